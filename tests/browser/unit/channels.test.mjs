// Channels in the Pushgate class (PROTOCOL.md "v1.1: channels", "Browser
// client"): the `channels` option on every transport, subscribe and
// unsubscribe (frames on a WebSocket, a reconnect with the new list on
// long-poll and SSE), refusals, `channel` on messages, and a push that
// reached several channels shown once.
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryStorage, Pushgate, channelList, classifyFrame, isChannelName } from '../../../static/pushgate.js';
import { FakeClock, FakeEventSource, FakeFetch, FakeWebSocket, fakeToken, flush } from './fakes.mjs';

const BASE = 'http://gw.test';

beforeEach(() => {
  FakeWebSocket.reset();
  FakeEventSource.reset();
});

function harness(options = {}) {
  const clock = new FakeClock();
  const http = new FakeFetch();
  const log = { messages: [], statuses: [], errors: [] };
  const client = new Pushgate(BASE, {
    getToken: async () => fakeToken('alice', Math.floor(clock.nowMs / 1000) + 3600),
    storage: new MemoryStorage(),
    onMessage: (m) => log.messages.push(m),
    onStatus: (s) => log.statuses.push(s),
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
  return { client, clock, http, log };
}

const channelsOf = (url) => new URL(url).searchParams.get('channels');

async function connectedOverWs(h) {
  h.client.connect();
  await flush();
  const ws = FakeWebSocket.last();
  ws.open();
  ws.receive({ type: 'pong' });
  assert.equal(h.client.state, 'connected');
  return ws;
}

/** A promise's outcome after pending callbacks ran: 'resolved', an error, or 'pending'. */
async function outcome(promise) {
  let result = 'pending';
  promise.then(() => { result = 'resolved'; }, (error) => { result = error; });
  await flush();
  return result;
}

test('channel names are checked as the gateway checks them', () => {
  assert.ok(isChannelName('product.42'));
  assert.ok(isChannelName('city:berlin'));
  assert.ok(isChannelName('x'.repeat(128)));
  for (const bad of ['', 'a b', 'a,b', 'x'.repeat(129), 'é', null, 7]) assert.ok(!isChannelName(bad), String(bad));
  assert.deepEqual(channelList(['a', 'b', 'a']), ['a', 'b']);
  assert.deepEqual(channelList(undefined), []);
  assert.throws(() => channelList(['ok', 'not ok']), TypeError);
  assert.throws(() => channelList('news'), TypeError);
  assert.throws(() => new Pushgate(BASE, { token: 't', channels: ['a,b'] }), TypeError);
});

test('channel frames are classified with their channel', () => {
  assert.deepEqual(classifyFrame({ type: 'message', id: 'p', cursor: 'c', stream: 'channel', channel: 'vip', data: 1 }),
    { action: 'message', id: 'p', cursor: 'c', stream: 'channel', channel: 'vip', data: 1 });
  assert.deepEqual(classifyFrame({ type: 'subscribed', channel: 'news' }), { action: 'subscribed', channel: 'news' });
  assert.deepEqual(classifyFrame({ type: 'unsubscribed', channel: 'news' }), { action: 'unsubscribed', channel: 'news' });
  assert.deepEqual(classifyFrame({ type: 'error', code: 'forbidden_channel', channel: 'x', message: 'no' }),
    { action: 'error', code: 'forbidden_channel', channel: 'x', message: 'no' });
  assert.equal(classifyFrame({ type: 'message', id: 'p', cursor: 'c', stream: 'user', data: 1 }).channel, undefined);
});

test('the channels option goes on every transport', async () => {
  for (const transport of ['ws', 'poll', 'sse']) {
    const h = harness({ channels: ['news', 'product.42'], transports: [transport] });
    h.client.connect();
    await flush();
    const url = transport === 'ws' ? FakeWebSocket.last().url
      : transport === 'sse' ? FakeEventSource.last().url : h.http.last().url;
    assert.equal(channelsOf(url), 'news,product.42', transport);
    h.client.close();
  }
});

test('a message that reached two channels is shown once, with its first channel', async () => {
  const h = harness({ channels: ['news', 'vip'] });
  const ws = await connectedOverWs(h);
  ws.receive({ type: 'message', id: 'promo', cursor: 'e-1~a', stream: 'channel', channel: 'vip', data: 1 });
  ws.receive({ type: 'message', id: 'promo', cursor: 'e-2~a', stream: 'channel', channel: 'news', data: 1 });
  ws.receive({ type: 'message', id: 'b', cursor: 'e-3~a', stream: 'broadcast', data: 2 });
  assert.deepEqual(h.log.messages.map((m) => [m.id, m.stream, m.channel]),
    [['promo', 'channel', 'vip'], ['b', 'broadcast', undefined]]);
  assert.equal(h.client.cursor, 'e-3~a', 'the cursor still moves with every frame');
});

test('subscribe and unsubscribe on a websocket are frames, settled by the answers', async () => {
  const h = harness();
  const ws = await connectedOverWs(h);
  const joined = h.client.subscribe('product.42');
  assert.deepEqual(JSON.parse(ws.sent.at(-1)), { type: 'subscribe', channel: 'product.42' });
  assert.equal(await outcome(joined), 'pending', 'not before the answer');
  assert.deepEqual(h.client.channels, ['product.42']);
  ws.receive({ type: 'subscribed', channel: 'product.42' });
  assert.equal(await outcome(joined), 'resolved');
  assert.equal(await outcome(h.client.subscribe('product.42')), 'resolved', 'already in: nothing sent');
  assert.equal(ws.sent.filter((t) => t.includes('subscribe')).length, 1);

  const left = h.client.unsubscribe('product.42');
  assert.deepEqual(JSON.parse(ws.sent.at(-1)), { type: 'unsubscribe', channel: 'product.42' });
  ws.receive({ type: 'unsubscribed', channel: 'product.42' });
  assert.equal(await outcome(left), 'resolved');
  assert.deepEqual(h.client.channels, []);

  // A reconnect carries the list.
  const news = h.client.subscribe('news');
  ws.receive({ type: 'subscribed', channel: 'news' });
  assert.equal(await outcome(news), 'resolved');
  ws.drop(1006);
  await h.clock.advance(60_000);
  assert.equal(channelsOf(FakeWebSocket.last().url), 'news');
});

test('a refused subscribe on a websocket rejects and leaves the list as it was', async () => {
  const h = harness({ channels: ['news'] });
  const ws = await connectedOverWs(h);
  const joined = h.client.subscribe('secret');
  ws.receive({ type: 'error', code: 'forbidden_channel', channel: 'secret', message: 'not allowed' });
  const result = await outcome(joined);
  assert.ok(result instanceof Error, String(result));
  assert.equal(result.code, 'forbidden_channel');
  assert.deepEqual(h.client.channels, ['news']);
  assert.equal(h.client.state, 'connected', 'the connection stays');
  assert.equal(h.log.errors.at(-1).channel, 'secret');
  await assert.rejects(h.client.subscribe('not ok'), TypeError);
});

test('on long-poll a subscribe aborts the parked poll and polls with the new list', async () => {
  const h = harness({ transports: ['poll'], channels: ['news'] });
  h.client.connect();
  await flush();
  h.http.answer(200, [{ type: 'message', id: 'm1', cursor: 'e-1~a', stream: 'channel', channel: 'news', data: 1 }]);
  await flush();
  assert.equal(h.client.state, 'connected');
  const parked = h.http.last();
  const joined = h.client.subscribe('product.7');
  await flush();
  assert.notEqual(h.http.last(), parked, 'a new poll');
  assert.equal(channelsOf(h.http.last().url), 'news,product.7');
  assert.equal(new URL(h.http.last().url).searchParams.get('cursor'), 'e-1~a', 'with the cursor it had');
  assert.equal(await outcome(joined), 'pending', 'not before the new poll is accepted');
  await h.clock.advance(10_000);
  assert.equal(await outcome(joined), 'resolved', 'a poll held without a refusal is accepted');
});

test('on long-poll a refused list rejects the subscribe and polls again with the old list', async () => {
  const h = harness({ transports: ['poll'], channels: ['news'] });
  h.client.connect();
  await flush();
  h.http.answer(200, [{ type: 'reconnect', reason: 'poll_timeout', retry_ms: 0, cursor: 'e-1' }]);
  await h.clock.advance(0);
  const joined = h.client.subscribe('secret');
  await flush();
  assert.equal(channelsOf(h.http.last().url), 'news,secret');
  h.http.answer(403, { error: { code: 'forbidden_channel', message: 'no' } });
  const result = await outcome(joined);
  assert.ok(result instanceof Error);
  assert.equal(result.code, 'forbidden_channel');
  await flush();
  assert.equal(channelsOf(h.http.last().url), 'news', 'back to the old list');
  assert.notEqual(h.client.state, 'closed');
});

test('on SSE a subscribe reconnects with the new list and settles once it opens', async () => {
  const h = harness({ transports: ['sse'] });
  h.client.connect();
  await flush();
  FakeEventSource.last().open();
  const first = FakeEventSource.last();
  const joined = h.client.subscribe('news');
  await flush();
  assert.ok(first.closed, 'the old stream is closed');
  assert.equal(channelsOf(FakeEventSource.last().url), 'news');
  FakeEventSource.last().open();
  assert.equal(await outcome(joined), 'resolved');

  // A stream that fails before it opens after a change: the change is undone.
  const refused = h.client.subscribe('secret');
  await flush();
  FakeEventSource.last().fail();
  assert.ok((await outcome(refused)) instanceof Error);
  await flush();
  assert.equal(channelsOf(FakeEventSource.last().url), 'news');
});

test('a channel refused at connect with no subscribe pending stops the client', async () => {
  const h = harness({ transports: ['poll'], channels: ['secret'] });
  h.client.connect();
  await flush();
  h.http.answer(403, { error: { code: 'forbidden_channel', message: 'no' } });
  await flush();
  assert.equal(h.client.state, 'closed');
  assert.equal(h.client.reason, 'forbidden_channel');
});
