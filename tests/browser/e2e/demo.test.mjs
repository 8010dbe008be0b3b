// The demo page and pushgate.js in Chromium against the real gateway.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Gateway, launchBrowser, newPage, screenshotPath, sleep, waitFor } from './support.mjs';

let gateway;
let browser;

before(async () => {
  gateway = await Gateway.start();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await gateway?.dispose();
});

/** A demo page connected as `user` through the page's own controls. */
async function openDemo(context, user, { transport = 'auto', blockWebSocket = false } = {}) {
  const page = await newPage(context);
  await page.goto(`${gateway.url}/`);
  await page.fill('#user', user);
  await page.click(`label:has(input[name=transport][value=${transport}])`);
  if (blockWebSocket) await page.check('#block-ws');
  await page.click('#connect');
  return page;
}

async function expectConnected(page, transport) {
  await waitFor(async () => (await page.textContent('#state')) === 'connected'
    && (await page.textContent('#transport')) === transport,
  { what: `connected over ${transport}`, timeoutMs: 20000 });
}

const shown = (page, id) => page.locator(`#messages li[data-id="${id}"]`).count();

async function expectShown(page, id, timeoutMs = 15000) {
  await waitFor(async () => (await shown(page, id)) >= 1, { what: `message ${id}`, timeoutMs });
}

let unique = 0;
const nextId = (label) => `e2e-${label}-${process.pid}-${++unique}`;

