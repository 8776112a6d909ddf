"""How a class is ranked: one score per submission and Gradescope's leaderboard items (rubric [leaderboard]).

The score is the geometric mean of the p99 latencies of the rubric's ``score_tests`` (the four 224x224
performance tests by default), defined only for submissions whose timed runs all count: the output of every
timed run matched the reference and the kernel did the work on the device.  A geometric mean weighs a 10%
gain on the fast float16 tests like a 10% gain on the slow float32 ones (an arithmetic mean of microseconds
would be decided by float32 alone).  Lower is better.

Gradescope's format (https://gradescope-autograders.readthedocs.io/en/latest/leaderboards/): results.json gets
a top-level ``"leaderboard"`` array of ``{"name": ..., "value": number or string, "order": "asc" | "desc"}``
(``order`` defaults to "desc", higher ranks higher).  Works on plain dicts (result.json's tests), so the grader's
records and the leaderboard page share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from grader.rubric import LeaderboardSpec

COUNTED = ("passed", "partial")  # statuses of a timed run that counts (older records lack "timing_counts")


def geometric_mean(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values]
    if not vals or any(not math.isfinite(v) or v <= 0 for v in vals):
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def counted_latencies(tests: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """test id -> p99 latency (us) of the performance tests whose timed run counts."""
    out: dict[str, float] = {}
    for t in tests:
        latency = t.get("latency_us")
        counts = t.get("timing_counts")
        if counts is None:
            counts = t.get("status") in COUNTED
        if t.get("kind") == "performance" and counts and isinstance(latency, int | float) and latency > 0:
            out[str(t["id"])] = float(latency)
    return out


def score(latencies: Mapping[str, float], spec: LeaderboardSpec) -> float | None:
    """The ranking score (us, lower is better), or None when a score test did not count."""
    if not spec.score_tests or any(t not in latencies for t in spec.score_tests):
        return None
    return geometric_mean(latencies[t] for t in spec.score_tests)


def gradescope_entries(tests: list[Mapping[str, Any]], spec: LeaderboardSpec, ranked: bool) -> list[dict[str, Any]]:
    """results.json's leaderboard items: only for ranked runs (graded with the class's secret seed) unless the
    rubric says otherwise, and only values that were measured on a counted run."""
    if spec.ranked_only and not ranked:
        return []
    latencies = counted_latencies(tests)
    mfu = {str(t["id"]): t.get("mfu") for t in tests}
    items: list[dict[str, Any]] = []
    for e in spec.entries:
        if e.metric == "score":
            value = score(latencies, spec)
        elif e.test not in latencies:
            value = None
        elif e.metric == "latency_us":
            value = latencies[e.test]
        else:
            m = mfu.get(e.test)
            value = 100.0 * m if isinstance(m, int | float) and math.isfinite(m) else None
        if value is not None:
            items.append({"name": e.name, "value": round(value, 2 if e.metric == "mfu" else 1), "order": e.order})
    return items
