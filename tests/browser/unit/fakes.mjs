// Fakes for driving the Pushgate class in node: a manual clock, a scripted
// WebSocket, EventSource and fetch. No real I/O, no real time.

/** Timers that fire only when the test advances the clock. */
export class FakeClock {
  constructor() {
    this.nowMs = 1_000_000;
    this.timers = new Map();
    this.nextId = 1;
  }

  env() {
    return {
      setTimeout: (fn, ms) => {
        const id = this.nextId++;
        this.timers.set(id, { fn, at: this.nowMs + Math.max(0, ms ?? 0) });
        return id;
      },
      clearTimeout: (id) => this.timers.delete(id),
      now: () => this.nowMs,
    };
  }

  /** The delay of the earliest pending timer, or null. */
  nextDelay() {
    let best = null;
    for (const { at } of this.timers.values()) best = best === null ? at : Math.min(best, at);
    return best === null ? null : best - this.nowMs;
  }

  /** Moves time on by `ms`, firing due timers in deadline order. */
  async advance(ms) {
    const until = this.nowMs + ms;
    for (;;) {
      let due = null;
      for (const [id, t] of this.timers) {
        if (t.at <= until && (due === null || t.at < due[1].at)) due = [id, t];
      }
      if (due === null) break;
      this.timers.delete(due[0]);
      this.nowMs = Math.max(this.nowMs, due[1].at);
      due[1].fn();
      await flush();
    }
    this.nowMs = until;
    await flush();
  }
}

/** Lets pending promise callbacks run. */
export async function flush() {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
}

/** A WebSocket whose life the test scripts. `FakeWebSocket.all` lists every one made. */
export class FakeWebSocket {
  static all = [];
  constructor(url) {
    this.url = url;
    this.sent = [];
    this.closed = null;
    this.readyState = 0;
    FakeWebSocket.all.push(this);
  }
  static reset() {
    FakeWebSocket.all = [];
  }
  static last() {
    return FakeWebSocket.all.at(-1);
  }
  send(text) {
    this.sent.push(text);
  }
  close(code) {
    this.closed = code ?? 1000;
    this.readyState = 3;
  }
  // Test side:
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  receive(frame) {
    this.onmessage?.({ data: typeof frame === 'string' ? frame : JSON.stringify(frame) });
  }
  drop(code = 1006) {
    this.readyState = 3;
    this.onclose?.({ code });
  }
}

/** An EventSource the test scripts. */
export class FakeEventSource {
  static all = [];
  constructor(url) {
    this.url = url;
    this.listeners = new Map();
    this.closed = false;
    FakeEventSource.all.push(this);
  }
  static reset() {
    FakeEventSource.all = [];
  }
  static last() {
    return FakeEventSource.all.at(-1);
  }
  addEventListener(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, new Set());
    this.listeners.get(type).add(fn);
  }
  removeEventListener(type, fn) {
    this.listeners.get(type)?.delete(fn);
  }
  close() {
    this.closed = true;
  }
  // Test side:
  open() {
    this.onopen?.({});
  }
  event(type, frame) {
    for (const fn of this.listeners.get(type) ?? []) fn({ type, data: JSON.stringify(frame) });
  }
  fail() {
    for (const fn of this.listeners.get('error') ?? []) fn({ type: 'error' });
  }
}

/** fetch whose answers the test gives: `requests` holds each call, oldest first. */
export class FakeFetch {
  constructor() {
    this.requests = [];
    this.fetch = (url, init) => new Promise((resolve, reject) => {
      const request = { url, init, resolve, reject, answered: false };
      init?.signal?.addEventListener('abort', () => reject(new Error('aborted')));
      this.requests.push(request);
    });
  }
  last() {
    return this.requests.at(-1);
  }
  /** Answers the oldest unanswered request. */
  answer(status, body, headers = {}) {
    const request = this.requests.find((r) => !r.answered);
    if (!request) throw new Error('no pending request');
    request.answered = true;
    request.resolve({
      status,
      headers: { get: (name) => headers[name.toLowerCase()] ?? null },
      json: async () => body,
    });
  }
  failNext(message = 'connection refused') {
    const request = this.requests.find((r) => !r.answered);
    request.answered = true;
    request.reject(new TypeError(message));
  }
  pending() {
    return this.requests.filter((r) => !r.answered);
  }
}

/** A JWT-shaped token with the given `exp` (seconds); the signature is not checked here. */
export function fakeToken(sub, expSeconds) {
  const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  return `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, exp: expSeconds })}.sig`;
}
