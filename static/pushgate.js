/**
 * pushgate.js: the browser client of the pushgate push gateway.
 *
 * A dependency-free ES module. It connects over WebSocket, falls back to
 * long-poll (and SSE where asked), follows `reconnect` frames, keeps the
 * cursor (in memory and in sessionStorage, so a reload resumes), backs off
 * with full jitter, and hands every message to the page exactly once.
 *
 *     import { Pushgate } from '/pushgate.js';
 *     const client = new Pushgate('https://push.example.com', {
 *       getToken: async () => (await fetch('/my/token')).text(),
 *       onMessage: (m) => console.log(m.data),
 *       onStatus: (s) => console.log(s.state, s.transport),
 *     });
 *     client.connect();
 *
 * On a WebSocket, a token with an `exp` is refreshed in place shortly
 * before it expires (getToken, then a `refresh` frame). With
 * `cookieAuth: true` the client sends no token at all: the gateway asks
 * the site's connect proxy, which reads the session cookie.
 *
 * The file has two halves. The first is pure logic (backoff, cursor store,
 * dedupe, frame and failure decisions) with no I/O, exported so it can be
 * unit-tested in node. The second is I/O: one small adapter per transport
 * and the `Pushgate` class that ties them together. It stays one file on
 * purpose: a page can copy it next to its own code and import it.
 */

// ---------------------------------------------------------------------------
// Constants

/** Every transport this client speaks, by its short name. */
export const TRANSPORTS = Object.freeze(['ws', 'poll', 'sse']);

/** The transports tried when none are given, in order. */
export const DEFAULT_TRANSPORTS = Object.freeze(['ws', 'poll']);

/** The values of `Pushgate#state`. */
export const STATES = Object.freeze({
  /** Created, `connect()` not called yet. */
  IDLE: 'idle',
  /** First attempt (or a fallback to the next transport) under way. */
  CONNECTING: 'connecting',
  /** A transport is up and delivering. */
  CONNECTED: 'connected',
  /** Lost or told to come back: waiting for the next attempt, or making it. */
  RECONNECTING: 'reconnecting',
  /** Stopped: by `close()`, or by a close reason that must not resume. */
  CLOSED: 'closed',
});

/** WebSocket close codes the gateway uses, by the close reason they carry. */
export const WS_CLOSE_REASONS = Object.freeze({
  4001: 'idle',
  4002: 'replaced',
  4003: 'slow',
  4004: 'token_expired',
  1001: 'shutdown',
});

/** Defaults of every tunable option, in milliseconds unless named otherwise. */
export const DEFAULTS = Object.freeze({
  /** First backoff ceiling; attempt n waits a random time below base * 2^n. */
  backoffBaseMs: 500,
  /** Backoff ceiling cap. */
  backoffMaxMs: 30000,
  /** A connection that lived this long resets the backoff when it ends. */
  stableMs: 10000,
  /** A WebSocket or SSE stream not up within this long counts as failed. */
  connectTimeoutMs: 10000,
  /** A long-poll not answered within this long is abandoned (a dead proxy). */
  pollTimeoutMs: 90000,
  /** A first long-poll still pending after this long counts as established. */
  pollSettleMs: 1000,
  /** WebSocket heartbeat: a `{"type":"ping"}` this often; 0 turns it off. */
  pingIntervalMs: 20000,
  /** A token expiring within this long is renewed before connecting. */
  tokenMarginMs: 5000,
  /**
   * On a WebSocket, a fresh token is asked for and sent (`refresh` frame)
   * once this share of the token's remaining life has passed, plus up to
   * `refreshJitter` more at random (0.8 and 0.1: between 80 and 90 %).
   * 0 turns refresh off.
   */
  refreshRatio: 0.8,
  /** The random share added to `refreshRatio`, so a crowd does not refresh together. */
  refreshJitter: 0.1,
  /** Message ids remembered for dedupe (a count, not ms). */
  dedupeSize: 1000,
  /** The sessionStorage key the cursor is kept under. */
  storageKey: 'pushgate:cursor',
});

// ---------------------------------------------------------------------------
// Pure logic: backoff

/**
 * The wait before retry number `attempt` (0 for the first): "full jitter",
 * a uniform random time in [0, min(maxMs, baseMs * 2^attempt)). Spreads a
 * crowd of clients that lost the same gateway across the whole window.
 */
export function backoffDelay(attempt, baseMs = DEFAULTS.backoffBaseMs,
  maxMs = DEFAULTS.backoffMaxMs, random = Math.random) {
  const exponent = Math.min(Math.max(0, attempt | 0), 30);
  const ceiling = Math.min(maxMs, baseMs * 2 ** exponent);
  return Math.floor(random() * ceiling);
}

/** Successive backoff delays; `reset()` after a healthy connection. */
export class Backoff {
  constructor({ baseMs = DEFAULTS.backoffBaseMs, maxMs = DEFAULTS.backoffMaxMs } = {},
    random = Math.random) {
    if (!(baseMs > 0) || !(maxMs >= baseMs)) {
      throw new RangeError(`backoff: need 0 < baseMs <= maxMs, got ${baseMs}, ${maxMs}`);
    }
    this.baseMs = baseMs;
    this.maxMs = maxMs;
    this.random = random;
    /** Retries since the last reset. */
    this.attempt = 0;
  }

