"""Shared helpers of the grader's tests: fixture paths and report validators."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema

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
