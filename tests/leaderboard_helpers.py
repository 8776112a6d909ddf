"""A synthetic graded batch (result.json files and a gradebook) for the leaderboard's tests: ranking and the page
are tested on known latencies without grading anything."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from grader import seeds
from grader.rubric import load_rubric

SEED = 987654321
PERF = [t.id for t in load_rubric().tests if t.kind == "performance"]
SCORED = list(load_rubric().leaderboard.score_tests)


def record(student: str, latencies: dict[str, float], *, seed: int = SEED, mode: str = "secret",
           status: str = "graded", near: tuple[str, ...] = (), failed: tuple[str, ...] = ()) -> dict:
    tests = []
    for tid in PERF:
        lat = latencies.get(tid)
        counts = lat is not None and tid not in failed
        tests.append({
            "id": tid, "kind": "performance", "status": "passed" if counts else ("failed" if lat else "skipped"),
            "latency_us": lat, "mfu": 0.4 if lat else None, "timing_counts": counts,
            "near_boundary": tid in near, "boundary_distance": 0.05 if tid in near else 0.5,
        })
    score = sum(1.0 for t in tests if t["timing_counts"])
    secret = mode == "secret"
    return {"student": student, "status": status, "seed_mode": mode, "seed": -1 if secret else seed,
            "seed_fingerprint": seeds.fingerprint(seed) if secret else "", "score": score,
            "started_at": "2026-01-01T00:00:00Z", "tests": tests}


def write_batch(out: Path, records: list[dict], *, seed: int = SEED, gradebook: bool = True) -> Path:
    """OUT/<student>/<hash>/result.json for each record, the gradebook naming them, and the class seed file."""
    out.mkdir(parents=True, exist_ok=True)
    seeds.write_seed(seeds.private_dir(out) / seeds.SEED_FILE, seed)
    seeds.write_fingerprint(seeds.private_dir(out), seed)
    rows = []
    for i, rec in enumerate(records):
        d = out / rec["student"] / f"{i:016x}"
        d.mkdir(parents=True)
        (d / "result.json").write_text(json.dumps(rec))
        rows.append({"student": rec["student"], "result_dir": str(d)})
    if gradebook:
        with open(out / "gradebook.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["student", "result_dir"])
            w.writeheader()
            w.writerows(rows)
    return out


def latencies(fp32: float, fp16: float, *, ec: float = 50.0) -> dict[str, float]:
    """The four scored tests at fp32/fp16 latencies (pool variants 1% slower) and every other perf test at ec."""
    lat = {t: ec for t in PERF}
    lat |= {"part2.perf_fp32": fp32, "part2.perf_fp16": fp16,
            "part2.perf_fp32_pool": fp32 * 1.01, "part2.perf_fp16_pool": fp16 * 1.01}
    return lat


def sample_class() -> list[dict]:
    """Five ranked submissions (one slow, one near a target), one that fails a scored test, one of a student's own
    runs, one of an older seed, one grader error; student ids that must never appear under pseudonyms."""
    return [
        record("alice@uni.edu", latencies(3500, 830)),
        record("bob@uni.edu", latencies(3000, 900), near=("part2.perf_fp16",)),
        record("carol@uni.edu", latencies(4200, 1300)),
        record("dave@uni.edu", latencies(3600, 820)),
        record("<script>alert(1)</script>", latencies(5000, 1350)),
        record("erin@uni.edu", latencies(3100, 800), failed=("part2.perf_fp32_pool",)),
        record("frank@uni.edu", latencies(2000, 500), mode="submission", seed=11),
        record("grace@uni.edu", latencies(2000, 500), seed=SEED + 1),
        record("heidi@uni.edu", {}, status="error"),
    ]
