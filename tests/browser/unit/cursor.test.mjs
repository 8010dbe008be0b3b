import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CursorStore, MemoryStorage } from '../../../static/pushgate.js';

test('a new store starts with no cursor', () => {
  assert.equal(new CursorStore(new MemoryStorage()).get(), null);
  assert.equal(new CursorStore(null).get(), null);
});

test('set keeps the cursor in memory and in storage', () => {
  const storage = new MemoryStorage();
  const store = new CursorStore(storage, 'k');
  assert.equal(store.set('00000000000000aa-7'), true);
  assert.equal(store.get(), '00000000000000aa-7');
  assert.equal(storage.getItem('k'), '00000000000000aa-7');
});

test('a reload resumes from the stored cursor', () => {
  const storage = new MemoryStorage();
  new CursorStore(storage, 'pushgate:cursor:alice').set('00000000000000aa-9');
  const reloaded = new CursorStore(storage, 'pushgate:cursor:alice');
  assert.equal(reloaded.get(), '00000000000000aa-9');
  assert.equal(new CursorStore(storage, 'pushgate:cursor:bob').get(), null, 'keys are separate');
});

test('empty and non-string cursors are ignored', () => {
  const store = new CursorStore(new MemoryStorage());
  store.set('a-1');
  for (const bad of ['', null, undefined, 42, {}]) {
    assert.equal(store.set(bad), false);
    assert.equal(store.get(), 'a-1');
  }
  assert.equal(store.set('a-1'), false, 'same cursor is not a change');
});

test('clear forgets the cursor everywhere', () => {
  const storage = new MemoryStorage();
  const store = new CursorStore(storage, 'k');
  store.set('a-1');
  store.clear();
  assert.equal(store.get(), null);
  assert.equal(storage.getItem('k'), null);
  assert.equal(new CursorStore(storage, 'k').get(), null);
});

test('a storage that throws degrades to memory only', () => {
  const broken = {
    getItem() { throw new Error('SecurityError'); },
    setItem() { throw new Error('QuotaExceededError'); },
    removeItem() { throw new Error('SecurityError'); },
  };
  const store = new CursorStore(broken, 'k');
  assert.equal(store.get(), null);
  assert.equal(store.set('a-2'), true);
  assert.equal(store.get(), 'a-2');
  store.clear();
  assert.equal(store.get(), null);

  const writeOnlyBroken = new MemoryStorage();
  writeOnlyBroken.setItem = () => { throw new Error('QuotaExceededError'); };
  const second = new CursorStore(writeOnlyBroken, 'k');
  assert.equal(second.set('a-3'), true);
  assert.equal(second.get(), 'a-3');
});
