/**
 * charts.js: the dashboard's small canvas charts (no library).
 *
 * Two kinds: a time series (lines, or stacked areas) over a fixed window
 * of samples with the newest at the right, and a bar chart. Both size the
 * canvas backing store to the element's CSS size times devicePixelRatio,
 * so lines stay crisp, and redraw everything on each call (a few hundred
 * points: cheaper than keeping state).
 */

const GRID = '#e6e8ee';
const AXIS_TEXT = '#7a8194';
const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
const PAD = { left: 44, right: 10, top: 10, bottom: 20 };

/** The 2D context of `canvas`, scaled for the device; with its CSS size. */
function prepare(canvas) {
  const ratio = globalThis.devicePixelRatio || 1;
  const width = Math.max(1, canvas.clientWidth);
  const height = Math.max(1, canvas.clientHeight);
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = FONT;
  return { ctx, width, height };
}

/**
 * The axis top for data up to `value`: four grid steps of a round size
 * (1, 2 or 5 times a power of ten), never below 4 * `minStep`.
 */
export function axisMax(value, minStep = 1) {
  const wanted = Math.max(value / 4, minStep);
  const power = 10 ** Math.floor(Math.log10(wanted));
  for (const step of [1, 2, 5, 10]) {
    if (step * power >= wanted - 1e-12) return 4 * step * power;
  }
  return 40 * power;
}

/** A short label for an axis value: 1.5k, 2M, 0.25. */
export function shortNumber(value) {
  const abs = Math.abs(value);
  if (abs >= 1e6) return `${+(value / 1e6).toFixed(1)}M`;
  if (abs >= 1e3) return `${+(value / 1e3).toFixed(1)}k`;
  if (abs >= 10 || value === 0) return String(Math.round(value));
  return String(+value.toFixed(2));
}

function drawGrid(ctx, width, height, max, format) {
  const plotH = height - PAD.top - PAD.bottom;
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const y = Math.round(PAD.top + plotH - (plotH * i) / 4) + 0.5;
    ctx.strokeStyle = GRID;
    ctx.beginPath();
    ctx.moveTo(PAD.left, y);
    ctx.lineTo(width - PAD.right, y);
    ctx.stroke();
    ctx.fillStyle = AXIS_TEXT;
    ctx.fillText(format((max * i) / 4), PAD.left - 6, y);
  }
}

/**
 * Draws series over the last `capacity` samples, newest at the right.
 * `series`: `[{ color, values: number[] }]` (values oldest first, all the
 * same length). `stacked`: areas stacked in order instead of lines.
 * `windowLabel`: the text under the left edge ("2 min ago"). `minStep`:
 * the smallest grid step (1 for counts; smaller for fractional rates).
 */
export function drawTimeSeries(canvas, { series, capacity = 120, stacked = false,
  format = shortNumber, windowLabel = '', minStep = 1 }) {
  const { ctx, width, height } = prepare(canvas);
  const n = Math.max(0, ...series.map((s) => s.values.length));
  const totals = Array.from({ length: n }, (_, i) => (stacked
    ? series.reduce((sum, s) => sum + (s.values[i] || 0), 0)
    : Math.max(0, ...series.map((s) => s.values[i] || 0))));
  const max = axisMax(Math.max(0, ...totals), minStep);
  drawGrid(ctx, width, height, max, format);

  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const x = (i) => PAD.left + plotW - ((n - 1 - i) * plotW) / Math.max(1, capacity - 1);
  const y = (v) => PAD.top + plotH - (Math.min(v, max) / max) * plotH;

  ctx.fillStyle = AXIS_TEXT;
  ctx.textBaseline = 'alphabetic';
  ctx.textAlign = 'left';
  if (windowLabel) ctx.fillText(windowLabel, PAD.left, height - 5);
  ctx.textAlign = 'right';
  ctx.fillText('now', width - PAD.right, height - 5);
  if (n === 0) return;

  ctx.lineJoin = 'round';
  ctx.lineWidth = 2;
  const base = new Array(n).fill(0);
  for (const s of series) {
    const top = s.values.map((v, i) => (stacked ? base[i] : 0) + (v || 0));
    ctx.beginPath();
    top.forEach((v, i) => (i === 0 ? ctx.moveTo(x(i), y(v)) : ctx.lineTo(x(i), y(v))));
    ctx.strokeStyle = s.color;
    ctx.stroke();
    if (stacked) {
      for (let i = n - 1; i >= 0; i--) ctx.lineTo(x(i), y(base[i]));
      ctx.closePath();
      ctx.globalAlpha = 0.25;
      ctx.fillStyle = s.color;
      ctx.fill();
      ctx.globalAlpha = 1;
      top.forEach((v, i) => { base[i] = v; });
    }
    if (n === 1) {
      ctx.fillStyle = s.color;
      ctx.fillRect(x(0) - 2, y(top[0]) - 2, 4, 4);
    }
  }
}

/**
 * Draws one bar per entry: `bars` = `[{ label, value, color }]`, with the
 * value above each bar and the label below.
 */
export function drawBars(canvas, { bars, format = shortNumber, minStep = 1 }) {
  const { ctx, width, height } = prepare(canvas);
  const max = axisMax(Math.max(0, ...bars.map((b) => b.value)), minStep);
  drawGrid(ctx, width, height, max, format);
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const slot = plotW / Math.max(1, bars.length);
  const barW = Math.max(4, Math.min(56, slot * 0.62));
  ctx.textAlign = 'center';
  bars.forEach((bar, i) => {
    const cx = PAD.left + slot * i + slot / 2;
    const h = (Math.min(bar.value, max) / max) * plotH;
    ctx.fillStyle = bar.color;
    if (h > 0) roundedTop(ctx, cx - barW / 2, PAD.top + plotH - h, barW, h, Math.min(4, barW / 4));
    ctx.fillStyle = AXIS_TEXT;
    ctx.textBaseline = 'alphabetic';
    ctx.fillText(bar.label, cx, height - 5, slot - 2);
  });
}

function roundedTop(ctx, x, y, w, h, r) {
  const radius = Math.min(r, h);
  ctx.beginPath();
  ctx.moveTo(x, y + h);
  ctx.lineTo(x, y + radius);
  ctx.quadraticCurveTo(x, y, x + radius, y);
  ctx.lineTo(x + w - radius, y);
  ctx.quadraticCurveTo(x + w, y, x + w, y + radius);
  ctx.lineTo(x + w, y + h);
  ctx.closePath();
  ctx.fill();
}
