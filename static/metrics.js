/**
 * metrics.js: reading pushgate's /metrics (Prometheus text format 0.0.4)
 * in the browser, and the numbers the dashboard derives from it.
 *
 * Pure functions over strings and plain objects, unit-tested in node.
 */

/**
 * Parses Prometheus text into `{ samples, types }`:
 * `samples` maps a sample name (`pushgate_connections`,
 * `pushgate_timer_lateness_seconds_bucket`, ...) to its series, each
 * `{ labels: {name: value}, value: number }`; `types` maps a metric family
 * to its `# TYPE`. Comments, blank lines and timestamps are ignored; a
 * line that does not parse is skipped rather than failing the scrape.
 */
export function parsePrometheus(text) {
  const samples = new Map();
  const types = new Map();
  for (const raw of String(text).split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    if (line.startsWith('#')) {
      const type = /^#\s*TYPE\s+(\S+)\s+(\S+)/.exec(line);
      if (type) types.set(type[1], type[2]);
      continue;
    }
    const sample = parseSample(line);
    if (!sample) continue;
    if (!samples.has(sample.name)) samples.set(sample.name, []);
    samples.get(sample.name).push({ labels: sample.labels, value: sample.value });
  }
  return { samples, types };
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;

function parseSample(line) {
  const name = NAME.exec(line)?.[0];
  if (!name) return null;
  let rest = line.slice(name.length);
  const labels = {};
  if (rest.startsWith('{')) {
    const end = parseLabels(rest, labels);
    if (end < 0) return null;
    rest = rest.slice(end);
  }
  const fields = rest.trim().split(/\s+/);
  const value = parseValue(fields[0]);
  return value === null ? null : { name, labels, value };
}

/** Reads `{a="x",b="y"}` into `labels`; returns the index after `}` or -1. */
function parseLabels(text, labels) {
  let i = 1;
  for (;;) {
    while (text[i] === ' ' || text[i] === ',') i += 1;
    if (text[i] === '}') return i + 1;
    const name = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(text.slice(i))?.[0];
    if (!name) return -1;
    i += name.length;
    while (text[i] === ' ') i += 1;
    if (text[i] !== '=' || text[i + 1] !== '"') return -1;
    i += 2;
    let value = '';
    for (;;) {
      const c = text[i];
      if (c === undefined) return -1;
      if (c === '"') break;
      if (c === '\\') {
        const next = text[i + 1];
        value += next === 'n' ? '\n' : next;
        i += 2;
      } else {
        value += c;
        i += 1;
      }
    }
    labels[name] = value;
    i += 1;
  }
}

function parseValue(text) {
  if (text === undefined || text === '') return null;
  if (text === '+Inf' || text === 'Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  const value = Number(text);
  return Number.isNaN(value) ? null : value;
}

/** The value of `name` whose labels include `match`, or 0 when absent. */
export function value(parsed, name, match = {}) {
  const series = parsed.samples.get(name) ?? [];
  const found = series.find((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v));
  return found ? found.value : 0;
}

/** `{labelValue: value}` for each series of `name`, keyed by `label`. */
export function byLabel(parsed, name, label) {
  const out = {};
  for (const s of parsed.samples.get(name) ?? []) {
    if (s.labels[label] !== undefined) out[s.labels[label]] = (out[s.labels[label]] ?? 0) + s.value;
  }
  return out;
}

/** A histogram's cumulative buckets `[{le, count}]` sorted by `le`, with its sum and count. */
export function histogram(parsed, name) {
  const buckets = (parsed.samples.get(`${name}_bucket`) ?? [])
    .map((s) => ({ le: parseValue(s.labels.le), count: s.value }))
    .filter((b) => b.le !== null)
    .sort((a, b) => a.le - b.le);
  return { buckets, sum: value(parsed, `${name}_sum`), count: value(parsed, `${name}_count`) };
}

/**
 * The `q` quantile (0..1) of cumulative `buckets`, interpolated linearly
 * inside the bucket it falls in, as Prometheus' histogram_quantile does.
 * null when there are no observations. Past the last finite bound it
 * answers that bound.
 */
export function quantile(buckets, q) {
  if (buckets.length === 0) return null;
  const total = buckets[buckets.length - 1].count;
  if (!(total > 0)) return null;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const { le, count } of buckets) {
    if (count >= rank) {
      if (le === Infinity) return lowerBound;
      const inBucket = count - lowerCount;
      if (inBucket <= 0) return le;
      return lowerBound + (le - lowerBound) * ((rank - lowerCount) / inBucket);
    }
    lowerBound = le;
    lowerCount = count;
  }
  return lowerBound;
}

/** Per-bucket counts (not cumulative) from cumulative buckets. */
export function bucketCounts(buckets) {
  return buckets.map((b, i) => ({ le: b.le, count: b.count - (i > 0 ? buckets[i - 1].count : 0) }));
}

/**
 * A counter's rate per second between two readings `seconds` apart. A
 * drop means the process restarted and the counter began again at 0, so
 * the new reading is all increase (as Prometheus' rate() treats resets).
 */
export function rate(previous, current, seconds) {
  if (!(seconds > 0) || previous === undefined || previous === null) return 0;
  const increase = current >= previous ? current - previous : current;
  return increase / seconds;
}

/**
 * The dashboard's numbers from one scrape: gauges as they are, counters
 * as totals (rates come from two snapshots, see `rates`).
 */
export function snapshot(parsed) {
  return {
    connections: byLabel(parsed, 'pushgate_connections', 'transport'),
    sessions: value(parsed, 'pushgate_sessions'),
    timerEntries: value(parsed, 'pushgate_timer_entries'),
    channels: value(parsed, 'pushgate_channels'),
    subscriptions: value(parsed, 'pushgate_subscriptions'),
    published: byLabel(parsed, 'pushgate_messages_published_total', 'stream'),
    delivered: byLabel(parsed, 'pushgate_messages_delivered_total', 'transport'),
    evictions: byLabel(parsed, 'pushgate_evictions_total', 'reason'),
    lateness: histogram(parsed, 'pushgate_timer_lateness_seconds'),
    fanoutWait: histogram(parsed, 'pushgate_fanout_wait_seconds'),
    fanoutDuration: histogram(parsed, 'pushgate_fanout_duration_seconds'),
  };
}

/** Per-second rates of every counter between two snapshots `seconds` apart. */
export function rates(previous, current, seconds) {
  const each = (before = {}, now = {}) => Object.fromEntries(
    Object.entries(now).map(([key, v]) => [key, rate(before[key], v, seconds)]),
  );
  return {
    published: each(previous?.published, current.published),
    delivered: each(previous?.delivered, current.delivered),
    evictions: each(previous?.evictions, current.evictions),
  };
}
