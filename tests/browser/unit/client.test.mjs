// The Pushgate class driven through fake transports and a fake clock:
// fallback, reconnect frames, close reasons, cursor and dedupe end to end.
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryStorage, Pushgate } from '../../../static/pushgate.js';
import { FakeClock, FakeEventSource, FakeFetch, FakeWebSocket, fakeToken, flush } from './fakes.mjs';

const BASE = 'http://gw.test';

beforeEach(() => {
  FakeWebSocket.reset();
  FakeEventSource.reset();
});

/** A client wired to fakes; returns it with its clock, fetch and event logs. */
function harness(options = {}) {
  const clock = new FakeClock();
  const http = new FakeFetch();
  const tokens = [];
  const log = { messages: [], statuses: [], recovers: [], errors: [] };
  const getToken = async () => {
    const token = fakeToken(`alice`, Math.floor(clock.nowMs / 1000) + 3600 + tokens.length);
    tokens.push(token);
    return token;
  };
  const client = new Pushgate(BASE, {
    getToken,
    storage: new MemoryStorage(),
    onMessage: (m) => log.messages.push(m),
    onStatus: (s) => log.statuses.push(s),
    onRecover: (r) => log.recovers.push(r),
    onError: (e) => log.errors.push(e),
    pingIntervalMs: 0,
    ...options,
    env: {
      ...clock.env(),
      WebSocket: FakeWebSocket,
      EventSource: FakeEventSource,
      fetch: http.fetch,
      random: () => 0.5,
    },
  });
  return { client, clock, http, tokens, log };
}

const message = (id, cursor, data = { n: id }) => ({ type: 'message', id, cursor, stream: 'broadcast', data });

async function connectedOverWs(h) {
  h.client.connect();
  await flush();
  const ws = FakeWebSocket.last();
  ws.open();
  assert.equal(ws.sent[0], '{"type":"ping"}', 'a ping goes out on open');
  ws.receive({ type: 'pong' });
  assert.equal(h.client.state, 'connected');
  assert.equal(h.client.transport, 'ws');
  return ws;
}

test('connects over websocket with a fresh token and delivers messages', async () => {
  const h = harness();
  assert.equal(h.client.state, 'idle');
  const ws = await connectedOverWs(h);
  assert.match(ws.url, /^ws:\/\/gw\.test\/ws\?token=/);
  assert.ok(ws.url.includes(`token=${h.tokens[0]}`), 'the token from getToken');
  ws.receive(message('m1', 'e-1'));
  assert.deepEqual(h.log.messages, [{ id: 'm1', cursor: 'e-1', stream: 'broadcast', data: { n: 'm1' }, transport: 'ws' }]);
  assert.equal(h.client.cursor, 'e-1');
  assert.deepEqual(h.log.statuses.map((s) => s.state), ['connecting', 'connected']);
});

test('a websocket that cannot open falls back to long-poll at once', async () => {
  const h = harness();
  h.client.connect();
  await flush();
  FakeWebSocket.last().drop(1006);
  await flush();
  assert.equal(h.client.transport, 'poll');
  assert.equal(h.http.requests.length, 1);
  assert.match(h.http.last().url, /^http:\/\/gw\.test\/poll\?token=/);
  h.http.answer(200, [message('m1', 'e-1')]);
  await flush();
  assert.equal(h.client.state, 'connected');
  assert.deepEqual(h.log.messages.map((m) => [m.id, m.transport]), [['m1', 'poll']]);
  assert.match(h.http.last().url, /cursor=e-1$/, 'polls again at once with the new cursor');
});

test('a websocket cut after open but before its first frame also falls back', async () => {
  const h = harness();
  h.client.connect();
  await flush();
  const ws = FakeWebSocket.last();
  ws.open();
  ws.drop(1006);
  await flush();
  assert.equal(h.client.transport, 'poll');
  assert.equal(h.http.requests.length, 1);
});

test('a first long-poll that is parked counts as connected after the settle time', async () => {
  const h = harness({ transports: ['poll'] });
  h.client.connect();
  await flush();
  assert.equal(h.client.state, 'connecting');
  await h.clock.advance(1000);
  assert.equal(h.client.state, 'connected');
  h.http.answer(200, [{ type: 'reconnect', reason: 'poll_timeout', retry_ms: 0, cursor: 'e-7' }]);
  await flush();
  await h.clock.advance(0);
  assert.equal(h.http.requests.length, 2);
  assert.match(h.http.last().url, /cursor=e-7$/);
  assert.deepEqual(h.log.statuses.map((s) => s.state), ['connecting', 'connected'],
    'a poll timeout is not a status change');
});

