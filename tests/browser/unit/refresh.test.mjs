// Token refresh on a WebSocket (getToken shortly before `exp`, then a
// `refresh` frame) and cookie authentication (no token at all), driven
// through the fakes.
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryStorage, Pushgate, classifyFrame, refreshDelay } from '../../../static/pushgate.js';
import { FakeClock, FakeEventSource, FakeFetch, FakeWebSocket, fakeToken, flush } from './fakes.mjs';

const BASE = 'http://gw.test';
const LIFE_SECS = 100;

beforeEach(() => {
  FakeWebSocket.reset();
  FakeEventSource.reset();
});

/** A client whose getToken hands out tokens living LIFE_SECS from now. */
function harness(options = {}) {
  const clock = new FakeClock();
  const http = new FakeFetch();
  const tokens = [];
  const log = { errors: [], statuses: [] };
  const getToken = async () => {
    const token = fakeToken('alice', Math.floor(clock.nowMs / 1000) + LIFE_SECS);
    tokens.push(token);
    return token;
  };
  const client = new Pushgate(BASE, {
    getToken,
    storage: new MemoryStorage(),
    onError: (e) => log.errors.push(e),
    onStatus: (s) => log.statuses.push(s),
    pingIntervalMs: 0,
    ...options,
    env: {
      ...clock.env(),
      WebSocket: FakeWebSocket,
      EventSource: options.EventSource ?? FakeEventSource,
      fetch: http.fetch,
      random: () => 0.5,
    },
  });
  return { client, clock, http, tokens, log };
}

async function connectedOverWs(h) {
  h.client.connect();
  await flush();
  const ws = FakeWebSocket.last();
  ws.open();
  ws.receive({ type: 'pong' });
  assert.equal(h.client.state, 'connected');
  return ws;
}

const refreshFrames = (ws) => ws.sent.map((t) => JSON.parse(t)).filter((f) => f.type === 'refresh');

test('refreshDelay is a share of the remaining life, with jitter', () => {
  assert.equal(refreshDelay(0, 10_000, 0.8, 0.1, () => 0), 8000);
  assert.equal(refreshDelay(0, 10_000, 0.8, 0.1, () => 1), 9000);
  assert.equal(refreshDelay(5_000, 15_000, 0.8, 0.1, () => 0.5), 8500);
  assert.equal(refreshDelay(0, null), null, 'no exp');
  assert.equal(refreshDelay(10_000, 10_000), null, 'expired');
  assert.equal(refreshDelay(0, 10_000, 0), null, 'off');
  assert.deepEqual(classifyFrame({ type: 'refreshed', expires_at: 12 }), { action: 'refreshed', expiresAtMs: 12_000 });
});

test('a websocket token is refreshed in place before it expires, again and again', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  assert.equal(h.tokens.length, 1);
  // 80 % + 0.5 * 10 % of 100 s: at 85 s.
  await h.clock.advance(84_000);
  assert.equal(refreshFrames(ws).length, 0, 'not yet');
  await h.clock.advance(1_000);
  assert.equal(h.tokens.length, 2, 'getToken asked once more');
  assert.deepEqual(refreshFrames(ws), [{ type: 'refresh', token: h.tokens[1] }]);
  const exp = Math.floor(h.clock.nowMs / 1000) + LIFE_SECS;
  ws.receive({ type: 'refreshed', expires_at: exp });
  await h.clock.advance(85_000);
  assert.equal(refreshFrames(ws).length, 2, 'the next refresh came from the new expiry');
  assert.equal(FakeWebSocket.all.length, 1, 'never reconnected');
  assert.equal(h.client.state, 'connected');
  assert.deepEqual(h.log.errors, []);
});

test('a refused refresh falls back to a reconnect with a fresh token', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  await h.clock.advance(85_000);
  assert.equal(refreshFrames(ws).length, 1);
  ws.receive({ type: 'error', code: 'bad_token', message: 'refresh refused: unknown kid' });
  await flush();
  assert.equal(FakeWebSocket.all.length, 2, 'a new websocket');
  assert.equal(h.tokens.length, 3, 'with a token asked for it');
  assert.ok(FakeWebSocket.last().url.includes(`token=${h.tokens[2]}`));
  assert.equal(ws.closed, 1000, 'the old one was closed');
});

test('an unrelated error frame does not reconnect, and poll never refreshes', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  ws.receive({ type: 'error', code: 'bad_frame', message: 'what?' });
  await flush();
  assert.equal(FakeWebSocket.all.length, 1);

  const p = harness({ transports: ['poll'] });
  p.client.connect();
  await flush();
  await p.clock.advance(90_000);
  assert.equal(p.tokens.length, 1, 'no refresh on long-poll');
});

test('cookieAuth connects with no token, with credentials, and stops on 401', async () => {
  const h = harness({ getToken: undefined, cookieAuth: true, transports: ['poll', 'sse'] });
  h.client.connect();
  await flush();
  const poll = h.http.last();
  assert.ok(!poll.url.includes('token='), poll.url);
  assert.equal(poll.init.credentials, 'include');
  h.http.answer(401, { error: { code: 'unauthorized' } });
  await flush();
  assert.equal(h.client.state, 'closed');
  assert.equal(h.client.reason, 'unauthorized');

  let init = null;
  class CredentialedEventSource extends FakeEventSource {
    constructor(url, options) {
      super(url);
      init = options;
    }
  }
  const s = harness({ getToken: undefined, cookieAuth: true, transports: ['sse'], EventSource: CredentialedEventSource });
  s.client.connect();
  await flush();
  assert.deepEqual(init, { withCredentials: true });
  assert.ok(!FakeEventSource.last().url.includes('token='));

  const w = harness({ getToken: undefined, cookieAuth: true });
  await connectedOverWs(w);
  assert.ok(!FakeWebSocket.last().url.includes('token='));
  await w.clock.advance(3_600_000);
  assert.equal(refreshFrames(FakeWebSocket.last()).length, 0, 'nothing to refresh');
  assert.throws(() => new Pushgate(BASE, {}), TypeError, 'still one of the three');
});

test('with cookieAuth, token_expired reconnects and asks the site again', async () => {
  const h = harness({ getToken: undefined, cookieAuth: true });
  const ws = await connectedOverWs(h);
  ws.receive({ type: 'close', reason: 'token_expired' });
  assert.equal(h.client.state, 'reconnecting');
  await h.clock.advance(h.clock.nextDelay());
  assert.equal(FakeWebSocket.all.length, 2, 'back, still without a token');
  assert.ok(!FakeWebSocket.last().url.includes('token='));
});
