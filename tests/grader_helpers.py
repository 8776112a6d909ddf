"""Shared helpers of the grader's tests: fixture paths and report validators."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import numpy as np

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "grader_fixtures"
HOSTILE = TESTS / "hostile"
FAST_RUBRIC = str(FIXTURES / "rubric_fast.toml")
GOOD = FIXTURES / "good"
SCHEMA = json.loads((TESTS / "schemas" / "gradescope_results.schema.json").read_text())


def check_reports(out_dir: Path, rubric_total: float) -> dict:
    """Validate the four report files of one grading; returns results.json."""
    results = json.loads((out_dir / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    assert abs(sum(t["max_score"] for t in results["tests"]) - rubric_total) < 1e-9
    assert abs(results["score"] - sum(t["score"] for t in results["tests"])) < 1e-9
    for t in results["tests"]:
        assert 0 <= t["score"] <= t["max_score"]
    root = ET.parse(out_dir / "junit.xml").getroot()
    assert root.tag == "testsuites"
    assert len(root.findall(".//testcase")) == len(results["tests"])
    summary = (out_dir / "summary.md").read_bytes()
    assert len(summary) < 1024 * 1024
    record = json.loads((out_dir / "result.json").read_text())
    assert record["score"] == results["score"]
    leftovers = [p.name for p in out_dir.iterdir() if p.name.startswith(".")]
    assert not leftovers, f"temporary files left behind: {leftovers}"
    return results


# ------------------------------------------------------------------------------ conv2d rubrics built in tests ----
# The grouped-call tests (test_grader_shared_calls, test_grader_group_security, test_grader_timed_ahead_security)
# grade small conv2d rubrics: the fast rubric's header and a few [[test]] entries, written by these builders.

# a 16x16 image, 128 channels in and out, a 3x3 filter
CONV16 = {"in_channels": 128, "out_channels": 128, "height": 16, "width": 16, "kernel": 3, "dtype": "float32"}
# part2.large, part2.bias and part2.maxpool in small: batch 2, cases that differ only in bias and pooling (so the
# pipeline gives them one X and W, and groups their calls)
GROUP_CASES = [{**CONV16, "batch": 2, "bias": bias, "pool": pool} for bias, pool in
               (("zeros", 1), ("random", 1), ("random", 2))]
GROUP_IDS = ("conv.plain", "conv.bias", "conv.pool")
FIXED_THRESHOLDS = {"source": "fixed", "optimized_us": 1000000.0, "relaxed_us": 2000000.0}


def toml_inline(values: dict) -> str:
    """``values`` (strings, numbers, booleans) as a TOML inline table."""
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in values.items()) + " }"


def conv_test_toml(id: str, name: str, cases: list[dict], kind: str = "correctness", points: float = 1,
                   timeout_s: float = 60, requires: tuple[str, ...] = (), thresholds: dict | None = None) -> str:
    """One ``[[test]]`` entry of Part 2's conv2d kernel (``part2/conv2d.py``, ``fused_conv2d_maxpool``)."""
    lines = ["", "[[test]]", f'id = "{id}"', f'name = "{name}"', "part = 2", 'file = "part2/conv2d.py"',
             'function = "fused_conv2d_maxpool"', f'kind = "{kind}"', 'problem = "conv2d"', f"points = {points:g}"]
    if requires:
        lines.append(f"requires = {json.dumps(list(requires))}")
    lines += [f"timeout_s = {timeout_s:g}", "cases = [" + ", ".join(toml_inline(c) for c in cases) + "]"]
    if thresholds is not None:
        lines.append(f"thresholds = {toml_inline(thresholds)}")
    return "\n".join(lines) + "\n"


def conv_group_tests(timeouts: tuple[float, ...] = (60, 60, 60)) -> str:
    """The batch-2 correctness tests on one X and W (:data:`GROUP_CASES`, one point each), as many as ``timeouts``
    gives limits: ``conv.plain`` (no bias), ``conv.bias`` and ``conv.pool`` (bias and 2x2 pooling)."""
    assert 1 <= len(timeouts) <= len(GROUP_IDS)
    names = ("conv, no bias", "conv + bias", "conv + bias + pool")
    return "".join(conv_test_toml(i, n, [c], timeout_s=t)
                   for i, n, c, t in zip(GROUP_IDS, names, GROUP_CASES, timeouts))


