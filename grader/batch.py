"""Grade many submissions: content-addressed results, resume after a crash, pluggable executors.

Layout of the output directory::

    out/<student>/<content-hash[:16]>/{results.json, junit.xml, summary.md, result.json}
    out/.staging/            work in progress; a finished grading is moved into place with one rename
    out/gradebook.csv        one row per submission (student); it and overview.md: grader/batch_reports.py
    out/overview.md          histogram, pass rate per test, fastest/slowest kernels
    out/batch.jsonl          one line per job and run (graded / skipped / error), appended

``grade_one(job)`` is self-contained (picklable in, picklable out, writes its own directory atomically), so an
executor only has to call it somewhere: in-process (``serial``), in a local process pool (``local``), or on a
cluster (``ray``, provided by grader/ray_executor.py when present).  A result directory whose result.json has the
same content hash, rubric hash, tool version, backend, target, seed and time-limit scale is reused, never
regraded.
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import importlib
import io
import json
import multiprocessing
import os
import secrets
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from grader import seeds
from grader.batch_reports import overview_markdown, write_gradebook
from grader.progress import Progress
from grader.records import GradeConfig, GradeRecord, JobStatus, RecordStatus, resume_key, stored_key
from grader.reports import atomic_write, write_all
from grader.submission import (
    ARCHIVE_SUFFIXES,
    Submission,
    SubmissionError,
    load_submission,
    safe_student_id,
    student_from_path,
)

STAGING = ".staging"
REFCACHE = "refcache"  # under the batch's private directory (grader/seeds.py: OUT/.grader/)


@dataclass(frozen=True)
class GradeJob:
    """One submission to grade.  Paths must be visible to whichever machine runs the job."""

    submission: str
    student: str
    out_root: str
    config: GradeConfig
    force: bool = False


@dataclass
class JobResult:
    student: str
    submission: str
    status: str  # a JobStatus: graded | skipped | error
    content_hash: str = ""
    out_dir: str | None = None
    score: float = 0.0
    base_points: float = 0.0
    max_score: float = 0.0
    tests: dict[str, float] = field(default_factory=dict)
    test_status: dict[str, str] = field(default_factory=dict)
    latencies: dict[str, float] = field(default_factory=dict)
    near_boundary: dict[str, float] = field(default_factory=dict)  # test id -> distance from its nearest target
    seconds: float = 0.0  # this run's time for the job (a reused result costs only the check)
    error: str | None = None
    graded_seconds: float = 0.0  # how long the grading itself took, in whichever run made it
    timings: dict[str, float] = field(default_factory=dict)  # where that time went (screen, imports, tests)
    test_cpu: dict[str, float] = field(default_factory=dict)  # test id -> its kernel processes' CPU seconds
    apis: dict[str, str] = field(default_factory=dict)  # file -> the NKI API its imports name (grader/apis.py)

    @classmethod
    def from_record(cls, record: dict[str, Any], status: str, out_dir: str | None, seconds: float) -> JobResult:
        tests = record.get("tests", [])
        return cls(
            student=record.get("student", ""),
            submission=record.get("submission", ""),
            status=status,
            content_hash=record.get("content_hash", ""),
            out_dir=out_dir,
            score=float(record.get("score", 0.0)),
            base_points=float(record.get("base_points", 0.0)),
            max_score=float(record.get("max_score", 0.0)),
            tests={t["id"]: float(t["score"]) for t in tests},
            test_status={t["id"]: t["status"] for t in tests},
            latencies={t["id"]: float(t["latency_us"]) for t in tests if t.get("latency_us") is not None},
            near_boundary={t["id"]: float(t["boundary_distance"]) for t in tests
                           if t.get("near_boundary") and t.get("boundary_distance") is not None},
            seconds=seconds,
            error=record.get("error"),
            graded_seconds=float(record.get("seconds", 0.0) or 0.0),
            timings={str(k): float(v) for k, v in (record.get("timings") or {}).items() if isinstance(v, int | float)},
            test_cpu={t["id"]: sum(float(c.get("cpu_seconds") or 0.0) for c in t.get("cases", [])) for t in tests},
            apis={str(k): str(v) for k, v in (record.get("apis") or {}).items()},
        )


# ------------------------------------------------------------------------------------------ seeds ----


def class_config(
    config: GradeConfig, out_root: str | Path, *, seed_file: str | Path | None = None, rotate: bool = False
) -> tuple[GradeConfig, str]:
    """``config`` for ranked grading of a class: the secret class seed (``config.seed`` if given, else the one in
    ``seed_file``, by default OUT/.grader/secret-seed, created on first use or replaced with ``rotate``), the
    shared reference cache OUT/.grader/refcache, and that private directory hidden from student code.
    Returns the config and a line saying which seed is used (by its fingerprint)."""
    private = seeds.ensure_private_dir(seeds.private_dir(Path(out_root).resolve()))  # absolute: Ray tasks too
    cache = private / REFCACHE
    if config.seed is not None:
        seed, note = int(config.seed), "given with --seed"
    else:
        path = Path(seed_file) if seed_file else private / seeds.SEED_FILE
        seed, new = seeds.class_seed(path, rotate=rotate)
        note = ("new, written to " if new else "from ") + str(path)
    if rotate:  # every entry belongs to the old inputs
        shutil.rmtree(cache, ignore_errors=True)
    seeds.ensure_private_dir(cache)
    seeds.write_fingerprint(private, seed)
    hidden = [str(private)] + ([str(Path(seed_file).resolve().parent)] if seed_file else [])
    ranked = replace(config, seed=seed, seed_mode="secret", ref_cache=str(cache), hidden_dirs=tuple(hidden))
    return ranked, f"class seed #{seeds.fingerprint(seed)} ({note})"


# ---------------------------------------------------------------------------------------- one job ----


def expected_key(sub: Submission, config: GradeConfig) -> dict[str, Any]:
    from grader import thresholds
    from grader.pipeline import effective_seed, resolve_backend
    from grader.rubric import load_rubric

    rubric = load_rubric(config.rubric_path).select(list(config.only) or None)
    seed = effective_seed(rubric, sub.content_hash, config)
    seed_id = f"#{seeds.fingerprint(seed)}" if config.seed_mode == "secret" else seed
    return resume_key(
        sub.content_hash, rubric.sha256, thresholds.tool_version(), resolve_backend(config.backend), config.target,
        seed_id, float(config.timeout_scale),
    )


def _stored_record(final: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((final / "result.json").read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _publish(staging: Path, final: Path) -> None:
    """Move a complete result directory into place with renames only (never a partial directory)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        old = staging.parent / f"old-{secrets.token_hex(6)}"
        os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, final)


