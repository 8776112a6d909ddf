"""Offline profile files standing in for NEFF/NTFF: what nki.benchmark(save_neff_name=, save_trace_name=) writes.

* ``NAME.neff`` -- a JSON document labelled "nkisim profile, not a real NEFF": the modelled report, the
  serialized instruction trace (base64 of the ``nkisim.core.traceio`` format), so it can be re-costed later, and
  the kernel's source files as they were when profiled (``sources``), so a page drawn from it later (``python -m
  nkisim.profile html A.neff B.neff``, the before/after compare) shows the code each run ran, from any directory.
* ``NAME.ntff`` -- Chrome/Perfetto trace JSON (one track per engine and DMA queue), summary embedded.  The large
  one (about 1.5 KB per instruction: 62 MB for the handout's Part 2 starting point at 224x224), so the course's
  scripts write it only when asked; ``python -m nkisim.profile trace NAME.neff -o NAME.json`` makes it later.
* ``NAME.summary.txt`` -- the neuron-profile-style text summary.

A profile run compiled with DGE off (``--disable-dge``, as the course profiles) says so at the top of its
summary and in the HTML page's banner, with the ordinary run's latency when the caller recorded it in
``trace.meta["profile_run"]`` (nkibench does): profiled and ordinary latencies are never shown unlabelled.

``python -m nkisim.profile summary FILE`` accepts any of them (and raw trace files).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping

from nkisim.core import traceio
from nkisim.core.instr import Trace
from nkisim.perf import dge_from_meta
from nkisim.perf.perfetto import _atomic_write_text, perfetto_json
from nkisim.perf.report import PerfReport
from nkisim.perf.summary import format_summary

NEFF_FORMAT = "nkisim-profile"
NEFF_NOTE = "nkisim profile, not a real NEFF: modelled report + serialized instruction trace"
MAX_CRITICAL_PATH = 2000


def _stem(path: str) -> str:
    for ext in (".neff", ".ntff", ".json", ".txt"):
        if path.endswith(ext):
            return path[: -len(ext)]
    return path


def run_note(trace: Trace) -> str:
    """One sentence when this run was compiled with DGE off (a profile run), naming the ordinary latency; else ''."""
    meta = getattr(trace, "meta", None) or {}
    if dge_from_meta(meta) is not False:
        return ""
    ordinary = (meta.get("profile_run") or {}).get("ordinary_nc_latency_us") if isinstance(meta, dict) else None
    other = (f"an ordinary run of this kernel takes {float(ordinary):.2f} us (nc_latency)"
             if isinstance(ordinary, (int, float)) else "an ordinary run (DGE on) is timed without profiling")
    return ("This profile run was compiled with DGE off (--disable-dge), as the course's profiles are: the times "
            f"shown are that run's, not the scored latency; {other}.")


def summary_text(trace: Trace, report: PerfReport) -> str:
    """The text summary, with the profile-run note (two lines parse_summary skips) under its header."""
    text = format_summary(report)
    note = run_note(trace)
    if not note:
        return text
    head, _, rest = text.partition("\n")
    return f"{head}\n\nprofile run, not an ordinary run:\n  {note}\n{rest}"


def neff_document(trace: Trace, report: PerfReport, sources: Mapping[str, str] | None = None) -> dict:
    rep = report.to_dict()
    cp = rep.get("critical_path", [])
    if len(cp) > MAX_CRITICAL_PATH:
        rep["critical_path"] = cp[-MAX_CRITICAL_PATH:]
        rep["critical_path_truncated"] = len(cp)
    return {
        "format": NEFF_FORMAT,
        "note": NEFF_NOTE,
        "report": rep,
        "summary_text": summary_text(trace, report),
        "trace_npz_base64": base64.b64encode(traceio.dumps(trace)).decode("ascii"),
        "sources": {str(k): str(v) for k, v in (sources or {}).items()},
    }


def write_profile(
    trace: Trace,
    report: PerfReport,
    base_name: str | None = None,
    *,
    neff_path: str | None = None,
    ntff_path: str | None = None,
    summary_path: str | None = None,
    neff_name: str | None = None,
    trace_name: str | None = None,
    sources: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Write the .neff stand-in, the .ntff Perfetto JSON and the .summary.txt; returns {kind: path}.

    ``base_name`` gives all three names (``base.neff``, ``base.ntff``, ``base.summary.txt``); explicit paths
    override single files (``neff_name``/``trace_name`` are aliases of ``neff_path``/``ntff_path``, as
    nki.benchmark's save_neff_name/save_trace_name).  At least one of them must be given.  ``sources``
    ({file basename: text}, the kernel's files as profiled) is stored in the .neff stand-in.
    """
    neff_path = neff_path or neff_name
    ntff_path = ntff_path or trace_name
    if base_name is None and neff_path is None and ntff_path is None and summary_path is None:
        raise ValueError("write_profile needs base_name or an explicit file path")
    if base_name is not None:
        base = _stem(os.fspath(base_name))
        neff_path = neff_path or base + ".neff"
        ntff_path = ntff_path or base + ".ntff"
        summary_path = summary_path or base + ".summary.txt"
    elif summary_path is None:
        summary_path = _stem(os.fspath(neff_path or ntff_path)) + ".summary.txt"
    out: dict[str, str] = {}
    text = summary_text(trace, report)
    if neff_path:
        _atomic_write_text(neff_path, json.dumps(neff_document(trace, report, sources), separators=(",", ":")))
        out["neff"] = os.fspath(neff_path)
    if ntff_path:
        doc = perfetto_json(list(trace.instrs), report)
        doc["otherData"]["summary_text"] = text
        _atomic_write_text(ntff_path, json.dumps(doc, separators=(",", ":")))
        out["ntff"] = os.fspath(ntff_path)
    if summary_path:
        _atomic_write_text(summary_path, text)
        out["summary"] = os.fspath(summary_path)
    return out


def _neff_doc(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != NEFF_FORMAT:
        raise ValueError(f"{path}: not an nkisim profile (.neff stand-in)")
    return doc


def read_profile_sources(path: str) -> dict[str, str]:
    """The kernel sources a .neff stand-in stored when it was written ({} for profiles written before they did)."""
    sources = _neff_doc(path).get("sources") or {}
    if not isinstance(sources, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in sources.items()):
        raise ValueError(f"{path}: corrupt stored kernel sources")
    return dict(sources)


def read_profile_trace(path: str) -> Trace:
    """The instruction trace stored in a .neff stand-in."""
    doc = _neff_doc(path)
    try:
        raw = base64.b64decode(doc["trace_npz_base64"], validate=True)
    except (KeyError, ValueError) as e:
        raise ValueError(f"{path}: missing or corrupt embedded trace ({e})") from None
    return traceio.loads(raw)
