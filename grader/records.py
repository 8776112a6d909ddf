"""Plain, picklable records passed between the pipeline, the reports and the batch executors, and the words they
use for outcomes (``Verdict``, ``Status``, ``RecordStatus``, ``JobStatus``).

The outcome enums are ``str`` subclasses whose value is the word that was always written: result.json,
results.json, junit.xml, the gradebook and ``==`` against a plain string see exactly the old strings, and a
record read back from JSON (plain strings) compares equal to the enum.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class _Word(str, Enum):
    """A str enum that prints as its value (``enum.StrEnum`` of Python 3.11, here for 3.10 too)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class Verdict(_Word):
    """How one kernel run (runner.CaseRun), one import check (runner.ImportCheck) or one judged case
    (CaseRecord) came out."""

    OK = "ok"  # the run finished and reported (its output is judged next)
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    BAD_OUTPUT = "bad-output"
    GRADER_ERROR = "grader-error"
    NOT_RUN = "not-run"


class Status(_Word):
    """A test's outcome (TestResult.status): what reports, junit and Gradescope's extra_data show."""

    PASSED = "passed"
    PARTIAL = "partial"
    FAILED = "failed"
    ERROR = "error"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    MISSING = "missing"
    SKIPPED = "skipped"
    GRADER_ERROR = "grader-error"


class RecordStatus(_Word):
    """A grading's outcome (GradeRecord.status): graded, or the grader itself failed."""

    GRADED = "graded"
    ERROR = "error"


class JobStatus(_Word):
    """A batch job's outcome (batch.JobResult.status)."""

    GRADED = "graded"
    SKIPPED = "skipped"  # an earlier grading with the same resume key was reused
    ERROR = "error"


@dataclass(frozen=True)
class GradeConfig:
    """Everything that decides a grade besides the submission itself (part of the batch resume key)."""

    rubric_path: str | None = None
    only: tuple[str, ...] = ()
    backend: str = "auto"  # auto | nkisim | neuron
    target: str = "trn2"  # trn2 | trn1
    seed: int | None = None  # None: derived from the rubric's salt and the submission (grader/problems/)
    # "submission": per-submission seeds (a student's own runs); "secret": ``seed`` is the class's secret seed
    # (grader/seeds.py), shared by every submission of a batch; only such runs are ranked on a leaderboard
    seed_mode: str = "submission"
    screen: bool = True  # run nkisim.check_kernel first (tests switch it off to probe the runtime layers)
    workers: int = 1  # kernel runs of one submission in parallel
    timeout_scale: float = 1.0
    tmp_root: str | None = None
    ref_cache: str | None = None  # directory of the shared reference cache (grader/refcache.py); None: memory only
    hidden_dirs: tuple[str, ...] = ()  # hidden from student code besides the grader's own (the batch's private dir)

    def to_dict(self) -> dict[str, Any]:
        """As recorded in result.json: a secret class seed is left out (result.json files sit in the batch's output
        directory, which sandboxed kernels of other gradings may be able to read)."""
        d = asdict(self)
        if self.seed_mode == "secret":
            d["seed"] = None
        return d


@dataclass
class CaseRecord:
    index: int
    verdict: str  # a Verdict: passed | failed | error | timeout | crashed | bad-output | grader-error | not-run
    message: str
    seconds: float
    kernel_seconds: float | None = None
    max_abs_error: float | None = None
    cpu_seconds: float | None = None  # the kernel process's CPU seconds, as it reported them
    output_tail: str = ""  # the end of what the kernel printed (for TAs; never shown as a result)


