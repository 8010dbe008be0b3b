import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  classifyFrame, closeAction, closeReasonOfCode, isTokenStale, nextAttempt, parseFrame,
  tokenExpiryMs, transportUrl,
} from '../../../static/pushgate.js';
import { fakeToken } from './fakes.mjs';

test('every close reason maps to what the client does next', () => {
  const table = [
    ['idle', 'reconnect'],
    ['slow', 'reconnect'],
    ['shutdown', 'reconnect'],
    ['token_expired', 'renew'],
    ['replaced', 'stop'],
    ['something_new', 'stop'],
    [undefined, 'stop'],
  ];
  for (const [reason, want] of table) assert.equal(closeAction(reason), want, String(reason));
});

test('websocket close codes carry the close reasons', () => {
  const table = [
    [4001, 'idle'], [4002, 'replaced'], [4003, 'slow'], [4004, 'token_expired'], [1001, 'shutdown'],
    [1000, null], [1006, null], [1009, null], [undefined, null],
  ];
  for (const [code, want] of table) assert.equal(closeReasonOfCode(code), want, String(code));
});

test('frames are classified into steps', () => {
  const table = [
    [{ type: 'message', id: 'm1', cursor: 'e-1', stream: 'broadcast', data: { a: 1 } },
      { action: 'message', id: 'm1', cursor: 'e-1', stream: 'broadcast', data: { a: 1 } }],
    [{ type: 'message', id: 'm2', cursor: 'e-2', stream: 'user', data: null },
      { action: 'message', id: 'm2', cursor: 'e-2', stream: 'user', data: null }],
    [{ type: 'recover', complete: false, cursor: 'e-3' },
      { action: 'recover', complete: false, cursor: 'e-3' }],
    [{ type: 'reconnect', reason: 'draining', retry_ms: 1000, cursor: 'e-4' },
      { action: 'reconnect', reason: 'draining', retryMs: 1000, cursor: 'e-4' }],
    [{ type: 'reconnect', reason: 'poll_timeout', retry_ms: 0, cursor: 'e-5' },
      { action: 'reconnect', reason: 'poll_timeout', retryMs: 0, cursor: 'e-5' }],
    [{ type: 'close', reason: 'replaced' }, { action: 'close', reason: 'replaced', then: 'stop' }],
    [{ type: 'close', reason: 'token_expired' }, { action: 'close', reason: 'token_expired', then: 'renew' }],
    [{ type: 'close', reason: 'slow' }, { action: 'close', reason: 'slow', then: 'reconnect' }],
    [{ type: 'error', code: 'unsupported', message: 'no' }, { action: 'error', code: 'unsupported', message: 'no' }],
    [{ type: 'pong' }, { action: 'pong' }],
    [{ type: 'future_frame', x: 1 }, { action: 'ignore' }],
    [null, { action: 'ignore' }],
    [[1, 2], { action: 'ignore' }],
  ];
  for (const [frame, want] of table) assert.deepEqual(classifyFrame(frame), want, JSON.stringify(frame));
});

test('parseFrame takes JSON objects with a type and nothing else', () => {
  assert.deepEqual(parseFrame('{"type":"pong"}'), { type: 'pong' });
  for (const bad of ['', 'not json', '[]', '{"t":1}', '{"type":5}', 'null', null, undefined]) {
    assert.equal(parseFrame(bad), null, String(bad));
  }
});

test('token expiry is read from the exp claim', () => {
  assert.equal(tokenExpiryMs(fakeToken('alice', 1700000000)), 1700000000 * 1000);
  assert.equal(tokenExpiryMs('opaque-token'), null);
  assert.equal(tokenExpiryMs('a.!!!.c'), null);
  assert.equal(tokenExpiryMs(undefined), null);
  const token = fakeToken('alice', 2000);
  assert.equal(isTokenStale(token, 1990 * 1000, 5000), false);
  assert.equal(isTokenStale(token, 1996 * 1000, 5000), true);
  assert.equal(isTokenStale('opaque', 1e15), false, 'an unreadable token is used as is');
  assert.equal(isTokenStale(null, 0), true);
});

test('an unproven transport that fails moves on to the next at once', () => {
  const transports = ['ws', 'poll', 'sse'];
  const proven = new Set();
  assert.deepEqual(nextAttempt({ transports, index: 0, proven, established: false }), { index: 1, immediate: true });
  assert.deepEqual(nextAttempt({ transports, index: 1, proven, established: false }), { index: 2, immediate: true });
  assert.deepEqual(nextAttempt({ transports, index: 2, proven, established: false }), { index: 0, immediate: false },
    'all failed: back to the first, after backoff');
});

test('a proven or established transport stays and backs off', () => {
  const transports = ['ws', 'poll'];
  assert.deepEqual(nextAttempt({ transports, index: 0, proven: new Set(['ws']), established: false }),
    { index: 0, immediate: false }, 'a gateway restart does not demote a working websocket');
  assert.deepEqual(nextAttempt({ transports, index: 0, proven: new Set(), established: true }),
    { index: 0, immediate: false });
  assert.deepEqual(nextAttempt({ transports, index: 1, proven: new Set(['poll']), established: false }),
    { index: 1, immediate: false }, 'a page that fell back stays on long-poll');
  assert.deepEqual(nextAttempt({ transports: ['ws'], index: 0, proven: new Set(), established: false }),
    { index: 0, immediate: false });
});

test('transport urls keep the base path and switch the scheme for websockets', () => {
  const params = { token: 't.k.n', cursor: '00000000000000ab-3' };
  assert.equal(transportUrl('http://127.0.0.1:8080', '/ws', params, 'ws'),
    'ws://127.0.0.1:8080/ws?token=t.k.n&cursor=00000000000000ab-3');
  assert.equal(transportUrl('https://push.example.com/gw', '/ws', { token: 'x' }, 'ws'),
    'wss://push.example.com/gw/ws?token=x');
  assert.equal(transportUrl('https://push.example.com/gw/', '/poll', { token: 'x', cursor: null }, 'poll'),
    'https://push.example.com/gw/poll?token=x');
  assert.equal(transportUrl('http://h', '/sse', { token: 'a b&c' }, 'sse'), 'http://h/sse?token=a+b%26c');
});
