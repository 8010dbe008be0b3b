#!/usr/bin/env node
// Client tokens for the load client's token file (LOADTEST_TOKEN_FILE,
// loadtest/src/tokens.rs): one `<user> <token>` line per user, users
// <prefix>0 .. <prefix>(n-1), valid for --ttl seconds. Node's own crypto,
// so the scripts need no openssl loop and no extra crate.
//
// Usage:
//   node loadtest/mint-tokens.js --alg hs256 --secret SECRET -n N [--prefix u] [--ttl 3600]
//   node loadtest/mint-tokens.js --alg rs256 --key PRIVATE.pem [--kid KID] -n N [--prefix u] [--ttl 3600]
// Writes the lines to standard output.
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const { parseArgs } = require('node:util');

const { values: opt } = parseArgs({
  options: {
    alg: { type: 'string' },
    secret: { type: 'string' },
    key: { type: 'string' },
    kid: { type: 'string' },
    n: { type: 'string', short: 'n' },
    prefix: { type: 'string', default: 'u' },
    ttl: { type: 'string', default: '3600' },
  },
});
const n = Number(opt.n);
const fail = (why) => {
  process.stderr.write(`mint-tokens: ${why}\n`);
  process.exit(2);
};
if (!Number.isInteger(n) || n < 1) fail('-n must be a count of users');

const b64 = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
let header;
let sign;
if (opt.alg === 'hs256') {
  if (!opt.secret) fail('hs256 needs --secret');
  header = { alg: 'HS256', typ: 'JWT' };
  sign = (input) => crypto.createHmac('sha256', opt.secret).update(input).digest('base64url');
} else if (opt.alg === 'rs256') {
  if (!opt.key) fail('rs256 needs --key (a PEM private key)');
  const key = crypto.createPrivateKey(fs.readFileSync(opt.key));
  header = { alg: 'RS256', typ: 'JWT' };
  sign = (input) => crypto.sign('sha256', Buffer.from(input), key).toString('base64url');
} else {
  fail('--alg must be hs256 or rs256');
}
if (opt.kid) header.kid = opt.kid;

const exp = Math.floor(Date.now() / 1000) + Number(opt.ttl);
const head = b64(header);
const lines = [];
for (let i = 0; i < n; i++) {
  const user = `${opt.prefix}${i}`;
  const input = `${head}.${b64({ sub: user, exp })}`;
  lines.push(`${user} ${input}.${sign(input)}`);
}
process.stdout.write(lines.join('\n') + '\n');
