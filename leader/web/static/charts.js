// The pages' charts, drawn with uPlot (vendored from npm by scripts/vendor_web.sh) from the specs the leader puts in
// <script id="chart-data"> (leader/web/charts.py). Hover a chart for values (in its legend), drag across it to zoom,
// double-click to reset, click a legend entry to hide or show its series. Heat maps are tables of coloured cells.
(function () {
  const holder = document.getElementById("chart-data");
  if (!holder) return;
  const specs = JSON.parse(holder.textContent);
  const drawn = (window.benchfleetCharts = []);  // the uPlot instances, in page order (for tests and the console)
  // 10 colours × 3 dash patterns: 30 series before a style repeats.
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const DASHES = [[], [6, 3], [2, 2]];
  const INVALID = "#b71c1c";
  const HEIGHT = 260;
  const MARKED_MAX = 50;  // a series of at most this many pairs has a mark at each

  function fmt(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return "—";
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }
  function style(i) {
    return {stroke: COLOURS[i % COLOURS.length], dash: DASHES[Math.floor(i / COLOURS.length) % DASHES.length]};
  }
  function note(box, text) {
    const p = document.createElement("p");
    p.className = "muted chart-empty";
    p.textContent = text;
    box.appendChild(p);
  }
  // A log axis is ticked at its whole decades (1, 10, 100, or 1e9, 1e10, 1e11), not at uPlot's steps from wherever
  // the range starts (which read 1.02e+11); a range holding fewer than two decades at 1, 2 and 5 times them, or
  // failing that at every whole multiple.
  function decades(u, axisIdx, min, max) {
    const within = (steps) => {
      const out = [];
      for (let k = Math.floor(Math.log10(min)); k <= Math.ceil(Math.log10(max)); k++)
        for (const m of steps) { const v = m * 10 ** k; if (v >= min * (1 - 1e-9) && v <= max * (1 + 1e-9)) out.push(v); }
      return out;
    };
    for (const steps of [[1], [1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]]) {
      const ticks = within(steps);
      if (ticks.length >= 2) return ticks;
    }
    return [min, max];
  }
  function tick(v) {
    const k = Math.round(Math.log10(Math.abs(v)));
    return v > 0 && Math.abs(v / 10 ** k - 1) < 1e-9 && (k >= 4 || k <= -4) ? `1e${k}` : fmt(v);
  }
  function axis(label, log, extra) {
    // uPlot passes null for a tick it leaves unlabelled (too close to the last): a blank, not "—".
    const label_ = log ? tick : fmt;
    const a = {label, stroke: "#333", grid: {stroke: "#eee"}, values: (u, splits) => splits.map((v) => (v == null ? "" : label_(v)))};
    if (log) Object.assign(a, {splits: decades, filter: (u, splits) => splits});  // uPlot's own filter blanks all but 1×10^k
    return Object.assign(a, extra || {});
  }
  function axes(spec, xValues) {
    const x = axis(spec.x ? spec.x.label : "", spec.x && spec.x.log, xValues);
    return [x, axis(spec.y.label, spec.y.log, {size: 60})];
  }
  // A log axis spans exactly what is shown (uPlot's default snaps it out to whole decades, which undoes a zoom).
  function scale(axis) {
    if (!axis || !axis.log) {
      return {range: (u, lo, hi) => {  // a little room at the ends; a single value (or ties) gets ±10% around it
        const span = hi - lo, pad = span > Math.abs(hi) * 1e-6 ? span * 0.04 : Math.abs(hi) * 0.1 || 1;
        return [lo - pad, hi + pad];
      }};
    }
    return {distr: 3, log: 10, range: (u, lo, hi) => (lo === hi ? [lo / 2, hi * 2] : [lo, hi])};
  }

  // Series with their own x values, on one sorted x column with a row per (series, pair): a series has a gap in the
  // others' rows (two pairs at the same x, a saturated ladder's, both stay).
  function lineChart(spec, width) {
    const rows = spec.series.flatMap((s, i) => s.x.map((x, k) => [x, i, k])).sort((a, b) => a[0] - b[0]);
    // uPlot finds what to draw by searching the x column, so it must increase strictly: a repeated x moves up by a
    // billionth of itself (far below what any label or hover value shows).
    const xs = [];
    rows.forEach(([x]) => xs.push(xs.length && x <= xs[xs.length - 1] ? xs[xs.length - 1] + Math.max(Math.abs(x), 1) * 1e-9 : x));
    const data = [xs];
    const series = [{label: spec.x.label || "x", value: (u, v) => fmt(v)}];
    const flagged = spec.series.map((s) => new Set(s.invalid));
    const invalid = new Array(rows.length).fill(null);
    spec.series.forEach((s, i) => {
      const column = new Array(rows.length).fill(null);
      rows.forEach(([, owner, k], row) => {
        if (owner !== i) return;
        column[row] = s.y[k];
        if (flagged[i].has(k)) invalid[row] = s.y[k];
      });
      data.push(column);
      const look = style(i);
      // Every pair of a sparse series gets its mark (uPlot's default hides marks where pairs crowd the x axis, and
      // two configurations measured at one rate sit at one x: a one-rate job drew nothing); a bare series (a
      // ceiling, a limit) is its line alone.
      const points = s.bare ? {show: false} : s.x.length <= MARKED_MAX ? {show: true, size: 6, fill: look.stroke} : {size: 5, fill: look.stroke};
      series.push({label: s.label, stroke: look.stroke, dash: look.dash, width: 1.6, spanGaps: true,
                   paths: spec.lines ? undefined : () => null, points, value: (u, v) => fmt(v)});
    });
    if (invalid.some((v) => v !== null)) {  // invalid measurements: hollow red rings over their curve
      data.push(invalid);
      series.push({label: "invalid point", stroke: INVALID, width: 0, paths: () => null,
                   points: {show: true, size: 11, width: 2, stroke: INVALID, fill: "#fff"}, value: (u, v) => fmt(v)});
    }
    const opts = {width, height: HEIGHT, series, axes: axes(spec),
                  scales: {x: Object.assign({time: false}, scale(spec.x)), y: scale(spec.y)},
                  cursor: {drag: {x: true, y: false}}, legend: {live: true}};
    return [opts, data];
  }

  // Stacked bars: each stack is drawn as its running total, tallest first, so the lower parts stay visible; the
  // legend shows each part's own value.
  function barChart(spec, width) {
    const n = spec.labels.length;
    const idx = spec.labels.map((_, i) => i);
    const totals = new Array(n).fill(0);
    const cumulative = spec.stacks.map((s) => s.values.map((v, i) => (v === null ? null : (totals[i] += v))));
    const bars = uPlot.paths.bars({size: [0.6, 80]});
    const order = spec.stacks.map((_, i) => i).reverse();
    const data = [idx];
    const series = [{label: "point", value: (u, v) => (v === null ? "—" : spec.labels[v])}];
    for (const i of order) {
      const look = style(i);
      data.push(cumulative[i]);
      series.push({label: spec.stacks[i].label, stroke: look.stroke, fill: look.stroke + "cc", width: 1, paths: bars,
                   points: {show: false}, value: (u, v, si, di) => fmt(di === null ? null : spec.stacks[i].values[di])});
    }
    const xValues = {values: (u, splits) => splits.map((v) => (Number.isInteger(v) && v >= 0 && v < n ? spec.labels[v] : "")),
                     splits: () => idx, grid: {show: false}};
    const opts = {width, height: HEIGHT, series, axes: axes(spec, xValues),
                  scales: {x: {time: false, range: [-0.5, n - 0.5]}, y: {range: (u, lo, hi) => [0, hi * 1.1]}},
                  cursor: {drag: {x: true, y: false}}, legend: {live: true}};
    return [opts, data];
  }

  function heatTable(spec, box) {
    const values = spec.cells.map((c) => c[2]);
    const low = Math.min(...values), high = Math.max(...values);
    const cell = new Map(spec.cells.map((c) => [c[0] + "\u0000" + c[1], c[2]]));
    const table = document.createElement("table");
    table.className = "heat";
    const head = table.createTHead().insertRow();
    head.insertCell().outerHTML = `<th class="axis"></th>`;
    for (const x of spec.xs) { const th = document.createElement("th"); th.textContent = x; head.appendChild(th); }
    const body = table.createTBody();
    for (const y of [...spec.ys].reverse()) {
      const row = body.insertRow();
      const th = document.createElement("th");
      th.textContent = y;
      row.appendChild(th);
      for (const x of spec.xs) {
        const td = row.insertCell();
        const v = cell.get(x + "\u0000" + y);
        if (v === undefined) continue;
        const t = high > low ? (v - low) / (high - low) : 0.5;
        td.className = "cell";
        td.style.background = colour(t);
        td.style.color = t > 0.6 ? "#fff" : "#000";
        td.textContent = fmt(v);
        td.title = `${spec.x.label} ${x} × ${spec.y.label} ${y}: ${fmt(v)}`;
      }
    }
    const caption = document.createElement("caption");
    caption.textContent = `${spec.y.label} (rows) × ${spec.x.label} (columns)`;
    table.appendChild(caption);
    box.appendChild(table);
    // The colour scale: the lowest value's colour to the highest's, with the values at both ends.
    const legend = document.createElement("div");
    legend.className = "heat-scale";
    const ramp = document.createElement("span");
    ramp.className = "heat-ramp";
    ramp.style.background = `linear-gradient(to right, ${colour(0)}, ${colour(0.5)}, ${colour(1)})`;
    const lowText = document.createElement("span"), highText = document.createElement("span");
    lowText.className = "heat-low";
    highText.className = "heat-high";
    lowText.textContent = fmt(low);
    highText.textContent = fmt(high);
    legend.append(lowText, ramp, highText);
    box.appendChild(legend);
  }
  function colour(t) {
    return `rgb(${Math.round(255 - 200 * t)},${Math.round(255 - 160 * t)},${Math.round(255 - 60 * t)})`;
  }

  for (const figure of document.querySelectorAll("figure.chart[data-chart]")) {
    const spec = specs[Number(figure.dataset.chart)];
    const box = figure.querySelector(".chart-box");
    if (spec.empty) { note(box, spec.empty); continue; }
    if (spec.kind === "heatmap") { heatTable(spec, box); continue; }
    if (typeof uPlot === "undefined") {
      note(box, "The chart library is not installed here (scripts/vendor_web.sh vendors it from npm); the tables above hold the figures.");
      continue;
    }
    const [opts, data] = (spec.kind === "bar" ? barChart : lineChart)(spec, Math.max(320, box.clientWidth));
    const chart = new uPlot(opts, data, box);
    chart.benchfleetSpec = spec;
    drawn.push(chart);
  }
  // Follow the grid's column width when the window is resized.
  let pending = null;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(() => drawn.forEach((c) => c.setSize({width: Math.max(320, c.root.parentNode.clientWidth), height: HEIGHT})), 150);
  });
})();
