// Types of pushgate.js, the browser client of the pushgate push gateway.

/** A transport's short name. */
export type TransportName = 'ws' | 'poll' | 'sse';

/** The client's state (see `STATES`). */
export type State = 'idle' | 'connecting' | 'connected' | 'reconnecting' | 'closed';

/** Why the gateway ends a connection (the `close` frame's `reason`). */
export type CloseReason = 'idle' | 'replaced' | 'slow' | 'token_expired' | 'shutdown';

/** Why the gateway asks the client to come back (the `reconnect` frame's `reason`). */
export type ReconnectReason = 'poll_timeout' | 'draining' | 'lifetime';

/**
 * Why the client stopped or is reconnecting (`Pushgate#reason`, `Status.reason`):
 * a close or reconnect reason, or one of the client's own:
 * `client` (close() was called), `lost` (the connection failed),
 * `http_<status>` (a long-poll was refused), `unauthorized` (401 with a fixed
 * token), `forbidden` (403: origin not allowed), `token` (getToken failed).
 */
export type Reason = CloseReason | ReconnectReason | 'client' | 'lost' | 'unauthorized'
  | 'forbidden' | 'forbidden_channel' | 'token' | `http_${number}` | string;

/** Frames the gateway sends (PROTOCOL.md, "Frames"). */
export type Frame =
  | { type: 'message'; id: string; cursor: string; stream: 'broadcast' | 'user'; data: unknown }
  | { type: 'message'; id: string; cursor: string; stream: 'channel'; channel: string; data: unknown }
  | { type: 'subscribed' | 'unsubscribed'; channel: string }
  | { type: 'refreshed'; expires_at: number }
  | { type: 'recover'; complete: boolean; cursor: string }
  | { type: 'reconnect'; reason: ReconnectReason; retry_ms: number; cursor: string }
  | { type: 'close'; reason: CloseReason }
  | { type: 'error'; code: string; message: string; channel?: string }
  | { type: 'pong' };

/** One delivered message (the `message` event). */
export interface Message {
  /** The push id: the backend's idempotency key or one the gateway generated. */
  id: string | null;
  /** The cursor of this message (opaque). */
  cursor: string | null;
  /** `broadcast` (everyone), `user` (this user's personal stream) or `channel`. */
  stream: 'broadcast' | 'user' | 'channel';
  /**
   * The channel, for a channel's message (absent otherwise). A push that
   * reached several of the client's channels is delivered once, with the
   * first channel it arrived on.
   */
  channel?: string;
  /** The JSON the backend pushed, as is. */
  data: unknown;
  /** The transport it arrived on. */
  transport: TransportName;
}

/** The `status` event: sent on each change of state or transport and each scheduled retry. */
export interface Status {
  state: State;
  transport: TransportName | null;
  reason: Reason | null;
  /** Backoff retries since the last healthy connection. */
  attempt: number;
  /** When reconnecting: milliseconds until the next attempt, else null. */
  retryInMs: number | null;
}

/** The `recover` event, after a resume with a cursor. */
export interface Recover {
  /** false: the gateway's history did not cover the whole gap; some messages are missing. */
  complete: boolean;
  cursor: string | null;
}

/** The `error` event: a problem that does not stop the client. */
export interface ClientError {
  /** The `error` frame's code, or `token` when getToken failed. */
  code: string;
  message: string;
  /** The channel a refused `subscribe` named. */
  channel?: string;
}

/** Why `subscribe()` was refused: `code` is `forbidden_channel`, `bad_channel`, `too_many_channels`, or `http_<status>` / `refused`. */
export interface ChannelError extends Error {
  code: string;
}

/** What getToken may return: the token, or an object holding it (as `/demo/token` answers). */
export type TokenResult = string | { token: string };

