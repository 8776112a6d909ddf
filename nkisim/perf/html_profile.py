"""Offline HTML profile: one self-contained page with the engine timeline, summary and kernel source.

``python -m nkisim.profile html PROFILE [PROFILE_B] -o OUT.html``; part1/run_benchmark.py and
part2/test_harness.py write ``NAME.html`` beside the other profile files on nkisim.

Drawing is Bokeh's (BokehJS inlined with ``bokeh.resources.INLINE``, so the page makes no network request and
works from file://).  Bokeh rather than Plotly: its models (data sources, ranges, JS callbacks) are scriptable
from a small inlined script, which the zoom-dependent merging of a 100k-instruction run needs, and its inlined
JavaScript is smaller (~1.5 MB; plotly.js alone is several MB).  The canvas backend, not WebGL: merging keeps
a few thousand rectangles on screen, and in headless Chromium without a GPU canvas redrew them faster.
Level of detail lives in ``html/profile.js``; the lanes come from :mod:`nkisim.perf.timeline` (the same events
as the Perfetto trace); summary fields are the text summary's (:func:`nkisim.perf.summary.format_summary`),
never recomputed here.
"""

from __future__ import annotations

import hashlib
import html
import os
from dataclasses import dataclass, field
from pathlib import Path

from nkisim.core.instr import Trace
from nkisim.perf.report import PerfReport
from nkisim.perf.summary import HEADER, format_summary
from nkisim.perf.timeline import CRITICAL_LANE, Timeline, build_timeline

ASSETS = Path(__file__).with_name("html")
# Op colours (Bokeh's Category10 without its red, which marks the critical path), then Category20's light ones.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
           "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5"]
FIXED_COLORS = {"dma_copy": "#2ca02c", "dma_issue": "#98df8a", "nc_matmul": "#1f77b4", "nc_transpose": "#aec7e8",
                "activation": "#ff7f0e", "tensor_tensor": "#9467bd", "tensor_copy": "#8c564b",
                "tensor_scalar": "#e377c2", "tensor_reduce": "#17becf"}
ROW_PX = 22


@dataclass
class ProfileData:
    """One costed run to draw: its trace (start/end filled by ``estimate``), report and kernel sources."""

    trace: Trace
    report: PerfReport
    title: str = ""
    sources: dict[str, str] = field(default_factory=dict)  # file basename -> text
    origin: str = ""  # where it came from (profile file path), shown in the banner
    source_note: str = ""  # shown instead of the source pane when ``sources`` is empty on purpose, above it if not


def model_version() -> str:
    """The performance model's version: MODEL_VERSION when the model declares one, else a hash of its sources."""
    import nkisim
    import nkisim.perf as perf

    declared = getattr(perf, "MODEL_VERSION", None)
    if declared:
        return f"{declared} (nkisim {nkisim.__version__})"
    h = hashlib.sha256()
    for name in ("model.py", "scheduler.py", "costs.py", "report.py"):
        p = Path(perf.__file__).with_name(name)
        if p.exists():
            h.update(p.read_bytes())
    return f"nkisim {nkisim.__version__}, model sources {h.hexdigest()[:10]}"


def find_sources(wheres: list[str], search_dirs: list[str | os.PathLike]) -> dict[str, str]:
    """Text of the kernel files named in ``file:line`` locations, looked up by basename in ``search_dirs``."""
    names = sorted({w.rsplit(":", 1)[0] for w in wheres if ":" in w})
    out: dict[str, str] = {}
    for name in names:
        for d in search_dirs:
            p = Path(d) / name
            if p.is_file():
                try:
                    out[name] = p.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                break
    return out


def kernel_sources(kernel) -> dict[str, str]:
    """{basename: text} of the file defining ``kernel`` (an nki.jit-wrapped function or a plain one)."""
    import inspect

    fn = kernel
    for _ in range(5):  # nki.jit / nki.benchmark wrappers keep the function in .func
        inner = next((getattr(fn, a) for a in ("func", "__wrapped__") if callable(getattr(fn, a, None))), None)
        if inner is None:
            break
        fn = inner
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return {}
    if not path or not os.path.isfile(path):
        return {}
    return {os.path.basename(path): Path(path).read_text(encoding="utf-8")}


