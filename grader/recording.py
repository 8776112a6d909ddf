"""Assembling a GradeRecord: the one builder (:func:`build_record`) for a grading and for a grading that could not
run (:func:`error_record`), and the tool versions a record states.  grader/pipeline.py grades; this module only
writes down what a grading found, in the same fields whichever way it ended.
"""

from __future__ import annotations

import platform
import time
from typing import Any

import numpy as np

from grader import seeds, thresholds
from grader.records import GradeConfig, GradeRecord, RecordStatus, TestResult
from grader.rubric import Rubric, load_rubric

GRADER_VERSION = "1.0.0"


def now() -> str:
    """The time as records state it (UTC, ISO 8601)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def build_record(
    path: str,
    config: GradeConfig,
    *,
    student: str,
    content_hash: str,
    rubric: Rubric | None,
    backend: str,
    seed: int | None,
    status: RecordStatus,
    tests: list[TestResult],
    started_at: str,
    seconds: float,
    tool_version: str,
    isolation: list[str],
    error: str | None,
    **extra: Any,
) -> GradeRecord:
    """The one place a GradeRecord is assembled (a grading's and an error's): the rubric's identity and points
    (none when it could not be read), the seed as recorded (a secret class seed only by its fingerprint) and
    the score (the sum of the tests' scores)."""
    secret = config.seed_mode == "secret"
    return GradeRecord(
        student=student,
        submission=path,
        content_hash=content_hash,
        rubric_sha256=rubric.sha256 if rubric else "",
        rubric_title=rubric.title if rubric else "autograder",
        tool_version=tool_version,
        grader_version=GRADER_VERSION,
        backend=backend,
        target=config.target,
        seed=-1 if secret or seed is None else seed,
        seed_mode=config.seed_mode,
        seed_fingerprint=seeds.fingerprint(seed) if secret and seed is not None else "",
        status=status,
        score=round(sum((r.score for r in tests), 0.0), 6),
        max_score=rubric.total_points if rubric else 0.0,
        base_points=rubric.base_points if rubric else 0.0,
        tests=tests,
        started_at=started_at,
        seconds=seconds,
        isolation=isolation,
        python=platform.python_version(),
        config=config.to_dict(),
        error=error,
        **extra,
    )


def tool_versions(backend: str, toolchains: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    import nkisim

    versions = {
        "grader": GRADER_VERSION,
        "nkisim": nkisim.__version__,
        "nkisim_sources": thresholds.perf_fingerprint(),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    for chain in (toolchains or {}).values():  # the SDK that ran each API's kernels on Trainium
        if chain["backend"].startswith("neuron-") and chain.get("sdk"):
            tool, _, version = chain["sdk"].partition(" ")
            versions[tool] = version
    return versions


def error_record(
    path: str,
    config: GradeConfig,
    message: str,
    student: str = "",
    content_hash: str = "",
    started_at: str | None = None,
    seconds: float = 0.0,
) -> GradeRecord:
    """The record of a grading that could not run at all (written so Gradescope/CI still get results)."""
    try:
        rubric: Rubric | None = load_rubric(config.rubric_path).select(list(config.only) or None)
    except Exception:  # noqa: BLE001
        rubric = None
    try:
        tool = thresholds.tool_version()
    except Exception:  # noqa: BLE001
        tool = "unknown"
    return build_record(
        path,
        config,
        student=student,
        content_hash=content_hash,
        rubric=rubric,
        backend=config.backend,
        seed=config.seed,
        status=RecordStatus.ERROR,
        tests=[],
        started_at=started_at or now(),
        seconds=seconds,
        tool_version=tool,
        isolation=[],
        error=message,
    )