describe('demo page', () => {
  test('connects over WebSocket and shows a broadcast pushed by the backend', async () => {
    const context = await browser.newContext({ viewport: { width: 900, height: 600 } });
    const page = await openDemo(context, 'alice');
    await expectConnected(page, 'ws');
    const id = nextId('broadcast');
    await gateway.push({ to: '*', id, data: { title: 'Hello from the test', body: 'over the WebSocket' } });
    await expectShown(page, id);
    const item = page.locator(`#messages li[data-id="${id}"]`);
    assert.match(await item.textContent(), /Hello from the test/);
    assert.equal(await item.locator('.badge[data-transport]').textContent(), 'ws');
    assert.equal(await item.getAttribute('data-stream'), 'broadcast');
    assert.notEqual(await page.textContent('#cursor'), 'none', 'the cursor is shown');
    assert.deepEqual(page.errors, []);
    await context.close();
  });

  test('with WebSocket blocked by the switch it falls back to long-poll and still receives', async () => {
    const context = await browser.newContext();
    const page = await openDemo(context, 'bob', { blockWebSocket: true });
    await expectConnected(page, 'poll');
    const first = nextId('poll');
    await gateway.push({ to: '*', id: first, data: { title: 'Via long-poll' } });
    await expectShown(page, first);
    // Past a poll timeout (2 s): the client polls again and keeps receiving.
    await sleep(2600);
    const second = nextId('poll');
    await gateway.push({ to: ['bob'], id: second, data: { title: 'Still here after a poll timeout' } });
    await expectShown(page, second);
    assert.equal(await page.textContent('#transport'), 'poll');
    assert.equal(await page.locator(`#messages li[data-id="${second}"] .badge[data-transport]`).textContent(), 'poll');
    assert.match(await page.textContent('#log'), /connecting, over poll/, 'the log shows the fallback');
    assert.deepEqual(page.errors, []);
    await context.close();
  });

  test('a WebSocket cut right after the upgrade, before any frame, also falls back to long-poll', async () => {
    const context = await browser.newContext();
    const page = await newPage(context);
    // A proxy that completes the upgrade and then drops the stream.
    let upgrades = 0;
    await page.routeWebSocket(/\/ws\?/, (ws) => {
      upgrades += 1;
      setTimeout(() => ws.close({ code: 1011, reason: 'proxy says no' }), 100);
    });
    await page.goto(`${gateway.url}/?user=bea&connect=1`);
    await expectConnected(page, 'poll');
    assert.equal(upgrades, 1, 'one WebSocket try, then long-poll');
    const id = nextId('cut');
    await gateway.push({ to: ['bea'], id, data: { title: 'Delivered despite the proxy' } });
    await expectShown(page, id);
    assert.deepEqual(page.errors, []);
    await context.close();
  });

  test('the switch forces SSE, and switching back to auto uses the WebSocket again without repeats', async () => {
    const context = await browser.newContext();
    const page = await openDemo(context, 'carol', { transport: 'sse' });
    await expectConnected(page, 'sse');
    const viaSse = nextId('sse');
    await gateway.push({ to: '*', id: viaSse, data: { title: 'Via server-sent events' } });
    await expectShown(page, viaSse);
    await page.click('label:has(input[name=transport][value=auto])');
    await expectConnected(page, 'ws');
    const viaWs = nextId('ws');
    await gateway.push({ to: '*', id: viaWs, data: { title: 'Back on the WebSocket' } });
    await expectShown(page, viaWs);
    assert.equal(await shown(page, viaSse), 1, 'the resume after the switch did not repeat it');
    assert.deepEqual(page.errors, []);
    await context.close();
  });

  test('a personal message pushed from the panel reaches only its user', async () => {
    const context = await browser.newContext({ viewport: { width: 900, height: 600 } });
    const dana = await openDemo(context, 'dana');
    const erik = await openDemo(context, 'erik');
    await expectConnected(dana, 'ws');
    await expectConnected(erik, 'ws');

    const greeting = nextId('everyone');
    await gateway.push({ to: '*', id: greeting, data: { title: 'Spring sale starts now', body: 'For everyone: 15% off all plans.' } });
    await expectShown(dana, greeting);
    await expectShown(erik, greeting);

    // Erik's page pushes a personal promotion to dana through /demo/push.
    await erik.click('label:has(input[name=to][value=user])');
    await erik.fill('#push-user', 'dana');
    await erik.fill('#promo-title', 'Just for you, dana: 30% off');
    await erik.fill('#promo-body', 'A personal offer, pushed from the panel.');
    await erik.click('#push-send');
    await waitFor(async () => /sent .* to 1 user/.test(await erik.textContent('#push-result')),
      { what: 'push result' });
    const personal = await waitFor(async () => {
      const item = dana.locator('#messages li[data-stream=user]');
      return (await item.count()) === 1 && item.getAttribute('data-id');
    }, { what: 'personal message on dana' });
    assert.match(await dana.locator(`#messages li[data-id="${personal}"]`).textContent(), /Just for you, dana/);

    // A broadcast after it: once erik has that, he would have had the personal one.
    const marker = nextId('marker');
    await gateway.push({ to: '*', id: marker, data: { title: 'Free shipping this weekend' } });
    await expectShown(erik, marker);
    await expectShown(dana, marker);
    assert.equal(await shown(erik, personal), 0);
    assert.equal(await erik.locator('#messages li[data-stream=user]').count(), 0);

    await dana.evaluate(() => window.scrollTo(0, 0));
    await dana.screenshot({ path: screenshotPath('demo.png') });
    assert.deepEqual([...dana.errors, ...erik.errors], []);
    await context.close();
  });

  test('a reload resumes from the cursor kept in sessionStorage', async () => {
    const context = await browser.newContext();
    const page = await openDemo(context, 'fay');
    await expectConnected(page, 'ws');
    const before = nextId('before-reload');
    await gateway.push({ to: '*', id: before, data: { title: 'Before the reload' } });
    await expectShown(page, before);
    await page.goto('about:blank');
    const missed = nextId('while-away');
    await gateway.push({ to: ['fay'], id: missed, data: { title: 'Pushed while the page was away' } });
    await page.goto(`${gateway.url}/`);
    await expectConnected(page, 'ws');
    await expectShown(page, missed);
    assert.equal(await shown(page, before), 0, 'only what was missed is replayed');
    assert.equal(await page.locator('#gap').isHidden(), true, 'history covered the gap');
    await context.close();
  });

  test('the demo page and the dashboard fit a phone-sized screen', async () => {
    const context = await browser.newContext({ viewport: { width: 360, height: 740 }, isMobile: true, hasTouch: true });
    for (const path of ['/?user=hana&connect=1', '/dashboard.html']) {
      const page = await newPage(context);
      await page.goto(`${gateway.url}${path}`);
      await sleep(1500);
      const { scrollWidth, innerWidth } = await page.evaluate(() => ({
        scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
      }));
      assert.ok(scrollWidth <= innerWidth, `${path}: no sideways scrolling (${scrollWidth} > ${innerWidth})`);
      assert.deepEqual(page.errors, []);
    }
    await context.close();
  });

  test('a gateway restart is survived with every message shown exactly once', async () => {
    const context = await browser.newContext();
    const page = await openDemo(context, 'gus');
    await expectConnected(page, 'ws');
    const beforeIds = [nextId('pre'), nextId('pre')];
    for (const id of beforeIds) await gateway.push({ to: '*', id, data: { title: `before restart ${id}` } });
    for (const id of beforeIds) await expectShown(page, id);

    const exit = await gateway.restart();
    assert.equal(exit.code, 0, `the gateway drains and exits 0 (got ${JSON.stringify(exit)})`);
    assert.match(await page.textContent('#log'), /reconnecting.*reason draining/,
      'the page followed the reconnect frame');
    await expectConnected(page, 'ws');

    const afterIds = [nextId('post'), nextId('post'), nextId('post')];
    await gateway.push({ to: ['gus'], id: afterIds[0], data: { title: 'after restart, personal' } });
    for (const id of afterIds.slice(1)) await gateway.push({ to: '*', id, data: { title: `after restart ${id}` } });
    for (const id of afterIds) await expectShown(page, id);

    for (const id of [...beforeIds, ...afterIds]) assert.equal(await shown(page, id), 1, id);
    assert.equal(await page.locator('#messages li').count(), 5, 'nothing else, nothing twice');
    assert.equal(await page.textContent('#transport'), 'ws', 'a restart does not demote to long-poll');
    assert.equal(await page.locator('#gap').isVisible(), true,
      'the in-memory history was lost with the process, and the page says so');
    assert.deepEqual(page.errors, []);
    await context.close();
  });
  test('joins a public channel, gets its segment from the token, and shows a push to both once', async () => {
    const context = await browser.newContext();
    const page = await newPage(context);
    await page.goto(`${gateway.url}/`);
    await page.fill('#user', 'dora');
    await page.fill('#segments', 'vip');
    await page.click('#connect');
    await expectConnected(page, 'ws');
    await page.fill('#channel', 'news');
    await page.click('#join');
    await waitFor(async () => (await page.textContent('#channels')) === 'vip, news',
      { what: 'news joined', timeoutMs: 10000 });
    // A public channel the page asked for, and the token's segment.
    const news = nextId('news');
    await gateway.push({ to: { channels: ['news'] }, id: news, data: { title: 'Breaking' } });
    await expectShown(page, news);
    const item = page.locator(`#messages li[data-id="${news}"]`);
    assert.equal(await item.getAttribute('data-channel'), 'news');
    assert.equal(await item.locator('.badge[data-stream]').textContent(), '#news');
    // A promotion to the segment and the topic at once: shown once.
    const both = nextId('both');
    await gateway.push({ to: { channels: ['vip', 'news'] }, id: both, data: { title: 'VIP and news' } });
    await expectShown(page, both);
    const marker = nextId('marker');
    await gateway.push({ to: '*', id: marker, data: { title: 'after' } });
    await expectShown(page, marker);
    assert.equal(await shown(page, both), 1, 'one item for a push that reached two channels');
    // A channel that is not public is refused and nothing changes.
    await page.fill('#channel', 'secret');
    await page.click('#join');
    await waitFor(async () => /subscribe secret refused: forbidden_channel/.test(await page.textContent('#log')),
      { what: 'refusal logged', timeoutMs: 10000 });
    assert.equal(await page.textContent('#channels'), 'vip, news');
    // The panel pushes to a segment too.
    await page.click('label:has(input[name=to][value=channels])');
    await page.fill('#push-channels', 'vip');
    await page.fill('#promo-title', 'Segment promo');
    await page.click('#push-send');
    await waitFor(async () => /to 1 channel/.test(await page.textContent('#push-result')),
      { what: 'push answered', timeoutMs: 10000 });
    await waitFor(async () => (await page.locator('#messages li[data-channel="vip"]').count()) >= 2,
      { what: 'segment promo shown', timeoutMs: 10000 });
    assert.deepEqual(page.errors, []);
    await context.close();
  });
});