/** The subset of Web Storage the cursor store uses. */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export interface Options {
  /** A fixed client token (JWT). Give this, `getToken` or `cookieAuth`. */
  token?: string;
  /**
   * Called for a token before the first connection, when the current one
   * is about to expire (read from its `exp` claim), after a `token_expired`
   * close and after a 401. On a WebSocket, also shortly before the
   * token's `exp` (see `refreshRatio`): the new token is sent as a
   * `refresh` frame and the connection stays up; if the gateway refuses
   * it, the client reconnects with another fresh token.
   */
  getToken?: () => TokenResult | Promise<TokenResult>;
  /**
   * Send no token at all: the gateway asks the site's connect proxy
   * (`[auth] connect_proxy_url`), which reads the session cookie. Long-poll
   * sends credentials (`credentials: 'include'`) and SSE opens with
   * `withCredentials`, so a gateway on another origin gets the cookie too
   * (its `allowed_origins` must name the page's origin). A 401 stops a
   * long-poll client (reason `unauthorized`): sign the user in, then
   * `connect()`. A `token_expired` close (the site's `expires_at`)
   * reconnects, and the site is asked again. `token` and `getToken` are
   * ignored. Default false.
   */
  cookieAuth?: boolean;
  /**
   * Channels to join besides the token's claim (each in the claim or public
   * on the gateway), sent as `channels=` on every transport. Default none.
   */
  channels?: string[];
  /** Transports to try, in order. Default `['ws', 'poll']`. */
  transports?: TransportName[];
  onMessage?: (message: Message) => void;
  onStatus?: (status: Status) => void;
  onRecover?: (recover: Recover) => void;
  onError?: (error: ClientError) => void;
  /** Where the cursor is kept. Default `sessionStorage` (memory if unavailable); `null`: memory only. */
  storage?: StorageLike | null;
  /** The storage key. Default `'pushgate:cursor'`; use one per user when a page switches users. */
  storageKey?: string;
  /** The dedupe set; pass one to share it between client instances. Default: a new one of `dedupeSize`. */
  seen?: RecentIds;
  /** Message ids remembered for dedupe. Default 1000. */
  dedupeSize?: number;
  /** Backoff: attempt n waits a uniform random time in [0, min(max, base * 2^n)). Defaults 500 and 30000 ms. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** A connection that lived this long resets the backoff. Default 10000 ms. */
  stableMs?: number;
  /** A WebSocket or SSE stream not up within this long counts as failed. Default 10000 ms. */
  connectTimeoutMs?: number;
  /** A long-poll not answered within this long is abandoned. Default 90000 ms. */
  pollTimeoutMs?: number;
  /** A first long-poll still pending after this long counts as up. Default 1000 ms. */
  pollSettleMs?: number;
  /** WebSocket heartbeat interval; two silent intervals end the connection. 0: off. Default 20000 ms. */
  pingIntervalMs?: number;
  /** A token expiring within this long is renewed before connecting. Default 5000 ms. */
  tokenMarginMs?: number;
  /**
   * WebSocket refresh: a fresh token is sent once this share of the
   * token's remaining life has passed, plus up to `refreshJitter` more at
   * random. Defaults 0.8 and 0.1 (between 80 and 90 %); 0 turns it off.
   */
  refreshRatio?: number;
  refreshJitter?: number;
  /** Endpoint paths under the base URL. Default `/ws`, `/poll`, `/sse`. */
  paths?: Partial<Record<TransportName, string>>;
  /** Replacements of globals, for tests. */
  env?: Partial<Env>;
}

export interface Env {
  WebSocket: typeof WebSocket;
  EventSource: typeof EventSource;
  fetch: typeof fetch;
  setTimeout: (fn: () => void, ms: number) => unknown;
  clearTimeout: (id: unknown) => void;
  now: () => number;
  random: () => number;
}

export interface EventMap {
  message: Message;
  status: Status;
  recover: Recover;
  error: ClientError;
}

export class Pushgate {
  /** @param baseUrl the gateway's origin (and path prefix, if any); default the page's origin. */
  constructor(baseUrl: string | URL | null | undefined, options: Options);
  /** One of `STATES`. */
  readonly state: State;
  /** The transport in use or being tried, or null before the first attempt. */
  readonly transport: TransportName | null;
  /** Why the client last stopped or is reconnecting. */
  readonly reason: Reason | null;
  /** The cursor a reconnect would resume from. */
  readonly cursor: string | null;
  /** The channels asked for (the `channels` option and later subscribes). */
  readonly channels: string[];
  /**
   * Joins a channel: a `subscribe` frame on a WebSocket (resolves on
   * `subscribed`), else a reconnect with the new list (resolves once it is
   * up). Rejects with a ChannelError, the list unchanged, when refused.
   */
  subscribe(name: string): Promise<void>;
  /** Leaves a channel: an `unsubscribe` frame, or a reconnect with the new list. */
  unsubscribe(name: string): Promise<void>;
  /** Starts connecting; a no-op unless idle or closed. Returns this. */
  connect(): this;
  /** Stops for good (until connect() again); keeps the cursor. */
  close(): void;
  /** Skips a pending backoff wait. */
  retryNow(): void;
  /** Subscribes; returns an unsubscribe function. */
  on<K extends keyof EventMap>(type: K, fn: (event: EventMap[K]) => void): () => void;
}