@dataclass
class TestResult:
    id: str
    name: str
    part: int
    kind: str
    max_score: float
    extra_credit: bool
    visibility: str
    tags: list[str]
    score: float = 0.0
    status: str = Status.FAILED  # a Status
    message: str = ""
    seconds: float = 0.0
    latency_us: float | None = None
    optimized_us: float | None = None
    relaxed_us: float | None = None
    mfu: float | None = None
    boundary_distance: float | None = None  # performance on nkisim: relative distance from the nearest tier target
    near_boundary: bool = False  # boundary_distance < the rubric's borderline_margin: re-time on Trainium
    implausible: list[str] = field(default_factory=list)  # why the latency is physically impossible (plausibility.py)
    timing_counts: bool = False  # performance: the timed run's output matched and its work was done on the device
    perf: dict[str, Any] | None = None
    cases: list[CaseRecord] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED


@dataclass
class GradeRecord:
    """The full record of one grading (result.json); results.json/junit/summary are views of it."""

    student: str
    submission: str
    content_hash: str
    rubric_sha256: str
    rubric_title: str
    tool_version: str
    grader_version: str
    backend: str
    target: str
    seed: int  # -1 for a secret class seed: only its fingerprint is recorded (seed_fingerprint)
    status: str  # a RecordStatus: graded | error
    score: float
    max_score: float
    base_points: float
    tests: list[TestResult]
    started_at: str
    seconds: float
    isolation: list[str]
    python: str
    config: dict[str, Any]
    error: str | None = None
    violations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    seed_mode: str = "submission"  # "secret": the class seed of a batch (a ranked run); see GradeConfig
    seed_fingerprint: str = ""  # a secret class seed's public name (grader/seeds.py: fingerprint)
    leaderboard: list[dict[str, Any]] = field(default_factory=list)  # Gradescope's items (grader/ranking.py)
    # file -> the NKI API its imports say: 'nki' | 'legacy' | 'mixed' | 'none' (grader/apis.py)
    apis: dict[str, str] = field(default_factory=dict)
    # API -> {"backend": nkisim | neuron-nki | neuron-legacy | none, "version": ..., "detail": ...}
    toolchains: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def api_summary(self) -> str:
        """The APIs and what timed them, as every report states them."""
        from grader.apis import summary, toolchain_summary

        timed = toolchain_summary(self.toolchains)
        return summary(self.apis) + (f", {timed}" if timed else "")

    @property
    def seed_label(self) -> str:
        """The seed as reports show it: a class seed is secret and shown by its fingerprint only."""
        if self.seed_mode == "secret":
            return f"secret class seed #{self.seed_fingerprint}"
        return str(self.seed)

    @property
    def seed_id(self) -> int | str:
        """What identifies the inputs in a resume key: the seed, or a secret one's fingerprint."""
        return f"#{self.seed_fingerprint}" if self.seed_mode == "secret" else self.seed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def resume_key(self) -> dict[str, Any]:
        return resume_key(
            self.content_hash, self.rubric_sha256, self.tool_version, self.backend, self.target, self.seed_id,
            float(self.config.get("timeout_scale", 1.0)),
        )


def resume_key(
    content_hash: str, rubric_sha256: str, tool_version: str, backend: str, target: str, seed: int | str,
    timeout_scale: float,
) -> dict[str, Any]:
    """What must match for an earlier grading to be reused by a batch run (a trial run with short time limits
    must not leave its timeouts in the gradebook)."""
    return {
        "content_hash": content_hash,
        "rubric_sha256": rubric_sha256,
        "tool_version": tool_version,
        "backend": backend,
        "target": target,
        "seed": seed,
        "timeout_scale": timeout_scale,
    }


def stored_key(record: dict[str, Any]) -> dict[str, Any]:
    """The resume key of a stored result.json (older records without a timeout scale match none)."""
    config = record.get("config")
    scale = config.get("timeout_scale") if isinstance(config, dict) else None
    seed = f"#{record.get('seed_fingerprint')}" if record.get("seed_mode") == "secret" else record.get("seed")
    return {k: record.get(k) for k in ("content_hash", "rubric_sha256", "tool_version", "backend", "target")} | {
        "seed": seed, "timeout_scale": scale}
