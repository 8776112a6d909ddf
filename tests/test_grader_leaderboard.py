"""The class leaderboard: ranking score, which runs are ranked, pseudonyms, Gradescope's leaderboard items in
results.json (checked against the JSON schema of Gradescope's format), and the page's HTML (the browser test
drives it in Chromium: test_grader_leaderboard_browser.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import jsonschema
import pytest
from grader_helpers import ROOT, SCHEMA
from leaderboard_helpers import PERF, SCORED, SEED, latencies, record, sample_class, write_batch

from grader import leaderboard, ranking, reports, seeds
from grader.records import GradeRecord
from grader.records import TestResult as Result
from grader.rubric import RubricError, load_rubric


def test_geometric_mean_and_score():
    assert ranking.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert ranking.geometric_mean([]) is None and ranking.geometric_mean([1.0, 0.0]) is None
    spec = load_rubric().leaderboard
    lat = {t: 100.0 for t in SCORED}
    assert ranking.score(lat, spec) == pytest.approx(100.0)
    del lat[SCORED[0]]
    assert ranking.score(lat, spec) is None  # every scored test must count


def test_only_counted_timings_rank():
    tests = record("x", latencies(3000, 900), failed=("part2.perf_fp16",))["tests"]
    counted = ranking.counted_latencies(tests)
    assert "part2.perf_fp16" not in counted and counted["part2.perf_fp32"] == 3000
    # older result.json without timing_counts: passed/partial count, failed does not
    old = [{k: v for k, v in t.items() if k != "timing_counts"} for t in tests]
    assert set(ranking.counted_latencies(old)) == set(counted)


def test_gradescope_items_only_for_ranked_runs():
    spec = load_rubric().leaderboard
    tests = record("x", latencies(3000, 900))["tests"]
    assert ranking.gradescope_entries(tests, spec, ranked=False) == []
    items = ranking.gradescope_entries(tests, spec, ranked=True)
    names = [e.name for e in spec.entries]
    assert [i["name"] for i in items] == names
    by_name = {i["name"]: i for i in items}
    assert by_name[names[0]]["value"] == pytest.approx(math.sqrt(3000 * 900) * 1.01**0.5, abs=0.1)
    assert all(i["order"] == ("desc" if "MFU" in i["name"] else "asc") for i in items)
    assert by_name["fp32 224x224 MFU (%)"]["value"] == 40.0


def _record(leaderboard_items: list[dict]) -> GradeRecord:
    t = Result("part2.perf_fp32", "perf", 2, "performance", 17.5, False, "visible", ["part2"], score=17.5,
                   status="passed", latency_us=3000.0, mfu=0.4, timing_counts=True)
    return GradeRecord("s", "p", "h" * 64, "r", "title", "tool", "1", "nkisim", "trn2", SEED, "graded", 17.5, 17.5,
                       17.5, [t], "now", 1.0, [], "3.11", {}, seed_mode="secret", leaderboard=leaderboard_items)


def test_results_json_leaderboard_validates_against_gradescopes_format():
    spec = load_rubric().leaderboard
    items = ranking.gradescope_entries(record("x", latencies(3000, 900))["tests"], spec, ranked=True)
    results = reports.gradescope_results(_record(items))
    jsonschema.validate(results, SCHEMA)
    assert results["leaderboard"] == items
    assert results["extra_data"]["ranked"] is True
    # the secret seed is named by its fingerprint only in what students see
    text = json.dumps(results)
    assert str(SEED) not in text and "secret class seed #" in results["output"]
    # an item outside Gradescope's format is caught by the schema
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**results, "leaderboard": [{"name": "x", "value": 1, "order": "up"}]}, SCHEMA)
    unranked = reports.gradescope_results(_record([]))
    assert "leaderboard" not in unranked


def test_rubric_leaderboard_is_validated(tmp_path):
    base = (ROOT / "grader" / "rubric.toml").read_text()
    bad = base.replace('metric = "mfu", test = "part2.perf_fp16"', 'metric = "mfu", test = "part2.small"')
    p = tmp_path / "r.toml"
    p.write_text(bad)
    with pytest.raises(RubricError, match="performance test"):
        load_rubric(p)
    p.write_text(base.replace('metric = "score" }', 'metric = "speed" }'))
    with pytest.raises(RubricError, match="metric must be one of"):
        load_rubric(p)


def test_ranking_of_a_class(tmp_path):
    out = write_batch(tmp_path / "out", sample_class())
    rows, left_out = leaderboard.rank(leaderboard.load_records(out), load_rubric(), seeds.fingerprint(SEED))
    ranked = [r.student for r in rows if r.rank is not None]
    assert ranked == ["bob@uni.edu", "alice@uni.edu", "dave@uni.edu", "carol@uni.edu", "<script>alert(1)</script>"]
    assert [r.rank for r in rows if r.rank] == [1, 2, 3, 4, 5]
    assert rows[-1].student == "erin@uni.edu" and rows[-1].score is None  # a scored test did not count
    assert left_out == {"graded with another class seed": 1, "not a ranked run (a per-submission seed)": 1,
                        "grader error (regraded on the next batch run)": 1}
    assert rows[0].near == ["part2.perf_fp16"]


def test_the_page_says_each_submissions_nki_api(tmp_path):
    both = {"part1/kernels.py": "legacy", "part2/conv2d.py": "nki"}
    recs = [record("alice", latencies(3000, 900)) | {"apis": {"part1/kernels.py": "nki", "part2/conv2d.py": "nki"}},
            record("bob", latencies(3500, 900)) | {"apis": both}, record("carol", latencies(3600, 900))]
    out = write_batch(tmp_path / "out", recs)
    rows, _ = leaderboard.rank(leaderboard.load_records(out), load_rubric(), seeds.fingerprint(SEED))
    assert {r.student: r.api for r in rows} == {"alice": "nki", "bob": "legacy+nki", "carol": ""}
    page = leaderboard.write_leaderboard(out)[0].read_text()
    assert '<button type="button">API</button>' in page and '<td data-v="legacy+nki">legacy+nki</td>' in page


def test_without_a_gradebook_the_newest_result_per_student_is_used(tmp_path):
    old = record("alice", latencies(9000, 900))
    new = record("alice", latencies(3000, 900)) | {"started_at": "2026-02-01T00:00:00Z"}
    out = write_batch(tmp_path / "out", [old, new], gradebook=False)
    recs = leaderboard.load_records(out)
    assert len(recs) == 1 and recs[0]["started_at"].startswith("2026-02")


def test_pseudonyms_are_stable_secret_and_distinct(tmp_path):
    students = [f"student{i}@uni.edu" for i in range(400)]
    key = leaderboard.pseudonym_key(tmp_path)
    names = leaderboard.pseudonyms(students, key)
    assert len(set(names.values())) == len(students)  # clashes get a suffix
    assert names == leaderboard.pseudonyms(list(reversed(students)), leaderboard.pseudonym_key(tmp_path))
    assert names != leaderboard.pseudonyms(students, b"another key of 32 bytes, really!")
    key_file = tmp_path / ".grader" / leaderboard.PSEUDONYM_KEY
    assert os.stat(key_file).st_mode & 0o077 == 0


def test_page_hides_student_ids_unless_asked(tmp_path):
    out = write_batch(tmp_path / "out", sample_class())
    path, rows, _ = leaderboard.write_leaderboard(out)
    page = path.read_text()
    assert path == out / "leaderboard.html"
    for r in sample_class():
        assert r["student"] not in page and "uni.edu" not in page
    assert str(SEED) not in page
    named, _, _ = leaderboard.write_leaderboard(out, dest=tmp_path / "named.html", names=True)
    text = named.read_text()
    assert "alice@uni.edu" in text
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "http://" not in page.replace(leaderboard.CSP, "") and "https://" not in page  # nothing to fetch
    for t in PERF:
        assert t.split(".", 1)[1] in page  # a column per performance test


@pytest.mark.slow
def test_cli(tmp_path):
    out = write_batch(tmp_path / "out", sample_class())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "grader", "leaderboard", str(out)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "5 ranked of 6 submissions" in run.stdout and (out / "leaderboard.html").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    run = subprocess.run([sys.executable, "-m", "grader", "leaderboard", str(empty)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "no class seed" in run.stderr
    # the TA gave the seed on the command line: the batch recorded its fingerprint, and --seed-file also works
    seed_file = tmp_path / "seed"
    seeds.write_seed(seed_file, SEED)
    run = subprocess.run([sys.executable, "-m", "grader", "leaderboard", str(out), "--seed-file", str(seed_file),
                          "--out", str(tmp_path / "b.html")], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "5 ranked" in run.stdout, run.stderr
