"""Views of a graded batch: ``gradebook.csv`` (one row per student) and ``overview.md`` (histograms, pass rates,
fastest and slowest kernels, results near a tier target, where the time went).  Pure functions of the batch's
JobResults (grader/batch.py runs the batch and calls them); the views of one grading are grader/reports.py's.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

from grader.records import JobStatus, Status
from grader.reports import atomic_write

if TYPE_CHECKING:
    from grader.batch import JobResult


def write_gradebook(results: list[JobResult], test_ids: list[str], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(
        [
            "student",
            "status",
            "total",
            "base_points",
            *test_ids,
            "seconds",
            "content_hash",
            "submission",
            "result_dir",
            "error",
            "near_boundary",
            "api",
        ]
    )
    for r in sorted(results, key=lambda r: r.student):
        writer.writerow(
            [
                r.student,
                r.status,
                "" if r.status == JobStatus.ERROR else f"{r.score:g}",  # a grader/infrastructure error is not a zero
                f"{r.base_points:g}",
                *[f"{r.tests[t]:g}" if t in r.tests else "" for t in test_ids],
                f"{r.seconds:.1f}",
                r.content_hash,
                r.submission,
                r.out_dir or "",
                (r.error or "").splitlines()[0][:200] if r.error else "",
                " ".join(sorted(r.near_boundary)),
                " ".join(f"{name}={api}" for name, api in sorted(r.apis.items())),
            ]
        )
    atomic_write(path, buf.getvalue())


def overview_markdown(
    results: list[JobResult], test_ids: list[str], wall_seconds: float, jobs: int, seed_note: str = ""
) -> str:
    graded = [r for r in results if r.status in (JobStatus.GRADED, JobStatus.SKIPPED)]
    lines = [f"# Batch overview: {len(results)} submissions", ""]
    if seed_note:
        lines += [f"Inputs: {seed_note}.", ""]
    counts = {s: sum(1 for r in results if r.status == s) for s in JobStatus}
    lines.append(
        f"**Batch wall time {wall_seconds:.1f} s** with {jobs} job(s). Graded now: {counts['graded']}, "
        f"reused: {counts['skipped']}, grader errors: {counts['error']}."
    )
    lines += ["", "## Score histogram", ""]
    if graded:
        top = max(r.base_points for r in graded) or 1.0
        buckets = [0] * 11
        for r in graded:
            buckets[min(10, int(10 * r.score / top))] += 1
        width = max(buckets) or 1
        lines.append("```text")
        for i, n in enumerate(buckets):
            label = f"{i * 10:3d}-{min(100, i * 10 + 9):3d}%" if i < 10 else "   100%+"
            lines.append(f"{label} | {'#' * round(30 * n / width)} {n}")
        lines.append("```")
        mean = sum(r.score for r in graded) / len(graded)
        lines.append(f"Mean {mean:.2f} / {top:g}.")
    lines += ["", "## Pass rate per test", "", "| test | passed | partial | failed / other |", "|---|---|---|---|"]
    for t in test_ids:
        st = [r.test_status.get(t) for r in graded if t in r.test_status]
        if not st:
            continue
        p, q = st.count(Status.PASSED), st.count(Status.PARTIAL)
        lines.append(f"| {t} | {p}/{len(st)} ({p / len(st):.0%}) | {q} | {len(st) - p - q} |")
    perf = sorted({t for r in graded for t in r.latencies})
    if perf:
        lines += ["", "## Fastest and slowest kernels (modelled p99 latency)", ""]
        for t in perf:
            ranked = sorted((r.latencies[t], r.student) for r in graded if t in r.latencies)
            fast = ", ".join(f"{s} {v:.0f} us" for v, s in ranked[:3])
            slow = ", ".join(f"{s} {v:.0f} us" for v, s in ranked[-3:][::-1])
            lines.append(f"- **{t}**: fastest {fast}; slowest {slow}")
    lines += _near_boundary_section(graded)
    lines += _time_sections(results)
    errors = [r for r in results if r.status == JobStatus.ERROR]
    if errors:
        lines += ["", "## Grader errors (regraded on the next run)", ""]
        lines += [f"- {r.student}: {(r.error or '').splitlines()[0][:200]}" for r in errors]
    return "\n".join(lines) + "\n"


TIME_BUCKETS = (5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200)  # upper edges in seconds
NEAR_BOUNDARY_ROWS = 50  # rows of the overview's near-a-target table (the gradebook lists all)


def _near_boundary_section(graded: list[JobResult]) -> list[str]:
    """Performance results whose modelled latency is close to a tier target: the ones worth re-timing on
    Trainium, since a model error of that size would change the credit."""
    rows = sorted((d, r.student, t, r.latencies.get(t)) for r in graded for t, d in r.near_boundary.items())
    if not rows:
        return []
    lines = ["", "## Close to a target (re-time on Trainium if the grade matters)", "",
             f"{len(rows)} performance result(s) lie within the rubric's borderline_margin of a tier target; "
             "nkisim's latency is a model's estimate, so on hardware these may earn a different tier "
             "(the gradebook's near_boundary column lists them all).", "",
             "| student | test | modelled p99 (us) | distance from the target |", "|---|---|---|---|"]
    for d, student, test, latency in rows[:NEAR_BOUNDARY_ROWS]:
        lines.append(f"| {student} | {test} | {'' if latency is None else f'{latency:.0f}'} | {d:.1%} |")
    if len(rows) > NEAR_BOUNDARY_ROWS:
        lines.append(f"| ... {len(rows) - NEAR_BOUNDARY_ROWS} more | | | |")
    return lines


def time_histogram(seconds: list[float]) -> list[str]:
    """Text histogram of grading times, one line per bucket up to the slowest one."""
    edges = list(TIME_BUCKETS)
    counts = [0] * (len(edges) + 1)
    for s in seconds:
        counts[next((i for i, e in enumerate(edges) if s < e), len(edges))] += 1
    last = max(i for i, n in enumerate(counts) if n) if any(counts) else 0
    width = max(counts) or 1
    out = []
    for i in range(last + 1):
        lo = 0 if i == 0 else edges[i - 1]
        label = f"{lo:>4d}-{edges[i]:<4d} s" if i < len(edges) else f"{lo:>4d}+     s"
        out.append(f"{label} | {'#' * round(30 * counts[i] / width)} {counts[i]}")
    return out


def where_time_went(r: JobResult, top: int = 4) -> str:
    """The largest parts of one grading: tests (with their status), import checks, the static screen."""
    parts = []
    for key, sec in r.timings.items():
        if key.startswith("test:"):
            tid = key[5:]
            parts.append((sec, f"{tid} {sec:.1f} s ({r.test_status.get(tid, '?')})"))
        elif key.startswith("import:"):
            parts.append((sec, f"import {key[7:]} {sec:.1f} s"))
        elif key == "screen_s":
            parts.append((sec, f"screen {sec:.1f} s"))
    parts.sort(key=lambda p: -p[0])
    shown = [text for sec, text in parts[:top] if sec >= 0.05]
    rest = sum(sec for sec, _ in parts[top:])
    if rest >= 0.05:
        shown.append(f"{len(parts) - top} more {rest:.1f} s")
    if not shown:
        return (r.error or "no timings recorded").splitlines()[0][:120]
    return "; ".join(shown)


def _time_sections(results: list[JobResult]) -> list[str]:
    """Time per submission (histogram) and the ten slowest submissions with where their time went."""
    now = [r for r in results if r.status != JobStatus.SKIPPED]
    lines = ["", "## Time per submission", ""]
    if now:
        pool, key, what = now, (lambda r: r.seconds), "graded in this run"
    else:
        pool, key, what = results, (lambda r: r.graded_seconds), "all reused; times of the runs that graded them"
    if not pool:
        return lines + ["No submissions."]
    secs = [key(r) for r in pool]
    lines.append(
        f"{len(pool)} submission(s) {what}: total {sum(secs):.1f} s, mean {sum(secs) / len(secs):.1f} s, "
        f"median {sorted(secs)[len(secs) // 2]:.1f} s, max {max(secs):.1f} s."
    )
    lines += ["", "```text", *time_histogram(secs), "```"]
    lines += [
        "",
        "## Ten slowest submissions",
        "",
        "| student | seconds | status | score | where the time went |",
        "|---|---|---|---|---|",
    ]
    for r in sorted(pool, key=key, reverse=True)[:10]:
        score = "" if r.status == JobStatus.ERROR else f"{r.score:g}/{r.base_points:g}"
        where = where_time_went(r).replace("|", "/")
        lines.append(f"| {r.student} | {key(r):.1f} | {r.status} | {score} | {where} |")
    return lines
