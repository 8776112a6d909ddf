"""Throughput of the local process pool vs the Ray executor on this machine, and Ray's cost per task.

    .venv/bin/python tools/bench_ray_executor.py [-n 16] [--jobs 2] [--only part1.transpose]

Grades the same batch (n copies of the staff part-1 kernels, each with a distinct content hash) with
``--executor local`` and ``--executor ray`` (a local Ray cluster with ``--jobs`` CPUs, started once and timed
separately), then pushes n no-op jobs through both executors to isolate the dispatch overhead per task.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_batch(root: Path, n: int) -> Path:
    src = (REPO / "grader" / "reference" / "part1" / "kernels.py").read_text()
    for i in range(n):
        d = root / f"student{i:03d}" / "part1"
        d.mkdir(parents=True)
        (d / "kernels.py").write_text(src + f"\n# copy {i}\n")
    return root


def noop(job):
    from grader.batch import JobResult

    return JobResult(job.student, job.submission, "graded")


def timed_batch(source: Path, out: Path, config, executor: str, jobs: int) -> tuple[float, int]:
    from grader.batch import run_batch

    t0 = time.perf_counter()
    results = run_batch(source, out, config, jobs=jobs, executor=executor, force=True, progress=False)
    graded = sum(r.status == "graded" for r in results)
    return time.perf_counter() - t0, graded


def dispatch_overhead(executor, jobs: list) -> float:
    t0 = time.perf_counter()
    n = sum(1 for _ in executor.map_unordered(noop, jobs))
    assert n == len(jobs)
    return (time.perf_counter() - t0) / len(jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=16, help="submissions in the batch")
    parser.add_argument("--jobs", type=int, default=2, help="parallel gradings (local pool size, Ray CPUs)")
    parser.add_argument("--only", default="part1.transpose", help="rubric tests to run (default: part1.transpose)")
    parser.add_argument("--noop", type=int, default=200, help="no-op jobs for the dispatch overhead")
    args = parser.parse_args()

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback-only local cluster
    from grader.batch import GradeJob, LocalProcessExecutor
    from grader.ray_executor import RayExecutor
    from grader.records import GradeConfig

    config = GradeConfig(only=tuple(args.only.split(",")), backend="nkisim")
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        source = make_batch(root / "subs", args.n)
        local_s, local_ok = timed_batch(source, root / "out-local", config, "local", args.jobs)

        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=args.jobs, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        startup_s = time.perf_counter() - t0
        try:
            ray_s, ray_ok = timed_batch(source, root / "out-ray", config, "ray", args.jobs)
            noop_jobs = [
                GradeJob(str(root / f"n{i}"), f"n{i}", str(root / "out-noop"), config) for i in range(args.noop)
            ]
            ray_task_s = dispatch_overhead(RayExecutor(args.jobs), noop_jobs)
        finally:
            ray.shutdown()
        local_task_s = dispatch_overhead(LocalProcessExecutor(args.jobs), noop_jobs)

    per_min = 60.0  # seconds -> minutes
    print(f"batch: {args.n} submissions, --only {args.only}, {args.jobs} parallel gradings, {os.cpu_count()} CPUs")
    print(f"  local executor: {local_s:6.1f} s  {args.n / local_s * per_min:6.1f} submissions/min ({local_ok} graded)")
    print(
        f"  ray executor  : {ray_s:6.1f} s  {args.n / ray_s * per_min:6.1f} submissions/min ({ray_ok} graded), "
        f"plus {startup_s:.1f} s to start the local cluster "
        f"({args.n / (ray_s + startup_s) * per_min:.1f}/min including it)"
    )
    print(f"  ray minus local per submission: {(ray_s - local_s) / args.n * 1000:+.0f} ms")
    print(
        f"dispatch overhead ({args.noop} no-op jobs, {args.jobs} slots): ray {ray_task_s * 1000:.1f} ms/task, "
        f"local pool {local_task_s * 1000:.1f} ms/task (includes starting its {args.jobs} processes)"
    )


if __name__ == "__main__":
    main()