def grade_one(job: GradeJob, grade: Callable[[Submission, GradeConfig], GradeRecord] | None = None) -> JobResult:
    """Grade (or reuse) one submission; safe to run in any process or on any machine sharing the paths.

    ``grade`` replaces the in-process grading step (ray_executor ships the files to a remote task with it).
    """
    from grader.pipeline import error_record, grade_loaded

    t0 = time.perf_counter()
    out_root = Path(job.out_root)
    try:
        sub = load_submission(job.submission, job.student)
    except SubmissionError as exc:
        return JobResult(job.student, job.submission, JobStatus.ERROR, error=str(exc),
                         seconds=time.perf_counter() - t0)
    sub.student = job.student or sub.student
    final = out_root / sub.student / sub.content_hash[:16]
    try:
        key = expected_key(sub, job.config)
    except Exception as exc:  # noqa: BLE001 - configuration problem: every job will report it
        return JobResult(
            sub.student,
            job.submission,
            JobStatus.ERROR,
            sub.content_hash,
            error=f"{type(exc).__name__}: {exc}",
            seconds=time.perf_counter() - t0,
        )
    stored = _stored_record(final)
    if (
        not job.force
        and stored
        and stored.get("status") == RecordStatus.GRADED
        and stored_key(stored) == key
    ):
        return JobResult.from_record(stored, JobStatus.SKIPPED, str(final), time.perf_counter() - t0)
    try:
        record: GradeRecord = (grade or grade_loaded)(sub, job.config)
    except Exception as exc:  # noqa: BLE001
        record = error_record(
            job.submission,
            job.config,
            f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}",
            sub.student,
            sub.content_hash,
        )
    staging = out_root / STAGING / f"{sub.student}-{sub.content_hash[:16]}-{secrets.token_hex(4)}"
    write_all(record, staging)
    _publish(staging, final)
    return JobResult.from_record(
        record.to_dict(), JobStatus.GRADED if record.status == RecordStatus.GRADED else JobStatus.ERROR, str(final),
        time.perf_counter() - t0,
    )


# ----------------------------------------------------------------------------------------- executors ----


