import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Backoff, backoffDelay, reconnectDelay } from '../../../static/pushgate.js';

/** A random() that returns the given values in turn. */
const sequence = (...values) => {
  let i = 0;
  return () => values[i++ % values.length];
};

test('the ceiling doubles from the base until the cap', () => {
  const nearlyOne = () => 0.999999;
  const ceilings = [0, 1, 2, 3, 4, 5, 6, 7, 20, 1000].map((n) => backoffDelay(n, 500, 30000, nearlyOne));
  assert.deepEqual(ceilings, [499, 999, 1999, 3999, 7999, 15999, 29999, 29999, 29999, 29999]);
});

test('full jitter spans the whole window from zero', () => {
  assert.equal(backoffDelay(0, 500, 30000, () => 0), 0);
  assert.equal(backoffDelay(4, 500, 30000, () => 0), 0);
  assert.equal(backoffDelay(4, 500, 30000, () => 0.5), 4000);
});

test('random delays stay within [0, ceiling) and are spread out', () => {
  for (let attempt = 0; attempt < 12; attempt++) {
    const ceiling = Math.min(30000, 500 * 2 ** attempt);
    const seen = new Set();
    for (let i = 0; i < 200; i++) {
      const d = backoffDelay(attempt, 500, 30000);
      assert.ok(Number.isInteger(d) && d >= 0 && d < ceiling, `attempt ${attempt}: ${d}`);
      seen.add(Math.floor((d / ceiling) * 4));
    }
    assert.equal(seen.size, 4, `attempt ${attempt} should reach every quarter of its window`);
  }
});

test('odd attempts are clamped, not thrown on', () => {
  assert.equal(backoffDelay(-3, 500, 30000, () => 0.5), 250);
  assert.equal(backoffDelay(1e9, 500, 30000, () => 0.5), 15000);
});

test('Backoff counts attempts and reset starts over', () => {
  const backoff = new Backoff({ baseMs: 100, maxMs: 1000 }, () => 0.999);
  assert.deepEqual([backoff.next(), backoff.next(), backoff.next(), backoff.next(), backoff.next()],
    [99, 199, 399, 799, 999]);
  assert.equal(backoff.attempt, 5);
  backoff.reset();
  assert.equal(backoff.attempt, 0);
  assert.equal(backoff.next(), 99);
});

test('Backoff takes its jitter from the random source', () => {
  const backoff = new Backoff({ baseMs: 1000, maxMs: 8000 }, sequence(0.25, 0.5, 0.75));
  assert.deepEqual([backoff.next(), backoff.next(), backoff.next()], [250, 1000, 3000]);
});

test('Backoff refuses a nonsense window', () => {
  assert.throws(() => new Backoff({ baseMs: 0, maxMs: 10 }), RangeError);
  assert.throws(() => new Backoff({ baseMs: 100, maxMs: 10 }), RangeError);
});

test('reconnect frames wait retry_ms plus up to half again, zero stays zero', () => {
  assert.equal(reconnectDelay(0, () => 0.9), 0);
  assert.equal(reconnectDelay(1000, () => 0), 1000);
  assert.equal(reconnectDelay(1000, () => 0.999), 1499);
  assert.equal(reconnectDelay(60000, () => 0.999), 60000 + 4995);
  assert.equal(reconnectDelay(undefined, () => 0.5), 0);
  assert.equal(reconnectDelay(-5, () => 0.5), 0);
});