export const TRANSPORTS: readonly TransportName[];
export const DEFAULT_TRANSPORTS: readonly TransportName[];
export const STATES: Readonly<{
  IDLE: 'idle'; CONNECTING: 'connecting'; CONNECTED: 'connected';
  RECONNECTING: 'reconnecting'; CLOSED: 'closed';
}>;
export const WS_CLOSE_REASONS: Readonly<Record<number, CloseReason>>;
export const DEFAULTS: Readonly<Required<Pick<Options,
  'backoffBaseMs' | 'backoffMaxMs' | 'stableMs' | 'connectTimeoutMs' | 'pollTimeoutMs'
  | 'pollSettleMs' | 'pingIntervalMs' | 'tokenMarginMs' | 'refreshRatio' | 'refreshJitter'
  | 'dedupeSize' | 'storageKey'>>>;

/** Full-jitter backoff: a uniform random delay in [0, min(maxMs, baseMs * 2^attempt)). */
export function backoffDelay(attempt: number, baseMs?: number, maxMs?: number, random?: () => number): number;

export class Backoff {
  constructor(options?: { baseMs?: number; maxMs?: number }, random?: () => number);
  readonly baseMs: number;
  readonly maxMs: number;
  attempt: number;
  next(): number;
  reset(): void;
}

/** retry_ms plus up to half of it again at random (at most 5 s). */
export function reconnectDelay(retryMs: number, random?: () => number): number;

export class MemoryStorage implements StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export class CursorStore {
  constructor(storage: StorageLike | null | undefined, key?: string);
  get(): string | null;
  /** true when the cursor changed. */
  set(cursor: string | null | undefined): boolean;
  clear(): void;
}

export class RecentIds {
  constructor(capacity?: number);
  /** false when the id was already among the most recent `capacity`. */
  add(id: string | null | undefined): boolean;
  has(id: string): boolean;
  readonly size: number;
}

export function parseFrame(text: string): Frame | null;

export type Step =
  | { action: 'message'; id: string | null; cursor: string | null; stream: 'broadcast' | 'user' | 'channel'; channel?: string | null; data: unknown }
  | { action: 'subscribed' | 'unsubscribed'; channel: string }
  | { action: 'refreshed'; expiresAtMs: number | null }
  | { action: 'recover'; complete: boolean; cursor: string | null }
  | { action: 'reconnect'; reason: string; retryMs: number; cursor: string | null }
  | { action: 'close'; reason: string; then: 'reconnect' | 'renew' | 'stop' }
  | { action: 'error'; code: string; message: string; channel?: string }
  | { action: 'pong' }
  | { action: 'ignore' };

export function classifyFrame(frame: unknown): Step;
/** Whether `name` is a channel name: 1 to 128 bytes of `[A-Za-z0-9_.:@-]`. */
export function isChannelName(name: unknown): name is string;
/** Channel names with repeats dropped; throws a TypeError for a bad one. */
export function channelList(names: string[] | null | undefined): string[];
export function closeAction(reason: string): 'reconnect' | 'renew' | 'stop';
export function closeReasonOfCode(code: number): CloseReason | null;
export function tokenExpiryMs(token: string): number | null;
/** When to refresh a token expiring at `expiryMs`, as a delay from `nowMs`; null: nothing to schedule. */
export function refreshDelay(nowMs: number, expiryMs: number | null, ratio?: number, jitter?: number,
  random?: () => number): number | null;
export function isTokenStale(token: string | null | undefined, nowMs: number, marginMs?: number): boolean;
export function nextAttempt(args: {
  transports: TransportName[];
  index: number;
  proven: Set<TransportName>;
  established: boolean;
}): { index: number; immediate: boolean };
export function transportUrl(baseUrl: string, path: string,
  params?: Record<string, string | null | undefined>, transport?: TransportName): string;