class Executor(Protocol):
    """Runs ``fn`` on every job and yields results as they complete (any order)."""

    name: str

    def map_unordered(self, fn: Callable[[GradeJob], JobResult], jobs: list[GradeJob]) -> Iterator[JobResult]: ...


class SerialExecutor:
    name = "serial"

    def __init__(self, jobs: int = 1):
        self.jobs = 1

    def map_unordered(self, fn: Callable[[GradeJob], JobResult], jobs: list[GradeJob]) -> Iterator[JobResult]:
        for job in jobs:
            yield fn(job)


def _worker_init(blas_threads: int = 0) -> None:
    """Pool workers die with the batch process (kill -9 included) and ignore Ctrl-C (the parent handles it).
    ``blas_threads``: their share of the cores for BLAS (``jobs`` workers each using every core would only
    contend); the references themselves take one thread whatever it is (grader/problems/base.py
    ``one_blas_thread``: the same values on any machine)."""
    if blas_threads > 0:  # through nkisim's process-wide limiter (nkisim/core/blas.py), not threadpoolctl's, which
        # would make this thread the only one whose limits count for the worker's life
        from nkisim.core.blas import set_default_threads

        set_default_threads(blas_threads)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalProcessExecutor:
    """A pool of grading processes on this machine; a worker that dies costs one retry, not the batch."""

    name = "local"

    def __init__(self, jobs: int = 2, retries: int = 1):
        self.jobs = max(1, jobs)
        self.retries = retries

    def map_unordered(self, fn: Callable[[GradeJob], JobResult], jobs: list[GradeJob]) -> Iterator[JobResult]:
        pending = list(jobs)
        attempt = 0
        while pending:
            ctx = multiprocessing.get_context("spawn")
            failed: list[tuple[GradeJob, BaseException]] = []
            blas = max(1, (os.cpu_count() or 1) // self.jobs)
            with cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, initializer=_worker_init,
                                        initargs=(blas,)) as pool:
                futures = {pool.submit(fn, job): job for job in pending}
                for fut in cf.as_completed(futures):
                    job = futures[fut]
                    try:
                        yield fut.result()
                    except BaseException as exc:  # noqa: BLE001 - BrokenProcessPool, pickling errors...
                        failed.append((job, exc))
            attempt += 1
            if attempt > self.retries:
                for job, exc in failed:
                    yield JobResult(
                        job.student,
                        job.submission,
                        JobStatus.ERROR,
                        error=f"grading worker failed: {type(exc).__name__}: {exc}",
                    )
                return
            pending = [job for job, _ in failed]


EXECUTORS: dict[str, Callable[[int], Executor]] = {"serial": SerialExecutor, "local": LocalProcessExecutor}


def register_executor(name: str, factory: Callable[[int], Executor]) -> None:
    """Make ``--executor NAME`` available (used by grader/ray_executor.py)."""
    EXECUTORS[name] = factory


def get_executor(name: str, jobs: int, **options: Any) -> Executor:
    if name not in EXECUTORS:
        try:
            importlib.import_module(f"grader.{name}_executor")
        except ImportError as exc:
            raise ValueError(f"unknown executor {name!r} (available: {sorted(EXECUTORS)}): {exc}") from exc
    if name not in EXECUTORS:
        raise ValueError(f"grader.{name}_executor did not register an executor named {name!r}")
    return EXECUTORS[name](jobs, **options)  # options: e.g. address= for ray, retries=


# ----------------------------------------------------------------------------------------- discovery ----


def _is_submission(p: Path) -> bool:
    if p.name.startswith(".") or p.name == STAGING:
        return False
    return p.is_dir() or (p.is_file() and p.name.lower().endswith(ARCHIVE_SUFFIXES))


def _student_for_dir(p: Path) -> str:
    meta = p / "submission_metadata.json"
    if p.is_dir() and meta.exists():
        try:
            data = json.loads(meta.read_text())
            users = data.get("users") or []
            if users and isinstance(users[0], dict):
                for key in ("email", "sid", "name", "id"):
                    if users[0].get(key):
                        return safe_student_id(str(users[0][key]))
        except (OSError, ValueError):
            pass
    return student_from_path(p)


