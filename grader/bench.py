"""Grader throughput figures: ``python -m grader.bench [--jobs 2] [--copies 2] [--skip-batch]``.

Prints seconds per submission for the staff reference solution and for the untouched starter files (the
"stub" submission), and the batch throughput with ``--jobs`` parallel gradings over ``--copies`` distinct
copies of each.  Numbers depend on the machine and its load; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from grader import thresholds
from grader.batch import run_batch, summarize
from grader.calibrate import reference_dir
from grader.pipeline import grade_submission
from grader.records import GradeConfig

ROOT = Path(__file__).resolve().parent.parent


def _cpu_seconds() -> float:
    """CPU time of this process and its waited-for descendants (the sandboxed children): load-independent."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _stub_dir(tmp: Path) -> Path:
    d = tmp / "stub"
    for rel in ("part1/kernels.py", "part2/conv2d.py"):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, d / rel)
    return d


def _variant(src: Path, dst: Path, tag: str) -> Path:
    """A copy with distinct content (so batch grading cannot reuse an earlier result)."""
    for rel in ("part1/kernels.py", "part2/conv2d.py"):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_text((src / rel).read_text() + f"\n# bench copy {tag}\n")
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--copies", type=int, default=2, help="copies of each submission in the batch run")
    ap.add_argument("--workers", type=int, default=2, help="kernel runs in parallel for the single gradings")
    ap.add_argument("--skip-batch", action="store_true")
    args = ap.parse_args(argv)
    ref = reference_dir()
    with tempfile.TemporaryDirectory(prefix="grader-bench-") as tmp_s:
        tmp = Path(tmp_s)
        stub = _stub_dir(tmp)
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        t0 = time.perf_counter()
        thresholds.reference_timings("nkisim", "trn2")  # a missing cache entry is computed here, not timed below
        print(f"reference timings ready in {time.perf_counter() - t0:.1f} s ({thresholds.tool_version()})")
        for label, sub in (("reference", ref), ("stub (starter files)", stub)):
            t0, cpu0 = time.perf_counter(), _cpu_seconds()
            rec = grade_submission(sub, None, GradeConfig(workers=args.workers))
            wall, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
            print(
                f"{label:22s} {wall:7.1f} s wall, {cpu:7.1f} CPU s per submission  score {rec.score:g}/"
                f"{rec.base_points:g}  status {rec.status}  (workers={args.workers})"
            )
        if args.skip_batch:
            return 0
        subs = tmp / "class"
        for i in range(args.copies):
            _variant(ref, subs / f"ref{i}", f"r{i}")
            _variant(stub, subs / f"stub{i}", f"s{i}")
        t0 = time.perf_counter()
        results = run_batch(subs, tmp / "out", GradeConfig(workers=1), jobs=args.jobs, progress=False)
        wall = time.perf_counter() - t0
        n = len(results)
        print(
            f"batch --jobs {args.jobs}: {n} submissions ({args.copies} reference + {args.copies} stub copies) in "
            f"{wall:.1f} s = {n / wall * 3600:.1f} submissions/hour; {summarize(results)}"
        )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
