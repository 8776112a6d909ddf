"""Recompute the reference timings behind the latency targets (``python -m grader calibrate``).

Runs the staff kernels (grader/reference: optimized; grader/reference/relaxed: the relaxed conv) through exactly
the path student kernels take -- sandboxed child, timing-mode trace, cost model in the parent -- on every
performance case of the rubric, and stores the modelled latencies per (backend, target, tool version) through
grader/thresholds.py.  Layering: calibrate -> runner, thresholds, staff (never the other way round).
"""

from __future__ import annotations

import fcntl
import functools
import sys
import threading
from pathlib import Path

from grader import problems, thresholds
from grader.rubric import Rubric, load_rubric
from grader.runner import run_case
from grader.staff import reference_available, reference_dir, relaxed_conv_file

_COMPUTE_LOCK = threading.Lock()


def _measure(
    source: bytes, rel_file: str, function: str, inv, backend: str, target: str, rubric: Rubric, timeout_s: float
) -> float:
    run = run_case(
        source,
        rel_file,
        function,
        inv,
        mode="timing",
        want_trace=True,
        backend=backend,
        target=target,
        limits=rubric.limits,
        timeout_s=timeout_s,
    )
    if run.verdict != "ok":
        raise RuntimeError(f"reference kernel {rel_file}:{function} failed: {run.verdict}: {run.message}")
    if backend == "neuron":
        assert run.hardware_p99_us is not None
        return run.hardware_p99_us
    from nkisim.perf import estimate

    return float(estimate(run.trace, target).nc_latency_us)


def calibrate(
    *,
    backend: str = "nkisim",
    target: str = "trn2",
    cache_file: Path | None = None,
    rubric: Rubric | None = None,
    verbose: bool = False,
) -> dict[str, float]:
    """Measure every performance case of the rubric with the reference kernels; store and return the timings."""
    rubric = rubric or load_rubric()
    ref = reference_dir()
    timings: dict[str, float] = {}
    failures: dict[str, str] = {}
    relaxed = relaxed_conv_file()
    for test in rubric.tests:
        if test.kind != "performance":
            continue
        case = test.cases[0]
        inv = problems.make_invocation(test.problem, case, rubric.seed)
        main_file = ref / test.file
        if not main_file.exists():
            raise FileNotFoundError(f"staff reference {main_file} is missing; cannot calibrate")
        variants = [("optimized", main_file)]
        if test.problem == "conv2d" and relaxed is not None:
            variants.append(("relaxed", relaxed))
        for variant, path in variants:
            if test.problem == "conv2d":
                key = thresholds.conv_key(case["dtype"], case["height"], case["width"], case.get("pool", 1), variant)
            else:
                key = test.thresholds.get("key") or f"{test.problem}:{test.id}"
            if key in timings or key in failures:
                continue
            try:
                timings[key] = _measure(
                    path.read_bytes(),
                    test.file,
                    test.function,
                    inv,
                    backend,
                    target,
                    rubric,
                    max(test.timeout_s, 300),
                )
            except RuntimeError as exc:
                # A staff kernel that cannot run on this target: its tests fall back to the published targets.
                failures[key] = str(exc).splitlines()[0][:300]
                print(f"  {key:45s}     FAILED: {failures[key]}", file=sys.stderr)
                continue
            if verbose:
                print(f"  {key:45s} {timings[key]:10.1f} us")
    if cache_file is not None:
        entry = thresholds.describe_entry(timings)
        if failures:
            entry["failures"] = failures
        thresholds.write_cache_entry(cache_file, thresholds.cache_key(backend, target), entry)
    thresholds.reference_timings.cache_clear()
    ensure_reference_timings.cache_clear()
    return timings


@functools.lru_cache(maxsize=8)
def ensure_reference_timings(backend: str, target: str) -> dict[str, float]:
    """The reference timings for this (backend, target, tool version): cached ones, else measured now (when the
    staff kernels are here) and stored in the per-user cache, else :func:`thresholds.reference_timings`'s
    fallback (another version's entry, or none)."""
    with _COMPUTE_LOCK:  # tests graded in parallel threads must not calibrate twice
        found = thresholds.cached_timings(backend, target)
        if found is not None or not reference_available():
            return found if found is not None else thresholds.reference_timings(backend, target)
        cache = thresholds.user_cache_file()
        cache.parent.mkdir(parents=True, exist_ok=True)
        # Batch workers (other processes) may miss the cache at the same moment: one computes, the others wait.
        with open(cache.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = thresholds.cached_timings(backend, target)
            if found is not None:
                return found
            print(
                f"[grader] no reference timings for {thresholds.cache_key(backend, target)}; computing them once ...",
                file=sys.stderr,
            )
            return calibrate(backend=backend, target=target, cache_file=cache)