describe('token refresh', () => {
  test('a WebSocket refreshes its token in place and keeps receiving', async () => {
    const context = await browser.newContext();
    const page = await newPage(context);
    await page.goto(`${gateway.url}/`);
    const user = `refresh-${process.pid}`;
    // A refresh due almost at once (0.01 % of an hour: 0.36 s), without
    // jitter, so the test sees several within a few seconds.
    await page.evaluate(async (uid) => {
      const { Pushgate } = await import('/pushgate.js');
      window.refreshLog = { tokens: 0, statuses: [], messages: [], errors: [] };
      const log = window.refreshLog;
      window.refreshClient = new Pushgate(location.origin, {
        transports: ['ws'],
        refreshRatio: 0.0001,
        refreshJitter: 0,
        getToken: async () => {
          log.tokens += 1;
          const answer = await fetch('/demo/token', {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ user: uid }),
          });
          return (await answer.json()).token;
        },
        onStatus: (s) => log.statuses.push(`${s.state}/${s.transport}`),
        onMessage: (m) => log.messages.push(m.data),
        onError: (e) => log.errors.push(e.code),
      }).connect();
    }, user);
    const log = () => page.evaluate(() => window.refreshLog);
    await waitFor(async () => (await log()).tokens >= 4, { what: 'three refreshes', timeoutMs: 20000 });
    const id = nextId('refresh');
    await gateway.push({ to: [user], id, data: { title: 'after refreshes' } });
    await waitFor(async () => (await log()).messages.some((d) => d?.title === 'after refreshes'),
      { what: 'the push after refreshes' });
    const seen = await log();
    assert.deepEqual(seen.statuses, ['connecting/ws', 'connected/ws'], 'one connection, never reconnected');
    assert.deepEqual(seen.errors, []);
    await page.evaluate(() => window.refreshClient.close());
    assert.deepEqual(page.errors, []);
    await context.close();
  });
});