# ---------------------------------------------------------------- summary and source panes (plain HTML)


def _summary_rows(text: str) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """(metric rows, critical-path rows) of a text summary, exactly as format_summary wrote them."""
    metrics: list[tuple[str, str]] = []
    crit: list[list[str]] = []
    in_crit = False
    for line in text.splitlines():
        if not line.strip() or line.startswith(HEADER):
            continue
        if line.endswith(":"):
            in_crit = True
            continue
        if in_crit and line.startswith(" "):
            parts = line.split()
            if len(parts) >= 4:
                crit.append([parts[0], parts[1], parts[2], " ".join(parts[3:])])
            continue
        parts = line.split(None, 1)
        metrics.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return metrics, crit


KEY_METRICS = {"total_time", "nc_latency", "mfu_estimated_percent", "tensor_active_time_percent"}


def summary_html(reports: list[PerfReport], titles: list[str]) -> str:
    texts = [format_summary(r) for r in reports]
    parsed = [_summary_rows(t) for t in texts]
    e = html.escape
    heads = "".join(f"<th>{e(t)}</th>" for t in titles)
    if len(reports) == 2:
        heads += "<th>B / A</th>"
    rows = []
    keys: list[str] = []
    for m, _ in parsed:
        for k, _v in m:
            if k not in keys:
                keys.append(k)
    vals = [dict(m) for m, _ in parsed]
    for k in keys:
        cells = [v.get(k, "") for v in vals]
        ratio = ""
        if len(cells) == 2:
            try:
                a, b = float(cells[0].split()[0]), float(cells[1].split()[0])
                ratio = f"{b / a:.3g}x" if a else ""
            except (ValueError, IndexError):
                ratio = ""
        tds = "".join(f'<td class="num">{e(c)}</td>' for c in cells) + (
            f'<td class="num">{e(ratio)}</td>' if len(cells) == 2 else "")
        cls = ' class="key"' if k in KEY_METRICS else ""
        rows.append(f"<tr{cls}><td>{e(k)}</td>{tds}</tr>")
    out = [f'<h3>Summary</h3><table class="nk-metrics"><tr><th>metric</th>{heads}</tr>{"".join(rows)}</table>']
    for title, (_m, crit) in zip(titles, parsed):
        if not crit:
            continue
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in crit)
        out.append(f"<h3>Critical path by kernel line: {e(title)}</h3><table class=\"nk-crit\">"
                   f"<tr><th>kernel line</th><th>op</th><th>count</th><th>time on the path</th></tr>{body}</table>")
    return "\n".join(out)


def sources_html(k: int, title: str, sources: dict[str, str], issued: set[str], note: str = "") -> str:
    e = html.escape
    parts = [f'<div class="nk-src" id="nk-src-{k}"><h3>Kernel source: {e(title)}</h3>']
    if not sources:
        parts.append(f'<p class="nk-missing">{e(note)}</p>' if note else
                     '<p class="nk-missing">The kernel source file was not found when this page was made '
                     '(pass --source FILE to python -m nkisim.profile html).</p>')
    elif note:  # a caveat about the sources shown (e.g. today's file, not the version profiled)
        parts.append(f'<p class="nk-missing">{e(note)}</p>')
    for name, text in sorted(sources.items()):
        lines = []
        for no, line in enumerate(text.splitlines(), start=1):
            loc = f"{name}:{no}"
            cls = "ln issued" if loc in issued else "ln"
            lines.append(f'<span class="{cls}" id="L:{k}:{e(loc)}"><span class="no">{no}</span>{e(line)}</span>')
        parts.append(f'<div class="nk-fname">{e(name)}</div><pre>{"".join(lines)}</pre>')
    parts.append(f'<div class="nk-missing" id="nk-src-missing-{k}"></div></div>')
    return "".join(parts)


# ---------------------------------------------------------------- the Bokeh timeline


def _op_colors(ops: list[str]) -> list[str]:
    out, free = [], [c for c in PALETTE if c not in FIXED_COLORS.values()] or PALETTE
    for i, op in enumerate(ops):
        out.append(FIXED_COLORS.get(op, free[i % len(free)]))
    return out


