"""The Part 2 harness's wall and CPU time, serial against worker processes, as interleaved pairs (a benchmark that
prints figures, not a test):

    python tools/harness_bench.py [--pairs 3] [--jobs 2] [--submission staff/ladder/step0_naive_nki.py ...]

Runs ``part2/test_harness.py --test_maxpool --submission S`` with ``--jobs 1`` and with ``--jobs N`` alternately
(which one goes first alternates too), each a fresh process, and prints per submission the median wall seconds and
CPU seconds (user + system of the harness and its worker processes, ``os.wait4``) of each side, the median of the
per-pair wall ratios, and the load average over the runs: on a shared machine the wall time follows the load, so
the quiet figures are the ones to compare with the issue's targets.  Every pair must print the same lines (the
wall-time line aside): the script says so when they do not.

The parallel side also prints its busiest worker's CPU seconds and the harness process's own (the total less its
workers'): on two idle cores the wall time is about the larger of the two plus the serial start, so these say how
well the jobs are packed even when the machine is too loaded for its wall times to mean much.  ``--root DIR`` runs
the harness of another checkout (``git worktree add /tmp/base <commit>``: the before side of a comparison), and
``--env NAME=VALUE`` sets a variable for the harness runs (``HARNESS_SHARE_PRODUCTS=0``: no grouped cases).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["staff/ladder/step0_naive_nki.py", "grader/reference"]
WALL_LINE = re.compile(r"^\(wall time .*\)$", re.M)
WORKER_LINE = re.compile(r"^\(worker CPU s: (.*)\)\n?", re.M)


def run(submission: str, jobs: int, extra: list[str], root: Path = ROOT, env: dict | None = None,
        workers: list | None = None) -> tuple[float, float, str]:
    """(wall s, CPU s, output without the wall-time and worker lines) of one harness process; reaped with wait4,
    whose usage counts the worker processes the harness reaped: the CPU of the whole run.  ``workers``: gets the
    workers' CPU seconds, busiest first, when the harness printed them."""
    import tempfile

    cmd = [sys.executable, str(root / "part2" / "test_harness.py"), "--test_maxpool", "--submission",
           str((ROOT / submission).resolve()), "--jobs", str(jobs), *extra]
    with tempfile.TemporaryFile("w+") as f:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=root, stdout=f, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "HARNESS_WORKER_CPU": "1", **(env or {})})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        f.seek(0)
        out = f.read()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-2000:]}")
    found = WORKER_LINE.search(out)
    if found and workers is not None:
        workers.extend(float(c) for c in found.group(1).split(", "))
    return wall, usage.ru_utime + usage.ru_stime, WORKER_LINE.sub("", WALL_LINE.sub("", out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes of the parallel side (default 2)")
    ap.add_argument("--submission", action="append", default=[], help="conv2d.py or a directory (repeatable)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose harness runs (default this one)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the harness runs (repeatable)")
    args, extra = ap.parse_known_args(argv)
    env = dict(e.split("=", 1) for e in args.env)
    for submission in args.submission or DEFAULT:
        sides: dict[int, list[tuple[float, float]]] = {1: [], args.jobs: []}
        busiest, parent = [], []
        ratios, loads, outputs = [], [os.getloadavg()[0]], set[str]()
        for i in range(args.pairs):
            order = (1, args.jobs) if i % 2 == 0 else (args.jobs, 1)
            pair = {}
            for jobs in order:
                workers: list[float] = []
                wall, cpu, out = run(submission, jobs, extra, args.root, env, workers)
                pair[jobs] = wall
                sides[jobs].append((wall, cpu))
                if workers:
                    busiest.append(workers[0])
                    parent.append(cpu - sum(workers))
                outputs.add(out)
                loads.append(os.getloadavg()[0])
            ratios.append(pair[args.jobs] / pair[1])
        print(f"{submission}: {args.pairs} pairs, load average {min(loads):.1f}-{max(loads):.1f}")
        for jobs, rows in sides.items():
            print(f"  --jobs {jobs}: wall {statistics.median(w for w, _ in rows):.1f} s (range "
                  f"{min(w for w, _ in rows):.1f}-{max(w for w, _ in rows):.1f}), CPU "
                  f"{statistics.median(c for _, c in rows):.1f} s")
        if busiest:
            print(f"  --jobs {args.jobs}: busiest worker {statistics.median(busiest):.1f} CPU s, the harness process "
                  f"{statistics.median(parent):.1f} CPU s")
        print(f"  wall --jobs {args.jobs} / --jobs 1: median {statistics.median(ratios):.2f} (range "
              f"{min(ratios):.2f}-{max(ratios):.2f})")
        if len(outputs) != 1:
            import difflib

            first, second = sorted(outputs)[:2]
            print("  THE OUTPUTS DIFFER between runs:")
            for line in list(difflib.unified_diff(first.splitlines(), second.splitlines(), lineterm="", n=1))[:40]:
                print(f"    {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
