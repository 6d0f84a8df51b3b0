// pilake ui: the few things a server-rendered page cannot do. Charts are uPlot (vendored); data
// comes from <script type="application/json"> elements the server wrote (never evaluated).
"use strict";
(function () {
  const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7d8c", "#57606a"];

  function readJson(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  // Commits per hour: every hour from the first to the last with commits (empty ones 0), an
  // hour either side, and the axis set to that span: left to itself, uPlot spread one bar over
  // three years.
  function commitsChart() {
    const el = document.getElementById("commits-chart");
    const data = readJson("commits-data");
    if (!el || !data || data.x.length === 0) return;
    const byHour = new Map(data.x.map((h, i) => [h, data.y[i]]));
    const first = data.x[0], last = data.x[data.x.length - 1];
    const xs = [], ys = [];
    for (let h = first; h <= last; h += 3600) { xs.push(h); ys.push(byHour.get(h) || 0); }
    const lo = first - 3600, hi = last + 3600;
    const bars = uPlot.paths.bars({ size: [0.8, 40], align: 1 });
    const u = new uPlot({
      width: el.clientWidth - 2, height: 220,
      scales: { x: { time: true, auto: false, range: () => [lo, hi] } },
      legend: { show: false },
      series: [{}, { label: "episodes committed", stroke: COLORS[0], fill: "rgba(31,111,235,0.35)", paths: bars }],
      axes: [{}, { label: "episodes / hour" }],
      hooks: { setScale: [(u, key) => { if (key === "x") el.dataset.xSpanS = String(u.scales.x.max - u.scales.x.min); }] },
    }, [xs, ys], el);
  }

  // Shaded spans (annotations) with their label, under the cursor line.
  function drawMarks(u, marks) {
    const ctx = u.ctx;
    ctx.save();
    ctx.font = (11 * devicePixelRatio) + "px system-ui, sans-serif";
    ctx.textAlign = "left";  // uPlot leaves the axes' alignment on the context
    ctx.textBaseline = "alphabetic";
    marks.forEach((m, i) => {
      const x0 = u.valToPos(m.t0, "x", true), x1 = u.valToPos(m.t1, "x", true);
      ctx.fillStyle = i % 2 ? "rgba(154,103,0,0.14)" : "rgba(130,80,223,0.14)";
      ctx.fillRect(x0, u.bbox.top, Math.max(x1 - x0, 2 * devicePixelRatio), u.bbox.height);
      ctx.fillStyle = "#57606a";
      ctx.fillText(m.label.slice(0, 60), x0 + 3 * devicePixelRatio, u.bbox.top + (12 + 12 * (i % 3)) * devicePixelRatio);
    });
    ctx.restore();
  }

  // The episode page: plots whose cursor follows the first video, and a click that seeks them all.
  function episodePlots() {
    const data = readJson("plot-data");
    if (!data) return;
    const videos = Array.from(document.querySelectorAll("video.cam"));
    const plots = [];
    let cursorT = 0;
    const cursorLine = (u) => {
      const x = u.valToPos(cursorT, "x", true);
      const ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#d1242f";
      ctx.lineWidth = 2 * devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.restore();
    };
    // a camera's clock starts at its first frame; the plots' at the first step
    const offset = (v) => parseFloat(v.dataset.offset) || 0;
    const seek = (t) => {
      for (const v of videos) {
        const local = t - offset(v);
        v.currentTime = Math.max(0, Math.min(local, v.duration || local));
      }
      setCursor(t);
    };
    document.querySelectorAll(".plot").forEach((el) => {
      const name = el.dataset.series;
      const dims = data[name] || [];
      if (dims.length === 0) { el.textContent = "no " + name + " values"; return; }
      const names = (data.names && data.names[name]) || [];
      const marks = data.marks || [];
      const series = [{ label: "t (s)" }].concat(dims.map((_, d) => ({
        label: names[d] || name + "[" + d + "]", stroke: COLORS[d % COLORS.length], width: 1.5,
      })));
      el.dataset.marks = String(marks.length);
      const u = new uPlot({
        width: el.clientWidth - 2, height: 200,
        scales: { x: { time: false } },
        series: series,
        axes: [{ label: "seconds" }, {}],
        cursor: { drag: { x: false, y: false } },
        hooks: { draw: [(u) => drawMarks(u, marks), cursorLine] },
      }, [data.t].concat(dims), el);
      u.over.addEventListener("click", (ev) => seek(u.posToVal(ev.offsetX, "x")));
      plots.push({ el: el, u: u });
    });
    function setCursor(t) {
      cursorT = t;
      for (const p of plots) {
        p.el.dataset.cursorT = t.toFixed(3);
        p.u.redraw(false, false);
      }
    }
    if (videos.length === 0) return;
    const lead = videos[0];
    const now = () => lead.currentTime + offset(lead);
    const follow = () => {
      setCursor(now());
      if (!lead.paused && !lead.ended) requestAnimationFrame(follow);
    };
    lead.addEventListener("play", () => {
      for (const v of videos.slice(1)) {
        v.currentTime = Math.max(0, now() - offset(v));
        v.play().catch(() => {});
      }
      requestAnimationFrame(follow);
    });
    lead.addEventListener("pause", () => { for (const v of videos.slice(1)) v.pause(); });
    lead.addEventListener("timeupdate", () => setCursor(now()));
    lead.addEventListener("seeked", () => setCursor(now()));
  }

  // The dataset page: the length histogram and, per feature, each dimension's quantiles.
  function datasetCharts() {
    const data = readJson("dataset-data");
    if (!data) return;
    const el = document.getElementById("length-chart");
    const h = data.histogram;
    if (el && h.counts.length) {
      // a few bins (every episode of one length) get room either side, not the whole axis
      const lo = h.edges[0], hi = h.edges[h.edges.length - 1];
      const pad = h.counts.length < 10 ? (hi - lo) * (10 - h.counts.length) / 2 : 0;
      new uPlot({
        width: el.clientWidth - 2, height: 200,
        scales: { x: { time: false, range: () => [lo - pad, hi + pad] } },
        legend: { show: false },
        // a step line over the bin edges (each count holds from its edge to the next), filled
        series: [{}, { label: "episodes", stroke: COLORS[0], fill: "rgba(31,111,235,0.35)",
          paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }],
        axes: [{ label: "steps" }, { label: "episodes" }],
      }, [h.edges, h.counts.concat([0])], el);
      el.dataset.bins = String(h.counts.length);
    }
    document.querySelectorAll(".chart.dist").forEach((box) => {
      const d = data.distributions[box.dataset.kind];
      if (!d || !d.q50) return;
      const xs = d.names.map((_, i) => i);
      const dot = (color) => ({ stroke: color, width: 0, points: { show: true, size: 6, fill: color } });
      new uPlot({
        width: box.clientWidth - 2, height: 240,
        scales: { x: { time: false, range: () => [-0.5, xs.length - 0.5] } },
        series: [{ label: "dimension", value: (u, i) => (i == null ? "" : d.names[i]) },
          Object.assign({ label: "q01" }, dot("#d1242f")),
          { label: "q10", stroke: "rgba(31,111,235,0.5)" },
          { label: "median", stroke: COLORS[0], width: 2 },
          { label: "q90", stroke: "rgba(31,111,235,0.5)" },
          Object.assign({ label: "q99" }, dot("#1a7f37"))],
        bands: [{ series: [4, 2], fill: "rgba(31,111,235,0.15)" }],
        axes: [{ splits: () => xs, values: (u, splits) => splits.map((i) => d.names[i] || ""), rotate: -30, size: 70 }, {}],
      }, [xs, d.q01, d.q10, d.q50, d.q90, d.q99], box);
      box.dataset.dims = String(xs.length);
    });
  }

  document.addEventListener("DOMContentLoaded", () => { commitsChart(); episodePlots(); datasetCharts(); });
})();
