"""Batch-grading cost on a synthetic class (a benchmark that prints figures, not a test).

    python -m grader.bench --class 100 [--jobs 2] [--executors local] [--compare]
    python -m grader.bench --mix staff=4,stub=4,crash=2,hostile:infinite_loop=1 --kill-after 25
    python -m grader.bench --class 20 --write DIR        (only write the class)

``--class N`` builds the issue's class from the existing material: 80% full-credit submissions (the staff
solution, grader/reference), 15% stubs (the untouched starter files) and 5% hostile ones, cycling through
HOSTILE_ORDER: variants of the staff solution (import-hang: a part2/conv2d.py that never finishes importing;
kernel-hang: a kernel that never returns; crash: kernels that raise; memory-bomb: a kernel that allocates until
it runs out of memory; syntax: a syntax error) and the hostile-submission suite (``hostile:NAME`` = tests/hostile/
NAME, e.g. the escape that looks for the class seed and the reference cache).  Every submission has distinct
content (nothing is reused).  ``--full`` and ``--stub`` change the shares.

The class is graded as ``python -m grader batch`` grades one: with the class's secret seed, so the references are
computed once and shared (grader/refcache.py).  For each executor it prints the wall time, the CPU seconds of the
whole batch and, per kind of submission, the CPU seconds each one cost (its grading process and its sandboxed
kernel processes, from result.json) -- CPU seconds depend far less on what else the machine runs than wall time --
then regrades the unchanged class (every result reused) and prints that wall time too.  ``--compare`` also
grades the class without its hostile submissions.  ``--kill-after S`` instead runs ``python -m grader batch`` on
the class, SIGKILLs it (process group) after S s, runs it again (the resumed run, timed) and a third time (which
must redo nothing).

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

from grader.batch import JobResult, class_config, run_batch, summarize
from grader.calibrate import ensure_reference_timings
from grader.cli import positive_float
from grader.records import GradeConfig
from grader.staff import reference_dir

ROOT = Path(__file__).resolve().parent.parent
HOSTILE_DIR = ROOT / "tests" / "hostile"
FILES = ("part1/kernels.py", "part2/conv2d.py")
CONV = "part2/conv2d.py"
GOOD_KINDS = ("staff", "stub")
VARIANT_KINDS = ("import-hang", "kernel-hang", "crash", "memory-bomb", "syntax")  # made from the staff solution
FIXTURE = "hostile:"  # hostile:NAME = the submission tests/hostile/NAME
# The hostile kinds of a class, in the order they are used: the expensive variants (they pass the static screen
# and exhaust their limits) alternate with the suite's escapes (rejected by the screen, cheap).
HOSTILE_ORDER = (
    "kernel-hang", "memory-bomb", "hostile:refcache_escape", "import-hang", "hostile:infinite_loop", "crash",
    "hostile:memoise_escape", "syntax", "hostile:sibling_escape", "hostile:fork_bomb_escape", "hostile:print_flood",
)
BAD_KINDS = VARIANT_KINDS  # kept for --mix and older callers
FULL_SHARE, STUB_SHARE = 0.8, 0.15  # the class: 80 full-credit, 15 stubs, 5 hostile of 100


def is_hostile(kind: str) -> bool:
    return kind not in GOOD_KINDS


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
    if kind.startswith(FIXTURE):
        src = HOSTILE_DIR / kind[len(FIXTURE):]
        if not src.is_dir():
            raise ValueError(f"no hostile submission {src}")
        return {f: (src / f).read_text() for f in FILES}
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
        raise ValueError(f"unknown submission kind {kind!r}; kinds: {GOOD_KINDS + VARIANT_KINDS} or hostile:NAME")
    return files


def class_kinds(n: int, full: float = FULL_SHARE, stub: float = STUB_SHARE, seed: int = 0) -> list[str]:
    """``n`` submission kinds: round(n * full) staff, round(n * stub) stubs, the rest hostile (HOSTILE_ORDER,
    cycled), in a fixed shuffled order (so the hostile ones are spread over the batch)."""
    if n < 1 or not (0 <= full <= 1 and 0 <= stub <= 1 and full + stub <= 1):
        raise ValueError("--class must be >= 1, --full and --stub in [0, 1] with --full + --stub <= 1")
    n_full, n_stub = round(n * full), round(n * stub)
    n_stub = min(n_stub, n - n_full)
    kinds = ["staff"] * n_full + ["stub"] * n_stub
    kinds += [HOSTILE_ORDER[i % len(HOSTILE_ORDER)] for i in range(n - len(kinds))]
    random.Random(seed).shuffle(kinds)
    return kinds


def parse_mix(text: str) -> list[str]:
    """``staff=4,stub=4,crash=2,hostile:infinite_loop=1`` -> the kinds in that order."""
    kinds: list[str] = []
    for item in text.split(","):
        name, _, count = item.partition("=")
        name = name.strip()
        known = name in GOOD_KINDS + VARIANT_KINDS or (name.startswith(FIXTURE) and (HOSTILE_DIR / name[len(FIXTURE):])
                                                        .is_dir())
        if not known:
            raise ValueError(f"--mix: unknown kind {name!r}; kinds: {', '.join(GOOD_KINDS + VARIANT_KINDS)}, "
                             "hostile:NAME (tests/hostile/NAME)")
        kinds += [name] * int(count or 1)
    return kinds


def write_class(dest: Path, kinds: list[str]) -> dict[str, str]:
    """One directory per submission under ``dest``; returns student -> kind (also written to dest/../class.json)."""
    ref = reference_dir()
    staff = {f: (ref / f).read_text() for f in FILES}
    stub = {f: (ROOT / f).read_text() for f in FILES}
    roster: dict[str, str] = {}
    for i, kind in enumerate(kinds):
        student = f"s{i:03d}-{kind.replace(FIXTURE, 'hostile-')}"
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


def job_cpu(r: JobResult) -> float:
    """CPU seconds one grading cost: its grading process and its sandboxed kernel processes (result.json)."""
    return r.timings.get("cpu:grader_s", 0.0) + r.timings.get("cpu:kernels_s", 0.0)


def _kind_line(label: str, results: list[JobResult]) -> str:
    if not results:
        return f"  {label:26s}   0"
    cpu = sorted(job_cpu(r) for r in results)
    wall = sum(r.seconds for r in results) / len(results)
    return (f"  {label:26s} {len(results):3d}  {sum(cpu) / len(cpu):7.1f} {cpu[len(cpu) // 2]:7.1f} {cpu[-1]:7.1f}"
            f"   {wall:7.1f}")


def _timed_batch(
    source: Path, out: Path, executor: str, jobs: int, config: GradeConfig
) -> tuple[float, float, list[JobResult]]:
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    results = run_batch(source, out, config, jobs=jobs, executor=executor, progress=False)
    return time.perf_counter() - t0, _cpu_seconds() - cpu0, results


def _cpu_note(executor: str, cpu: float) -> str:
    return f"{cpu:.0f} CPU s" if executor != "ray" else "CPU n/a (Ray workers)"


def _references_line(results: list[JobResult]) -> str:
    t = [r.timings for r in results if r.status == "graded"]
    computed = sum(x.get("references:computed", 0) for x in t)
    seconds = sum(x.get("references:computed_s", 0) for x in t)
    disk = sum(x.get("references:from_disk", 0) for x in t)
    memory = sum(x.get("references:from_memory", 0) for x in t)
    return (f"  shared references: {computed:.0f} computed ({seconds:.1f} s), {disk:.0f} loaded from the cache on "
            f"disk, {memory:.0f} found in a worker's memory")


def _where_cpu_goes(results: list[JobResult]) -> str:
    """Mean CPU seconds of a full-credit submission's parts: each test's kernel processes and the grader itself."""
    graded = [r for r in results if r.status == "graded"]
    if not graded:
        return "  (no full-credit submission graded in this run)"
    tests: dict[str, float] = {}
    for r in graded:
        for t, c in r.test_cpu.items():
            tests[t] = tests.get(t, 0.0) + c / len(graded)
    grader = sum(r.timings.get("cpu:grader_s", 0.0) for r in graded) / len(graded)
    kernels = sum(r.timings.get("cpu:kernels_s", 0.0) for r in graded) / len(graded)
    top = ", ".join(f"{t} {c:.1f}" for t, c in sorted(tests.items(), key=lambda x: -x[1])[:6])
    return (f"  a full-credit submission's CPU s: grader process {grader:.1f}, kernel processes {kernels:.1f} "
            f"(largest: {top}; the rest start-ups and small tests)")


def _groups_line(results: list[JobResult]) -> str:
    """Mean figures of a full-credit submission's calls made together (grader.runner.run_group): groups, calls in
    them, timed calls made speculatively and those discarded, products reused / computed."""
    graded = [r for r in results if r.status == "graded"]
    if not graded or not any("share:calls" in r.timings for r in graded):
        return "  calls made together: none (GRADER_SHARE_PRODUCTS=0, or no kernel replayed)"

    def mean(key: str) -> float:
        return sum(r.timings.get(f"share:{key}", 0.0) for r in graded) / len(graded)

    return (f"  calls made together per full-credit submission: {mean('groups'):.1f} groups of {mean('calls'):.1f} "
            f"calls ({mean('speculative'):.1f} timed calls made speculatively, {mean('unused'):.1f} discarded); "
            f"products reused {mean('hits'):.0f}, computed {mean('misses'):.0f}; replayed alone {mean('alone'):.1f}")


def _projection(results: list[JobResult], roster: dict[str, str], jobs: int) -> str:
    """The issue's class (100: 80 full-credit, 15 stubs, 5 hostile) from this run's mean CPU seconds per kind, on
    ``jobs`` otherwise idle cores."""
    def mean(pick: Callable[[str], bool]) -> float | None:
        cpu = [job_cpu(r) for r in results if pick(roster.get(r.student, ""))]
        return sum(cpu) / len(cpu) if cpu else None

    full, stub, bad = mean(lambda k: k == "staff"), mean(lambda k: k == "stub"), mean(is_hostile)
    if full is None:
        return "  (no projection: no full-credit submission in this class)"
    total = 80 * full + 15 * (stub if stub is not None else 0.0) + 5 * (bad if bad is not None else 0.0)
    cores = max(1, min(jobs, os.cpu_count() or 1))
    return (f"  projected for 100 submissions (80 full-credit, 15 stubs, 5 hostile) from these means: {total:.0f} CPU "
            f"s, {total / cores / 60:.1f} min on {cores} idle core(s)")


def bench_class(args: argparse.Namespace, kinds: list[str], tmp: Path) -> None:
    source = tmp / "class"
    roster = write_class(source, kinds)
    hostile = {s for s, k in roster.items() if is_hostile(k)}
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    n_full, n_stub = kinds.count("staff"), kinds.count("stub")
    print(f"class: {len(kinds)} submissions ({n_full} full-credit, {n_stub} stubs, {len(hostile)} hostile: "
          f"{', '.join(f'{k} {n}' for k, n in counts.items() if is_hostile(k))}); --jobs {args.jobs}; {_load()}")
    for executor in args.executors:
        out = tmp / f"out-{executor}"
        config, note = class_config(GradeConfig(timeout_scale=args.timeout_scale), out)
        print(f"[{executor}] inputs from the {note.split(' (')[0]}")
        wall, cpu, results = _timed_batch(source, out, executor, args.jobs, config)
        print(
            f"[{executor}] graded {len(results)} submissions in {wall:.1f} s wall ({60 * len(results) / wall:.2f} per "
            f"minute); {_cpu_note(executor, cpu)} in all; {summarize(results)}; {_load()}"
        )
        print(f"  {'kind':26s}   n  CPU s/submission: mean  median  max   wall s/submission")
        by_kind = {k: [r for r in results if roster.get(r.student) == k] for k in counts}
        print(_kind_line("full-credit (staff)", by_kind.get("staff", [])))
        print(_kind_line("stub", by_kind.get("stub", [])))
        print(_kind_line("hostile (all)", [r for r in results if r.student in hostile]))
        for kind in counts:
            if is_hostile(kind):
                print(_kind_line("  " + kind, by_kind[kind]))
        print(_references_line(results))
        print(_where_cpu_goes(by_kind.get("staff", [])))
        print(_groups_line(by_kind.get("staff", [])))
        print(_projection(results, roster, args.jobs))
        wall2, cpu2, again = _timed_batch(source, out, executor, args.jobs, config)
        print(f"[{executor}] regrade of the unchanged class: {wall2:.1f} s wall, {_cpu_note(executor, cpu2)}; "
              f"{summarize(again)}; {_load()}")
        if args.compare and hostile:
            good_only = tmp / "class-good"
            if not good_only.exists():
                for st in roster:
                    if st not in hostile:
                        shutil.copytree(source / st, good_only / st)
            base_out = tmp / f"out-{executor}-good"
            base_config, _ = class_config(GradeConfig(timeout_scale=args.timeout_scale), base_out)
            base_wall, base_cpu, base = _timed_batch(good_only, base_out, executor, args.jobs, base_config)
            ratio = f"with them / without = {wall / base_wall:.2f}x wall"
            if executor != "ray":
                ratio += f", {cpu / base_cpu:.2f}x CPU"
            print(
                f"[{executor}] the same class without its {len(hostile)} hostile submissions: {len(base)} in "
                f"{base_wall:.1f} s wall, {_cpu_note(executor, base_cpu)}; {ratio}; {_load()}"
            )


def bench_kill_resume(args: argparse.Namespace, kinds: list[str], tmp: Path) -> None:
    source = tmp / "class"
    write_class(source, kinds)
    out = tmp / "out"
    cmd = [sys.executable, "-m", "grader", "batch", str(source), "--out", str(out), "--jobs", str(args.jobs)]
    cmd += ["--quiet", "--executor", args.executors[0], "--timeout-scale", str(args.timeout_scale)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
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
    ap.add_argument("--full", type=float, default=FULL_SHARE, help="share of full-credit (staff) submissions")
    ap.add_argument("--stub", type=float, default=STUB_SHARE, help="share of stubs (the rest are hostile)")
    ap.add_argument("--mix", default=None,
                    help="explicit class instead: e.g. staff=4,stub=4,crash=2,hostile:infinite_loop=1")
    ap.add_argument("--jobs", type=int, default=2, help="submissions graded in parallel")
    ap.add_argument("--executors", default="local", help="comma-separated: local, ray, serial")
    ap.add_argument("--compare", action="store_true", help="also grade the class without its hostile submissions")
    ap.add_argument("--kill-after", type=float, default=None, help="SIGKILL the batch after S s, then resume it")
    ap.add_argument("--show-overview", action="store_true", help="--kill-after: print the final overview.md")
    ap.add_argument("--timeout-scale", type=positive_float, default=1.0, help="as for python -m grader batch")
    ap.add_argument("--write", default=None, metavar="DIR", help="only write the class into DIR")
    args = ap.parse_args(argv)
    args.executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    kinds = parse_mix(args.mix) if args.mix else class_kinds(args.size, args.full, args.stub)
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
