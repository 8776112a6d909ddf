"""Batch-grading throughput on a synthetic class (a benchmark that prints figures, not a test).

    python -m grader.bench --class 100 --bad-fraction 0.05 [--jobs 2] [--executors local,ray] [--compare]
    python -m grader.bench --mix staff=4,stub=4,crash=2,syntax=1,import-hang=1 --kill-after 25
    python -m grader.bench --class 20 --bad-fraction 0.25 --write DIR        (only write the class)

The class is built from the staff solution (grader/reference), the untouched starter files (the "stub") and
hostile variants of the staff solution: a part2/conv2d.py that never finishes importing (import-hang), a kernel
that never returns (kernel-hang), kernels that raise (crash), a kernel that allocates until it runs out of memory
(memory-bomb) and a part2/conv2d.py with a syntax error (syntax).  Staff and stub submissions are the "good"
ones, the hostile variants the "bad" ones; every submission has distinct content (nothing is reused).

For each executor it prints the batch wall time, submissions per minute, and for the good and the bad ones the
mean seconds per submission and the submissions per minute ``--jobs`` workers would grade of that kind alone.
``--compare`` also grades the same class without its bad submissions and prints the ratio of the wall times.
``--kill-after S`` instead runs ``python -m grader batch`` on the class, SIGKILLs it (process group) after S s,
runs it again (the resumed run, timed) and a third time (which must redo nothing).

The machine is shared and timings depend on its load: the load average is printed with every figure.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from grader.batch import JobResult, run_batch, summarize
from grader.calibrate import ensure_reference_timings
from grader.cli import positive_float
from grader.records import GradeConfig
from grader.staff import reference_dir

ROOT = Path(__file__).resolve().parent.parent
FILES = ("part1/kernels.py", "part2/conv2d.py")
CONV = "part2/conv2d.py"
GOOD_KINDS = ("staff", "stub")
BAD_KINDS = ("import-hang", "kernel-hang", "crash", "memory-bomb", "syntax")
PROJECT_CLASS, PROJECT_FRACTION = 100, 0.05  # the target class, projected from smaller measured ones


def _prepend_to_function(source: str, function: str, lines: list[str]) -> str:
    """``source`` with ``lines`` inserted as the first statements of ``function``'s body."""
    tree = ast.parse(source)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    first = fn.body[0]
    indent = " " * first.col_offset
    text = source.splitlines(keepends=True)
    at = first.lineno - 1
    return "".join(text[:at] + [indent + line + "\n" for line in lines] + text[at:])


def _variant_sources(kind: str, staff: dict[str, str], stub: dict[str, str]) -> dict[str, str]:
    """The two files of one submission of ``kind``."""
    if kind == "stub":
        return dict(stub)
    files = dict(staff)
    conv = files[CONV]
    if kind == "import-hang":  # the case: a module-level loop in part2/conv2d.py
        files[CONV] = conv + "\nwhile True:\n    pass\n"
    elif kind == "kernel-hang":
        files[CONV] = _prepend_to_function(conv, "fused_conv2d_maxpool", ["while True:", "    pass"])
    elif kind == "crash":
        boom = ['raise RuntimeError("index bookkeeping went wrong")']
        files[CONV] = _prepend_to_function(conv, "fused_conv2d_maxpool", boom)
        files["part1/kernels.py"] = _prepend_to_function(files["part1/kernels.py"], "matrix_transpose", boom)
    elif kind == "memory-bomb":
        hog = ["hog = []", "while True:", "    hog.append(bytearray(1024 * 1024 * 1024))"]
        files[CONV] = _prepend_to_function(conv, "fused_conv2d_maxpool", hog)
    elif kind == "syntax":
        files[CONV] = conv + "\n\ndef helper(x:\n    return x\n"
    elif kind != "staff":
        raise ValueError(f"unknown submission kind {kind!r}; kinds: {GOOD_KINDS + BAD_KINDS}")
    return files


def class_kinds(n: int, bad_fraction: float, seed: int = 0) -> list[str]:
    """``n`` submission kinds: round(n * bad_fraction) bad ones cycling through BAD_KINDS, the rest alternately
    staff and stub, in a fixed shuffled order (so the bad ones are spread over the batch)."""
    if n < 1 or not 0 <= bad_fraction <= 1:
        raise ValueError("--class must be >= 1 and --bad-fraction in [0, 1]")
    n_bad = round(n * bad_fraction)
    kinds = [BAD_KINDS[i % len(BAD_KINDS)] for i in range(n_bad)]
    kinds += [GOOD_KINDS[i % len(GOOD_KINDS)] for i in range(n - n_bad)]
    random.Random(seed).shuffle(kinds)
    return kinds