  /** The next delay in ms; each call raises the ceiling until the cap. */
  next() {
    const delay = backoffDelay(this.attempt, this.baseMs, this.maxMs, this.random);
    this.attempt += 1;
    return delay;
  }

  reset() {
    this.attempt = 0;
  }
}

/**
 * The wait before following a `reconnect` frame: its `retry_ms`, plus up to
 * half of it again at random (at most 5 s), so a drained gateway's clients
 * do not all arrive at the next one in the same millisecond. 0 stays 0.
 */
export function reconnectDelay(retryMs, random = Math.random) {
  const base = Number.isFinite(retryMs) && retryMs > 0 ? retryMs : 0;
  return base + Math.floor(random() * Math.min(base / 2, 5000));
}

// ---------------------------------------------------------------------------
// Pure logic: cursor store and dedupe

/** A storage that lives only in memory (the fallback when none works). */
export class MemoryStorage {
  constructor() {
    this.map = new Map();
  }
  getItem(key) {
    return this.map.has(key) ? this.map.get(key) : null;
  }
  setItem(key, value) {
    this.map.set(key, String(value));
  }
  removeItem(key) {
    this.map.delete(key);
  }
}

/**
 * The last cursor seen, kept in memory and mirrored to a Web Storage
 * (sessionStorage by default) so a reload of the page resumes where it was.
 * A storage that throws (private mode, quota) degrades to memory only.
 */
export class CursorStore {
  constructor(storage, key = DEFAULTS.storageKey) {
    this.storage = storage ?? null;
    this.key = key;
    this.value = null;
    try {
      const stored = this.storage?.getItem(key);
      if (typeof stored === 'string' && stored !== '') this.value = stored;
    } catch {
      this.storage = null;
    }
  }

  /** The cursor to resume from, or null. */
  get() {
    return this.value;
  }

  /** Remembers `cursor` (a non-empty string); true when it changed. */
  set(cursor) {
    if (typeof cursor !== 'string' || cursor === '' || cursor === this.value) return false;
    this.value = cursor;
    try {
      this.storage?.setItem(this.key, cursor);
    } catch {
      // Memory still has it; the next reload just starts live.
    }
    return true;
  }

  /** Forgets the cursor (the gateway called it bad). */
  clear() {
    this.value = null;
    try {
      this.storage?.removeItem(this.key);
    } catch {
      // Nothing to do.
    }
  }
}

/**
 * The most recent `capacity` message ids: `add` says whether an id is new.
 * Bounded, O(1) per call: a Set keeps insertion order, so the oldest id is
 * its first. Shared between transports (and may be shared between client
 * instances), so a message delivered twice across a switch is shown once.
 */
export class RecentIds {
  constructor(capacity = DEFAULTS.dedupeSize) {
    if (!(capacity >= 1)) throw new RangeError(`dedupe capacity must be >= 1, got ${capacity}`);
    this.capacity = Math.floor(capacity);
    this.ids = new Set();
  }

  /** Records `id`; false when it was already among the recent ones. */
  add(id) {
    if (id === undefined || id === null || id === '') return true;
    const key = String(id);
    if (this.ids.has(key)) return false;
    this.ids.add(key);
    if (this.ids.size > this.capacity) {
      this.ids.delete(this.ids.values().next().value);
    }
    return true;
  }

  has(id) {
    return this.ids.has(String(id));
  }

  get size() {
    return this.ids.size;
  }
}

// ---------------------------------------------------------------------------
// Pure logic: frames, close reasons, tokens, failures

/** A frame from its JSON text, or null when it is not a frame object. */
export function parseFrame(text) {
  if (typeof text !== 'string') return null;
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  return isFrame(value) ? value : null;
}

function isFrame(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    && typeof value.type === 'string';
}

/**
 * What a close reason asks of the client:
 * - `reconnect`: come back with the cursor, after backoff (idle, slow,
 *   shutdown);
 * - `renew`: get a new token first, then come back (token_expired);
 * - `stop`: do not come back (replaced: another connection of the same user
 *   took this one's place, and returning would evict it in turn). Unknown
 *   reasons stop too: PROTOCOL.md says not to resume unless told to.
 */
export function closeAction(reason) {
  switch (reason) {
    case 'idle':
    case 'slow':
    case 'shutdown':
      return 'reconnect';
    case 'token_expired':
      return 'renew';
    default:
      return 'stop';
  }
}

/** The close reason a WebSocket close code carries, or null for none. */
export function closeReasonOfCode(code) {
  return WS_CLOSE_REASONS[code] ?? null;
}

/**
 * What to do with one frame, as a plain object:
 * - `{action:'message', id, cursor, stream, data}`, with `channel` when
 *   `stream` is `'channel'`
 * - `{action:'subscribed'|'unsubscribed', channel}` (answers on a WebSocket)
 * - `{action:'refreshed', expiresAtMs}` (a `refresh` frame was taken)
 * - `{action:'recover', complete, cursor}`
 * - `{action:'reconnect', reason, retryMs, cursor}`
 * - `{action:'close', reason, then}` where `then` is `closeAction(reason)`
 * - `{action:'error', code, message}` (the gateway's answer to a bad frame),
 *   with `channel` when it refused a `subscribe`
 * - `{action:'pong'}` and `{action:'ignore'}` (unknown types, for forward
 *   compatibility with new frame types).
 */
