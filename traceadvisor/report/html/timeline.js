/* traceadvisor HTML report: the timeline (canvas 2D, no framework) and the finding buttons.
 * Data: #ta-data holds base64 of gzip-compressed JSON (render_html.py); each lane's starts are
 * delta-coded whole ns after t0 (ns), durations whole ns. Times shown are the trace's own clock, µs.
 * Every trace-derived string reaches the page through textContent or the canvas, never as markup. */
(function () {
  'use strict';
  var TA = (window.traceadvisor = {
    ready: false, view: { start_us: 0, end_us: 0 }, draws: 0, findingWindows: {}, error: null,
    showFinding: function () { return false; },
  });
  var KIND_COLORS = {
    kernel: '#3b7dd8', memcpy: '#d8a03b', memset: '#b07cc6', cpu_op: '#6aa84f', python: '#a3acb6', annotation: '#e06666',
  };
  var CAUSE_COLORS = {
    sync: '#cc0000', data_loading: '#e69138', optimizer: '#8e7cc3', launch_bound: '#f1c232', cpu_op: '#38761d',
    launch_latency: '#d0d4d8', unknown: '#7f7f7f', communication: '#17becf',
  };
  var ROW = 12, LANE_GAP = 6, LABEL_W = 230, AXIS_H = 22, MIN_SPAN_US = 0.01;
  var canvas, ctx, tooltip, wrap, rangeText, lanes = [], full = { lo: 0, hi: 1 }, v0 = 0, v1 = 1;
  var kinds = [], kindNames = [], width = 800, height = 100, pending = false;

  function fail(e) {
    TA.error = String((e && e.message) || e);
    console.error('traceadvisor report: ' + TA.error);
  }

  function b64bytes(text) {
    var bin = atob(text.replace(/\s+/g, '')), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function decode() {
    var el = document.getElementById('ta-data');
    var stream = new Blob([b64bytes(el.textContent)]).stream().pipeThrough(new DecompressionStream('gzip'));
    return new Response(stream).text().then(JSON.parse);
  }

  /* A lane's spans split into rows by depth; each row's starts ascending (Float64Array). */
  function buildLane(tr, lane) {
    var n = lane.ds.length, depth = 0, i;
    for (i = 0; i < n; i++) if (lane.z[i] > depth) depth = lane.z[i];
    var rows = [], counts = new Array(depth + 1).fill(0);
    for (i = 0; i < n; i++) counts[lane.z[i]]++;
    for (i = 0; i <= depth; i++) {
      rows.push({ s: new Float64Array(counts[i]), e: new Float64Array(counts[i]), n: new Int32Array(counts[i]),
        k: new Int32Array(counts[i]), len: 0, maxDur: 0 });
    }
    var cum = 0;
    for (i = 0; i < n; i++) {
      cum += lane.ds[i];
      var r = rows[lane.z[i]], j = r.len++, s = (lane.t0 + cum) / 1000, d = lane.d[i] / 1000;
      r.s[j] = s; r.e[j] = s + d; r.n[j] = lane.n[i]; r.k[j] = lane.k[i];
      if (d > r.maxDur) r.maxDur = d;
    }
    return { label: lane.label, role: lane.role, rows: rows, trace: tr, y: 0, h: rows.length * ROW };
  }

  function colorOf(lane, k) {
    if (lane.role === 'idle') return CAUSE_COLORS[lane.trace.causes[k]] || '#999';
    return KIND_COLORS[kinds[k]] || '#999';
  }

  function lowerBound(a, len, x) {
    var lo = 0, hi = len;
    while (lo < hi) { var m = (lo + hi) >> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }

  function layout() {
    var y = AXIS_H;
    for (var i = 0; i < lanes.length; i++) { lanes[i].y = y; y += lanes[i].h + LANE_GAP; }
    height = Math.max(y, AXIS_H + 40);
    width = Math.max(300, wrap.clientWidth || 800);
    var dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.height = height + 'px';
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  }

  function X(t) { return LABEL_W + ((t - v0) / (v1 - v0)) * (width - LABEL_W); }
  function T(x) { return v0 + ((x - LABEL_W) / (width - LABEL_W)) * (v1 - v0); }

  // A time in µs as the text report writes it (report/format.py fmt_time): µs, ms or s by
  // magnitude, four significant digits, never finer than the trace's nanosecond.
  var UNITS = [['µs', 1], ['ms', 1e3], ['s', 1e6]];
  function fmtDur(us) {
    if (us === 0 || !isFinite(us)) return (us === 0 ? '0' : String(us)) + ' µs';
    var sign = us < 0 ? '-' : '', mag = Math.abs(us);
    for (var u = 0; u < UNITS.length; u++) {
      var x = mag / UNITS[u][1], exp = Math.floor(Math.log10(x));
      var maxDec = 3 + Math.round(Math.log10(UNITS[u][1]));
      var dec = Math.min(maxDec, Math.max(0, 3 - exp)), text = x.toFixed(dec);
      if (dec > 0 && dec === 3 - exp && parseFloat(text) >= Math.pow(10, exp + 1)) text = x.toFixed(dec - 1);
      if (parseFloat(text) < 1000 || u === UNITS.length - 1) return sign + text + ' ' + UNITS[u][0];
    }
  }

  TA.fmtTime = fmtDur; // for the tests: the page writes times as the text report does

  // An offset from the trace's start, signed (a span may start before the first drawn one).
  function fmtOffset(us) {
    return (us < 0 ? '\u2212' : '+') + fmtDur(Math.abs(us));
  }

  function niceStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
  }

  function drawAxis() {
    ctx.fillStyle = '#f6f8fa';
    ctx.fillRect(0, 0, width, AXIS_H);
    ctx.strokeStyle = '#eceff2';
    ctx.fillStyle = '#5b6570';
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    var step = niceStep(v1 - v0, Math.max(2, Math.floor((width - LABEL_W) / 110)));
    for (var t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      var x = Math.round(X(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, AXIS_H); ctx.lineTo(x, height); ctx.stroke();
      ctx.fillText(fmtOffset(t - full.lo), x + 3, AXIS_H / 2);
    }
    ctx.fillText('from trace start', 6, AXIS_H / 2);
  }

  function drawRow(lane, row, y) {
    var i = lowerBound(row.s, row.len, v0 - row.maxDur), left = LABEL_W;
    var px0 = -1, px1 = -1, pcol = null;
    function flush() {
      if (pcol !== null) { ctx.fillStyle = pcol; ctx.fillRect(px0, y, Math.max(1, px1 - px0), ROW - 1); pcol = null; }
    }
    ctx.font = '10px system-ui, sans-serif';
    for (; i < row.len && row.s[i] <= v1; i++) {
      if (row.e[i] < v0) continue;
      var x0 = Math.max(left, X(row.s[i])), x1 = Math.min(width, X(row.e[i])), col = colorOf(lane, row.k[i]);
      if (x1 - x0 < 0.5) { /* tiny: merged with its neighbours into one rectangle of at least 1 px */
        if (pcol !== null && x0 - px1 < 1) { if (x1 > px1) px1 = x1; continue; }
        flush(); px0 = x0; px1 = x1; pcol = col; continue;
      }
      flush();
      ctx.fillStyle = col;
      ctx.fillRect(x0, y, x1 - x0, ROW - 1);
      if (x1 - x0 > 40) {
        var name = lane.trace.names[row.n[i]] || '', fit = Math.floor((x1 - x0 - 4) / 5.5);
        if (fit > 2) {
          ctx.fillStyle = '#fff';
          ctx.fillText(name.length > fit ? name.slice(0, fit - 1) + '…' : name, x0 + 2, y + ROW / 2);
        }
      }
    }
    flush();
  }

  function draw() {
    pending = false;
    ctx.clearRect(0, 0, width, height);
    drawAxis();
    ctx.textBaseline = 'middle';
    for (var i = 0; i < lanes.length; i++) {
      var lane = lanes[i];
      ctx.fillStyle = i % 2 ? '#fbfcfd' : '#ffffff';
      ctx.fillRect(0, lane.y - LANE_GAP / 2, width, lane.h + LANE_GAP);
      for (var r = 0; r < lane.rows.length; r++) drawRow(lane, lane.rows[r], lane.y + r * ROW);
      ctx.fillStyle = '#f6f8fa';
      ctx.fillRect(0, lane.y - LANE_GAP / 2, LABEL_W - 4, lane.h + LANE_GAP);
      ctx.fillStyle = '#1d2329';
      ctx.font = '11px system-ui, sans-serif';
      var label = lane.label.length > 38 ? lane.label.slice(0, 37) + '…' : lane.label;
      ctx.fillText(label, 6, lane.y + Math.min(lane.h, ROW * 2) / 2);
    }
    TA.view = { start_us: v0, end_us: v1 };
    TA.draws++;
    if (rangeText) rangeText.textContent = 'showing ' + fmtDur(v1 - v0) + ' from ' + fmtOffset(v0 - full.lo);
  }

  function redraw() {
    if (!pending) { pending = true; window.requestAnimationFrame(draw); }
  }

  function setView(a, b) {
    var span = Math.max(b - a, MIN_SPAN_US), maxSpan = (full.hi - full.lo) * 4 || 1;
    if (span > maxSpan) { var mid = (a + b) / 2; a = mid - maxSpan / 2; b = mid + maxSpan / 2; span = maxSpan; }
    v0 = a; v1 = a + span;
  }

  function hit(x, y) {
    if (x < LABEL_W) return null;
    for (var i = 0; i < lanes.length; i++) {
      var lane = lanes[i];
      if (y < lane.y || y >= lane.y + lane.h) continue;
      var row = lane.rows[Math.floor((y - lane.y) / ROW)];
      if (!row) return null;
      var t = T(x), tol = (3 * (v1 - v0)) / (width - LABEL_W);
      var j = lowerBound(row.s, row.len, t + tol) - 1, best = -1;
      for (var steps = 0; j >= 0 && steps < 64; j--, steps++) {
        if (row.e[j] + tol >= t) { best = j; if (row.s[j] <= t && row.e[j] >= t) break; }
        if (row.s[j] < t - row.maxDur - tol) break;
      }
      return best < 0 ? null : { lane: lane, row: row, i: best };
    }
    return null;
  }

  function showTip(ev) {
    var rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    var h = hit(x, y);
    if (!h) { tooltip.hidden = true; return; }
    var r = h.row, i = h.i, lane = h.lane, what;
    if (lane.role === 'idle') what = 'idle: ' + (lane.trace.causeNames || lane.trace.causes)[r.k[i]];
    else what = kindNames[r.k[i]] || '';
    var name = lane.trace.names[r.n[i]] || '';
    tooltip.textContent = (name ? name + '\n' : '') + what + ' · ' + lane.label + '\nstart ' + fmtOffset(r.s[i] - full.lo) +
      ' from the trace start\nduration ' + fmtDur(r.e[i] - r.s[i]);
    tooltip.hidden = false;
    var left = Math.min(x + 14, width - 360);
    tooltip.style.left = Math.max(0, left) + 'px';
    tooltip.style.top = y + 16 + 'px'; // the tooltip is positioned in the scrolled content, as the canvas
  }

  function bind() {
    canvas.addEventListener('wheel', function (ev) {
      ev.preventDefault();
      var rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left;
      if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        var d = ((ev.deltaX || ev.deltaY) / (width - LABEL_W)) * (v1 - v0);
        setView(v0 + d, v1 + d);
      } else {
        var f = Math.exp(ev.deltaY * 0.002), t = T(Math.max(LABEL_W, x));
        setView(t - (t - v0) * f, t + (v1 - t) * f);
      }
      tooltip.hidden = true;
      redraw();
    }, { passive: false });
    var drag = null;
    canvas.addEventListener('mousedown', function (ev) {
      drag = { x: ev.clientX, a: v0, b: v1 };
      canvas.classList.add('dragging');
      ev.preventDefault();
    });
    window.addEventListener('mousemove', function (ev) {
      if (drag) {
        var d = ((drag.x - ev.clientX) / (width - LABEL_W)) * (drag.b - drag.a);
        setView(drag.a + d, drag.b + d);
        tooltip.hidden = true;
        redraw();
      } else if (ev.target === canvas) showTip(ev);
    });
    window.addEventListener('mouseup', function () { drag = null; canvas.classList.remove('dragging'); });
    canvas.addEventListener('mouseleave', function () { tooltip.hidden = true; });
    canvas.addEventListener('dblclick', function () { setView(full.lo, full.hi); redraw(); });
    var reset = document.getElementById('timeline-reset');
    if (reset) reset.addEventListener('click', function () { setView(full.lo, full.hi); redraw(); });
    window.addEventListener('resize', function () { layout(); redraw(); });
  }

  function legend() {
    document.querySelectorAll('#timeline-legend i[data-kind]').forEach(function (el) {
      el.style.background = KIND_COLORS[el.getAttribute('data-kind')] || '#999';
    });
    document.querySelectorAll('#timeline-legend i[data-cause]').forEach(function (el) {
      el.style.background = CAUSE_COLORS[el.getAttribute('data-cause')] || '#999';
    });
  }

  function showFinding(n) {
    var w = TA.findingWindows[n];
    if (!w) return false;
    setView(w.start_us, w.end_us);
    draw();
    var section = document.getElementById('timeline');
    if (section && section.scrollIntoView) section.scrollIntoView({ block: 'start' });
    return true;
  }

  function buttons() {
    document.querySelectorAll('button.show-in-timeline').forEach(function (b) {
      b.addEventListener('click', function () { TA.showFinding(Number(b.getAttribute('data-finding'))); });
    });
  }

  function start(data) {
    kinds = data.kinds;
    kindNames = data.kindNames || data.kinds;
    TA.findingWindows = data.findingWindows || {};
    var lo = Infinity, hi = -Infinity;
    data.traces.forEach(function (tr) {
      lo = Math.min(lo, tr.start_us);
      hi = Math.max(hi, tr.end_us);
      tr.lanes.forEach(function (lane) { lanes.push(buildLane(tr, lane)); });
    });
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    full = { lo: lo, hi: hi > lo ? hi : lo + 1 };
    setView(full.lo, full.hi);
    TA.showFinding = showFinding;
    layout();
    bind();
    draw();
    TA.ready = true;
  }

  function main() {
    canvas = document.getElementById('timeline-canvas');
    tooltip = document.getElementById('timeline-tooltip');
    wrap = document.getElementById('timeline-wrap');
    rangeText = document.getElementById('timeline-range');
    legend();
    buttons();
    if (!canvas || !canvas.getContext) { fail('no canvas in the page'); return; }
    ctx = canvas.getContext('2d');
    if (typeof DecompressionStream === 'undefined') {
      fail('this browser has no DecompressionStream (Chrome 80+, Firefox 113+, Safari 16.4+): no timeline');
      return;
    }
    decode().then(start).catch(fail);
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
})();
