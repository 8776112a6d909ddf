"""Recompute the reference timings behind the latency targets (``python -m grader calibrate``).

Runs the staff kernels (grader/reference: optimized; grader/reference/relaxed: the relaxed conv) through exactly
the path student kernels take -- sandboxed child, timing-mode trace, cost model in the parent -- on every
performance case of the rubric, and stores the modelled latencies per (backend, target, tool version).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from grader import problems, thresholds
from grader.rubric import Rubric, load_rubric
from grader.runner import run_case


def reference_dir() -> Path:
    """The staff solutions (GRADER_REFERENCE_DIR overrides: on Gradescope they stay in the root-only source tree)."""
    env = os.environ.get("GRADER_REFERENCE_DIR")
    return Path(env) if env else Path(__file__).with_name("reference")


def relaxed_conv_file() -> Path | None:
    base = reference_dir() / "relaxed"
    for candidate in (base / "part2" / "conv2d.py", base / "conv2d.py"):
        if candidate.exists():
            return candidate
    return None


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
    return timings