def read_manifest(path: Path) -> list[tuple[str, str]]:
    """CSV (student,path) or JSON ([{"student":..,"path":..}]); relative paths are relative to the manifest."""
    text = path.read_text()
    rows: list[tuple[str, str]] = []
    if path.suffix == ".json":
        for item in json.loads(text):
            rows.append((str(item.get("student", "")), str(item["path"])))
    else:
        for row in csv.DictReader(io.StringIO(text)):
            rows.append((row.get("student", "") or "", row["path"]))
    base = path.parent
    return [(s, str(p if os.path.isabs(p) else base / p)) for s, p in rows]


def discover_jobs(source: str | Path, out_root: str | Path, config: GradeConfig, force: bool = False) -> list[GradeJob]:
    """Submissions in a directory (one entry per student) or listed in a manifest file."""
    src = Path(source)
    if not src.exists():
        raise SubmissionError(f"{src} does not exist")
    if src.is_file() and not src.name.lower().endswith(ARCHIVE_SUFFIXES):
        pairs = [(s or student_from_path(Path(p)), p) for s, p in read_manifest(src)]
    else:
        entries = sorted(p for p in src.iterdir() if _is_submission(p)) if src.is_dir() else [src]
        pairs = [(_student_for_dir(p), str(p)) for p in entries]
    seen: dict[str, int] = {}
    jobs = []
    for student, path in pairs:
        sid = safe_student_id(student)
        seen[sid] = seen.get(sid, 0) + 1
        if seen[sid] > 1:
            sid = f"{sid}-{seen[sid]}"
        jobs.append(GradeJob(path, sid, str(out_root), config, force))
    return jobs


def _clean_staging(out_root: Path) -> None:
    staging = out_root / STAGING
    if staging.exists():
        shutil.rmtree(staging, ignore_errors=True)


def run_batch(
    source: str | Path,
    out_root: str | Path,
    config: GradeConfig,
    *,
    jobs: int = 2,
    executor: str = "local",
    force: bool = False,
    progress: bool = True,
    on_result: Callable[[JobResult], None] | None = None,
    executor_options: dict[str, Any] | None = None,
) -> list[JobResult]:
    """Grade everything in ``source`` into ``out_root``; returns one JobResult per submission."""
    out = Path(out_root)
    out.mkdir(parents=True, exist_ok=True)
    _clean_staging(out)  # leftovers of a killed run are never results
    job_list = discover_jobs(source, out, config, force)
    from grader.rubric import load_rubric

    test_ids = [t.id for t in load_rubric(config.rubric_path).select(list(config.only) or None).tests]
    _prefetch_thresholds(config)
    ex = get_executor(executor, jobs, **(executor_options or {}))
    bar = Progress(len(job_list), enabled=progress)
    if hasattr(ex, "on_retry"):  # executors that retry infrastructure failures report each retry live
        ex.on_retry = lambda job, why: bar.note("retried", f"{job.student} ({why[:100]})")
    results: list[JobResult] = []
    t0 = time.perf_counter()
    log = out / "batch.jsonl"
    for res in ex.map_unordered(grade_one, job_list):
        results.append(res)
        with open(log, "a") as fh:
            fh.write(json.dumps({"time": time.time(), **asdict(res)}) + "\n")
        bar.update(res.status, res.student)
        if on_result:
            on_result(res)
    bar.close()
    wall = time.perf_counter() - t0
    write_gradebook(results, test_ids, out / "gradebook.csv")
    seed_note = (f"the secret class seed #{seeds.fingerprint(config.seed)} (the same inputs for every submission)"
                 if config.seed_mode == "secret" and config.seed is not None else "a seed per submission")
    atomic_write(out / "overview.md", overview_markdown(results, test_ids, wall, jobs, seed_note))
    _clean_staging(out)
    return results


def _prefetch_thresholds(config: GradeConfig) -> None:
    """Compute missing reference timings once, before the workers would each try to."""
    from grader.calibrate import ensure_reference_timings
    from grader.pipeline import resolve_backend
    from grader.rubric import load_rubric

    rubric = load_rubric(config.rubric_path).select(list(config.only) or None)
    if not any(t.kind == "performance" and t.thresholds.get("source") != "fixed" for t in rubric.tests):
        return  # fixed targets need no reference timings
    from grader.staff import available_apis

    backend = resolve_backend(config.backend)
    if backend == "nkisim":
        for api in available_apis():  # a class may hand in either API (each is timed against its own staff kernel)
            ensure_reference_timings(backend, config.target, api)


def summarize(results: Iterable[JobResult]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results:
        out[r.status] = out.get(r.status, 0) + 1
    return out
