// nkisim HTML profile: level-of-detail drawing of the engine timeline (inlined into the page, no network).
//
// Every profile ships all its intervals in a hidden Bokeh ColumnDataSource ("ev", sorted by lane then start).
// On load and whenever the shared time range changes, refresh() rebuilds the drawn source ("vis") from the
// intervals inside the visible range: intervals that would be closer than a pixel apart are merged into one
// block (shaded by how busy it is, hover lists what it holds), so a 100k-instruction run draws at most a few
// rectangles per pixel column and panning stays smooth.  Clicking a block highlights its kernel line in the
// source pane.
(function () {
  "use strict";
  const NK = (window.nkisim = window.nkisim || {});
  const GAP_PX = 1.0; // intervals closer than this are merged
  const BIN_PX = 4.0; // a merged block is never wider than this (so busy fractions stay visible)
  const OUTLINE_MIN_PX = 8.0; // narrower critical-path blocks are marked by the top lane only
  const MIXED = "#7f7f7f";
  const CRIT = "#d62728";
  NK.profiles = [];
  NK.refreshes = 0;

  function prep(p) {
    if (p._prep) return p._prep;
    const d = p.ev.data;
    const n = d.start.length;
    const off = new Int32Array(p.lanes.length + 1);
    for (let i = 0; i < n; i++) off[d.lane[i] + 1]++;
    for (let l = 0; l < p.lanes.length; l++) off[l + 1] += off[l];
    const runmax = new Float64Array(n); // running max of end inside a lane: binary-searchable
    for (let l = 0; l < p.lanes.length; l++) {
      let m = -Infinity;
      for (let i = off[l]; i < off[l + 1]; i++) {
        if (d.end[i] > m) m = d.end[i];
        runmax[i] = m;
      }
    }
    p._prep = { off, runmax };
    return p._prep;
  }

  function firstEndingAfter(runmax, lo, hi, x) {
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (runmax[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  function fmtList(items, total) {
    return items.join(", ") + (total > items.length ? ", \u2026" : "");
  }

  // Blocks of one profile for the time window [x0, x1] drawn over width pixels.
  function blocks(p, x0, x1, width) {
    const d = p.ev.data;
    const { off, runmax } = prep(p);
    const px = (x1 - x0) / Math.max(width, 50);
    const gap = GAP_PX * px;
    const bin = BIN_PX * px;
    const nl = p.lanes.length;
    const out = { left: [], right: [], bottom: [], top: [], color: [], alpha: [], label: [],
      lane_name: [], opnd: [], where: [], where0: [], t0: [], dur: [], seq: [], n: [], lane: [] };
    const outl = { left: [], right: [], bottom: [], top: [] };
    for (let l = 0; l < nl; l++) {
      const hi = off[l + 1];
      let i = firstEndingAfter(runmax, off[l], hi, x0);
      const y = nl - 1 - l;
      while (i < hi && d.start[i] <= x1) {
        const bs = d.start[i];
        let be = d.end[i];
        let cnt = 1, busy = be - bs, same = true, crit = d.crit[i];
        const op0 = d.op[i];
        const ops = [op0], wheres = [d.where[i]];
        let nops = 1, nwh = 1;
        let j = i + 1;
        while (j < hi && d.start[j] <= x1) {
          const s = d.start[j], e = d.end[j];
          if (s - be > gap || Math.max(be, e) - bs > bin) break;
          cnt++;
          busy += e - s;
          if (e > be) be = e;
          if (d.op[j] !== op0) {
            same = false;
            if (ops.indexOf(d.op[j]) < 0) { nops++; if (ops.length < 3) ops.push(d.op[j]); }
          }
          if (wheres.indexOf(d.where[j]) < 0) { nwh++; if (wheres.length < 3) wheres.push(d.where[j]); }
          crit |= d.crit[j];
          j++;
        }
        out.left.push(bs);
        out.right.push(Math.max(be, bs + 0.8 * px));
        out.bottom.push(y - 0.38);
        out.top.push(y + 0.38);
        out.lane.push(l);
        out.lane_name.push(p.lanes[l]);
        out.t0.push(bs);
        out.dur.push(be - bs);
        out.n.push(cnt);
        out.where0.push(p.wheres[d.where[i]]);
        // outline critical-path blocks only where they are wide enough to keep their own colour visible
        if (crit && l !== p.crit_lane && be - bs >= OUTLINE_MIN_PX * px) {
          outl.left.push(bs);
          outl.right.push(be);
          outl.bottom.push(y - 0.38);
          outl.top.push(y + 0.38);
        }
        if (cnt === 1) {
          out.label.push(p.ops[op0]);
          out.opnd.push(p.operands[d.operands[i]] || "-");
          out.where.push(p.wheres[d.where[i]]);
          out.seq.push(d.seq[i] >= 0 ? "#" + d.seq[i] : "-");
          out.color.push(l === p.crit_lane ? CRIT : p.op_colors[op0]);
          out.alpha.push(0.9);
        } else {
          const frac = be > bs ? Math.min(1, busy / (be - bs)) : 1;
          out.label.push(cnt + " instructions: " + fmtList(ops.map((o) => p.ops[o]), nops));
          out.opnd.push("merged at this zoom (busy " + (100 * frac).toFixed(0) + "% of the span); zoom in for each one");
          out.where.push(fmtList(wheres.map((w) => p.wheres[w]), nwh));
          out.seq.push("#" + d.seq[i] + " \u2026 #" + d.seq[j - 1]);
          out.color.push(l === p.crit_lane ? CRIT : same ? p.op_colors[op0] : MIXED);
          out.alpha.push(0.35 + 0.6 * frac);
        }
        i = j;
      }
    }
    return { vis: out, outl };
  }

  // Blocks are built for the visible window plus half a window width on each side, so a pan only re-merges once
  // the view leaves that margin (or the zoom changes), and dragging just moves already-built rectangles.
  function refreshNow(force) {
    NK._pending = false;
    for (const p of NK.profiles) {
      const xr = p.fig.x_range;
      const w = p.fig.inner_width > 0 ? p.fig.inner_width : 1200;
      const span = xr.end - xr.start;
      const px = span / w;
      const c = p._win;
      if (!force && c && xr.start >= c.a && xr.end <= c.b && Math.abs(px / c.px - 1) < 0.2) continue;
      const t = performance.now();
      const a = xr.start - span / 2, b = xr.end + span / 2;
      const bl = blocks(p, a, b, 2 * w);
      p.vis.data = bl.vis;
      if (p.outl) p.outl.data = bl.outl;
      p._win = { a, b, px };
      p.last_ms = performance.now() - t;
    }
    NK.refreshes++;
  }

  NK.refresh = function () {
    if (NK._pending) return;
    NK._pending = true;
    window.requestAnimationFrame(() => refreshNow(false));
  };

  // Re-merge now (not at the next animation frame): for tests and scripted views.
  NK.refreshNow = function () {
    refreshNow(false);
  };

  // Called once per profile from a DocumentReady callback with the Bokeh models and the string tables.
  NK.register = function (p) {
    NK.profiles.push(p);
    refreshNow(true);
  };

  // Click on a block: highlight its kernel line in the source pane and say what was clicked.
  NK.select = function (p, idx) {
    if (idx == null || idx < 0) return;
    const d = p.vis.data;
    const where = d.where0[idx];
    const info = document.getElementById("nk-selected");
    if (info) info.textContent = d.label[idx] + " on " + d.lane_name[idx] + " (" + p.title + ")  \u2192  " + where;
    for (const el of document.querySelectorAll(".nk-src .hl")) el.classList.remove("hl");
    const line = document.getElementById("L:" + p.k + ":" + where);
    const miss = document.getElementById("nk-src-missing-" + p.k);
    if (line) {
      line.classList.add("hl");
      const pre = line.parentElement; // scroll the source pane only, never the page away from the timeline
      pre.scrollTop = Math.max(0, line.offsetTop - pre.clientHeight / 2);
      if (miss) miss.textContent = "";
    } else if (miss) {
      miss.textContent = "source of " + where + " is not in this page (the file was not found when it was made)";
    }
  };

  // Helpers for tests and curious students (browser console): visible range, drawn blocks per lane,
  // and the page position of a time/lane of one profile.
  NK.state = function () {
    return NK.profiles.map((p) => {
      const per = new Array(p.lanes.length).fill(0);
      for (const l of p.vis.data.lane) per[l]++;
      const off = prep(p).off;
      const per_lane = p.lanes.map((_, l) => off[l + 1] - off[l]);
      return { title: p.title, x0: p.fig.x_range.start, x1: p.fig.x_range.end, lanes: p.lanes, blocks: per,
        intervals: p.ev.data.start.length, lane_intervals: per_lane, last_ms: p.last_ms };
    });
  };
  NK.pagePos = function (k, t_us, lane) {
    const p = NK.profiles[k];
    const view = window.Bokeh.index.find_one(p.fig);
    const y = p.lanes.length - 1 - lane;
    const sx = view.frame.x_scale.compute(t_us);
    const sy = view.frame.y_scale.compute(y);
    const r = view.canvas_view.el.getBoundingClientRect();
    return { x: r.left + sx, y: r.top + sy };
  };
})();
