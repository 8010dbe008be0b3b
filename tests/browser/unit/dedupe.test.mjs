import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RecentIds } from '../../../static/pushgate.js';

test('an id is new once, then a duplicate', () => {
  const ids = new RecentIds(10);
  assert.equal(ids.add('m1'), true);
  assert.equal(ids.add('m1'), false);
  assert.equal(ids.add('m2'), true);
  assert.equal(ids.has('m1'), true);
  assert.equal(ids.size, 2);
});

test('the set is bounded and forgets the oldest first', () => {
  const ids = new RecentIds(3);
  for (const id of ['a', 'b', 'c', 'd']) assert.equal(ids.add(id), true);
  assert.equal(ids.size, 3);
  assert.equal(ids.has('a'), false, 'the oldest went');
  assert.equal(ids.add('b'), false);
  assert.equal(ids.add('a'), true, 'a forgotten id counts as new again');
  assert.equal(ids.has('b'), false, 'and pushed out the next oldest');
});

test('a long run keeps memory at capacity', () => {
  const ids = new RecentIds(1000);
  for (let i = 0; i < 50000; i++) ids.add(`id-${i}`);
  assert.equal(ids.size, 1000);
  assert.equal(ids.add('id-49999'), false);
  assert.equal(ids.add('id-48999'), true);
});

test('messages without an id are never dropped', () => {
  const ids = new RecentIds(2);
  for (const missing of [null, undefined, '']) {
    assert.equal(ids.add(missing), true);
    assert.equal(ids.add(missing), true);
  }
  assert.equal(ids.size, 0);
});

test('ids compare as strings', () => {
  const ids = new RecentIds(5);
  assert.equal(ids.add(7), true);
  assert.equal(ids.add('7'), false);
});

test('capacity must be at least one', () => {
  assert.throws(() => new RecentIds(0), RangeError);
});
