// pilake ui: the few things a server-rendered page cannot do. Charts are uPlot (vendored); data
// comes from <script type="application/json"> elements the server wrote (never evaluated).
"use strict";
(function () {
  const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7d8c", "#57606a"];

  function readJson(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function commitsChart() {
    const el = document.getElementById("commits-chart");
    const data = readJson("commits-data");
    if (!el || !data || data.x.length === 0) return;
    const bars = uPlot.paths.bars({ size: [0.8, 40] });
    new uPlot({
      width: el.clientWidth - 2, height: 220,
      // an hour either side: one bar alone would otherwise span years of axis
      scales: { x: { time: true, range: (u, min, max) => [min - 3600, max + 3600] } },
      legend: { show: false },
      series: [{}, { label: "episodes committed", stroke: COLORS[0], fill: "rgba(31,111,235,0.35)", paths: bars }],
      axes: [{}, { label: "episodes / hour" }],
    }, [data.x, data.y], el);
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
      const series = [{ label: "t (s)" }].concat(dims.map((_, d) => ({
        label: name + "[" + d + "]", stroke: COLORS[d % COLORS.length], width: 1.5,
      })));
      const u = new uPlot({
        width: el.clientWidth - 2, height: 200,
        scales: { x: { time: false } },
        series: series,
        axes: [{ label: "seconds" }, {}],
        cursor: { drag: { x: false, y: false } },
        hooks: { draw: [cursorLine] },
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

  document.addEventListener("DOMContentLoaded", () => { commitsChart(); episodePlots(); });
})();
