// Support for the end-to-end tests: the real gateway binary on a free port
// with a temporary config, Debian's Chromium driven by playwright-core, and
// small waiting helpers.

import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root. */
export const REPO = resolve(here, '../../..');
/** The static directory the gateway serves (the files under test). */
export const STATIC_DIR = join(REPO, 'static');
/**
 * Where the tests save their screenshots: a temporary directory, so a test
 * run leaves the repository as it found it; with E2E_REFRESH_SCREENSHOTS=1,
 * the committed ones README shows (static/screenshots/), to refresh them.
 */
export const SCREENSHOTS = process.env.E2E_REFRESH_SCREENSHOTS === '1'
  ? join(STATIC_DIR, 'screenshots')
  : join(tmpdir(), 'pushgate-e2e-screenshots');
const BINARY = process.env.E2E_PUSHGATE_BIN ?? join(REPO, 'target/debug/pushgate');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const API_KEY = 'e2e-api-key-0123456789abcdef';
const SECRET = 'e2e-secret-0123456789abcdef0123';

/** A TCP port nothing listens on right now. */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it returns a truthy value (returned) or `timeoutMs` passes. */
export async function waitFor(check, { timeoutMs = 15000, stepMs = 100, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await sleep(stepMs);
  }
}

/**
 * One gateway process. `start()` writes a config (demo on, short poll
 * timeout, static files from the repository) and waits for /healthz;
 * `stop()` sends SIGTERM and waits for the drain to finish; `restart()`
 * does both and starts again on the same port.
 */
export class Gateway {
  constructor({ port, session = {} }) {
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.dir = mkdtempSync(join(tmpdir(), 'pushgate-e2e-'));
    this.config = join(this.dir, 'config.toml');
    this.log = join(this.dir, 'gateway.log');
    this.session = {
      poll_timeout_secs: 2,
      session_ttl_secs: 6,
      idle_timeout_secs: 30,
      ping_interval_secs: 10,
      max_connections_per_user: 8,
      ...session,
    };
    this.child = null;
    this.starts = 0;
  }

  static async start(options = {}) {
    const gateway = new Gateway({ port: options.port ?? await freePort(), ...options });
    await gateway.start();
    return gateway;
  }

  writeConfig() {
    const session = Object.entries(this.session).map(([k, v]) => `${k} = ${v}`).join('\n');
    writeFileSync(this.config, `# Written by tests/browser/e2e/support.mjs
[server]
listen = "127.0.0.1:${this.port}"
drain_timeout_secs = 3
drain_spread_secs = 0
static_dir = ${JSON.stringify(STATIC_DIR)}

[session]
${session}

[auth]
secret = "${SECRET}"
api_key = "${API_KEY}"
allowed_origins = ["*"]

[demo]
enabled = true

[channels]
public = ["news", "product.*"]
`);
  }

  async start() {
    this.writeConfig();
    this.starts += 1;
    const out = openSync(this.log, 'a');
    this.child = spawn(BINARY, ['--config', this.config], {
      cwd: this.dir,
      stdio: ['ignore', out, out],
      env: gatewayEnv(),
    });
    const child = this.child;
    child.exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
    await waitFor(async () => {
      if (child.exitCode !== null) throw new Error(`gateway exited early:\n${this.tail()}`);
      const response = await fetch(`${this.url}/healthz`);
      return response.status === 200;
    }, { timeoutMs: 20000, what: `gateway on port ${this.port}` }).catch((error) => {
      throw new Error(`${error.message}\n${this.tail()}`);
    });
  }

  /** SIGTERM: the gateway drains (reconnect frames to everyone) and exits. */
  async stop() {
    const child = this.child;
    if (!child || child.exitCode !== null) return { code: child?.exitCode ?? null };
    child.kill('SIGTERM');
    let timer;
    const timeout = new Promise((r) => { timer = setTimeout(() => r(null), 15000); });
    const result = await Promise.race([child.exited, timeout]);
    clearTimeout(timer);
    if (result === null) {
      child.kill('SIGKILL');
      throw new Error(`gateway did not exit within 15 s of SIGTERM\n${this.tail()}`);
    }
    return result;
  }

  /** Stops the gateway and removes its temporary directory (kept with E2E_KEEP_LOGS=1). */
  async dispose() {
    await this.stop();
    if (process.env.E2E_KEEP_LOGS === '1') {
      console.log(`gateway log kept in ${this.log}`);
    } else {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }

  async restart() {
    const exit = await this.stop();
    await this.start();
    return exit;
  }

  /** The last lines of the gateway's log, for failure messages. */
  tail(lines = 30) {
    try {
      return readFileSync(this.log, 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** `POST /push` with the backend key; returns the parsed answer. */
  async push(body) {
    const response = await fetch(`${this.url}/push`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (response.status !== 202 && response.status !== 200) {
      throw new Error(`push answered ${response.status}: ${JSON.stringify(answer)}`);
    }
    return answer;
  }

  async metrics() {
    return (await fetch(`${this.url}/metrics`)).text();
  }
}

/**
 * The environment of the gateway: ours, without PUSHGATE_* variables (each
 * would override a key of the test's config, and the gateway refuses
 * names that are not keys).
 */
function gatewayEnv() {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PUSHGATE_')));
  return { ...env, RUST_LOG: process.env.RUST_LOG ?? 'info', NO_COLOR: '1' };
}

/** Chromium as the brief asks: Debian's binary, never a downloaded one. */
export function launchBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}

/** A new page that fails the test on uncaught page errors (collected in `page.errors`). */
export async function newPage(context) {
  const page = await context.newPage();
  page.errors = [];
  page.on('pageerror', (error) => page.errors.push(error.message));
  return page;
}

/** Makes sure the screenshots directory exists; returns the path of `name` in it. */
export function screenshotPath(name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  return join(SCREENSHOTS, name);
}

/**
 * Counts the strongly coloured pixels of a PNG (decoded by the browser):
 * the dashboard draws grid and text in greys, so colour means data.
 */
export async function colouredPixels(page, png) {
  return page.evaluate(async (base64) => {
    const image = new Image();
    image.src = `data:image/png;base64,${base64}`;
    await image.decode();
    const canvas = document.createElement('canvas');
    canvas.width = image.width;
    canvas.height = image.height;
    const ctx = canvas.getContext('2d');
    ctx.drawImage(image, 0, 0);
    const { data } = ctx.getImageData(0, 0, canvas.width, canvas.height);
    let coloured = 0;
    for (let i = 0; i < data.length; i += 4) {
      const max = Math.max(data[i], data[i + 1], data[i + 2]);
      const min = Math.min(data[i], data[i + 1], data[i + 2]);
      if (max - min > 60) coloured += 1;
    }
    return { coloured, total: data.length / 4 };
  }, png.toString('base64'));
}