def _figure(tl: Timeline, title: str, x_range, k: int, row_px: int = ROW_PX):
    import numpy as np
    from bokeh.models import (
        ColumnDataSource,
        CustomJS,
        FixedTicker,
        HoverTool,
        TapTool,
    )
    from bokeh.plotting import figure

    nl = len(tl.lanes)
    fig = figure(
        name=f"timeline{k}",
        title=title,
        x_range=x_range,
        y_range=(-0.6, nl - 0.4),
        height=row_px * nl + 90,
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
        active_drag="xpan",
        active_scroll="xwheel_zoom",
        output_backend="canvas",  # see module docstring: merged blocks keep counts low; canvas beat WebGL here
        toolbar_location="above",
    )
    fig.xaxis.axis_label = "time (\u00b5s, modelled)"
    fig.yaxis.ticker = FixedTicker(ticks=list(range(nl)))
    fig.yaxis.major_label_overrides = {nl - 1 - i: name for i, name in enumerate(tl.lanes)}
    fig.ygrid.grid_line_color = None
    fig.xaxis.ticker.desired_num_ticks = 12
    ev = ColumnDataSource(
        {"lane": tl.lane, "start": tl.start, "end": tl.end, "seq": tl.seq, "op": tl.op, "where": tl.where,
         "operands": tl.operands, "crit": tl.crit},
        name=f"ev{k}",
    )
    empty = {c: [] for c in ("left", "right", "bottom", "top", "color", "alpha", "label", "lane_name",
                             "opnd", "where", "where0", "t0", "dur", "seq", "n", "lane")}
    vis = ColumnDataSource(empty, name=f"vis{k}")
    # fills without outlines (half the canvas work per frame); critical-path outlines are a second, small glyph
    r = fig.quad(left="left", right="right", bottom="bottom", top="top", source=vis, fill_color="color",
                 fill_alpha="alpha", line_color=None,
                 selection_fill_alpha="alpha", nonselection_fill_alpha="alpha",
                 selection_line_color="#000000", selection_line_width=2.5, nonselection_line_color=None)
    outl = ColumnDataSource({c: [] for c in ("left", "right", "bottom", "top")}, name=f"outline{k}")
    fig.quad(left="left", right="right", bottom="bottom", top="top", source=outl, fill_color=None,
             line_color="#d62728", line_width=1.5)
    fig.add_tools(HoverTool(renderers=[r], tooltips=(
        '<div class="nk-tip"><span class="op">@label</span> on <b>@lane_name</b> (@seq)<br>'
        "@opnd<br>start @t0{0,0.000} \u00b5s, duration @dur{0,0.000} \u00b5s<br>"
        "kernel line: <b>@where</b></div>")))
    fig.add_tools(TapTool(renderers=[r]))
    crit_lane = tl.lanes.index(CRITICAL_LANE) if CRITICAL_LANE in tl.lanes else -1
    spec = {"k": k, "title": title, "lanes": tl.lanes, "ops": tl.ops, "wheres": tl.wheres,
            "operands": tl.operand_texts, "op_colors": _op_colors(tl.ops), "crit_lane": crit_lane}
    register = CustomJS(args={"ev": ev, "vis": vis, "outl": outl, "fig": fig, "spec": spec}, code="""
        const p = Object.assign({}, spec, {ev: ev, vis: vis, outl: outl, fig: fig});
        window.nkisim.register(p);
    """)
    select = CustomJS(args={"vis": vis, "k": k}, code="""
        const p = window.nkisim.profiles.find((q) => q.k === k);
        const idx = vis.selected.indices;
        if (p && idx.length) window.nkisim.select(p, idx[0]);
    """)
    vis.selected.js_on_change("indices", select)
    del np
    return fig, register