test('a gateway restart keeps a proven websocket: backoff, not fallback', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  ws.receive(message('m1', 'e-1'));
  ws.receive({ type: 'reconnect', reason: 'draining', retry_ms: 1000, cursor: 'e-1' });
  assert.equal(ws.closed, 1000, 'the old socket is closed by the client');
  assert.equal(h.client.state, 'reconnecting');
  assert.equal(h.client.reason, 'draining');
  assert.equal(h.clock.nextDelay(), 1250, 'retry_ms plus jitter');
  await h.clock.advance(1250);
  const refused = FakeWebSocket.last();
  assert.notEqual(refused, ws);
  assert.match(refused.url, /cursor=e-1$/);
  refused.drop(1006);
  await flush();
  assert.equal(h.client.transport, 'ws', 'stays on websocket');
  assert.equal(h.http.requests.length, 0, 'no long-poll');
  assert.equal(h.client.state, 'reconnecting');
  assert.equal(h.clock.nextDelay(), 250, 'full jitter of the first backoff window (0.5 * 500)');
  await h.clock.advance(250);
  const again = FakeWebSocket.last();
  again.open();
  again.receive({ type: 'recover', complete: false, cursor: 'f-0' });
  again.receive(message('m2', 'f-1'));
  assert.equal(h.client.state, 'connected');
  assert.deepEqual(h.log.recovers, [{ complete: false, cursor: 'f-0' }]);
  assert.deepEqual(h.log.messages.map((m) => m.id), ['m1', 'm2']);
  assert.equal(h.client.cursor, 'f-1');
});

test('backoff grows while the gateway stays away and is capped', async () => {
  const h = harness({ backoffMaxMs: 4000 });
  await connectedOverWs(h);
  const delays = [];
  for (let i = 0; i < 6; i++) {
    FakeWebSocket.last().drop(1006);
    await flush();
    delays.push(h.clock.nextDelay());
    await h.clock.advance(h.clock.nextDelay());
  }
  assert.deepEqual(delays, [250, 500, 1000, 2000, 2000, 2000]);
});

test('replaced closes for good', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  ws.receive({ type: 'close', reason: 'replaced' });
  ws.drop(4002);
  await h.clock.advance(60000);
  assert.equal(h.client.state, 'closed');
  assert.equal(h.client.reason, 'replaced');
  assert.equal(FakeWebSocket.all.length, 1, 'never reconnected');
});

test('a 4002 close code without the frame also stops', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  ws.drop(4002);
  await h.clock.advance(60000);
  assert.equal(h.client.state, 'closed');
  assert.equal(FakeWebSocket.all.length, 1);
});

for (const [reason, code] of [['idle', 4001], ['slow', 4003], ['shutdown', 1001]]) {
  test(`${reason} reconnects with backoff and the cursor`, async () => {
    const h = harness();
    const ws = await connectedOverWs(h);
    ws.receive(message('m1', 'e-5'));
    ws.receive({ type: 'close', reason });
    ws.drop(code);
    assert.equal(h.client.state, 'reconnecting');
    assert.equal(h.client.reason, reason);
    await h.clock.advance(h.clock.nextDelay());
    assert.equal(FakeWebSocket.all.length, 2);
    assert.match(FakeWebSocket.last().url, /cursor=e-5$/);
    assert.equal(h.tokens.length, 1, 'the same token is reused');
  });
}

test('token_expired gets a new token before reconnecting', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  ws.receive({ type: 'close', reason: 'token_expired' });
  await h.clock.advance(h.clock.nextDelay());
  assert.equal(h.tokens.length, 2);
  assert.ok(FakeWebSocket.last().url.includes(`token=${h.tokens[1]}`));
});

test('token_expired with a fixed token stops', async () => {
  const h = harness({ getToken: undefined, token: 'fixed-token' });
  const ws = await connectedOverWs(h);
  ws.receive({ type: 'close', reason: 'token_expired' });
  assert.equal(h.client.state, 'closed');
  assert.equal(h.client.reason, 'token_expired');
});

test('a long-poll 401 renews the token', async () => {
  const h = harness({ transports: ['poll'] });
  h.client.connect();
  await flush();
  h.http.answer(401, { error: { code: 'unauthorized' } });
  await flush();
  await h.clock.advance(h.clock.nextDelay());
  assert.equal(h.tokens.length, 2);
  assert.ok(h.http.last().url.includes(`token=${h.tokens[1]}`));
});

test('an expiring token is renewed before connecting', async () => {
  let calls = 0;
  const h = harness({
    getToken: async () => {
      calls += 1;
      return { token: fakeToken('alice', Math.floor(h.clock.nowMs / 1000) + (calls === 1 ? 2 : 3600)) };
    },
  });
  await connectedOverWs(h);
  FakeWebSocket.last().drop(1006);
  await h.clock.advance(h.clock.nextDelay());
  assert.equal(calls, 2, 'the 2 s token was within the 5 s margin');
});

test('a message seen on one transport is not delivered again on the next', async () => {
  const h = harness({ transports: ['ws', 'poll'] });
  h.client.connect();
  await flush();
  FakeWebSocket.last().drop(1006);
  await flush();
  h.http.answer(200, [message('m1', 'e-1'), message('m2', 'e-2')]);
  await flush();
  h.http.answer(200, [message('m2', 'e-2'), message('m3', 'e-3')]);
  await flush();
  assert.deepEqual(h.log.messages.map((m) => m.id), ['m1', 'm2', 'm3']);
});