export function classifyFrame(frame) {
  if (!isFrame(frame)) return { action: 'ignore' };
  switch (frame.type) {
    case 'message': {
      const step = {
        action: 'message',
        id: frame.id === undefined || frame.id === null ? null : String(frame.id),
        cursor: typeof frame.cursor === 'string' ? frame.cursor : null,
        stream: STREAMS.includes(frame.stream) ? frame.stream : 'broadcast',
        data: frame.data,
      };
      if (step.stream === 'channel') step.channel = typeof frame.channel === 'string' ? frame.channel : null;
      return step;
    }
    case 'subscribed':
    case 'unsubscribed':
      return { action: frame.type, channel: String(frame.channel ?? '') };
    case 'refreshed':
      return {
        action: 'refreshed',
        expiresAtMs: Number.isFinite(frame.expires_at) ? frame.expires_at * 1000 : null,
      };
    case 'recover':
      return {
        action: 'recover',
        complete: frame.complete === true,
        cursor: typeof frame.cursor === 'string' ? frame.cursor : null,
      };
    case 'reconnect':
      return {
        action: 'reconnect',
        reason: String(frame.reason ?? 'unknown'),
        retryMs: Number.isFinite(frame.retry_ms) && frame.retry_ms > 0 ? frame.retry_ms : 0,
        cursor: typeof frame.cursor === 'string' ? frame.cursor : null,
      };
    case 'close': {
      const reason = String(frame.reason ?? 'unknown');
      return { action: 'close', reason, then: closeAction(reason) };
    }
    case 'error': {
      const step = { action: 'error', code: String(frame.code ?? ''), message: String(frame.message ?? '') };
      if (typeof frame.channel === 'string') step.channel = frame.channel;
      return step;
    }
    case 'pong':
      return { action: 'pong' };
    default:
      return { action: 'ignore' };
  }
}

/** The codes of an `error` frame that refuses a `refresh` frame. */
const REFRESH_ERRORS = ['bad_token', 'wrong_user'];

/** The streams a message can belong to. */
const STREAMS = ['broadcast', 'user', 'channel'];

/** Whether `name` is a channel name: 1 to 128 bytes of `[A-Za-z0-9_.:@-]`. */
export function isChannelName(name) {
  return typeof name === 'string' && /^[A-Za-z0-9_.:@-]{1,128}$/.test(name);
}

/**
 * A list of channel names with repeats dropped, in first-seen order;
 * throws a TypeError naming the first bad one.
 */
export function channelList(names) {
  if (names === undefined || names === null) return [];
  if (!Array.isArray(names)) throw new TypeError(`channels: a list of names, got ${JSON.stringify(names)}`);
  const out = [];
  for (const name of names) {
    if (!isChannelName(name)) throw new TypeError(`not a channel name: ${JSON.stringify(name)}`);
    if (!out.includes(name)) out.push(name);
  }
  return out;
}

/** The `exp` claim of a JWT in ms since the epoch, or null if unreadable. */
export function tokenExpiryMs(token) {
  if (typeof token !== 'string') return null;
  const part = token.split('.')[1];
  if (!part) return null;
  try {
    const base64 = part.replace(/-/g, '+').replace(/_/g, '/');
    const padded = base64 + '='.repeat((4 - (base64.length % 4)) % 4);
    const claims = JSON.parse(atob(padded));
    return Number.isFinite(claims?.exp) ? claims.exp * 1000 : null;
  } catch {
    return null;
  }
}

/**
 * When to refresh a token that expires at `expiryMs`, as a delay from
 * `nowMs`: `ratio` of its remaining life plus up to `jitter` more at
 * random. null when there is nothing to schedule (no expiry, already
 * expired, refresh off).
 */
export function refreshDelay(nowMs, expiryMs, ratio = DEFAULTS.refreshRatio,
  jitter = DEFAULTS.refreshJitter, random = Math.random) {
  if (!Number.isFinite(expiryMs) || !(ratio > 0)) return null;
  const remaining = expiryMs - nowMs;
  if (remaining <= 0) return null;
  const share = Math.min(ratio + Math.max(0, jitter) * random(), 1);
  return Math.floor(remaining * share);
}

/** Whether `token` is missing, or known to expire within `marginMs` of `nowMs`. */
export function isTokenStale(token, nowMs, marginMs = DEFAULTS.tokenMarginMs) {
  if (typeof token !== 'string' || token === '') return true;
  const expiry = tokenExpiryMs(token);
  return expiry !== null && expiry - marginMs <= nowMs;
}

/**
 * Where to go after an attempt ended without a frame saying what to do.
 *
 * A transport that never got a connection up this client's lifetime
 * ("unproven") may be blocked (a proxy that kills WebSockets): move to the
 * next one at once. A proven transport that fails is an outage, not a
 * block: stay on it and back off, so a gateway restart does not demote a
 * page to long-poll for good. When every transport failed unproven, go
 * back to the first after backoff.
 *
 * Returns `{index, immediate}`: the transport index for the next attempt
 * and whether to make it without waiting.
 */