def parse_mix(text: str) -> list[str]:
    """``staff=4,stub=4,crash=2`` -> the kinds in that order."""
    kinds: list[str] = []
    for item in text.split(","):
        name, _, count = item.partition("=")
        name = name.strip()
        if name not in GOOD_KINDS + BAD_KINDS:
            raise ValueError(f"--mix: unknown kind {name!r}; kinds: {', '.join(GOOD_KINDS + BAD_KINDS)}")
        kinds += [name] * int(count or 1)
    return kinds


def write_class(dest: Path, kinds: list[str]) -> dict[str, str]:
    """One directory per submission under ``dest``; returns student -> kind (also written to dest/../class.json)."""
    ref = reference_dir()
    staff = {f: (ref / f).read_text() for f in FILES}
    stub = {f: (ROOT / f).read_text() for f in FILES}
    roster: dict[str, str] = {}
    for i, kind in enumerate(kinds):
        student = f"s{i:03d}-{kind}"
        for rel, text in _variant_sources(kind, staff, stub).items():
            path = dest / student / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + f"\n# bench submission {i}\n")  # distinct content: no result is reused
        roster[student] = kind
    (dest.parent / f"{dest.name}.json").write_text(json.dumps(roster, indent=1) + "\n")
    return roster


def _cpu_seconds() -> float:
    """CPU time of this process and its waited-for descendants (pool workers, sandboxed children): unlike wall
    time it hardly depends on what else the machine runs.  Ray's workers are not our children: not counted."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def _group_line(label: str, results: list[JobResult], jobs: int) -> str:
    if not results:
        return f"  {label:5s}:   0 submissions"
    mean = sum(r.seconds for r in results) / len(results)
    rate = 60.0 * jobs / mean if mean > 0 else float("inf")
    return f"  {label:5s}: {len(results):3d} submissions, {mean:7.1f} s/submission, {rate:6.2f} submissions/min"


def _timed_batch(
    source: Path, out: Path, executor: str, jobs: int, config: GradeConfig
) -> tuple[float, float, list[JobResult]]:
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    results = run_batch(source, out, config, jobs=jobs, executor=executor, progress=False)
    return time.perf_counter() - t0, _cpu_seconds() - cpu0, results


def _cpu_note(executor: str, cpu: float) -> str:
    return f"{cpu:.0f} CPU s" if executor != "ray" else "CPU n/a (Ray workers)"


def bench_class(args: argparse.Namespace, kinds: list[str], tmp: Path) -> None:
    source = tmp / "class"
    roster = write_class(source, kinds)
    bad_students = {s for s, k in roster.items() if k in BAD_KINDS}
    good_only = tmp / "class-good"
    for s in roster:
        if s not in bad_students:
            shutil.copytree(source / s, good_only / s)
    counts = {k: kinds.count(k) for k in GOOD_KINDS + BAD_KINDS if k in kinds}
    print(f"class: {len(kinds)} submissions {counts}; --jobs {args.jobs}; {_load()}")
    config = GradeConfig(timeout_scale=args.timeout_scale)
    for executor in args.executors:
        wall, cpu, results = _timed_batch(source, tmp / f"out-{executor}", executor, args.jobs, config)
        good = [r for r in results if r.student not in bad_students]
        bad = [r for r in results if r.student in bad_students]
        print(
            f"[{executor}] {len(results)} submissions in {wall:.1f} s wall = {60 * len(results) / wall:.2f} "
            f"submissions/min, {wall / len(results):.1f} s/submission; {_cpu_note(executor, cpu)}; "
            f"{summarize(results)}; {_load()}"
        )
        print(_group_line("good", good, args.jobs))
        print(_group_line("bad", bad, args.jobs))
        for kind in BAD_KINDS:
            mine = [r for r in bad if roster[r.student] == kind]
            if mine:
                print(f"    {kind:12s} {sum(r.seconds for r in mine) / len(mine):7.1f} s/submission")
        if good and bad:
            g = sum(r.seconds for r in good) / len(good)
            b = sum(r.seconds for r in bad) / len(bad)
            n_bad = round(PROJECT_CLASS * PROJECT_FRACTION)
            n_good = PROJECT_CLASS - n_bad
            print(
                f"  projection from these means for a class of {PROJECT_CLASS} with {PROJECT_FRACTION:.0%} bad "
                f"(bad kinds in this class's mix): with / without the bad = "
                f"{(n_good * g + n_bad * b) / (n_good * g):.2f}x"
            )
        if args.compare and bad_students:
            base_wall, base_cpu, base = _timed_batch(
                good_only, tmp / f"out-{executor}-good", executor, args.jobs, config
            )
            ratio = f"with them / without = {wall / base_wall:.2f}x wall"
            if executor != "ray":
                ratio += f", {cpu / base_cpu:.2f}x CPU"
            print(
                f"[{executor}] the same class without its {len(bad_students)} bad submissions: {len(base)} in "
                f"{base_wall:.1f} s wall, {_cpu_note(executor, base_cpu)}; {ratio}; {_load()}"
            )


def bench_kill_resume(args: argparse.Namespace, kinds: list[str], tmp: Path) -> None:
    source = tmp / "class"
    write_class(source, kinds)
    out = tmp / "out"
    cmd = [sys.executable, "-m", "grader", "batch", str(source), "--out", str(out), "--jobs", str(args.jobs)]
    cmd += ["--quiet", "--executor", args.executors[0], "--timeout-scale", str(args.timeout_scale)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    counts = {k: kinds.count(k) for k in GOOD_KINDS + BAD_KINDS if k in kinds}
    print(f"class: {len(kinds)} submissions {counts}; {_load()}")
    print("$ " + " ".join(cmd))
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(args.kill_after)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)  # pool workers and sandboxes die with their parent (PR_SET_PDEATHSIG)
    done = len(list(out.glob("*/*/result.json")))
    print(f"first run SIGKILLed after {args.kill_after:g} s: {done} finished result(s) on disk")
    for label in ("resumed run", "third run"):
        t0, cpu0 = time.perf_counter(), _cpu_seconds()
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
        summary = run.stdout.strip().splitlines()[0] if run.stdout.strip() else run.stderr.strip()[-300:]
        print(f"{label}: {wall:.1f} s wall, {cpu:.0f} CPU s (exit {run.returncode}): {summary}; {_load()}")
    results = [json.loads(p.read_text()) for p in out.glob("*/*/result.json")]
    per_student = {}
    for r in results:
        per_student[r["student"]] = per_student.get(r["student"], 0) + 1
    print(
        f"result directories: {len(results)} for {len(kinds)} submissions "
        f"(one each: {sorted(per_student.values()) == [1] * len(kinds)}); "
        f"staging left: {(out / '.staging').exists()}"
    )
    if args.show_overview:
        print((out / "overview.md").read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--class", dest="size", type=int, default=20, help="submissions in the synthetic class")
    ap.add_argument("--bad-fraction", type=float, default=0.05, help="share of hostile submissions")
    ap.add_argument("--mix", default=None, help="explicit class instead: e.g. staff=4,stub=4,crash=2,syntax=1")
    ap.add_argument("--jobs", type=int, default=2, help="submissions graded in parallel")
    ap.add_argument("--executors", default="local,ray", help="comma-separated: local, ray, serial")
    ap.add_argument("--compare", action="store_true", help="also grade the class without its bad submissions")
    ap.add_argument("--kill-after", type=float, default=None, help="SIGKILL the batch after S s, then resume it")
    ap.add_argument("--show-overview", action="store_true", help="--kill-after: print the final overview.md")
    ap.add_argument("--timeout-scale", type=positive_float, default=1.0, help="as for python -m grader batch")
    ap.add_argument("--write", default=None, metavar="DIR", help="only write the class into DIR")
    args = ap.parse_args(argv)
    args.executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    kinds = parse_mix(args.mix) if args.mix else class_kinds(args.size, args.bad_fraction)
    if args.write:
        roster = write_class(Path(args.write), kinds)
        print(f"wrote {len(roster)} submissions to {args.write} (roster: {Path(args.write)}.json)")
        return 0
    t0 = time.perf_counter()
    ensure_reference_timings("nkisim", "trn2")  # a missing cache entry is computed here, not timed below
    print(f"reference timings ready in {time.perf_counter() - t0:.1f} s")
    with tempfile.TemporaryDirectory(prefix="grader-bench-") as tmp_s:
        run: Callable[[argparse.Namespace, list[str], Path], None]
        run = bench_kill_resume if args.kill_after is not None else bench_class
        run(args, kinds, Path(tmp_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
