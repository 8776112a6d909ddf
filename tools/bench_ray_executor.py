"""Throughput of the local process pool vs the Ray executor on this machine, and Ray's cost per task.

    .venv/bin/python tools/bench_ray_executor.py [-n 16] [--jobs 2] [--only part1.transpose]

Grades the same batch (n copies of the staff part-1 kernels, each with a distinct content hash) with
``--executor local``, ``--executor ray`` and ``--executor ray --ship-files``.  Ray runs on a local cluster
with ``--jobs`` CPUs, started once and timed separately.  Then n no-op jobs go through both executors to
isolate the dispatch overhead per task.
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


def timed_batch(source: Path, out: Path, config, executor: str, jobs: int, **options) -> tuple[float, int]:
    from grader.batch import run_batch

    t0 = time.perf_counter()
    results = run_batch(source, out, config, jobs=jobs, executor=executor, force=True, progress=False,
                        executor_options=options)
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
    parser.add_argument("--repeat", type=int, default=2, help="rounds (local, then ray); the best round counts")
    args = parser.parse_args()

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback-only local cluster
    import ray

    from grader.batch import GradeJob, LocalProcessExecutor
    from grader.ray_executor import RayExecutor
    from grader.records import GradeConfig

    config = GradeConfig(only=tuple(args.only.split(",")), backend="nkisim")
    best: dict[str, float] = {}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(tmp)
        source = make_batch(root / "subs", args.n)
        noop_jobs = [GradeJob(str(root / f"n{i}"), f"n{i}", str(root / "out-noop"), config) for i in range(args.noop)]

        def keep(name: str, seconds: float) -> None:
            best[name] = min(seconds, best.get(name, float("inf")))

        for _ in range(args.repeat):
            keep("local", timed_batch(source, root / "out-local", config, "local", args.jobs)[0])
            keep("local-noop", dispatch_overhead(LocalProcessExecutor(args.jobs), noop_jobs))
            t0 = time.perf_counter()  # Ray runs only while it is measured: its daemons would slow the local runs
            ray.init(num_cpus=args.jobs, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
            keep("startup", time.perf_counter() - t0)
            try:
                keep("ray", timed_batch(source, root / "out-ray", config, "ray", args.jobs)[0])
                keep("ship", timed_batch(source, root / "out-ship", config, "ray", args.jobs, ship_files=True)[0])
                keep("ray-noop", dispatch_overhead(RayExecutor(args.jobs), noop_jobs))
            finally:
                ray.shutdown()

    def rate(name: str) -> str:
        return f"{best[name]:6.1f} s  {args.n / best[name] * 60:6.1f} submissions/min"

    print(f"batch: {args.n} submissions, --only {args.only}, {args.jobs} parallel gradings, {os.cpu_count()} CPUs, "
          f"best of {args.repeat}, load average {load:.1f} at the start")
    print(f"  local executor      : {rate('local')}")
    print(f"  ray executor        : {rate('ray')}  (+{best['startup']:.1f} s to start the local cluster: "
          f"{args.n / (best['ray'] + best['startup']) * 60:.1f}/min including it)")
    print(f"  ray --ship-files    : {rate('ship')}")
    print(f"  ray minus local, per submission: {(best['ray'] - best['local']) / args.n * 1000:+.0f} ms")
    print(f"dispatch overhead ({args.noop} no-op jobs): ray {best['ray-noop'] * 1000:.1f} ms/task, "
          f"local pool {best['local-noop'] * 1000:.1f} ms/task (includes starting its {args.jobs} processes)")


if __name__ == "__main__":
    main()
