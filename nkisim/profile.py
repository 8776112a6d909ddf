"""Offline profile viewer: ``python -m nkisim.profile summary|trace|html FILE``.

FILE may be a ``.neff`` stand-in or ``.ntff`` Perfetto JSON written by nkisim's nki.benchmark/profile support,
a ``.summary.txt``, or a raw trace file from ``nkisim.core.traceio`` (re-costed with ``--target``).
``summary`` mirrors ``neuron-profile view --output-format summary-text``; ``trace`` writes Perfetto JSON;
``html`` writes a self-contained page (timeline, summary, kernel source; ``html A B`` compares two runs).  The
source shown is the one the ``.neff`` stand-in stored when it was profiled (so ``html v0.neff v1.neff`` shows
each version's own code, from any directory); only profiles that stored none fall back to files found by name
beside the profile or in the current directory, and the page says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _load_any(path: str, target: str | None):
    """(summary_text, trace_or_None) of any supported profile file."""
    from nkisim.core import traceio
    from nkisim.perf.profile_files import NEFF_FORMAT, read_profile_trace

    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK"):  # raw trace (.npz)
        return None, traceio.load(path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        if isinstance(doc, dict) and doc.get("format") == NEFF_FORMAT:
            tr = read_profile_trace(path)
            return (None if target else doc.get("summary_text")), tr
        if isinstance(doc, dict) and "traceEvents" in doc:
            s = (doc.get("otherData") or {}).get("summary_text")
            if not s:
                raise ValueError(f"{path}: Perfetto trace without an embedded nkisim summary")
            return s, None
        raise ValueError(f"{path}: unrecognised JSON profile")
    from nkisim.perf.summary import HEADER

    if stripped.startswith(HEADER):
        return text, None
    raise ValueError(f"{path}: not an nkisim profile, summary or trace file")


def _stored_sources(path: str) -> dict[str, str]:
    """The kernel sources a .neff stand-in stored when it was profiled; {} for other files."""
    from nkisim.perf.profile_files import read_profile_sources

    try:
        return read_profile_sources(path)
    except (ValueError, UnicodeDecodeError):  # a raw trace or another kind of file: nothing stored
        return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nkisim.profile", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary", help="print the text summary (neuron-profile summary-text style)")
    s.add_argument("file")
    s.add_argument("--target", choices=("trn1", "trn2"), default=None, help="re-cost the trace for this target")
    t = sub.add_parser("trace", help="write the Perfetto/Chrome trace JSON of a profile or trace file")
    t.add_argument("file")
    t.add_argument("-o", "--output", required=True)
    t.add_argument("--target", choices=("trn1", "trn2"), default=None)
    h = sub.add_parser("html", help="write a self-contained HTML profile (two files: a before/after comparison)")
    h.add_argument("files", nargs="+", metavar="PROFILE", help="a .neff stand-in or raw trace file (one or two)")
    h.add_argument("-o", "--output", default=None, help="output page (default: PROFILE with .html)")
    h.add_argument("--target", choices=("trn1", "trn2"), default=None)
    h.add_argument("--source", action="append", default=[], metavar="FILE",
                   help="kernel source file to show (default: looked up by name beside the profile and here)")
    args = ap.parse_args(argv)
    if args.cmd == "html":
        return _html(ap, args)
    try:
        text, trace = _load_any(args.file, args.target)
        if args.cmd == "summary":
            if text is None:
                from nkisim.perf import estimate
                from nkisim.perf.summary import format_summary

                text = format_summary(estimate(trace, args.target))
            sys.stdout.write(text)
            return 0
        if trace is None:
            raise ValueError(f"{args.file}: holds no instruction trace (use the .neff stand-in or a trace file)")
        from nkisim.perf import estimate
        from nkisim.perf.perfetto import write_perfetto

        rep = estimate(trace, args.target)
        write_perfetto(list(trace.instrs), rep, args.output)
        print(f"wrote {args.output}")
        return 0
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _html(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if len(args.files) > 2:
        ap.error("html takes one profile, or two to compare (before and after)")
    if args.output is None:
        if len(args.files) == 2:
            ap.error("comparing two profiles needs -o OUT.html")
        from nkisim.perf.profile_files import _stem

        args.output = _stem(args.files[0]) + ".html"
    try:
        from nkisim.perf import estimate
        from nkisim.perf.html_profile import ProfileData, find_sources, write_html

        given: dict[str, str] = {}
        for src in args.source:
            with open(src, encoding="utf-8") as f:
                given[os.path.basename(src)] = f.read()
        profiles = []
        for path in args.files:
            _text, trace = _load_any(path, args.target)
            if trace is None:
                raise ValueError(f"{path}: holds no instruction trace (use the .neff stand-in or a trace file)")
            rep = estimate(trace, args.target)
            wheres = sorted({ins.where for ins in trace.instrs if ins.where})
            # the source as it was when profiled (stored in the .neff stand-in), so a before/after page shows
            # each run's own code wherever it is drawn from; files found on disk only fill what it lacks
            sources = _stored_sources(path)
            on_disk = {k: v for k, v in find_sources(wheres, [os.path.dirname(os.path.abspath(path)), os.getcwd()])
                       .items() if k not in sources}
            sources.update(on_disk)
            sources.update({k: v for k, v in given.items() if any(w.startswith(k + ":") for w in wheres)})
            note = ""
            if on_disk and not set(given) >= set(on_disk):
                note = (f"{', '.join(sorted(set(on_disk) - set(given)))}: today's file (found by name), not "
                        "necessarily the version profiled: this profile stored no source")
            profiles.append(ProfileData(trace, rep, title=os.path.basename(path), sources=sources, origin=path,
                                        source_note=note))
        write_html(profiles, args.output)
        print(f"wrote {args.output} (open it in a browser: file://{os.path.abspath(args.output)})")
        return 0
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
