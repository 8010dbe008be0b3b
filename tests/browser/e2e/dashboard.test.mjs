// The dashboard in Chromium: live charts from /metrics of a real gateway.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Gateway, colouredPixels, launchBrowser, newPage, screenshotPath, sleep, waitFor } from './support.mjs';

let gateway;
let browser;

before(async () => {
  // Two connections per user, so a third evicts the oldest ("replaced").
  gateway = await Gateway.start({ session: { max_connections_per_user: 2 } });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await gateway?.dispose();
});

const CHARTS = ['connections', 'sessions', 'published', 'delivered', 'evictions', 'lateness'];

test('the dashboard draws every chart from live metrics', async () => {
  const context = await browser.newContext({ viewport: { width: 900, height: 600 } });
  // Traffic: one client per transport, and a user over the per-user limit.
  for (const [user, transport] of [['ann', 'auto'], ['ben', 'poll'], ['cat', 'sse']]) {
    const page = await newPage(context);
    await page.goto(`${gateway.url}/?user=${user}&transport=${transport}&connect=1`);
    await waitFor(async () => (await page.textContent('#state')) === 'connected', { what: `${user} connected` });
  }
  const sockets = await newPage(context);
  await sockets.goto(`${gateway.url}/`);
  const replaced = await sockets.evaluate(async () => {
    const { token } = await (await fetch('demo/token', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"user":"dan"}',
    })).json();
    const url = new URL(`ws?token=${token}`, location.href).href.replace(/^http/, 'ws');
    const closes = [];
    for (let i = 0; i < 3; i++) {
      const ws = new WebSocket(url);
      ws.onclose = (event) => closes.push(event.code);
      await new Promise((resolve) => { ws.onopen = resolve; });
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
    return closes;
  });
  assert.deepEqual(replaced, [4002], 'the oldest of three was replaced');

  const dashboard = await newPage(context);
  await dashboard.goto(`${gateway.url}/dashboard.html`);
  for (let second = 0; second < 8; second++) {
    for (let i = 0; i <= second % 3; i++) {
      await gateway.push({ to: i === 2 ? ['ann'] : '*', data: { second, i } });
    }
    await sleep(1000);
  }

  await waitFor(async () => (await dashboard.getAttribute('#live', 'data-ok')) === 'true', { what: 'live scrape' });
  const connections = Number(await dashboard.textContent('#t-connections'));
  assert.ok(connections >= 5, `connections tile: ${connections}`);
  assert.match(await dashboard.textContent('#t-published-sub'), /^1[0-9] total$/);
  assert.match(await dashboard.textContent('#legend-evictions'), /replaced 1/);
  assert.match(await dashboard.textContent('#t-fanout'), /^[0-9.]+ ms$/, 'fan-out p99 shown');
  assert.match(await dashboard.textContent('#t-fanout-sub'), /^wait p99 [0-9.]+ ms$/);

  for (const name of CHARTS) {
    const canvas = dashboard.locator(`#chart-${name}`);
    const box = await canvas.boundingBox();
    assert.ok(box.width > 200 && box.height > 100, `${name} has a size: ${JSON.stringify(box)}`);
    const { coloured, total } = await colouredPixels(dashboard, await canvas.screenshot());
    assert.ok(coloured > 40, `${name} chart has data drawn: ${coloured} coloured of ${total} pixels`);
  }
  await dashboard.evaluate(() => window.scrollTo(0, 0));
  await dashboard.screenshot({ path: screenshotPath('dashboard.png') });
  assert.deepEqual(dashboard.errors, []);
  await context.close();
});

test('the dashboard says so when the gateway cannot be reached', async () => {
  const context = await browser.newContext();
  const dashboard = await newPage(context);
  await dashboard.goto(`${gateway.url}/dashboard.html`);
  await waitFor(async () => (await dashboard.getAttribute('#live', 'data-ok')) === 'true', { what: 'live' });
  await dashboard.route('**/metrics', (route) => route.abort());
  await waitFor(async () => (await dashboard.getAttribute('#live', 'data-ok')) === 'false', { what: 'unreachable' });
  assert.match(await dashboard.textContent('#live'), /unreachable/);
  await dashboard.unroute('**/metrics');
  await waitFor(async () => (await dashboard.getAttribute('#live', 'data-ok')) === 'true', { what: 'live again' });
  await context.close();
});