test('a shared dedupe set spans client instances', async () => {
  const first = harness();
  const ws = await connectedOverWs(first);
  ws.receive(message('m1', 'e-1'));
  first.client.close();
  const second = harness({ seen: first.client.seen, transports: ['sse'] });
  second.client.connect();
  await flush();
  const sse = FakeEventSource.last();
  sse.open();
  sse.event('message', message('m1', 'e-1'));
  sse.event('message', message('m2', 'e-2'));
  assert.deepEqual(second.log.messages.map((m) => [m.id, m.transport]), [['m2', 'sse']]);
});

test('sse resumes with ?cursor= and tells an error frame from a failure', async () => {
  const h = harness({ transports: ['sse'] });
  h.client.connect();
  await flush();
  const sse = FakeEventSource.last();
  sse.open();
  assert.equal(h.client.state, 'connected');
  sse.event('message', message('m1', 'e-1'));
  sse.event('error', { type: 'error', code: 'x', message: 'y' });
  assert.deepEqual(h.log.errors, [{ code: 'x', message: 'y' }]);
  assert.equal(h.client.state, 'connected');
  sse.fail();
  assert.equal(sse.closed, true, 'the browser does not reconnect on its own');
  assert.equal(h.client.state, 'reconnecting');
  await h.clock.advance(h.clock.nextDelay());
  assert.match(FakeEventSource.last().url, /^http:\/\/gw\.test\/sse\?token=.*&cursor=e-1$/);
});

test('a bad cursor is forgotten and the client starts live', async () => {
  const storage = new MemoryStorage();
  storage.setItem('pushgate:cursor', 'garbage');
  const h = harness({ transports: ['poll'], storage });
  assert.equal(h.client.cursor, 'garbage');
  h.client.connect();
  await flush();
  h.http.answer(400, { error: { code: 'bad_cursor' } });
  await flush();
  await h.clock.advance(h.clock.nextDelay());
  assert.equal(h.client.cursor, null);
  assert.ok(!h.http.last().url.includes('cursor='));
});

// The gateway refuses a resume whose history it could not read (503
// `unavailable`, `Retry-After`): history still covers the gap, so the
// client must come back with the same cursor. A browser shows a refused
// WebSocket or EventSource only as a failure before it opened.
for (const transport of ['ws', 'poll', 'sse']) {
  test(`a resume refused 503 over ${transport} comes back with the same cursor`, async () => {
    const storage = new MemoryStorage();
    storage.setItem('pushgate:cursor', 'e-4');
    const h = harness({ transports: [transport], storage });
    h.client.connect();
    await flush();
    const url = () => ({ ws: () => FakeWebSocket.last().url, poll: () => h.http.last().url,
      sse: () => FakeEventSource.last().url })[transport]();
    assert.match(url(), /cursor=e-4$/);
    if (transport === 'ws') FakeWebSocket.last().drop(1006);
    if (transport === 'sse') FakeEventSource.last().fail();
    if (transport === 'poll') {
      h.http.answer(503, { error: { code: 'unavailable', message: 'message history unavailable' } },
        { 'retry-after': '3' });
    }
    await flush();
    assert.equal(h.client.state, 'reconnecting');
    assert.equal(h.client.cursor, 'e-4', 'the cursor is kept');
    if (transport === 'poll') assert.equal(h.clock.nextDelay(), 3000, 'Retry-After is honoured');
    await h.clock.advance(h.clock.nextDelay());
    assert.match(url(), /cursor=e-4$/);
    assert.equal(storage.getItem('pushgate:cursor'), 'e-4');
  });
}

test('the cursor survives a reload through storage', async () => {
  const storage = new MemoryStorage();
  const first = harness({ storage });
  const ws = await connectedOverWs(first);
  ws.receive(message('m1', 'e-9'));
  first.client.close();
  const second = harness({ storage });
  second.client.connect();
  await flush();
  assert.match(FakeWebSocket.last().url, /cursor=e-9$/);
});

test('close stops everything and connect starts again', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  h.client.close();
  assert.equal(ws.closed, 1000);
  assert.equal(h.client.state, 'closed');
  assert.equal(h.client.reason, 'client');
  await h.clock.advance(60000);
  assert.equal(FakeWebSocket.all.length, 1);
  h.client.connect();
  await flush();
  assert.equal(FakeWebSocket.all.length, 2);
});

test('the websocket heartbeat ends a silent connection', async () => {
  const h = harness({ pingIntervalMs: 1000 });
  const ws = await connectedOverWs(h);
  await h.clock.advance(1000);
  assert.equal(ws.sent.length, 2, 'a second ping after the interval');
  await h.clock.advance(1000);
  assert.equal(ws.closed, 1000, 'nothing came back: the socket is given up');
  assert.equal(h.client.state, 'reconnecting');
});

test('options are checked', () => {
  assert.throws(() => new Pushgate(BASE, {}), TypeError);
  assert.throws(() => new Pushgate(BASE, { token: 't', transports: [] }), TypeError);
  assert.throws(() => new Pushgate(BASE, { token: 't', transports: ['ws', 'carrier-pigeon'] }), TypeError);
  assert.throws(() => new Pushgate(BASE, { token: 't', transports: ['ws', 'ws'] }), TypeError);
});