def render_page(profiles: list[ProfileData]) -> str:
    """The HTML text of the page for one profile, or a before/after comparison of two."""
    from bokeh.embed import file_html
    from bokeh.events import DocumentReady
    from bokeh.layouts import column
    from bokeh.models import CustomJS, Range1d
    from bokeh.resources import INLINE
    from jinja2 import Template

    import nkisim

    if not 1 <= len(profiles) <= 2:
        raise ValueError("an HTML profile shows one profile, or two to compare")
    tls = [build_timeline(list(p.trace.instrs), p.report) for p in profiles]
    labels = ["A (before)", "B (after)"] if len(profiles) == 2 else [""]
    titles = []
    for lab, p in zip(labels, profiles):
        t = p.title or p.report.kernel_name or "kernel"
        titles.append(f"{lab}: {t}" if lab else t)
    end = max(tl.end_us for tl in tls) or 1.0
    pad = 0.01 * end
    x_range = Range1d(0.0, end + pad, bounds=(-pad, end + pad), min_interval=1e-4, name="x_range")
    figs, registers = [], []
    for k, (tl, title) in enumerate(zip(tls, titles)):
        row_px = ROW_PX if len(profiles) == 1 else ROW_PX * 3 // 4  # two timelines fit one screen
        fig, reg = _figure(tl, f"{title}  [{profiles[k].report.target}]", x_range, k, row_px)
        figs.append(fig)
        registers.append(reg)
    refresh = CustomJS(code="window.nkisim.refresh();")
    x_range.js_on_change("start", refresh)
    x_range.js_on_change("end", refresh)
    layout = column(*figs, sizing_mode="stretch_width", name="timeline")
    from bokeh.document import Document

    doc = Document()
    doc.add_root(layout)
    for reg in registers:
        doc.js_on_event(DocumentReady, reg)
    doc.title = "nkisim profile: " + " vs ".join(titles)
    e = html.escape
    targets = sorted({p.report.target for p in profiles})
    banner = (f"Backend: nkisim performance model (NumPy emulator of NKI, not Trainium); target "
              f"{e(', '.join(targets))}; model version {e(model_version())}. Made from "
              f"{e(' and '.join(os.path.basename(p.origin) or 'a kernel run' for p in profiles))}. "
              "Times are the model's estimate of the NeuronCore timeline.")
    from nkisim.perf.profile_files import run_note

    notes = [(f"{titles[k]}: " if len(profiles) > 1 else "") + n
             for k, p in enumerate(profiles) if (n := run_note(p.trace))]
    if notes:
        banner += " <b>" + e(" ".join(notes)) + "</b>"
    issued = [{w for w in tl.wheres if w} for tl in tls]
    sources = "".join(sources_html(k, titles[k], p.sources, issued[k], p.source_note) for k, p in enumerate(profiles))
    template = Template((ASSETS / "page.html.jinja").read_text(encoding="utf-8"))
    return file_html(
        doc,
        resources=INLINE,
        title=doc.title,
        template=template,
        template_variables={
            "nk_version": nkisim.__version__,
            "nk_css": (ASSETS / "page.css").read_text(encoding="utf-8"),
            "nk_js": (ASSETS / "profile.js").read_text(encoding="utf-8"),
            "nk_banner": banner,
            "nk_summary": summary_html([p.report for p in profiles], titles),
            "nk_sources": sources,
        },
    )


def write_html(profiles: list[ProfileData], path: str | os.PathLike) -> str:
    """Write the page atomically; returns its path."""
    from nkisim.perf.perfetto import _atomic_write_text

    _atomic_write_text(path, render_page(profiles))
    return os.fspath(path)


def write_run_html(trace: Trace, report: PerfReport, path: str | os.PathLike, *, kernel=None,
                   sources: dict[str, str] | None = None, origin: str = "") -> str:
    """The page of one finished nki.benchmark run (what the part 1/2 scripts call after writing a profile)."""
    src = dict(sources or {})
    if kernel is not None:
        src.update(kernel_sources(kernel))
    wheres = [ins.where for ins in trace.instrs if ins.where]
    missing = {w.rsplit(":", 1)[0] for w in set(wheres)} - set(src)
    if missing:
        src.update(find_sources([f"{m}:0" for m in missing], [os.path.dirname(os.path.abspath(path)), os.getcwd()]))
    return write_html([ProfileData(trace, report, sources=src, origin=origin or os.fspath(path))], path)
