"""Print the timeline a grading recorded with ``GRADER_TIMELINE=FILE`` (grader/timeline.py).

    GRADER_TIMELINE=/tmp/tl.json python -m grader grade grader/reference --out /tmp/out
    python tools/grading_timeline.py /tmp/tl.json [--width 100] [--events] [--gap 0.1]

Prints, for the grading's wall time: one text lane per kernel slot (which kernel processes ran on it), one for the
parent's reference thread and one for the parent's other work (input generation, judging, costing traces), each
slot's busy fraction and its gaps (with what the grading was doing meanwhile), how much of the wall time 0, 1, 2
or more of these ran at once (on two cores, time with fewer than two is a core left idle unless the machine's other
load used it), and per kind of event its count, wall seconds and the parent thread's CPU seconds.  ``--events``
lists every event.  Lane letters: S specialize, R replay, G group replay, f input file, t trace load (in a slot);
r reference, p what judging a reference's outputs takes, made ahead at low priority (refs lane); i inputs, e
waiting for / computing a reference in a test, j judge, c costing a trace (parent).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

SLOT_LETTERS = {"specialize": "S", "replay": "R", "group_replay": "G", "input_file": "f", "trace_load": "t"}
PARENT_LETTERS = {"inputs": "i", "expected": "e", "judge": "j", "estimate": "c", "trace_load": "t",
                  "input_file": "f", "screen": "s", "imports": "m"}
# kinds that keep a core busy while they last (a kernel process, or the parent's own computing)
CPU_KINDS = {"specialize", "replay", "group_replay", "reference", "inputs", "judge", "estimate", "input_file",
             "screen", "judge_prep"}


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def total(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in union(spans))


def gaps(spans: list[tuple[float, float]], start: float, end: float, least: float) -> list[tuple[float, float]]:
    out, t = [], start
    for a, b in union(spans):
        if a - t >= least:
            out.append((t, a))
        t = max(t, b)
    if end - t >= least:
        out.append((t, end))
    return out


def lane(events: list[dict[str, Any]], letters: dict[str, str], wall: float, width: int) -> str:
    """One character per ``wall / width`` seconds: the letter of the event covering most of that column."""
    cells = []
    step = wall / width
    for c in range(width):
        a, b = c * step, (c + 1) * step
        cover: dict[str, float] = defaultdict(float)
        for e in events:
            over = min(b, e["t1"]) - max(a, e["t0"])
            if over > 0 and e["kind"] in letters:
                cover[letters[e["kind"]]] += over
        cells.append(max(cover, key=lambda k: cover[k]) if cover and max(cover.values()) > step * 0.2 else ".")
    return "".join(cells)


def occupancy(events: list[dict[str, Any]], wall: float, step: float = 0.05) -> list[float]:
    """Estimated cores in use per ``step`` seconds: a kernel process's CPU seconds (``proc_cpu``, at most one core
    per process) and the parent's threads' own CPU seconds (``cpu``), each spread evenly over its span; a span inside
    another of the same thread is counted once (the outer one's CPU includes it)."""
    n = max(1, math.ceil(wall / step - 1e-9))
    use = [0.0] * n
    for e in events:
        if e["kind"] not in CPU_KINDS:
            continue
        if any(o is not e and o["thread"] == e["thread"] and o["kind"] in CPU_KINDS and o["t0"] <= e["t0"]
               and e["t1"] <= o["t1"] and (o["t0"], -o["t1"]) < (e["t0"], -e["t1"]) for o in events):
            continue
        dur = e["t1"] - e["t0"]
        if dur <= 0:
            continue
        got = e.get("proc_cpu")
        if e["kind"] in ("specialize", "replay", "group_replay"):
            # a group's members run one at a time in one process
            cpu = sum(x for x in got if x) if isinstance(got, list) else (got if got is not None else dur)
            rate = min(1.0, cpu / dur)
        else:
            rate = min(1.0, e.get("cpu", 0.0) / dur)
        for b in range(int(e["t0"] / step), min(n, int(e["t1"] / step) + 1)):
            over = min((b + 1) * step, e["t1"]) - max(b * step, e["t0"])
            if over > 0:
                use[b] += rate * over / step
    return use


def self_cpu(events: list[dict[str, Any]]) -> list[float]:
    """Each span's parent CPU seconds less those of the spans directly inside it on the same thread: a span's ``cpu``
    is its thread's CPU from its start to its end, so it includes every span nested in it, and summing ``cpu`` per
    kind counts nested work twice (a ``test`` includes its ``slot``, ``inputs``, ``judge`` ...)."""
    own = []
    for e in events:
        inner = [o for o in events if o is not e and o["thread"] == e["thread"] and e["t0"] <= o["t0"]
                 and o["t1"] <= e["t1"] and (e["t0"], -e["t1"]) < (o["t0"], -o["t1"])]
        direct = [o for o in inner if not any(m is not o and m["t0"] <= o["t0"] and o["t1"] <= m["t1"]
                                               and (m["t0"], -m["t1"]) < (o["t0"], -o["t1"]) for m in inner)]
        own.append(max(0.0, e.get("cpu", 0.0) - sum(o.get("cpu", 0.0) for o in direct)))
    return own


def outside(doc: dict[str, Any]) -> dict[str, float]:
    """Where the grading's CPU seconds that the lanes do not draw went: ``undrawn``, the grader's threads' own CPU
    in spans of kinds the lanes do not count (a test's own work, ``expected`` computing a reference in a test's
    thread, ``slot``, ``close``: each span's self CPU); ``grader``, the grader process's CPU in no span at all (its
    other threads, the grading's set-up); ``kernels``, the kernel processes' CPU beyond their spans' process CPU
    (the warm servers' start-ups, a group's process outside its members' threads, forks and exits)."""
    events = doc["events"]
    own = self_cpu(events)
    proc = 0.0
    for e in events:
        got = e.get("proc_cpu")
        proc += sum(x for x in got if x) if isinstance(got, list) else (got or 0.0)
    return {"undrawn": sum(o for e, o in zip(events, own, strict=True) if e["kind"] not in CPU_KINDS),
            "grader": (doc.get("cpu_grader_s") or 0.0) - sum(own),
            "kernels": (doc.get("cpu_kernels_s") or 0.0) - proc}


def report(doc: dict[str, Any], width: int, least: float, list_events: bool) -> str:
    events = doc["events"]
    wall = float(doc["wall_s"])
    lines = [f"grading of {doc.get('submission')}: {wall:.2f} s wall, {doc.get('workers')} worker(s); "
             f"CPU grader {doc.get('cpu_grader_s')} s, kernel processes {doc.get('cpu_kernels_s')} s; "
             f"load {doc.get('loadavg_start')} -> {doc.get('loadavg_end')}"]
    slots = sorted({e["slot"] for e in events if e["slot"] is not None})
    tests = [e for e in events if e["kind"] == "test"]
    first = min((e["t0"] for e in tests), default=0.0)
    lines.append(f"{'':>8} |{'-' * width}| one column = {wall / width:.2f} s")
    held = {s: [(e["t0"], e["t1"]) for e in events if e["kind"] == "slot" and e["slot"] == s] for s in slots}
    for s in slots:
        inside = [e for e in events if e["slot"] == s and e["kind"] != "slot"]
        lines.append(f"{'slot ' + str(s):>8} |{lane(inside, SLOT_LETTERS, wall, width)}|")
    refs = [e for e in events if e["kind"] in ("reference", "judge_prep")]
    lines.append(f"{'refs':>8} |{lane(refs, {'reference': 'r', 'judge_prep': 'p'}, wall, width)}|")
    parent = [e for e in events if e["slot"] is None and e["kind"] in PARENT_LETTERS]
    lines.append(f"{'parent':>8} |{lane(parent, PARENT_LETTERS, wall, width)}|")
    lines.append("")
    for s in slots:
        busy = total(held[s])
        lines.append(f"slot {s}: held {busy:.2f} s of {wall:.2f} ({busy / wall:.0%}); from the first test "
                     f"({first:.2f} s) to the end {busy / max(wall - first, 1e-9):.0%}")
        for a, b in gaps(held[s], first, wall, least):
            during = sorted({f"{e['kind']} {e['name']}".strip() for e in events
                             if e["kind"] in CPU_KINDS | {"wait_group", "expected"}
                             and e["t0"] < b and e["t1"] > a and e["slot"] != s})
            lines.append(f"    gap {a:7.2f} - {b:7.2f} ({b - a:5.2f} s): {'; '.join(during)[:160] or 'nothing'}")
    step = 0.05
    use = occupancy(events, wall, step)
    per_col = max(1, round(wall / width / step))
    cols = [use[i:i + per_col] for i in range(0, len(use), per_col)][:width]
    lines.insert(4 + len(slots), f"{'cores':>8} |" + "".join(str(min(9, round(sum(c) / len(c)))) for c in cols)
                 + "|  (estimated cores this grading used, column mean)")
    lines.append("")
    idle = sum(max(0.0, 2.0 - u) * min(step, wall - b * step) for b, u in enumerate(use))
    measured = (doc.get("cpu_grader_s") or 0.0) + (doc.get("cpu_kernels_s") or 0.0)
    lines.append(f"CPU seconds in the spans {sum(use) * step:.2f} of the {measured:.2f} the grading used (the rest: "
                 "BLAS helper threads, process start-ups, work outside spans); core-seconds the spans left unused "
                 f"on 2 cores {idle:.2f} ({idle / (2 * wall):.0%} of 2 x wall)")
    rest = outside(doc)
    lines.append(f"  not drawn: the grader's own CPU in spans of other kinds {rest['undrawn']:.2f}, in no span "
                 f"{rest['grader']:.2f}; the kernel processes' beyond their spans' process CPU {rest['kernels']:.2f}")
    lines.append("")
    lines.append("parent CPU s: the grader's threads during the spans, nested spans included; self: without them "
                 "(the self column sums to the grader's CPU inside spans)")
    lines.append(f"{'kind':<14}{'count':>6}{'wall s':>9}{'parent CPU s':>14}{'self':>8}{'process CPU s':>15}")
    kinds: dict[str, list[tuple[dict[str, Any], float]]] = defaultdict(list)
    for e, own in zip(events, self_cpu(events), strict=True):
        kinds[e["kind"]].append((e, own))
    for kind, es in sorted(kinds.items(), key=lambda kv: -sum(e["t1"] - e["t0"] for e, _ in kv[1])):
        proc = 0.0
        for e, _ in es:
            got = e.get("proc_cpu")
            proc += sum(x for x in got if x) if isinstance(got, list) else (got or 0.0)
        lines.append(f"{kind:<14}{len(es):>6}{sum(e['t1'] - e['t0'] for e, _ in es):>9.2f}"
                     f"{sum(e.get('cpu', 0.0) for e, _ in es):>14.2f}{sum(own for _, own in es):>8.2f}{proc:>15.2f}")
    if list_events:
        lines.append("")
        for e in events:
            extra = {k: v for k, v in e.items() if k not in ("kind", "name", "t0", "t1", "thread", "slot", "cpu")}
            lines.append(f"{e['t0']:8.3f} {e['t1']:8.3f} {e['t1'] - e['t0']:7.3f}  cpu {e.get('cpu', 0):6.3f}  "
                         f"{e['thread']:<15} slot {str(e['slot']):<4} {e['kind']:<12} {e['name']} {extra or ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", help="the JSON file GRADER_TIMELINE named")
    ap.add_argument("--width", type=int, default=100, help="columns of the text lanes")
    ap.add_argument("--gap", type=float, default=0.1, help="shortest slot gap listed, seconds")
    ap.add_argument("--events", action="store_true", help="list every event")
    args = ap.parse_args(argv)
    try:
        doc = json.loads(Path(args.file).read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("events"), list) or "wall_s" not in doc:
            raise ValueError("not a grading timeline (no 'events' list or 'wall_s')")
    except (OSError, ValueError) as exc:
        print(f"grading_timeline: {args.file}: {exc}", file=sys.stderr)
        return 2
    if args.width < 10:
        print("grading_timeline: --width must be at least 10", file=sys.stderr)
        return 2
    print(report(doc, args.width, args.gap, args.events))
    return 0


if __name__ == "__main__":
    sys.exit(main())
