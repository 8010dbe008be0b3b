import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  bucketCounts, byLabel, histogram, parsePrometheus, quantile, rate, rates, snapshot, value,
} from '../../../static/metrics.js';
import { axisMax, shortNumber } from '../../../static/charts.js';

const SCRAPE = `# HELP pushgate_messages_published_total Messages accepted by POST /push, by stream.
# TYPE pushgate_messages_published_total counter
pushgate_messages_published_total{stream="user"} 2
pushgate_messages_published_total{stream="broadcast"} 13

# TYPE pushgate_evictions_total counter
pushgate_evictions_total{reason="idle"} 0
pushgate_evictions_total{reason="replaced"} 1

# TYPE pushgate_messages_delivered_total counter
pushgate_messages_delivered_total{transport="poll"} 9
pushgate_messages_delivered_total{transport="ws"} 41
pushgate_messages_delivered_total{transport="sse"} 13

# TYPE pushgate_connections gauge
pushgate_connections{transport="poll"} 1
pushgate_connections{transport="ws"} 3
pushgate_connections{transport="sse"} 1

# TYPE pushgate_timer_entries gauge
pushgate_timer_entries 6
# TYPE pushgate_sessions gauge
pushgate_sessions 4
# TYPE pushgate_channels gauge
pushgate_channels 3
# TYPE pushgate_subscriptions gauge
pushgate_subscriptions 7

# TYPE pushgate_timer_lateness_seconds histogram
pushgate_timer_lateness_seconds_bucket{le="0.001"} 0
pushgate_timer_lateness_seconds_bucket{le="0.005"} 10
pushgate_timer_lateness_seconds_bucket{le="0.01"} 11
pushgate_timer_lateness_seconds_bucket{le="0.1"} 11
pushgate_timer_lateness_seconds_bucket{le="+Inf"} 11
pushgate_timer_lateness_seconds_sum 0.04
pushgate_timer_lateness_seconds_count 11
# TYPE pushgate_fanout_wait_seconds histogram
pushgate_fanout_wait_seconds_bucket{le="0.00005"} 1
pushgate_fanout_wait_seconds_bucket{le="0.0001"} 4
pushgate_fanout_wait_seconds_bucket{le="+Inf"} 4
pushgate_fanout_wait_seconds_sum 0.00026
pushgate_fanout_wait_seconds_count 4
# TYPE pushgate_fanout_duration_seconds histogram
pushgate_fanout_duration_seconds_bucket{le="0.01"} 3
pushgate_fanout_duration_seconds_bucket{le="0.025"} 4
pushgate_fanout_duration_seconds_bucket{le="+Inf"} 4
pushgate_fanout_duration_seconds_sum 0.04
pushgate_fanout_duration_seconds_count 4
`;

test('a scrape becomes the dashboard snapshot', () => {
  const parsed = parsePrometheus(SCRAPE);
  assert.equal(parsed.types.get('pushgate_timer_lateness_seconds'), 'histogram');
  const s = snapshot(parsed);
  assert.deepEqual(s.connections, { poll: 1, ws: 3, sse: 1 });
  assert.equal(s.sessions, 4);
  assert.equal(s.timerEntries, 6);
  assert.equal(s.channels, 3);
  assert.equal(s.subscriptions, 7);
  assert.deepEqual(s.published, { user: 2, broadcast: 13 });
  assert.deepEqual(s.delivered, { poll: 9, ws: 41, sse: 13 });
  assert.deepEqual(s.evictions, { idle: 0, replaced: 1 });
  assert.equal(s.lateness.count, 11);
  assert.deepEqual(s.lateness.buckets.map((b) => b.le), [0.001, 0.005, 0.01, 0.1, Infinity]);
  assert.equal(s.fanoutWait.count, 4);
  assert.deepEqual(s.fanoutWait.buckets.map((b) => b.le), [0.00005, 0.0001, Infinity]);
  assert.equal(s.fanoutDuration.count, 4);
  assert.deepEqual(s.fanoutDuration.buckets.map((b) => b.count), [3, 4, 4]);
});

test('labels with escapes, timestamps, odd spacing and junk lines', () => {
  const parsed = parsePrometheus([
    'm{a="x\\"y",b="back\\\\slash",c="line\\nbreak"} 1.5 1700000000000',
    'm{a="plain",} 2',
    '  spaced_metric   3  ',
    'special{le="+Inf"} +Inf',
    'nan NaN',
    'this is not a sample',
    'broken{a="unterminated} 4',
    'novalue{a="b"}',
  ].join('\n'));
  assert.equal(value(parsed, 'm', { a: 'x"y' }), 1.5);
  assert.equal(parsed.samples.get('m')[0].labels.b, 'back\\slash');
  assert.equal(parsed.samples.get('m')[0].labels.c, 'line\nbreak');
  assert.equal(value(parsed, 'm', { a: 'plain' }), 2);
  assert.equal(value(parsed, 'spaced_metric'), 3);
  assert.equal(value(parsed, 'special'), Infinity);
  assert.ok(Number.isNaN(value(parsed, 'nan')));
  assert.equal(parsed.samples.has('this'), false);
  assert.equal(parsed.samples.has('broken'), false);
  assert.equal(parsed.samples.has('novalue'), false);
  assert.equal(value(parsed, 'absent'), 0);
  assert.deepEqual(byLabel(parsed, 'm', 'a'), { 'x"y': 1.5, plain: 2 });
});

test('quantiles interpolate inside the bucket, like histogram_quantile', () => {
  const { buckets } = histogram(parsePrometheus(SCRAPE), 'pushgate_timer_lateness_seconds');
  assert.equal(quantile(buckets, 0.5), 0.001 + 0.004 * (5.5 / 10));
  assert.ok(Math.abs(quantile(buckets, 0.99) - (0.005 + 0.005 * ((10.89 - 10) / 1))) < 1e-12);
  assert.equal(quantile([], 0.5), null);
  assert.equal(quantile([{ le: 1, count: 0 }, { le: Infinity, count: 0 }], 0.5), null);
  assert.equal(quantile([{ le: 1, count: 0 }, { le: Infinity, count: 4 }], 0.5), 1,
    'past the last finite bound: that bound');
  assert.deepEqual(bucketCounts(buckets).map((b) => b.count), [0, 10, 1, 0, 0]);
});

test('counter rates, and a restart counts as a reset', () => {
  assert.equal(rate(10, 25, 5), 3);
  assert.equal(rate(100, 4, 2), 2, 'the counter started again from 0');
  assert.equal(rate(undefined, 5, 1), 0, 'no earlier reading');
  assert.equal(rate(1, 5, 0), 0);
  const before = { published: { broadcast: 10 }, delivered: { ws: 5 }, evictions: {} };
  const now = { published: { broadcast: 12, user: 3 }, delivered: { ws: 9 }, evictions: { idle: 1 } };
  assert.deepEqual(rates(before, now, 2), {
    published: { broadcast: 1, user: 0 },
    delivered: { ws: 2 },
    evictions: { idle: 0 },
  });
});

test('axes get round tops in four steps', () => {
  const table = [[0, 4], [3, 4], [4, 4], [5, 8], [7, 8], [9, 20], [21, 40], [150, 200], [0.3, 4]];
  for (const [max, want] of table) assert.equal(axisMax(max), want, String(max));
  assert.equal(axisMax(0.3, 0.1), 0.4);
  assert.deepEqual([0, 7, 12.5, 1500, 2_500_000, 0.25].map(shortNumber), ['0', '7', '13', '1.5k', '2.5M', '0.25']);
});
