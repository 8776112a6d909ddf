"""Recompute the reference timings behind the latency targets (``python -m grader calibrate``).

Runs the staff kernels of one NKI API (grader/staff.py: the optimized kernels and the relaxed conv) through
exactly the path student kernels take -- sandboxed child, timing-mode trace, cost model in the parent -- on every
performance case of the rubric, and stores the modelled latencies per (backend, target, API, tool version)
through grader/thresholds.py.  Which staff kernels a test times and under which keys is its problem's
(``Problem.timing_keys``: the optimized kernel, and for conv2d the relaxed one too).
Layering: calibrate -> problems, runner, thresholds, staff (never the other way round).
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
from grader.staff import APIS, reference_available, reference_file, relaxed_conv_file

_COMPUTE_LOCK = threading.Lock()


def _measure(
    source: bytes, rel_file: str, function: str, inv, backend: str, target: str, rubric: Rubric, timeout_s: float,
    api: str,
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
        api=api,
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
    api: str | None = None,
    cache_file: Path | None = None,
    rubric: Rubric | None = None,
    verbose: bool = False,
) -> dict[str, float]:
    """Measure every performance case of the rubric with ``api``'s reference kernels; store and return the
    timings."""
    api = thresholds.api_or_default(api)
    rubric = rubric or load_rubric()
    timings: dict[str, float] = {}
    failures: dict[str, str] = {}
    # The relaxed tier is a latency bar, not an API feature: where ``api`` has no relaxed conv of its own, the other
    # API's is timed (the same algorithm models identically in both, tests/test_reference_nki_twins.py), so both
    # editions score against the same partial-credit targets.
    relaxed = relaxed_conv_file(api) or next(filter(None, (relaxed_conv_file(a) for a in APIS)), None)
    for test in rubric.tests:
        if test.kind != "performance":
            continue
        case = test.cases[0]
        problem = problems.get(test.problem)
        inv = problem.invocation(case, rubric.seed)
        main_file = reference_file(api, test.file)
        if main_file is None:
            raise FileNotFoundError(f"no staff reference {test.file} in the {api} API here; cannot calibrate")
        files = {"optimized": main_file, "relaxed": relaxed}
        for variant, key in problem.timing_keys(test.thresholds, case, test.id).items():
            path = files.get(variant)
            if path is None or key in timings or key in failures:
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
                    api,
                )
            except RuntimeError as exc:
                # A staff kernel that cannot run on this target: its tests fall back to the published targets.
                failures[key] = str(exc).splitlines()[0][:300]
                print(f"  {key:45s}     FAILED: {failures[key]}", file=sys.stderr)
                continue
            if verbose:
                print(f"  {key:45s} {timings[key]:10.1f} us")
    if cache_file is not None:
        entry = thresholds.describe_entry(timings, api)
        if failures:
            entry["failures"] = failures
        thresholds.write_cache_entry(cache_file, thresholds.cache_key(backend, target, api), entry)
    thresholds.reference_timings.cache_clear()
    ensure_reference_timings.cache_clear()
    return timings


@functools.lru_cache(maxsize=16)
def ensure_reference_timings(backend: str, target: str, api: str | None = None) -> dict[str, float]:
    """The reference timings for this (backend, target, API, tool version): cached ones, else measured now (when
    ``api``'s staff kernels are here) and stored in the per-user cache, else :func:`thresholds.reference_timings`'s
    fallback (another version's entry, the other API's, or none; each with a warning)."""
    api = thresholds.api_or_default(api)
    with _COMPUTE_LOCK:  # tests graded in parallel threads must not calibrate twice
        found = thresholds.cached_timings(backend, target, api)
        if found is not None or not reference_available(api):
            return found if found is not None else thresholds.reference_timings(backend, target, api)
        cache = thresholds.user_cache_file()
        cache.parent.mkdir(parents=True, exist_ok=True)
        # Batch workers (other processes) may miss the cache at the same moment: one computes, the others wait.
        with open(cache.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = thresholds.cached_timings(backend, target, api)
            if found is not None:
                return found
            print(
                f"[grader] no reference timings for {thresholds.cache_key(backend, target, api)}; computing them "
                "once ...",
                file=sys.stderr,
            )
            return calibrate(backend=backend, target=target, api=api, cache_file=cache)