def conv_timed_tests(pool_timeout_s: float = 60) -> str:
    """Four batch-1 timed tests (float32 and float16, with and without pooling; the pooling ones limited to
    ``pool_timeout_s``) requiring :func:`conv_group_tests`, as the course rubric's part 2 has them: the float32
    timed calls' X is the first image of the correctness calls' X.  The unpooled ones' 20 us optimized target makes
    their tier depend on the latency."""
    one = {**CONV16, "batch": 1, "bias": "random"}
    tests = [("conv.perf", "conv timed", 1, "float32", 4), ("conv.perf16", "conv timed fp16", 1, "float16", 4),
             ("conv.perf_pool", "conv timed + pool", 2, "float32", 2),
             ("conv.perf16_pool", "conv timed fp16 + pool", 2, "float16", 2)]
    return "".join(conv_test_toml(
        i, n, [{**one, "pool": pool, "dtype": dtype}], kind="performance", points=points,
        requires=GROUP_IDS[:pool + 1], timeout_s=60 if pool == 1 else pool_timeout_s,
        thresholds={"source": "fixed", "optimized_us": 20.0, "relaxed_us": 1000000.0} if pool == 1
        else {"source": "fixed", "optimized_us": 1000000.0}) for i, n, pool, dtype, points in tests)


def conv_rubric(path: Path, *tests: str, float16: bool = False) -> Path:
    """Writes a rubric of the fast rubric's header (limits, float32 tolerances; ``float16``: and float16's, as the
    course rubric has them) and ``tests`` (:func:`conv_test_toml` entries) to ``path``."""
    head = Path(FAST_RUBRIC).read_text().split("[[test]]")[0]
    if float16:
        head = head.replace("[tolerances]\n", "[tolerances]\nfloat16 = { rtol = 1e-2, atol = 1e-2 }\n")
    path.write_text(head + "".join(tests))
    return path


def record_results(record) -> list:
    """What a grading gives each test -- status, score, message, latencies, tier, per case verdict and maximum
    error -- to compare two gradings of one submission."""
    return [(t.id, t.status, t.score, t.message, t.latency_us, t.relaxed_us, t.optimized_us, t.timing_counts,
             [(c.verdict, c.message, c.max_abs_error) for c in t.cases]) for t in record.tests]


# The staff conv kernels as submissions, and a variant failing in its Python (at specialization) for pool_size 2 only
STAFF_CONV = (ROOT / "grader" / "reference" / "part2" / "conv2d.py").read_bytes()
LEGACY_CONV = (ROOT / "grader" / "reference" / "legacy" / "part2" / "conv2d.py").read_bytes()
POOL_FAILS = STAFF_CONV.replace(b"def fused_conv2d_maxpool(X, W, bias, pool_size=1):\n",
                                b"def fused_conv2d_maxpool(X, W, bias, pool_size=1):\n"
                                b"    if pool_size == 2:\n        raise ValueError('no pooling here')\n", 1)


def trace_fields(trace) -> list:
    """Every field of every instruction of a trace, to compare two runs' traces."""
    return [[getattr(i, k) for k in i.__slots__] for i in trace.instrs]


def assert_same_outcome(alone, grouped) -> None:
    """A call made in a group (or ahead) has the outcome it has alone: verdict, message, outputs bit for bit, trace."""
    assert (grouped.verdict, grouped.message, grouped.exhausted) == (alone.verdict, alone.message, alone.exhausted)
    assert len(grouped.outputs) == len(alone.outputs)
    for g, a in zip(grouped.outputs, alone.outputs, strict=True):
        assert g.dtype == a.dtype and g.shape == a.shape and np.array_equal(g.view(np.uint8), a.view(np.uint8))
    if alone.trace is not None:
        assert trace_fields(grouped.trace) == trace_fields(alone.trace) and grouped.trace.meta == alone.trace.meta


def conv_timed_rubric(tmp_path: Path) -> Path:
    """The three correctness tests and four batch-1 timed tests requiring them, as the course rubric's part 2 has
    them (:func:`conv_timed_tests`)."""
    return conv_rubric(tmp_path / "rubric.toml", conv_group_tests(), conv_timed_tests(), float16=True)