export function nextAttempt({ transports, index, proven, established }) {
  const current = transports[index];
  if (established || proven.has(current)) return { index, immediate: false };
  if (index + 1 < transports.length) return { index: index + 1, immediate: true };
  return { index: 0, immediate: false };
}

/** The URL of a transport endpoint under `baseUrl`, with query `params`. */
export function transportUrl(baseUrl, path, params = {}, transport = 'poll') {
  const base = new URL(baseUrl);
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  const url = new URL(path.replace(/^\//, ''), base);
  if (transport === 'ws') url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') url.searchParams.set(key, value);
  }
  return url.toString();
}

// ---------------------------------------------------------------------------
// I/O: one adapter per transport
//
// An adapter opens one connection and reports through three callbacks:
// `open()` once the connection is known to work, `frame(f)` per frame, and
// `end(info)` once, when it is over for any reason other than `stop()`.
// `info` = {established, code?, status?, retryAfterMs?, clean?, error?}.

const CLIENT_PING = '{"type":"ping"}';

/**
 * WebSocket. Established on the first frame, not on `open`: a proxy that
 * accepts the upgrade and then cuts the stream has not shown it works. The
 * client sends a ping as soon as the socket opens, so the first frame (the
 * gateway's pong, or a `recover` on a resume) comes at once.
 */
function openWebSocket(url, on, env, opts) {
  const ws = new env.WebSocket(url);
  let established = false;
  let stopped = false;
  let heardSincePing = true;
  let heartbeat = null;
  const giveUp = env.setTimeout(() => end({ established, error: 'connect timeout' }),
    opts.connectTimeoutMs);

  const beat = () => {
    if (!heardSincePing) {
      end({ established, error: 'heartbeat timeout' });
      return;
    }
    heardSincePing = false;
    send(CLIENT_PING);
    heartbeat = env.setTimeout(beat, opts.pingIntervalMs);
  };
  const send = (text) => {
    try {
      ws.send(text);
    } catch {
      // A socket closing under us; `onclose` reports it.
    }
  };
  const stop = (code = 1000) => {
    if (stopped) return;
    stopped = true;
    env.clearTimeout(giveUp);
    env.clearTimeout(heartbeat);
    ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
    try {
      ws.close(code);
    } catch {
      // Already closed.
    }
  };
  const end = (info) => {
    if (stopped) return;
    stop();
    on.end(info);
  };

  ws.onopen = () => {
    send(CLIENT_PING);
    if (opts.pingIntervalMs > 0) heartbeat = env.setTimeout(beat, opts.pingIntervalMs);
  };
  ws.onmessage = (event) => {
    if (stopped) return;
    heardSincePing = true;
    if (!established) {
      established = true;
      env.clearTimeout(giveUp);
      on.open();
    }
    const frame = parseFrame(typeof event.data === 'string' ? event.data : null);
    if (frame && !stopped) on.frame(frame);
  };
  ws.onerror = () => {};
  ws.onclose = (event) => end({ established, code: event.code });
  return { stop: () => stop(), send };
}

/**
 * One long-poll request. Established on its answer, or once the first
 * request has been held for `pollSettleMs` without failing (a parked poll
 * may legitimately wait `poll_timeout_secs` with nothing to say). A normal
 * answer ends the adapter with `clean: true`: the client polls again.
 */
function openPoll(url, on, env, opts, alreadyUp) {
  const abort = new AbortController();
  let established = alreadyUp;
  let stopped = false;
  const settle = alreadyUp ? null : env.setTimeout(() => markUp(), opts.pollSettleMs);
  const deadline = env.setTimeout(() => end({ established, error: 'poll timeout' }),
    opts.pollTimeoutMs);

  function markUp() {
    if (stopped || established) return;
    established = true;
    on.open();
  }
  function stop() {
    if (stopped) return;
    stopped = true;
    env.clearTimeout(settle);
    env.clearTimeout(deadline);
    abort.abort();
  }
  function end(info) {
    if (stopped) return;
    stop();
    on.end(info);
  }

  (async () => {
    let response;
    try {
      const init = {
        signal: abort.signal,
        cache: 'no-store',
        headers: { Accept: 'application/json' },
      };
      // The session cookie goes along to a gateway on another origin.
      if (opts.cookieAuth) init.credentials = 'include';
      response = await env.fetch(url, init);
    } catch (error) {
      end({ established, error: String(error?.message ?? error) });
      return;
    }
    if (stopped) return;
    if (response.status !== 200) {
      const retryAfter = Number(response.headers?.get?.('retry-after'));
      // The error's code says which refusal it is (`forbidden_channel`, ...).
      let code;
      try {
        const body = await response.json();
        if (typeof body?.error?.code === 'string') code = body.error.code;
      } catch {
        // Not JSON: the status alone.
      }
      if (stopped) return;
      end({
        established,
        status: response.status,
        code,
        retryAfterMs: Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : 0,
      });
      return;
    }
    let frames;
    try {
      frames = await response.json();
    } catch (error) {
      end({ established, error: 'bad poll answer' });
      return;
    }
    if (stopped) return;
    markUp();
    for (const frame of Array.isArray(frames) ? frames : []) {
      if (stopped) return;
      if (isFrame(frame)) on.frame(frame);
    }
    end({ established: true, clean: true });
  })();
  return { stop };
}

/**
 * Server-sent events. Established on the stream's `open`. The browser's
 * own reconnection is not used: every error closes the EventSource and
 * the client reconnects itself with `?cursor=` (same backoff, same
 * fallback rules as the other transports).
 */
function openSse(url, on, env, opts) {
  const source = opts.cookieAuth ? new env.EventSource(url, { withCredentials: true })
    : new env.EventSource(url);
  let established = false;
  let stopped = false;
  const giveUp = env.setTimeout(() => end({ established, error: 'connect timeout' }),
    opts.connectTimeoutMs);
  const types = ['message', 'recover', 'reconnect', 'close', 'pong'];

  const onFrame = (event) => {
    if (stopped) return;
    const frame = parseFrame(event.data);
    if (frame) on.frame(frame);
  };
  // `error` is both a frame type (a MessageEvent with data) and the
  // EventSource's own failure event (no data).
  const onError = (event) => {
    if (typeof event?.data === 'string') onFrame(event);
    else end({ established });
  };
  const stop = () => {
    if (stopped) return;
    stopped = true;
    env.clearTimeout(giveUp);
    for (const type of types) source.removeEventListener(type, onFrame);
    source.removeEventListener('error', onError);
    source.onopen = null;
    source.close();
  };
  const end = (info) => {
    if (stopped) return;
    stop();
    on.end(info);
  };

  source.onopen = () => {
    if (stopped || established) return;
    established = true;
    env.clearTimeout(giveUp);
    on.open();
  };
  for (const type of types) source.addEventListener(type, onFrame);
  source.addEventListener('error', onError);
  return { stop };
}

// ---------------------------------------------------------------------------
// The client

/** Options taken from `options`, validated, with defaults filled in. */
function resolveOptions(options) {
  const transports = options.transports ?? DEFAULT_TRANSPORTS;
  if (!Array.isArray(transports) || transports.length === 0
    || !transports.every((t) => TRANSPORTS.includes(t))
    || new Set(transports).size !== transports.length) {
    throw new TypeError(`transports: a non-empty list of distinct ${TRANSPORTS.join('/')}, got ${JSON.stringify(transports)}`);
  }
  if (!options.cookieAuth && !options.token && typeof options.getToken !== 'function') {
    throw new TypeError('pass a token, a getToken function or cookieAuth: true');
  }
  const opts = { ...DEFAULTS };
  for (const key of Object.keys(DEFAULTS)) {
    if (options[key] !== undefined) opts[key] = options[key];
  }
  opts.transports = [...transports];
  opts.cookieAuth = options.cookieAuth === true;
  opts.paths = { ws: '/ws', poll: '/poll', sse: '/sse', ...options.paths };
  opts.channels = channelList(options.channels);
  return opts;
}

function defaultStorage() {
  try {
    return globalThis.sessionStorage ?? new MemoryStorage();
  } catch {
    return new MemoryStorage();
  }
}

/**
 * A connection to one gateway for one user, kept up across failures.
 *
 * Events (subscribe with `on(type, fn)` or the `on<Type>` options):
 * - `message`: `{id, cursor, stream, data, transport}` (and `channel` for
 *   a channel's message), once per id: a push that reached several of the
 *   client's channels is shown once;
 * - `status`: `{state, transport, reason, attempt, retryInMs}` on every
 *   change of state or transport and every scheduled retry;
 * - `recover`: `{complete, cursor}` after a resume (complete false: the
 *   gateway's history did not cover the whole gap);
 * - `error`: `{code, message}` for problems that do not stop the client
 *   (an `error` frame, a failing getToken).
 */
export class Pushgate {
  /**
   * @param {string} baseUrl the gateway's origin (and path prefix, if any);
   *   defaults to the page's own origin.
   * @param {object} options see pushgate.d.ts.
   */
  constructor(baseUrl, options = {}) {
    this.options = resolveOptions(options);
    this.baseUrl = new URL(baseUrl || globalThis.location?.origin || '', globalThis.location?.href).toString();
    const e = options.env ?? {};
    this.env = {
      WebSocket: e.WebSocket ?? globalThis.WebSocket,
      EventSource: e.EventSource ?? globalThis.EventSource,
      fetch: e.fetch ?? ((...args) => globalThis.fetch(...args)),
      setTimeout: e.setTimeout ?? ((fn, ms) => globalThis.setTimeout(fn, ms)),
      clearTimeout: e.clearTimeout ?? ((id) => globalThis.clearTimeout(id)),
      now: e.now ?? (() => Date.now()),
      random: e.random ?? Math.random,
    };
    this.cookieAuth = this.options.cookieAuth;
    this.getToken = !this.cookieAuth && typeof options.getToken === 'function' ? options.getToken : null;
    this.token = this.cookieAuth ? null : options.token ?? null;
    this.refreshTimer = null;
    /** Whether a `refresh` frame awaits its answer. */
    this.refreshing = false;
    this.cursors = new CursorStore(options.storage === undefined ? defaultStorage() : options.storage,
      this.options.storageKey);
    this.seen = options.seen ?? new RecentIds(this.options.dedupeSize);
    this.backoff = new Backoff({ baseMs: this.options.backoffBaseMs, maxMs: this.options.backoffMaxMs },
      this.env.random);

    /** One of STATES. */
    this.state = STATES.IDLE;
    /** The transport in use or being tried ('ws', 'poll', 'sse'), or null. */
    this.transport = null;
    /** Why the client last stopped or is reconnecting, or null. */
    this.reason = null;

    this.index = 0;
    this.proven = new Set();
    this.conn = null;
    this.generation = 0;
    this.retryTimer = null;
    this.openedAt = 0;
    this.up = false;
    /** The channels asked for (sent as `channels=` on every transport). */
    this.channelNames = [...this.options.channels];
    /** Pending `subscribe`/`unsubscribe` calls by channel: {op, resolve, reject}. */
    this.pending = new Map();
    this.listeners = { message: new Set(), status: new Set(), recover: new Set(), error: new Set() };
    for (const [type, key] of [['message', 'onMessage'], ['status', 'onStatus'],
      ['recover', 'onRecover'], ['error', 'onError']]) {
      if (typeof options[key] === 'function') this.listeners[type].add(options[key]);
    }
    this.onOnline = () => {
      if (this.state === STATES.RECONNECTING && this.retryTimer !== null) this.retryNow();
    };
  }

  /** The cursor a reconnect would resume from, or null. */
  get cursor() {
    return this.cursors.get();
  }

  /** The channels the client asks for, beyond its token's claim. */
  get channels() {
    return [...this.channelNames];
  }

  /**
   * Joins channel `name`: a `subscribe` frame on a WebSocket (resolves on
   * `subscribed`), else a reconnect with the new list (resolves once it is
   * up). Rejects, and leaves the list as it was, if the gateway refuses it
   * (`forbidden_channel`, `bad_channel`, `too_many_channels`).
   */
  subscribe(name) {
    return this.changeChannels('subscribe', name);
  }

  /** Leaves channel `name` (an `unsubscribe` frame, or a reconnect). */
  unsubscribe(name) {
    return this.changeChannels('unsubscribe', name);
  }

  /** Subscribes `fn` to `type`; returns a function that unsubscribes. */
  on(type, fn) {
    const set = this.listeners[type];
    if (!set) throw new TypeError(`unknown event ${type}`);
    set.add(fn);
    return () => set.delete(fn);
  }

  /** Starts connecting (a no-op while already connecting or connected). */
  connect() {
    if (this.state !== STATES.IDLE && this.state !== STATES.CLOSED) return this;
    this.index = 0;
    this.transport = this.options.transports[0];
    this.reason = null;
    this.backoff.reset();
    globalThis.addEventListener?.('online', this.onOnline);
    this.setState(STATES.CONNECTING);
    this.attempt();
    return this;
  }

  /** Stops for good (until `connect()` again); the cursor is kept. */
  close() {
    globalThis.removeEventListener?.('online', this.onOnline);
    this.teardown();
    this.finish('client');
  }

  /** Skips a pending backoff wait and tries again now. */
  retryNow() {
    if (this.retryTimer === null) return;
    this.env.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.attempt();
  }

  // -- internals ------------------------------------------------------------

  changeChannels(op, name) {
    if (!isChannelName(name)) return Promise.reject(new TypeError(`not a channel name: ${JSON.stringify(name)}`));
    const joined = this.channelNames.includes(name);
    if ((op === 'subscribe') === joined && !this.pending.has(name)) return Promise.resolve();
    this.pending.get(name)?.reject(new Error(`${op} ${name} superseded`));
    if (op === 'subscribe' && !joined) this.channelNames.push(name);
    if (op === 'unsubscribe') this.channelNames = this.channelNames.filter((c) => c !== name);
    const done = new Promise((resolve, reject) => this.pending.set(name, { op, resolve, reject }));
    if (this.state === STATES.IDLE || this.state === STATES.CLOSED) {
      // Not connected: the list goes with the next connect.
      this.settle(name, null);
    } else if (this.transport === 'ws' && this.state === STATES.CONNECTED && this.conn?.send) {
      this.conn.send(JSON.stringify({ type: op, channel: name }));
    } else {
      // Long-poll and SSE take the list on a new request: make it now.
      this.relisting = true;
      this.attempt();
    }
    return done;
  }

  /** Ends the pending call for `name`: resolved, or rejected with `error`. */
  settle(name, error) {
    const pending = this.pending.get(name);
    if (!pending) return;
    this.pending.delete(name);
    if (error) pending.reject(error);
    else pending.resolve();
  }

  /** Undoes a refused `subscribe` of `name` and rejects its call. */
  refuse(name, code, message) {
    const pending = this.pending.get(name);
    if (pending?.op === 'subscribe') this.channelNames = this.channelNames.filter((c) => c !== name);
    const error = new Error(message || code);
    error.code = code;
    this.settle(name, error);
  }

  emit(type, value) {
    for (const fn of [...this.listeners[type]]) {
      try {
        fn(value);
      } catch (error) {
        // A listener's bug must not break the connection loop.
        globalThis.console?.error?.(error);
      }
    }
  }

  setState(state, extra = {}) {
    const changed = state !== this.state || this.transport !== this.statusTransport;
    this.state = state;
    this.statusTransport = this.transport;
    if (changed || extra.force) {
      this.emit('status', {
        state,
        transport: this.transport,
        reason: this.reason,
        attempt: this.backoff.attempt,
        retryInMs: extra.retryInMs ?? null,
      });
    }
  }

  /** Drops the current connection and any pending retry or refresh. */
  teardown() {
    this.generation += 1;
    this.env.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.env.clearTimeout(this.refreshTimer);
    this.refreshTimer = null;
    this.refreshing = false;
    this.conn?.stop();
    this.conn = null;
  }

  finish(reason) {
    this.teardown();
    this.reason = reason;
    this.up = false;
    this.setState(STATES.CLOSED, { force: true });
  }

  schedule(delayMs, { quiet = false } = {}) {
    this.teardown();
    const generation = this.generation;
    this.retryTimer = this.env.setTimeout(() => {
      if (generation !== this.generation) return;
      this.retryTimer = null;
      this.attempt();
    }, delayMs);
    if (!quiet) {
      this.up = false;
      this.setState(STATES.RECONNECTING, { force: true, retryInMs: delayMs });
    }
  }

  async currentToken() {
    if (!isTokenStale(this.token, this.env.now(), this.options.tokenMarginMs)) return this.token;
    if (!this.getToken) return this.token;
    return this.freshToken();
  }

  /** A new token from getToken, kept for the next connection too. */
  async freshToken() {
    const got = await this.getToken();
    const token = typeof got === 'string' ? got : got?.token;
    if (typeof token !== 'string' || token === '') throw new Error('getToken returned no token');
    this.token = token;
    return token;
  }

  /**
   * Arms the in-place refresh of the WebSocket's token, due at
   * `refreshRatio` (plus jitter) of the life left before `expiryMs`.
   */
  scheduleRefresh(expiryMs) {
    this.env.clearTimeout(this.refreshTimer);
    this.refreshTimer = null;
    if (!this.getToken || this.transport !== 'ws') return;
    const delay = refreshDelay(this.env.now(), expiryMs, this.options.refreshRatio,
      this.options.refreshJitter, this.env.random);
    if (delay === null) return;
    const generation = this.generation;
    this.refreshTimer = this.env.setTimeout(() => {
      this.refreshTimer = null;
      if (generation === this.generation) this.refresh(generation);
    }, delay);
  }

  /** Gets a fresh token and sends it on the WebSocket as a `refresh` frame. */
  async refresh(generation) {
    let token;
    try {
      token = await this.freshToken();
    } catch (error) {
      // The connection goes on; its token_expired close renews the token.
      if (generation === this.generation) {
        this.emit('error', { code: 'token', message: String(error?.message ?? error) });
      }
      return;
    }
    if (generation !== this.generation || !this.conn?.send) return;
    this.refreshing = true;
    this.conn.send(JSON.stringify({ type: 'refresh', token }));
  }

  /**
   * The gateway refused a `refresh`: reconnect with a fresh token (a
   * connect may succeed where the refresh did not, for example with a
   * key the gateway fetches only on connect). The cursor resumes it.
   */
  refreshRefused() {
    this.refreshing = false;
    this.token = null;
    this.attempt();
  }

  async attempt() {
    this.teardown();
    const generation = this.generation;
    this.transport = this.options.transports[this.index];
    if (this.state !== STATES.CONNECTED) {
      this.setState(this.state === STATES.RECONNECTING ? STATES.RECONNECTING : STATES.CONNECTING);
    }
    let token;
    try {
      token = await this.currentToken();
    } catch (error) {
      if (generation !== this.generation) return;
      this.emit('error', { code: 'token', message: String(error?.message ?? error) });
      this.reason = 'token';
      this.schedule(this.backoff.next());
      return;
    }
    if (generation !== this.generation) return;
    if (!token && !this.cookieAuth) {
      this.finish('token_expired');
      return;
    }
    const transport = this.transport;
    const url = transportUrl(this.baseUrl, this.options.paths[transport],
      { token, cursor: this.cursors.get(), channels: this.channelNames.join(',') }, transport);
    const callbacks = {
      open: () => generation === this.generation && this.onOpen(),
      frame: (frame) => generation === this.generation && this.onFrame(frame),
      end: (info) => generation === this.generation && this.onEnd(info),
    };
    if (transport === 'ws') this.conn = openWebSocket(url, callbacks, this.env, this.options);
    else if (transport === 'sse') this.conn = openSse(url, callbacks, this.env, this.options);
    else {
      // A poll with a changed channel list must show it is accepted before
      // the change counts as done.
      const up = this.up && this.proven.has('poll') && !this.relisting;
      this.conn = openPoll(url, callbacks, this.env, this.options, up);
    }
  }

  onOpen() {
    if (this.transport === 'ws' && this.token) this.scheduleRefresh(tokenExpiryMs(this.token));
    this.proven.add(this.transport);
    if (!this.up) this.openedAt = this.env.now();
    this.up = true;
    this.reason = null;
    this.setState(STATES.CONNECTED);
    // A connection made with the current list settles every pending change.
    this.relisting = false;
    for (const name of [...this.pending.keys()]) this.settle(name, null);
  }

  onFrame(frame) {
    const step = classifyFrame(frame);
    switch (step.action) {
      case 'message':
        this.cursors.set(step.cursor);
        if (this.seen.add(step.id)) {
          const { id, cursor, stream, data } = step;
          const event = { id, cursor, stream, data, transport: this.transport };
          if (stream === 'channel') event.channel = step.channel;
          this.emit('message', event);
        }
        break;
      case 'subscribed':
      case 'unsubscribed':
        if (this.pending.get(step.channel)?.op === step.action.slice(0, -1)) this.settle(step.channel, null);
        break;
      case 'refreshed':
        this.refreshing = false;
        this.scheduleRefresh(step.expiresAtMs ?? tokenExpiryMs(this.token));
        break;
      case 'recover':
        this.cursors.set(step.cursor);
        this.emit('recover', { complete: step.complete, cursor: step.cursor });
        break;
      case 'reconnect':
        this.cursors.set(step.cursor);
        if (step.reason === 'poll_timeout') {
          // The ordinary end of a parked poll: poll again, no status change.
          this.schedule(reconnectDelay(step.retryMs, this.env.random), { quiet: true });
        } else {
          this.reason = step.reason;
          this.schedule(reconnectDelay(step.retryMs, this.env.random));
        }
        break;
      case 'close':
        this.onClose(step.reason);
        break;
      case 'error':
        if (step.channel !== undefined && this.pending.has(step.channel)) {
          this.refuse(step.channel, step.code, step.message);
        }
        this.emit('error', { code: step.code, message: step.message, ...(step.channel !== undefined ? { channel: step.channel } : {}) });
        // The answer to our `refresh` frame (`bad_token`, `wrong_user`).
        if (this.refreshing && REFRESH_ERRORS.includes(step.code)) this.refreshRefused();
        break;
      default:
        break;
    }
  }

  onClose(reason) {
    this.reason = reason;
    const then = closeAction(reason);
    if (then === 'stop') {
      this.finish(reason);
      return;
    }
    if (then === 'renew' && !this.cookieAuth) {
      // With cookieAuth the site's answer expired, not a token: coming
      // back asks the site again, from the cookie.
      if (!this.getToken) {
        this.finish(reason);
        return;
      }
      this.token = null;
    }
    this.settleBackoff();
    this.schedule(this.backoff.next());
  }

  /**
   * Whether a refused request was about channels being changed: then the
   * pending subscribes are undone and rejected.
   */
  refusedChannels(info) {
    const channelCodes = ['forbidden_channel', 'bad_channel', 'too_many_channels'];
    if (info.code !== undefined && !channelCodes.includes(info.code)) return false;
    // An EventSource shows no status: a reconnect made for a new list that
    // fails before it is up is taken as the list's refusal.
    if (!info.status && !this.relisting) return false;
    this.relisting = false;
    const subscribing = [...this.pending].filter(([, p]) => p.op === 'subscribe').map(([name]) => name);
    if (subscribing.length === 0) return false;
    const code = info.code ?? (info.status ? `http_${info.status}` : 'refused');
    for (const name of subscribing) this.refuse(name, code, `channel ${name} refused`);
    return true;
  }

  /** Resets the backoff if the connection that just ended was healthy. */
  settleBackoff() {
    if (this.up && this.env.now() - this.openedAt >= this.options.stableMs) this.backoff.reset();
  }

  onEnd(info) {
    if (info.clean) {
      // A long-poll answered: poll again at once with the new cursor.
      this.settleBackoff();
      this.attempt();
      return;
    }
    const reason = closeReasonOfCode(info.code);
    if (reason !== null) {
      this.onClose(reason);
      return;
    }
    if (info.status === 401) {
      if (!this.getToken) {
        this.finish('unauthorized');
        return;
      }
      this.token = null;
    } else if ((info.status === 403 || info.status === 400 || (!info.established && !info.status))
      && this.refusedChannels(info)) {
      // A new channel list was refused: it is back as it was; go on.
      this.attempt();
      return;
    } else if (info.status === 403) {
      this.finish(info.code === 'forbidden_channel' ? 'forbidden_channel' : 'forbidden');
      return;
    } else if (info.status === 400 && this.cursors.get() !== null) {
      // bad_cursor: the stored cursor is not one this gateway issued.
      this.cursors.clear();
    }
    this.settleBackoff();
    this.reason = info.status ? `http_${info.status}` : 'lost';
    const next = nextAttempt({
      transports: this.options.transports,
      index: this.index,
      proven: this.proven,
      established: info.established,
    });
    this.index = next.index;
    if (next.immediate) {
      this.up = false;
      this.attempt();
      return;
    }
    this.schedule(Math.max(this.backoff.next(), info.retryAfterMs ?? 0));
  }
}
