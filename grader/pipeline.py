"""grade_submission(): the one grading function every front end (CLI, batch, Gradescope, CI, Ray) calls.

Order of work: read the two files -> which NKI API each is written in (grader/apis.py: a file importing both
namespaces scores 0, the other file is graded) -> static screen (nkisim.check_kernel) -> import check (each file
imported once in the sandbox with a short limit; a file that fails it fails every test needing it at once) ->
correctness tests -> performance tests (each only if its required correctness tests passed).  A kernel call that
times out or runs out of memory marks its function: later calls of it on inputs at least as large are not made.
Every kernel call runs in its own sandboxed child (grader/runner.py); the parent generates inputs, computes
references, judges outputs and costs traces.  What a test's ``problem`` means (inputs, reference, size, targets,
work check) is the problem's own module (grader/problems/); this module knows no problem by name.
Failures of the submission are verdicts (score 0 for that test); failures of the grader make the record's
status 'error' (Gradescope shows "autograder error", the CLI exits non-zero).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import os
import resource
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from grader import apis, plausibility, policy, problems, ranking, refcache, scratch, seeds, thresholds, timeline
from grader.calibrate import ensure_reference_timings
from grader.judge import judge_output
from grader.recording import build_record, error_record, now, tool_versions
from grader.records import CaseRecord, GradeConfig, GradeRecord, RecordStatus, Status, TestResult, Verdict
from grader.rubric import Rubric, RubricError, TestSpec, load_rubric
from grader.runner import (
    REPLAYED_APIS,
    CaseRun,
    CrossLink,
    ImportCheck,
    KernelServers,
    _signature,
    background,
    check_import,
    run_case,
    run_group,
)
from grader.sandbox import detect_isolation
from grader.submission import Submission, load_submission


class GraderError(RuntimeError):
    """The grader itself cannot grade (bad configuration, missing backend): not the student's fault."""


def resolve_backend(name: str) -> str:
    """'nkisim' or 'neuron' (real Trainium: either API's real toolchain is installed; nkibench.detect decides)."""
    if name not in ("auto", "nkisim", "neuron"):
        raise GraderError(f"--backend must be auto, nkisim or neuron, got {name!r}")
    if name == "nkisim":
        return name
    from nkibench.detect import toolchain

    chains = [toolchain(api) for api in ("nki", "legacy")]
    if any(tc.kind == "neuron" for tc in chains):
        return "neuron"
    if name == "neuron":
        raise GraderError("--backend neuron needs a real NKI toolchain (the `nki` package, or neuronx-cc with "
                          "neuronxcc.nki): " + "; ".join(f"{tc.api}: {tc.detail}" for tc in chains))
    return "nkisim"


def _input_key(problem: problems.Problem, case: dict[str, Any]) -> str:
    """Cases equal on the problem's input fields share their inputs (conv2d: X and W, and their convolution)."""
    return problem.name + json.dumps(problem.input_fields(case), sort_keys=True)


class _CaseGroup:
    """Calls of one kernel on the same X and W, made together by :func:`grader.runner.run_group` when the first of
    their tests' threads allowed to start them asks; the others wait for it and take their own call's outcome
    (docs/grading.md, "Correctness calls replayed together").

    ``members``: (test, case index, case), the correctness calls first (``part2.large``, ``bias``, ``maxpool``),
    then timed calls on the same inputs (the batch-1 float32 timed runs, whose X is the first image of the batch-4
    X: "batch prefixes").  A group with correctness calls is started by one of them, and its timed calls are made
    speculatively, before their tests' requirements are known: a timed test takes its call's outcome only when it
    runs at all (its requirements passed, as today), else the run is discarded.  A group of timed calls only (the
    float16 pair) is started by the first of their tests, with only the calls whose tests will run."""

    def __init__(self, members: list[tuple[TestSpec, int, dict[str, Any]]],
                 cross: tuple[CrossLink, str] | None = None) -> None:
        self.members = members
        self.cross = cross  # one half of a group split across two workers, sharing its leader's products
        self.correctness = any(t.kind == "correctness" for t, _, _ in members)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._started = False
        self.held = False  # took a kernel slot
        self.runs: dict[tuple[str, int], CaseRun | None] = {}
        self.taken: set[tuple[str, int]] = set()

    def may_start(self, test: TestSpec) -> bool:
        return test.kind == "correctness" or not self.correctness

    @property
    def started(self) -> bool:
        return self._started

    def prefetch(self, grading: _Grading, done: dict[str, TestResult]) -> None:
        """Make the group's calls before any of its tests asks (a free kernel slot, nothing else waiting for it):
        only groups of timed calls, each speculative until its test's requirements have passed."""
        with self._lock:
            if self._started or self.correctness:
                return
            self._started = True
        try:
            self.runs = grading._run_group(self, None, 0, done)
        finally:
            self._done.set()

    def run_for(self, grading: _Grading, test: TestSpec, index: int, done: dict[str, TestResult]) -> CaseRun | None:
        """This call's outcome from the group (None: the group did not make it; the caller makes it alone)."""
        with self._lock:
            first = not self._started and self.may_start(test)
            self._started = self._started or first
            started = self._started
        if not started:  # a timed test whose correctness group was never made (its tests did not call): alone
            return None
        if first:
            try:
                self.runs = grading._run_group(self, test.id, index, done)
            finally:
                if self in grading.critical_units and not self.held:  # made no call: its kept slot is free
                    grading.slots.reserve(-1)
                self._done.set()
        else:
            with grading.slots.claim(-1), timeline.span("wait_group", f"{test.id}#{index}"):  # holds no worker
                self._done.wait()
        with self._lock:
            self.taken.add((test.id, index))
        return self.runs.get((test.id, index))

    def unused(self) -> int:
        """Calls the group made that no test took (speculative timed runs of tests that did not run)."""
        return sum(1 for key, run in self.runs.items() if run is not None and key not in self.taken)


class _Slots:
    """The kernel-call slots of a grading: ``n`` sandboxed kernel processes (or groups) at a time, the largest
    waiting call first.  A test's thread claims a slot's worth of the machine while it runs (a call, or the
    parent's judging between calls), not while it waits for a group another test started, nor, when no other test
    requires it, while it judges its last call (``_Grading._calls_made``); speculative calls
    (timed runs made before their tests' requirements are known) start only on a slot no running test claims
    (docs/grading.md, round 7)."""

    def __init__(self, n: int) -> None:
        self.n = max(1, n)
        self.busy = 0
        self.claims = 0  # test threads running (in a slot or in the parent's own work), not waiting for a group
        self.ahead = 0  # slots held by speculative calls
        self._cv = threading.Condition()
        self._waiting: list[tuple[bool, float, int]] = []
        self._seq = itertools.count()
        self._free = list(range(self.n))  # slot numbers, for the timeline (GRADER_TIMELINE)
        self.reserved = 0  # slots kept for critical groups not started yet (reserve)
        self.first_until = 0.0  # until then (time.monotonic()), only critical calls start (keep_first)

    def reserve(self, delta: int) -> None:
        """Keep ``delta`` more (or, negative, fewer) slots for the grading's critical groups: until one takes its slot
        (``hold(critical=True)``), other calls leave it free.  Without it, a small call whose test thread asked a
        few milliseconds sooner took the second slot while the 224x224 group's thread was still on its way to the
        queue, and the group -- the grading's critical path -- started a whole small call later (1.0 s in one
        loaded grading of round 10)."""
        with self._cv:
            self.reserved = max(0, self.reserved + delta)
            self._cv.notify_all()

    def keep_first(self, seconds: float) -> None:
        """Start no call but a critical one for the next ``seconds`` (0: from now on, again), the calls already
        started going on: while the critical group's specializations run, which its process waits for, the small
        calls of the other slot would take a share of the two cores from them (docs/grading.md, "round 12,
        prestart").  Bounded, so that a critical specialization that hangs holds the others back no longer."""
        with self._cv:
            self.first_until = time.monotonic() + seconds if seconds > 0 else 0.0
            self._cv.notify_all()

    def _kept(self) -> float:
        """Seconds left of keep_first's hold (0: none).  Under the lock."""
        return max(0.0, self.first_until - time.monotonic()) if self.first_until else 0.0

    @contextmanager
    def hold(self, size: float, *, speculative: bool = False, label: str = "",
             critical: bool = False) -> Iterator[None]:
        asked = timeline.span("queue", label, speculative=speculative)
        asked.__enter__()
        with self._cv:
            entry = (speculative, -float(size), next(self._seq))
            heapq.heappush(self._waiting, entry)
            # while keep_first holds the others back, a critical call goes ahead of them in the queue too
            while ((self.busy >= self.n - (0 if critical else self.reserved))
                   or (self._waiting[0] != entry and not (critical and self._kept()))
                   or (not critical and self._kept())):
                self._cv.wait(None if critical else (self._kept() or None))
            self._waiting.remove(entry)
            heapq.heapify(self._waiting)
            if critical and self.reserved:
                self.reserved -= 1
            self.busy += 1
            self.ahead += speculative
            slot = heapq.heappop(self._free)
            self._cv.notify_all()
        asked.__exit__(None, None, None)
        timeline.set_slot(slot)
        try:
            with timeline.span("slot", label, speculative=speculative):
                yield
        finally:
            timeline.set_slot(None)
            with self._cv:
                self.busy -= 1
                self.ahead -= speculative
                heapq.heappush(self._free, slot)
                self._cv.notify_all()

    def add_claims(self, delta: int) -> None:
        with self._cv:
            self.claims += delta
            self._cv.notify_all()

    @contextmanager
    def claim(self, delta: int = 1) -> Iterator[None]:
        """A test's thread running (``delta`` 1) or, inside, waiting for a group (-1)."""
        self.add_claims(delta)
        try:
            yield
        finally:
            self.add_claims(-delta)

    def wait_idle(self, stop: threading.Event, timeout: float = 0.5) -> bool:
        """Block until a slot is free that no running test claims (True) or ``stop`` is set (False)."""
        with self._cv:
            while not stop.is_set():
                if (self.claims + self.ahead < self.n and self.busy < self.n - self.reserved and not self._waiting
                        and not self._kept()):
                    return True
                self._cv.wait(timeout)
        return False

    def wake(self) -> None:
        with self._cv:
            self._cv.notify_all()


def _split(members: list[tuple[TestSpec, int, dict[str, Any]]],
           parts: int) -> list[list[tuple[TestSpec, int, dict[str, Any]]]]:
    """The calls of one planned group in up to ``parts`` groups, one per worker: the correctness calls spread so
    that their sizes (input elements) balance, the timed calls added to the lightest.  Each group runs on one core;
    with two workers, two groups keep both busy for the products of two leaders instead of one.  Within a group,
    correctness calls come first (the largest batch leads: later members reuse its products), timed calls last."""
    def size(m: tuple[TestSpec, int, dict[str, Any]]) -> int:
        return problems.get(m[0].problem).input_elements(m[2])

    ordered = sorted(members, key=lambda m: (m[0].kind != "correctness", -size(m)))
    n = min(max(1, parts), sum(1 for m in ordered if m[0].kind == "correctness"))
    if n <= 1:
        return [ordered]
    bins: list[list[tuple[TestSpec, int, dict[str, Any]]]] = [[] for _ in range(n)]
    weights = [0] * n
    for m in ordered:
        k = min(range(n), key=lambda j: (weights[j], j))
        bins[k].append(m)
        weights[k] += size(m)
    return [b for b in bins if b]


def _cross_split(members: list[tuple[TestSpec, int, dict[str, Any]]]
                 ) -> list[list[tuple[TestSpec, int, dict[str, Any]]]]:
    """A planned group in two halves whose processes share the leader's products (``cross_group``): the largest
    correctness call (the leader, which computes every product) with the correctness calls of its signature (one
    specialization serves the half), and the others, which take the leader's products from the other process.  For
    the 224x224 group: {``part2.large``, ``bias``} and {``maxpool``, ``perf_fp32``, ``perf_fp32_pool``}, about
    6.2 and 2.2 CPU s of members; the second half's worker then makes the other calls."""
    def size(m: tuple[TestSpec, int, dict[str, Any]]) -> int:
        return problems.get(m[0].problem).input_elements(m[2])

    def signature(m: tuple[TestSpec, int, dict[str, Any]]) -> str | None:
        inv = problems.get(m[0].problem).stand_in(m[2])
        return None if inv is None else _signature(inv)

    ordered = sorted(members, key=lambda m: (m[0].kind != "correctness", -size(m)))
    lead = signature(ordered[0])
    first = [ordered[0], *(m for m in ordered[1:]
                           if m[0].kind == "correctness" and lead is not None and signature(m) == lead)]
    rest = [m for m in ordered if all(m is not f for f in first)]
    if not rest:
        return [ordered]
    return [first, rest]


def cross_group() -> bool:
    """Whether a grading with several workers splits its groups of three or more calls with two or more correctness
    calls into two halves that share the leader's products across their processes (``GRADER_CROSS_GROUP=1``;
    nkisim.core.channel, docs/grading.md round 9)."""
    return os.environ.get("GRADER_CROSS_GROUP", "0") != "0"


def group_split() -> bool:
    """Whether a grading with several workers splits a group into one per worker (``GRADER_GROUP_SPLIT=1``; default
    off).  Measured with the products shared by storage version (round 7), one group of the three 224x224 calls and
    the two float32 timed calls costs 8 CPU s less than one per worker for the same wall time under load: its
    followers are cheap, and the other worker makes the float16 pair and the small calls meanwhile."""
    return os.environ.get("GRADER_GROUP_SPLIT", "0") != "0"


# Near idle (load 2.2-2.7, the grading's own included) the staff reference graded in 16.4-17.7 s with 5 against
# 18.2-21.3 s with 0, five alternating triples (docs/grading.md, round 8); at load 3.5-5 the two were within noise,
# at load 10-13 5 took 0.89 of the wall time.  The critical group's specializations side by side (on with it) started
# a third warm server, about 0.7 CPU s, until one server per API served calls side by side (round 11).
BACKGROUND_NICE = 5


def background_nice(workers: int) -> int:
    """How far below the grader's priority a grading with several workers runs the kernel calls off its critical
    path, with the critical group's specializations side by side (``GRADER_BACKGROUND_NICE``, 0-19, default
    :data:`BACKGROUND_NICE`; 0: neither).  One worker: 0 (a batch's gradings are alike)."""
    if workers <= 1:
        return 0
    raw = os.environ.get("GRADER_BACKGROUND_NICE", str(BACKGROUND_NICE))
    try:
        nice = int(raw)
    except ValueError:
        raise GraderError(f"GRADER_BACKGROUND_NICE must be an integer 0-19, got {raw!r}") from None
    if not 0 <= nice <= 19:
        raise GraderError(f"GRADER_BACKGROUND_NICE must be an integer 0-19, got {nice}")
    return nice


# how long, at most, the critical group's specializations hold the other calls back (Slots.keep_first): about what
# they take on an idle machine (1.1-1.4 s).  Longer holds delay the niced calls more than they give the group where
# those calls end last (a loaded machine: docs/grading.md, "round 12, prestart")
CRITICAL_FIRST_S = 2.0
# ... and only while the machine is not loaded: a 1-minute load average below this per worker (the grading's own
# processes count: two workers' grading keeps it at 1.3-3 on an otherwise idle machine)
CRITICAL_FIRST_MAX_LOAD = 2.0


def critical_first(workers: int) -> bool:
    """Whether the critical group's specializations start alone, the other calls waiting for them (at most
    :data:`CRITICAL_FIRST_S`): ``GRADER_CRITICAL_FIRST`` ``0`` (the default: never, as before round 12), ``auto``
    (when the 1-minute load average is below :data:`CRITICAL_FIRST_MAX_LOAD` per worker) or ``1`` (always).  Off by
    default until measured on an idle machine: under load the niced calls off the critical path, not the group, end a
    grading last, and holding them back made it longer; idle, the other slot's calls end 0.9-1.5 s before the group,
    which a hold of about a second may eat into (docs/grading.md, "round 12, prestart")."""
    raw = os.environ.get("GRADER_CRITICAL_FIRST", "0")
    if raw not in ("auto", "0", "1"):
        raise GraderError(f"GRADER_CRITICAL_FIRST must be auto, 0 or 1, got {raw!r}")
    if raw != "auto":
        return raw == "1"
    try:
        return os.getloadavg()[0] < CRITICAL_FIRST_MAX_LOAD * workers
    except OSError:  # no load average here
        return True


# Threads judging calls ahead of their tests (_Grading._judge_ahead): the three batch-4 224x224 correctness outputs
# end 0.1-0.4 s apart at the end of their group, and each is judged as it ends (NumPy, mostly without the GIL); a
# timed pair made ahead takes two
JUDGE_AHEAD_THREADS = 3


def share_enabled(workers: int) -> bool:
    """Whether calls sharing X and W are made together (:meth:`_Grading.plan_groups`): by default, whatever the
    workers.  Round 6 grouped with one worker only: with two, a test waiting for the group held the other worker
    (34.7-38.8 s wall against 26.4-27.0 s alone); a grading with two workers is now scheduled so that nothing waits
    for a group while a call could run (:func:`_run_scheduled`; docs/grading.md, round 7).
    ``GRADER_SHARE_PRODUCTS=1`` groups, ``=0`` never."""
    forced = os.environ.get("GRADER_SHARE_PRODUCTS")
    if forced is not None:
        return forced != "0"
    return workers >= 1


class _Grading:
    def __init__(self, sub: Submission, rubric: Rubric, config: GradeConfig, backend: str, seed: int):
        self.sub = sub
        self.apis = apis.detect_files(sub.files)
        self.toolchains = apis.toolchains({n: a.found for n, a in self.apis.items()}, backend)
        self.rubric = rubric
        self.config = config
        self.backend = backend
        self.seed = seed
        # References by content address, shared with every other grading of the batch when the seed is the
        # class's secret one (the cache's MAC key derives from it); per-submission seeds use memory only.
        mac_key = seeds.derived_key(seed, "refcache") if config.seed_mode == "secret" else None
        self.store = refcache.ReferenceStore(config.ref_cache, mac_key)
        self.blocking: dict[str, list[Any]] = {}
        self.features: set[str] = set()
        # Traces come back from every nkisim run: the parent checks from them that the kernel itself moved the
        # data (a host-computed array returned by the kernel never touches HBM).
        self.want_trace = backend == "nkisim" and _traceio_available()
        self.violations: dict[str, list[dict[str, Any]]] = {}
        self.reorders: dict[str, dict[str, None]] = {}  # test id -> DMA-side transposes seen in its traces
        self.imports: dict[str, ImportCheck] = {}
        # (file, function) -> (input elements, why, test id) of the smallest call that hit a resource limit
        self.exhausted: dict[tuple[str, str], tuple[int, str, str]] = {}
        self._lock = threading.Lock()
        # warm kernel servers (grader/forkserver.py): one per API, a fork per kernel call, side by side as made
        self.servers = (KernelServers(target=config.target, limits=rubric.limits, tmp_root=config.tmp_root,
                                      size=max(1, config.workers))
                        if backend == "nkisim" and KernelServers.enabled() else None)
        # calls made together (runner.run_group) or ahead of their tests, by (test id, case index), and what the
        # groups saved
        self.groups: dict[tuple[str, int], _CaseGroup] = {}
        self.units: list[_CaseGroup] = []
        self.cross_links: list[CrossLink] = []
        self.slots = _Slots(max(1, config.workers))
        # references computed while the calls that need them run (several workers: the parent's float64
        # convolutions would otherwise wait for the call and hold its worker)
        # with several workers, the kernel calls off the critical path (every call but the largest correctness
        # calls) run below the grader's priority, so that the calls the grading waits for keep a core instead of
        # sharing it evenly while the other core idles at the end (round 8)
        self.nice = background_nice(config.workers) if backend == "nkisim" else 0
        self.critical_size = max((problems.get(t.problem).input_elements(c) for t in rubric.tests
                                  if t.kind == "correctness" for c in t.cases), default=0) if self.nice else 0
        self.ref_pool = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="grader-refs")
                         if config.workers > 1 else None)
        # the reference computations started (_prefetch_reference), by (test id, id of the case): a call judged ahead
        # waits for its own (_judge_ahead)
        self.ref_futures: dict[tuple[str, int], Future[None]] = {}
        self.judge_taken: set[tuple[str, int]] = set()  # calls whose tests asked for their judging (_judged_ahead)
        self._judge_lock = threading.RLock()  # judged_ahead and judge_taken (a reference's callback may re-enter)
        self.share_figures = {"groups": 0, "calls": 0, "speculative": 0, "hits": 0, "misses": 0, "alone": 0}
        self.required = {r for t in rubric.tests for r in t.requires}  # tests other tests require
        self.critical_units: list[_CaseGroup] = []  # groups of the largest correctness calls (_run_scheduled)
        # calls judged (timed ones costed too) as soon as their group returns or their member of it ends
        # (_judge_ahead): (test id, case) -> (the run, its verdict, or (verdict, report) for a timed call)
        self.judge_pool = (ThreadPoolExecutor(max_workers=JUDGE_AHEAD_THREADS, thread_name_prefix="grader-judge-ahead")
                           if config.workers > 1 else None)
        self.judged_ahead: dict[tuple[str, int], tuple[CaseRun, Future[Any]]] = {}
        self._released = threading.local()  # this test's thread gave up its claim on a worker (_calls_made)

    # ------------------------------------------------------------------------------------------ screen ----
    def screen(self) -> None:
        if not self.config.screen:
            return
        from nkisim.check import check_kernel

        for name, data in self.sub.files.items():
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.blocking[name] = []
                self.violations[name] = [
                    {"line": 1, "code": "SYNTAX-ERROR", "kind": "syntax", "message": f"not UTF-8 text: {exc}"}
                ]
                continue
            try:
                found = check_kernel(text, filename=name)
            except (RecursionError, MemoryError, ValueError) as exc:  # the file, not the grader, is the problem
                self.blocking[name] = []
                self.violations[name] = [
                    {"line": 1, "code": "SYNTAX-ERROR", "kind": "syntax", "message": f"cannot be screened: {exc}"}
                ]
                continue
            self.violations[name] = [v.as_dict() for v in found]
            block = [v for v in found if v.blocking]
            if block:
                self.blocking[name] = block

    def _screen_message(self, name: str) -> str:
        # the first line names the first finding: the console table and CI annotations show only that line
        items = self.blocking[name] or []
        found = [f"{name}:{v.line}: {v.code} ({v.kind}) {v.message}" for v in items]
        if not items:
            found = [f"{name}:{d['line']}: {d['code']} {d['message']}" for d in self.violations[name]]
        head = f"static screen: {found[0]}" if found else f"{name} did not pass the static screen"
        if len(found) > 1:
            head += f" (and {len(found) - 1} more)"
        lines = [head, f"{name} did not pass the static screen, so this test scores 0:"]
        lines += [f"  {f}" for f in found[:20]]
        if len(found) > 20:
            lines.append(f"  ... and {len(found) - 20} more")
        return "\n".join(lines)

    # ----------------------------------------------------------------------------------------- imports ----
    def check_imports(self, tests: tuple[TestSpec, ...]) -> dict[str, float]:
        """Import every file the tests need once, in the sandbox, with the rubric's short limit; returns the
        seconds each check took.  Files the static screen rejected are not imported at all."""
        wanted: dict[str, list[str]] = {}
        for t in tests:
            if t.file in self.sub.files and t.file not in self.blocking and self._api_problem(t.file) is None:
                names = wanted.setdefault(t.file, [])
                if t.function not in names:
                    names.append(t.function)

        def check(item: tuple[str, list[str]]) -> tuple[str, ImportCheck]:
            name, functions = item
            return name, check_import(
                self.sub.files[name],
                name,
                functions,
                backend=self.backend,
                target=self.config.target,
                api=self._api_of(name),
                limits=self.rubric.limits,
                timeout_s=self.rubric.limits.import_timeout_s,
                tmp_root=self.config.tmp_root,
                hidden=self.config.hidden_dirs,
                servers=self.servers,
            )

        items = sorted(wanted.items())
        if self.config.workers > 1 and len(items) > 1:
            with ThreadPoolExecutor(max_workers=min(self.config.workers, len(items))) as pool:
                done = list(pool.map(check, items))
        else:
            done = [check(item) for item in items]
        self.imports = dict(done)
        return {name: c.wall_seconds for name, c in done}

    def _api_problem(self, name: str) -> tuple[str, str] | None:
        """(status, message) when ``name`` cannot be graded because of its API: it imports both namespaces (its
        tests score 0), or this machine's hardware has no toolchain for it (not the student's fault)."""
        found = self.apis.get(name)
        if found is None:
            return None
        if found.error:
            return Status.REJECTED, found.error
        chain = self.toolchains.get(found.api or "")
        if self.backend == "neuron" and chain is not None and chain["backend"] == "none":
            return Status.GRADER_ERROR, (f"autograder error (not your fault): this machine cannot run {found.api} API "
                                    f"kernels on Trainium: {chain['detail']}")
        return None

    def _api_of(self, name: str) -> str | None:
        found = self.apis.get(name)
        return found.api if found is not None else None

    def _import_problem(self, test: TestSpec) -> tuple[str, str] | None:
        """(status, message) when the one-time import check already decided this test."""
        check = self.imports.get(test.file)
        if check is None or check.verdict == Verdict.GRADER_ERROR:
            return None  # not checked, or the check could not run: the test's own runs decide
        if check.verdict == Verdict.FAILED:
            return check.status, check.message
        if test.function in check.missing:
            return Status.ERROR, f"{test.file} defines no function {test.function!r}"
        return None

    # ------------------------------------------------------------------------------------ shared calls ----
    def plan_groups(self, tests: tuple[TestSpec, ...]) -> None:
        """Plan the calls made together or ahead of their tests.

        Grouping (when :func:`share_enabled` says so): the calls of one kernel whose inputs are the same X and W
        (the problem's input fields: conv2d cases differing only in bias, pooling and batch, a smaller batch's X
        being the first images of the larger's) are made by one :func:`grader.runner.run_group` when nkisim
        replays them (either API): correctness calls, and timed calls when timed runs compute values
        (``verify_performance_outputs``) and bring back traces: the batch-1 float32 timed runs join the batch-4
        correctness calls, the float16 pair is a group of its own.  With several workers every other timed call
        is a unit of its own too, so that it can be made on a free worker before its requirements are known
        (:func:`_run_scheduled`).  Calls of files the screen, the API check or the import check already decided
        are left out."""
        if self.backend != "nkisim":
            return
        grouping = share_enabled(max(1, self.config.workers))
        timed = self.rubric.verify_performance_outputs and self.want_trace
        ahead = timed and self.config.workers > 1
        if not grouping and not ahead:
            return
        planned: dict[tuple[str, str, str], list[tuple[TestSpec, int, dict[str, Any]]]] = {}
        for t in tests:
            if ((t.kind != "correctness" and not (timed and t.kind == "performance")) or t.file not in self.sub.files
                    or t.file in self.blocking or self._api_problem(t.file) is not None
                    or self._import_problem(t) is not None
                    or (self._api_of(t.file) or "legacy") not in REPLAYED_APIS):
                continue
            problem = problems.get(t.problem)
            cases = t.cases if t.kind == "correctness" else t.cases[:1]  # a timed test makes its first case's call
            for i, case in enumerate(cases):
                key = _input_key(problem, case) if grouping else f"{t.id}#{i}"
                planned.setdefault((t.file, t.function, key), []).append((t, i, case))
        from nkisim.core import channel

        crossing = cross_group() and self.config.workers > 1 and channel.supported()
        for planned_members in planned.values():
            parts = (_cross_split(planned_members) if crossing and len(planned_members) > 2
                     and sum(1 for t, _, _ in planned_members if t.kind == "correctness") > 1 else
                     _split(planned_members, self.config.workers if group_split() else 1))
            link = CrossLink(self.config.tmp_root) if len(parts) == 2 and crossing else None
            if link is not None:
                self.cross_links.append(link)
            for role, members in zip(("producer", "consumer", "", ""), parts, strict=False):
                if len(members) > 1 or (ahead and members[0][0].kind == "performance") or link is not None:
                    group = _CaseGroup(members, (link, role) if link is not None else None)
                    self.units.append(group)
                    for t, i, _ in members:
                        self.groups[(t.id, i)] = group

    def _wanted(self, group: _CaseGroup, member: tuple[TestSpec, int, dict[str, Any]],
                asker: tuple[str | None, int], done: dict[str, TestResult]) -> bool | None:
        """Whether a member's call is made with its group: True (asked for), False (speculatively: its test's
        requirements are not all known yet) or None (not made: its test will not make it, or not with this group's
        outcome: a requirement already failed, or its function hit a resource limit on inputs no larger)."""
        t, i, case = member
        if (t.id, i) == asker:
            return True
        if any(r in done and not done[r].passed for r in t.requires) or self._not_run(t, case) is not None:
            return None
        if t.kind == "correctness":
            return True
        # a timed call beside correctness calls, or beside a timed call whose requirements are not all known yet
        return not group.correctness and all(r in done for r in t.requires)

    def _run_group(self, group: _CaseGroup, asker: str | None, index: int,
                   done: dict[str, TestResult]) -> dict[tuple[str, int], CaseRun | None]:
        """Make the group's wanted calls (``asker``: the test whose call starts it, None when made ahead)."""
        wanted = [self._wanted(group, m, (asker, index), done) for m in group.members]
        members = [m for m, w in zip(group.members, wanted, strict=True) if w is not None]
        if not members:
            return {}
        speculative = [not w for w in wanted if w is not None]
        test0 = members[0][0]

        def generate() -> list[problems.SharedInvocation]:
            # the large inputs drawn straight into their input files (KernelServers.input_array)
            with problems.inputs_into(self.servers.input_array if maker is not None and self.servers else None):
                shared = [self._invocation(t, case) for t, _, case in members]
            if maker is not None and self.servers is not None:
                # the group's input files too, while its calls are specialized: the group process is launched
                # once they exist (runner._group_inputs finds them here), and writing the 224x224 batch-4 X and
                # the batch-1 one after the specializations held the critical path 0.2-0.9 s
                for sh in shared:
                    for arr in sh.inv.args:
                        if not arr.flags.writeable:
                            self.servers.input_file(arr)
            return shared

        def prefetch(shared: list[problems.SharedInvocation]) -> list[problems.Invocation]:
            for (t, _, case), sh in zip(members, shared, strict=True):
                self._prefetch_reference(t, case, sh)
            return [sh.inv for sh in shared]

        def made() -> list[problems.Invocation]:
            # the references once the calls are specialized (runner.run_group asks for the inputs then): their
            # thread (the 224x224 batch-4 float64 convolution, 5 CPU s at the grader's priority) took a third of
            # the cores from the critical group's specializations, which the group process waits for, while it
            # has seconds to spare (it is needed when the group ends); and a call whose specialization fails
            # needs no reference
            if first:
                self.slots.keep_first(0)  # the specializations are made: the other calls may start
            return prefetch(future.result())

        # the calls are specialized from their stand-ins while this grading generates their inputs (a 224x224
        # batch-4 X: 0.5 s quiet, 2-9 s loaded); a problem that cannot tell its calls' signatures without the
        # inputs generates them first
        stand_ins = [problems.get(t.problem).stand_in(case) for t, _, case in members]
        maker: ThreadPoolExecutor | None = None
        first = False  # other calls held back while this group's calls are specialized (Slots.keep_first)
        inputs: Any = None
        if all(s is not None for s in stand_ins):
            if self.servers is not None:
                # generate() writes the input files into it while the calls are specialized: it must exist
                # before their specializing children start, whose jails then mask it (L3: no child that runs the
                # kernel's Python sees input data)
                self.servers.reserve_inputs_dir()
            maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grader-inputs")
            future = maker.submit(generate)
            invs, inputs = list(stand_ins), made
        else:
            invs = prefetch(generate())
        try:
            size = sum(float(a.size) for inv in invs for a in inv.args)
            label = ",".join(f"{t.id}#{i}" + ("?" * a) for (t, i, _), a in zip(members, speculative, strict=True))
            nice = self._nice_for(members)
            critical = group in self.critical_units
            # while the critical group's calls are specialized, which its process waits for, no other call starts
            # (round 12): they would share the cores with them
            first = (critical and inputs is made and bool(self.nice) and not nice
                     and critical_first(self.config.workers))
            with self.slots.hold(size, speculative=all(speculative), label=label + f" nice {nice}" * bool(nice),
                                 critical=critical), \
                    background(nice):
                group.held = True
                if first:
                    self.slots.keep_first(CRITICAL_FIRST_S)
                runs, figures = run_group(
                    self.sub.files[test0.file], test0.file, test0.function, invs,
                    [t.timeout_s * self.config.timeout_scale for t, _, _ in members], want_trace=self.want_trace,
                    target=self.config.target, limits=self.rubric.limits, tmp_root=self.config.tmp_root,
                    hidden=self.config.hidden_dirs, servers=self.servers, api=self._api_of(test0.file) or "legacy",
                    speculative=speculative, inputs=inputs, cross=group.cross,
                    # the critical group's specializations side by side: everything else waits for it
                    parallel=self.config.workers if self.nice and not nice else 1,
                    # a call judged (and a timed one costed) as soon as its member of the group ends (the batch-1
                    # float32 pair: after about a quarter of the 224x224 group), not after the group's process
                    early=lambda k, run: self._judge_ahead([members[k]], [run], correctness=True),
                )
        finally:
            if first:
                self.slots.keep_first(0)  # a specialization failed (made() never asked for the inputs)
            if maker is not None:
                maker.shutdown(wait=True)
        with self._lock:
            self.share_figures["groups"] += len(members) > 1
            self.share_figures["calls"] += sum(1 for r in runs if r is not None)
            self.share_figures["speculative"] += sum(1 for r, a in zip(runs, speculative, strict=True)
                                                     if r is not None and a)
            for key in ("hits", "misses", "alone"):
                self.share_figures[key] += figures[key]
        for run in runs:
            if run is not None:
                self.features.update(run.features)
        self._judge_ahead(members, runs)
        return {(t.id, i): run for (t, i, _), run in zip(members, runs, strict=True)}

    # ------------------------------------------------------------------------------ resource-limit marks ----
    def _not_run(self, test: TestSpec, case: dict[str, Any]) -> str | None:
        """Why this call is not made: the same function already hit a resource limit on inputs no larger."""
        with self._lock:
            mark = self.exhausted.get((test.file, test.function))
        if mark is None or problems.get(test.problem).input_elements(case) < mark[0]:
            return None
        return f"not run: {test.function} {mark[1]} in {mark[2]}"

    def _mark(self, test: TestSpec, case: dict[str, Any], run: CaseRun) -> None:
        if not run.exhausted:
            return
        size = problems.get(test.problem).input_elements(case)
        key = (test.file, test.function)
        with self._lock:
            if key not in self.exhausted or size < self.exhausted[key][0]:
                self.exhausted[key] = (size, run.exhausted, test.id)

    # ------------------------------------------------------------------------------------------- tests ----
    def new_result(self, test: TestSpec) -> TestResult:
        return TestResult(
            test.id, test.name, test.part, test.kind, test.points, test.extra_credit, test.visibility, test.tags
        )

    def run_test(self, test: TestSpec, done: dict[str, TestResult]) -> TestResult:
        self._released.on = False
        try:
            with timeline.span("test", test.id):
                return self._run_test(test, done)
        finally:
            if self._released.on:
                self.slots.add_claims(1)  # _run_scheduled releases the test's claim once its dependents started

    def _calls_made(self, test: TestSpec) -> None:
        """This test's thread has made its last kernel call: with several workers, a test no other test requires
        gives up its claim on a worker while it judges and costs that call in the parent, so that a call made ahead
        (the float16 pair) can take the free slot meanwhile (``_Slots.wait_idle``).  Before, the slot stayed idle
        until the test ended: 0.76 s in a quiet grading after ``part1.transpose_ec``'s 4096x4096 call, whose
        reference and judging then ran, and the float16 pair made ahead after it ended 0.6 s after the group
        (docs/grading.md, round 10).  A required test keeps its claim until its dependents have started, so that
        no call made ahead slips in before theirs."""
        if self.config.workers > 1 and test.id not in self.required and not self._released.on:
            self._released.on = True
            self.slots.add_claims(-1)

    def _run_test(self, test: TestSpec, done: dict[str, TestResult]) -> TestResult:
        res = self.new_result(test)
        t0 = time.perf_counter()
        try:
            if test.file not in self.sub.files:
                res.status, res.message = Status.MISSING, self.sub.problems.get(test.file, f"{test.file} is missing")
            elif (api_problem := self._api_problem(test.file)) is not None:
                res.status, res.message = api_problem
            elif test.file in self.blocking:
                res.status, res.message = Status.REJECTED, self._screen_message(test.file)
            elif (failed := self._import_problem(test)) is not None:
                res.status, res.message = failed
            else:
                unmet = [r for r in test.requires if not (r in done and done[r].passed)]
                if unmet:
                    res.status = Status.SKIPPED
                    res.message = "skipped: needs a passing " + ", ".join(unmet) + " first"
                elif test.kind == "correctness":
                    self._correctness(test, res, done)
                else:
                    self._performance(test, res, done)
                self._note_disallowed(test, res)
        except Exception as exc:  # noqa: BLE001 - a grader bug must not look like a student failure
            res.status = Status.GRADER_ERROR
            res.score = 0.0
            res.message = f"autograder error (not your fault): {type(exc).__name__}: {exc}\n" + "".join(
                traceback.format_exception(exc)[-6:]
            )
        res.seconds = time.perf_counter() - t0
        return res

    def _note_disallowed(self, test: TestSpec, res: TestResult) -> None:
        """Name the handout-forbidden calls the test's file makes (grader/policy.py); the score is unchanged."""
        if not test.disallowed_apis or res.status == Status.SKIPPED:
            return
        source = self.sub.files[test.file].decode("utf-8", errors="replace")
        uses = policy.disallowed_uses(source, test.disallowed_apis)
        if uses:
            res.message = (res.message + "\n" if res.message else "") + policy.policy_note(test.file, uses)
        reorders = list(self.reorders.get(test.id, ()))
        if reorders:
            res.message = (res.message + "\n" if res.message else "") + policy.reorder_note(test.file, reorders)

    def early_inputs(self, tests: tuple[TestSpec, ...]) -> threading.Thread | None:
        """With several workers, start generating the inputs of the grading's critical calls (the rubric's largest
        correctness cases and the calls on the same X and W: the 224x224 group's batch-4 X and W, the batch-1 X of
        its float32 timed calls) in a thread now, beside the static screen and the import check, which keep one
        core busy for 0.3-0.4 s while the other idles; the group's calls then find them in the memo (or wait for
        the generation under way: ``refcache.memoised``) instead of generating them after the import check, on the
        critical path (0.8 CPU s, 1.4-1.8 s wall beside the group's specializations).  Only arrays in this
        process's memory: the input files are written by the group as before (docs/grading-security.md L3), so a
        submission the screen or the import check stops costs this generation and nothing else."""
        if self.config.workers <= 1 or self.backend != "nkisim":
            return None
        sizes = [(problems.get(t.problem).input_elements(c), _input_key(problems.get(t.problem), c))
                 for t in tests if t.kind == "correctness" and t.file in self.sub.files for c in t.cases]
        largest = max((n for n, _ in sizes), default=0)
        keys = {key for n, key in sizes if n >= largest}
        timed = self.rubric.verify_performance_outputs
        calls: list[tuple[int, TestSpec, dict[str, Any]]] = []
        for t in tests:
            if t.file not in self.sub.files or not (t.kind == "correctness" or (timed and t.kind == "performance")):
                continue
            problem = problems.get(t.problem)
            for case in (t.cases if t.kind == "correctness" else t.cases[:1]):
                if _input_key(problem, case) in keys:
                    calls.append((problem.input_elements(case), t, case))
        if not calls:
            return None
        ordered = sorted(calls, key=lambda c: -c[0])  # the largest first (stable): the group waits for it first

        outputs = self._early_outputs([(t, case) for _, t, case in ordered])

        def generate() -> None:
            # the large inputs drawn straight into their input files (KernelServers.input_array), whose directory
            # exists before the import check's children start (_grade_loaded), so that they mask it (L3)
            try:
                with problems.inputs_into(self.servers.input_array if self.servers is not None else None):
                    for _, t, case in ordered:
                        try:
                            self._invocation(t, case)
                        except Exception:  # noqa: BLE001 - the call's own generation raises it again, where reported
                            return
            finally:
                if outputs is not None:  # ends with this thread, which the grading's close joins
                    outputs.join()

        thread = threading.Thread(target=generate, name="grader-early-inputs", daemon=True)
        thread.start()
        return thread

    def _early_outputs(self, calls: list[tuple[TestSpec, dict[str, Any]]]) -> threading.Thread | None:
        """Prepare the output files of the critical calls (:meth:`early_inputs`'s, the 224x224 group's members), in
        a thread at the lowest priority started now (``KernelServers.prepare_outputs``): what a core left idle beside
        the screen and the import check does instead of the group's process on the critical path (docs/grading.md,
        round 12, faults).  A file not complete when the group starts is made by the replay as before.
        ``GRADER_PREPARE_OUTPUTS=0`` prepares none (for comparisons on one tree)."""
        if self.servers is None or os.environ.get("GRADER_PREPARE_OUTPUTS", "1") == "0":
            return None
        shapes = []
        for t, case in calls:
            stand_in = problems.get(t.problem).stand_in(case)
            if stand_in is not None:
                shapes.append((tuple(stand_in.out_shape), stand_in.out_dtype))
        servers = self.servers

        def prepare() -> None:
            try:  # this thread only (Linux: a thread id is a PRIO_PROCESS target)
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            except (AttributeError, OSError):
                pass
            servers.prepare_outputs(shapes)

        if not shapes:
            return None
        thread = threading.Thread(target=prepare, name="grader-early-outputs", daemon=True)
        thread.start()
        return thread

    def _judge_timed(self, test: TestSpec, case: dict[str, Any], shared: problems.SharedInvocation,
                     run: CaseRun) -> tuple[Any, Any]:
        """A timed call's verdict (None: its outputs are not verified) and, unless it failed, the cost model's
        report of its trace (None off nkisim): what :meth:`_performance` judges, a pure function of the run."""
        verdict = None
        if self.rubric.verify_performance_outputs:
            with timeline.span("expected", test.id):
                expected = self._expected(test, case, shared)
            with timeline.span("judge", test.id):
                verdict = judge_output(run.outputs, expected, shared.inv.out_dtype, self.rubric.tolerances,
                                       reveal=self.config.seed_mode != "secret")
            if not verdict.passed:
                return verdict, None
        if self.backend != "nkisim":
            return verdict, None
        from nkisim.perf import estimate

        # hints nkisim granted without checking them (listed in the trace; none when values were computed) are off
        trace = plausibility.without_unchecked_promises(run.trace)
        with timeline.span("estimate", test.id):
            return verdict, estimate(trace, self.config.target)

    def _judge_ahead(self, members: list[tuple[TestSpec, int, dict[str, Any]]],
                     runs: list[CaseRun | None], correctness: bool = False) -> None:
        """With several workers, judge and cost a group's timed calls as soon as the group returns, in a thread of
        their own, instead of when their tests start (after the correctness tests they require, which end when the
        224x224 group does): the float16 pair made ahead and the batch-1 float32 pair made with the group were
        judged and costed in the grading's tail, 0.3-0.4 s after the last kernel (docs/grading.md, round 10); a
        group's member as soon as it ends, while the group still runs (runner.run_group's ``early``: round 12),
        and then a correctness call's output too (``correctness``: the batch-4 224x224 members end 0.1-0.4 s apart
        and before their process does, whose test would judge them after it).  The verdict and the report are the
        ones the test computes (pure functions of the run); a test that does not run, or whose call's outcome is
        another run, leaves them unused, and one whose judging here failed judges again itself."""
        if self.judge_pool is None or self.backend != "nkisim":
            return
        for (t, i, case), run in zip(members, runs, strict=True):
            if run is None or run.verdict != Verdict.OK:
                continue
            if t.kind == "performance":
                if run.trace is None:
                    continue
                judge: Any = self._judge_timed
            elif correctness and t.kind == "correctness":
                judge = self._judge_correct
            else:
                continue
            with self._judge_lock:
                got = self.judged_ahead.get((t.id, i))
                if (got is not None and got[0] is run) or (t.id, i) in self.judge_taken:
                    continue  # judged as soon as its member of the group ended (``early``), or its test judges it
                ref = self.ref_futures.get((t.id, id(case)))
                if ref is not None and not ref.done():
                    # judged once the reference thread has made its reference: judging now would compute it again
                    # in this thread (a batch-1 224x224 float64 convolution, 1.5 CPU s, where the reference thread
                    # slices the batch-4 one's in 0.02 s)
                    ref.add_done_callback(lambda _, m=(t, i, case), r=run: self._judge_ahead([m], [r], correctness))
                    continue
                try:
                    shared = self._invocation(t, case)  # the memo's: the group generated them
                    self.judged_ahead[(t.id, i)] = (run, self.judge_pool.submit(judge, t, case, shared, run))
                except Exception:  # noqa: BLE001 - the test judges its call itself and reports what goes wrong
                    continue

    def _judged_ahead(self, test: TestSpec, index: int, run: CaseRun) -> Any:
        """What :meth:`_judge_ahead` made of this test's call ``run``, or None (not judged ahead, judged ahead from
        another run, or that judging failed: the caller judges).  Not waited for while still queued behind other
        calls' judging: it is taken back, and the caller judges at once."""
        with self._judge_lock:
            self.judge_taken.add((test.id, index))
            ahead = self.judged_ahead.pop((test.id, index), None)
        if ahead is None or ahead[0] is not run or ahead[1].cancel():
            return None
        try:
            return ahead[1].result()
        except Exception:  # noqa: BLE001 - judged again by the caller, where what goes wrong is reported
            return None

    def _judge_correct(self, test: TestSpec, case: dict[str, Any], shared: problems.SharedInvocation,
                       run: CaseRun) -> Any:
        """A correctness call's verdict on its outputs (grader.judge): what :meth:`_correctness` judges, a pure
        function of the run."""
        with timeline.span("expected", test.id):
            expected = self._expected(test, case, shared)
        with timeline.span("judge", test.id):
            return judge_output(run.outputs, expected, shared.inv.out_dtype, self.rubric.tolerances,
                                reveal=self.config.seed_mode != "secret")

    def _invocation(self, test: TestSpec, case: dict[str, Any]) -> problems.SharedInvocation:
        problem = problems.get(test.problem)
        seed = problems.case_seed(self.seed, _input_key(problem, case), 0)
        with timeline.span("inputs", test.id):
            return problem.shared_invocation(case, seed)

    def _expected(self, test: TestSpec, case: dict[str, Any], shared: problems.SharedInvocation) -> Any:
        """What the judge compares the output with (an array, or the problem's slice-by-slice grader.judge.Expected)."""
        precision = problems.reference_precision(test.problem, case, self.rubric.tolerances)
        return problems.get(test.problem).judged(self.store, shared, precision)

    def _prefetch_reference(self, test: TestSpec, case: dict[str, Any], shared: problems.SharedInvocation) -> None:
        """With several workers, start computing a call's reference beside the call (the judge's ``_expected``
        then finds it in the reference store): the float64 convolution of a 224x224 batch-4 case takes as long as
        a call, and computed after it, it held the worker while no kernel ran."""
        if self.ref_pool is None:
            return

        def compute() -> None:
            try:
                with timeline.span("reference", test.id):
                    expected = self._expected(test, case, shared)
                # what makes judging it cheaper, made by a low-priority thread on what the kernels leave of the
                # cores (conv2d's max-pool and extremes: grader/problems/conv2d.py prepare_later), so that the
                # judges in the grading's tail, after the last kernel, do less
                ahead = getattr(expected, "prepare_later", None)
                if callable(ahead):
                    ahead()
            except Exception:  # noqa: BLE001 - the judge computes it again and reports what goes wrong
                pass

        self.ref_futures[(test.id, id(case))] = self.ref_pool.submit(compute)

    def _nice_for(self, calls: list[tuple[TestSpec, int, dict[str, Any]]]) -> int:
        """0 for calls on the grading's critical path (one of them a correctness call of the rubric's largest
        inputs: the batch-4 224x224 convolutions, alone or grouped), else the background's ``nice``."""
        if not self.nice or any(t.kind == "correctness" and problems.get(t.problem).input_elements(case)
                                >= self.critical_size for t, _, case in calls):
            return 0
        return self.nice

    def _run(self, test: TestSpec, case: dict[str, Any], inv: problems.Invocation, *, mode: str,
             want_trace: bool) -> CaseRun:
        nice = self._nice_for([(test, 0, case)])
        label = f"{test.id} ({mode})" + f" nice {nice}" * bool(nice)
        with self.slots.hold(sum(float(a.size) for a in inv.args), label=label), background(nice):
            return self._run_held(test, inv, mode=mode, want_trace=want_trace)

    def _run_held(self, test: TestSpec, inv: problems.Invocation, *, mode: str, want_trace: bool) -> CaseRun:
        run = run_case(
            self.sub.files[test.file],
            test.file,
            test.function,
            inv,
            mode=mode,
            want_trace=want_trace,
            backend=self.backend,
            target=self.config.target,
            api=self._api_of(test.file),
            limits=self.rubric.limits,
            timeout_s=test.timeout_s * self.config.timeout_scale,
            tmp_root=self.config.tmp_root,
            hidden=self.config.hidden_dirs,
            servers=self.servers,
        )
        self.features.update(run.features)
        return run

    @staticmethod
    def _failed_run(res: TestResult, run: CaseRun, index: int, n: int) -> None:
        label = f"case {index + 1}/{n}: " if n > 1 else ""
        res.status = (
            Status.GRADER_ERROR if run.verdict == Verdict.GRADER_ERROR
            else (Status.TIMEOUT if run.verdict == Verdict.TIMEOUT else Status.ERROR)
        )
        res.message = label + run.message

    def _correctness(self, test: TestSpec, res: TestResult, done: dict[str, TestResult]) -> None:
        n = len(test.cases)
        for i, case in enumerate(test.cases):
            if self._skip_case(test, case, res, i, n):
                return
            # a grouped call first: the group generates the inputs while it specializes its calls (then this is
            # the memo's)
            group = self.groups.get((test.id, i))
            run = group.run_for(self, test, i, done) if group is not None else None
            shared = self._invocation(test, case)
            inv = shared.inv
            if run is None:  # not grouped, or the group could not make it (a grader error its starter reports)
                self._prefetch_reference(test, case, shared)
                run = self._run(test, case, inv, mode="full", want_trace=self.want_trace)
            if i == n - 1:
                self._calls_made(test)
            self._mark(test, case, run)
            rec = CaseRecord(
                i, run.verdict, run.message, run.wall_seconds, run.kernel_seconds, output_tail=run.output_tail[-2000:],
                cpu_seconds=run.cpu_seconds,
            )
            res.cases.append(rec)
            if run.verdict != Verdict.OK:
                self._failed_run(res, run, i, n)
                return
            verdict = self._judged_ahead(test, i, run) or self._judge_correct(test, case, shared, run)
            _release_outputs(run)
            rec.verdict = Verdict.PASSED if verdict.passed else Verdict.FAILED
            rec.message, rec.max_abs_error = verdict.message, verdict.max_abs_error
            if run.trace is not None and policy.DMA_TRANSPOSE in test.disallowed_apis:
                self.reorders.setdefault(test.id, {}).update(dict.fromkeys(policy.dma_reorders(run.trace)))
            if not verdict.passed:
                res.status = Status.FAILED
                described = problems.get(test.problem).describe(case)
                res.message = (f"case {i + 1}/{n} {described}: " if n > 1 else "") + verdict.message
                return
            problem = _work_problem(test, run, inv)
            if problem:
                rec.verdict, rec.message = Verdict.FAILED, problem
                res.status = Status.FAILED
                res.message = (f"case {i + 1}/{n}: " if n > 1 else "") + problem
                return
        res.status, res.score = Status.PASSED, test.points
        res.message = f"all {n} case(s) match the NumPy reference" if n > 1 else res.cases[0].message

    def _targets(self, test: TestSpec, case: dict[str, Any]) -> tuple[float, float]:
        """(relaxed_us, optimized_us): the rubric's fixed numbers, else the problem's targets from the staff
        kernels' modelled latencies of the test file's API."""
        spec = test.thresholds
        if spec.get("source") == "fixed":
            optimized = float(spec["optimized_us"])
            return float(spec.get("relaxed_us", optimized)), optimized
        return problems.get(test.problem).targets(
            spec, case, self.backend, self.config.target, factor=self.rubric.threshold_factor,
            timings=self._reference_timings(test.file),
        )

    def _reference_timings(self, name: str) -> dict[str, float]:
        """The modelled latencies of the staff kernels of ``name``'s API (each API is timed against its own)."""
        if self.backend != "nkisim":
            return {}  # hardware: the published targets; no modelled latencies
        return ensure_reference_timings(self.backend, self.config.target, self._api_of(name))

    def _skip_case(self, test: TestSpec, case: dict[str, Any], res: TestResult, index: int, n: int) -> bool:
        why = self._not_run(test, case)
        if why is None:
            return False
        res.cases.append(CaseRecord(index, Verdict.NOT_RUN, why, 0.0))
        res.status, res.message = Status.SKIPPED, (f"case {index + 1}/{n}: " if n > 1 else "") + why
        return True

    def _performance(self, test: TestSpec, res: TestResult, done: dict[str, TestResult]) -> None:
        case = test.cases[0]
        if self._skip_case(test, case, res, 0, 1):
            return
        relaxed, optimized = self._targets(test, case)
        res.relaxed_us, res.optimized_us = relaxed, optimized
        verify = self.rubric.verify_performance_outputs
        mode = "full" if verify else "timing"
        group = self.groups.get((test.id, 0))  # grouped only when verified (mode "full") with traces
        run = group.run_for(self, test, 0, done) if group is not None else None  # it generates the inputs
        shared = self._invocation(test, case)
        inv = shared.inv
        if run is None:
            if verify:
                self._prefetch_reference(test, case, shared)
            run = self._run(test, case, inv, mode=mode, want_trace=True)  # nkisim: the trace; neuron: nki.benchmark
        self._calls_made(test)
        self._mark(test, case, run)
        if run.verdict == Verdict.OK and self.backend == "nkisim" and run.trace is None:
            raise GraderError("no instruction trace came back from a timed run (is nkisim.core.traceio installed?)")
        res.cases.append(
            CaseRecord(
                0, run.verdict, run.message, run.wall_seconds, run.kernel_seconds, output_tail=run.output_tail[-2000:],
                cpu_seconds=run.cpu_seconds,
            )
        )
        if run.verdict != Verdict.OK:
            self._failed_run(res, run, 0, 1)
            return
        verdict, report = self._judged_ahead(test, 0, run) or (None, None)
        if verdict is None and report is None:
            verdict, report = self._judge_timed(test, case, shared, run)
        _release_outputs(run)
        if verdict is not None and not verdict.passed:
            res.status = Status.FAILED
            res.message = "the timed run's output is wrong, so its latency does not count: " + verdict.message
            return
        if report is not None:
            latency = float(report.nc_latency_us)
            # the report's fields without the critical path and the schedule (report.to_dict() deep-copies the
            # schedule first: 2-3 CPU s per graded submission)
            res.perf = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)
                        if f.name not in ("critical_path", "schedule")}
            res.mfu = float(report.mfu)
            problem = _work_problem(test, run, inv)
            if problem:
                res.status, res.latency_us = Status.FAILED, latency
                res.message = "the timed run does not count: " + problem
                return
        else:
            latency = float(run.hardware_p99_us or 0.0)
        res.latency_us = latency
        if plausibility.withhold_credit(res, inv, self.config.target, run.trace):
            return
        res.timing_counts = True
        tiers = int(test.thresholds.get("tiers", 2))
        tier = thresholds.credit_tier(latency, relaxed, optimized, tiers)
        if tier == "full":
            res.status, res.score = Status.PASSED, test.points
            res.message = f"p99 latency {latency:.1f} us <= target {optimized:.1f} us: full credit"
        elif tier == "partial":
            res.status = Status.PARTIAL
            res.score = round(test.points * self.rubric.partial_credit, 6)
            res.message = (
                f"p99 latency {latency:.1f} us: above the optimized target {optimized:.1f} us, within the relaxed "
                f"target {relaxed:.1f} us: {self.rubric.partial_credit:.0%} credit"
            )
        else:
            res.status = Status.FAILED
            limit = relaxed if tiers > 1 else optimized
            res.message = f"p99 latency {latency:.1f} us is above the target {limit:.1f} us: no credit"
        if res.mfu:  # a transpose does no matmul work: "MFU 0.0%" says nothing
            res.message += f" (MFU {res.mfu:.1%})"
        if self.backend == "nkisim":
            res.boundary_distance = thresholds.boundary_distance(latency, relaxed, optimized, tiers)
            res.near_boundary = res.boundary_distance < self.rubric.borderline_margin
            if res.near_boundary:
                res.message += (
                    f". Within {self.rubric.borderline_margin:.0%} of a target: this latency is nkisim's estimate, "
                    "and on Trainium the test may earn a different tier"
                )


def _release_outputs(run: CaseRun) -> None:
    """Drop a judged call's outputs, here and now, in the judging thread.  A call's output is a read-only map of
    a file its case directory no longer names (runner._load_output), so dropping the map frees the file's pages:
    the 224x224 group's three batch-4 outputs are 460 MB of 4 KiB tmpfs pages.  Kept in the group's runs until
    the grading ended, they were all unmapped and freed in its last step, on one core, after the last judge
    (0.15-0.3 s of the grader's main thread in the tail, kernel time: munmap and shmem_evict_inode); freed as
    each judge ends, the other judges of the tail run beside it.  Nothing reads a call's outputs after its
    verdict (the trace, which the work checks and the cost model read, stays)."""
    run.outputs = []


def _traceio_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("nkisim.core.traceio") is not None


def _work_problem(test: TestSpec, run: CaseRun, inv: problems.Invocation) -> str | None:
    """Why the traced run cannot have computed its output (None when it plausibly did, or without a trace)."""
    if run.trace is None:
        return None
    return problems.get(test.problem).work_problem(run.trace, inv)


def _run_phases(grading: _Grading, tests: tuple[TestSpec, ...], workers: int) -> list[TestResult]:
    """Correctness tests first, then the tests that depend on them; one at a time (``workers`` 1, each grading of
    a batch), else scheduled (:func:`_run_scheduled`)."""
    if workers > 1:
        return _run_scheduled(grading, tests, workers)
    done: dict[str, TestResult] = {}
    remaining = list(tests)
    while remaining:
        ready = [t for t in remaining if all(r in done for r in t.requires)]
        if not ready:  # cycle: should have been rejected by the rubric loader
            raise GraderError(f"tests {[t.id for t in remaining]} have circular requirements")
        for t in ready:
            done[t.id] = grading.run_test(t, done)
        remaining = [t for t in remaining if t.id not in done]
    return [done[t.id] for t in tests]


def _run_scheduled(grading: _Grading, tests: tuple[TestSpec, ...], workers: int) -> list[TestResult]:
    """Several workers: each test starts as soon as the tests it requires are done (a thread each), and its kernel
    calls take the grading's ``workers`` slots, the largest waiting call first (:class:`_Slots`); references are
    computed beside the calls (``_prefetch_reference``).  When a slot is free and no call waits for it, the next
    unit of timed calls (:meth:`_Grading.plan_groups`) is made ahead, speculatively: its tests take the outcomes
    if they run, as they would have made them.  A test's result does not depend on this order: its requirements
    are decided before it starts, and the one thing shared between tests (a function's resource-limit mark) was
    already raced by two workers."""
    done: dict[str, TestResult] = {}
    remaining = list(tests)
    stop = threading.Event()
    ahead = [u for u in grading.units if not u.correctness]
    ahead.sort(key=lambda u: -sum(problems.get(t.problem).input_elements(c) for t, _, c in u.members))

    def speculate() -> None:
        while grading.slots.wait_idle(stop):
            unit = next((u for u in ahead if not u.started), None)
            if unit is None:
                return
            try:
                unit.prefetch(grading, done)
            except Exception:  # noqa: BLE001 - its tests make their calls alone and report what goes wrong
                continue

    helper = threading.Thread(target=speculate, name="grader-ahead", daemon=True) if ahead else None
    running: dict[Future[TestResult], TestSpec] = {}
    released = 0
    # a slot kept for each group of the largest correctness calls (the grading's critical path) until it takes one,
    # or until its correctness tests all ended without starting it
    largest = max((problems.get(t.problem).input_elements(c) for u in grading.units if u.correctness
                   for t, _, c in u.members if t.kind == "correctness"), default=0)
    grading.critical_units = [u for u in grading.units if u.correctness and any(
        t.kind == "correctness" and problems.get(t.problem).input_elements(c) >= largest for t, _, c in u.members)]
    pending = list(grading.critical_units)
    grading.slots.reserve(len(pending))
    # the critical groups' tests are started first: one of them makes the group, whose specializations its process
    # waits for, and a thread started behind the others' began its group 0.01-0.1 s later (their first inputs,
    # references and calls took the interpreter meanwhile); a test's result does not depend on this order
    first = {t.id for u in grading.critical_units for t, _, _ in u.members if t.kind == "correctness"}
    with ThreadPoolExecutor(max_workers=max(workers, len(tests)), thread_name_prefix="grader-test") as pool:
        try:
            while remaining or running:
                ready = [t for t in remaining if all(r in done for r in t.requires)]
                if not ready and not running:  # cycle: should have been rejected by the rubric loader
                    raise GraderError(f"tests {[t.id for t in remaining]} have circular requirements")
                # a test claims a worker from before its thread starts until its dependents are started: no
                # speculative call slips in between
                grading.slots.add_claims(len(ready) - released)
                released = 0
                for t in sorted(ready, key=lambda t: t.id not in first):
                    running[pool.submit(grading.run_test, t, done)] = t
                remaining = [t for t in remaining if t not in ready]
                if helper is not None and helper.ident is None:
                    helper.start()  # after the first tests' claims
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in finished:
                    t = running.pop(fut)
                    done[t.id] = fut.result()  # run_test never raises: its own failures are grader errors
                released = len(finished)
                for u in [u for u in pending if u.started or all(
                        t.id in done for t, _, _ in u.members if t.kind == "correctness")]:
                    pending.remove(u)
                    if not u.started:  # no test made it: its slot is free for the others
                        grading.slots.reserve(-1)
        finally:
            stop.set()
            grading.slots.reserve(-grading.slots.reserved)
            grading.slots.wake()
            if helper is not None and helper.ident is not None:
                helper.join()
            grading.slots.add_claims(-released)
    return [done[t.id] for t in tests]


# The gradings this process keeps until it ends (:func:`retain_until_exit`), else None: each is freed as it returns.
_RETAINED: list[Any] | None = None


def retain_until_exit() -> None:
    """Keep every grading's objects from now on instead of freeing them as the grading returns: for a process that
    ends right after its one grading without freeing anything (``python -m grader grade``, grader/cli.py ``run``).
    Freeing a staff grading's objects -- the 19 calls' traces and their costed schedules, the inputs, references
    and outputs -- took 0.18-0.39 s of the grading's clock one Python object at a time (round 12, tail); the
    process's exit hands the memory back in one go.  Never for a process that grades on (a batch worker)."""
    global _RETAINED
    if _RETAINED is None:
        _RETAINED = []


def grade_loaded(sub: Submission, config: GradeConfig) -> GradeRecord:
    """Grade an already-read submission (raises GraderError / RubricError for grader-side problems)."""
    recorded = timeline.start(submission=str(sub.path), workers=max(1, config.workers))
    figures: dict[str, Any] = {}
    try:
        return _grade_loaded(sub, config, figures)
    finally:
        timeline.finish(recorded, **figures)


def _grade_loaded(sub: Submission, config: GradeConfig, figures: dict[str, Any]) -> GradeRecord:
    started_at, t0, cpu0 = now(), time.perf_counter(), _cpu_seconds()
    scratch.reap_stale(config.tmp_root)  # what SIGKILLed graders left there (first grading of the process only)
    fast = scratch.fast_root(config.tmp_root)
    if fast != config.tmp_root:
        scratch.reap_stale(fast)  # and in the tmpfs of the replays' scratch: memory until removed
    rubric = load_rubric(config.rubric_path).select(list(config.only) or None)
    backend = resolve_backend(config.backend)
    if config.target not in ("trn2", "trn1"):
        raise GraderError(f"--target must be trn2 or trn1, got {config.target!r}")
    seed = effective_seed(rubric, sub.content_hash, config)
    grading = _Grading(sub, rubric, config, backend, seed)
    early: threading.Thread | None = None
    try:
        if grading.servers is not None:
            # the shared input files' directory exists before any child that runs the kernel's Python starts (the
            # import check's too), so that every one of them masks it: they run beside the generation of inputs
            # into their files (early_inputs, the groups) (L3)
            grading.servers.reserve_inputs_dir()
            # the servers the import check forks start beside the screen, not after it (round 11)
            grading.servers.prestart(sorted({grading._api_of(t.file) or "legacy" for t in rubric.tests
                                             if t.file in sub.files and grading._api_problem(t.file) is None}))
        early = grading.early_inputs(rubric.tests)
        t_screen = time.perf_counter()
        with timeline.span("screen"):
            grading.screen()
        screen_s = time.perf_counter() - t_screen
        with timeline.span("imports"):
            import_s = grading.check_imports(rubric.tests)
        grading.plan_groups(rubric.tests)
        results = _run_phases(grading, rubric.tests, max(1, config.workers))
    finally:
        with timeline.span("close"):
            if early is not None:
                early.join()
            if grading.judge_pool is not None:
                grading.judge_pool.shutdown(wait=True, cancel_futures=True)
            if grading.ref_pool is not None:
                grading.ref_pool.shutdown(wait=True, cancel_futures=True)
            problems.settle()  # the judges' background preparations: no thread outlives the grading
            if grading.servers is not None:
                grading.servers.close()  # before the CPU count: a server's calls are counted once it is reaped
            for link in grading.cross_links:  # a half that never ran leaves its channel file behind otherwise
                link.close()
    failed = [r for r in results if r.status == Status.GRADER_ERROR]
    cpu_grader, cpu_kernels = (b - a for a, b in zip(cpu0, _cpu_seconds()))
    figures.update(cpu_grader_s=round(cpu_grader, 3), cpu_kernels_s=round(cpu_kernels, 3))
    if _RETAINED is not None:
        _RETAINED.append(grading)
    return build_record(
        sub.path,
        config,
        student=sub.student,
        content_hash=sub.content_hash,
        rubric=rubric,
        backend=backend,
        seed=seed,
        status=RecordStatus.ERROR if failed else RecordStatus.GRADED,
        tests=results,
        started_at=started_at,
        seconds=time.perf_counter() - t0,
        tool_version=thresholds.tool_version(),
        isolation=sorted(grading.features or detect_isolation().features),
        error="; ".join(f"{r.id}: {r.message.splitlines()[0]}" for r in failed) or None,
        violations=grading.violations,
        timings={
            "screen_s": screen_s,
            **{f"import:{name}": sec for name, sec in import_s.items()},
            **{f"test:{r.id}": r.seconds for r in results},
            **grading.store.stats.as_timings(),
            # sandboxed process start-ups (warm servers + one-off processes) for how many kernel calls
            **(grading.servers.as_timings() if grading.servers is not None else {}),
            # correctness calls replayed together (runner.run_group): groups, calls, products reused / computed
            **({f"share:{k}": float(v) for k, v in grading.share_figures.items()} if grading.groups else {}),
            **({"share:unused": float(sum(g.unused() for g in {id(g): g for g in grading.groups.values()}.values()))}
               if grading.groups else {}),
            # CPU seconds of this process (inputs, references, judging, costing traces) and of the sandboxed
            # kernel processes; exact when nothing else runs in the process meanwhile (a batch worker)
            "cpu:grader_s": cpu_grader,
            "cpu:kernels_s": cpu_kernels,
        },
        versions=tool_versions(backend, grading.toolchains),
        apis={name: found.found for name, found in grading.apis.items()},
        toolchains=grading.toolchains,
        leaderboard=ranking.gradescope_entries(
            [_ranking_view(r) for r in results], rubric.leaderboard, ranked=config.seed_mode == "secret"
        ),
    )


def _ranking_view(r: TestResult) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "status": r.status, "latency_us": r.latency_us, "mfu": r.mfu,
            "timing_counts": r.timing_counts}


def _cpu_seconds() -> tuple[float, float]:
    """(this process, its waited-for children) user + system CPU seconds."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def effective_seed(rubric: Rubric, content_hash: str, config: GradeConfig) -> int:
    """The seed a grading uses: the class's secret one, an explicit --seed, or one derived from the submission."""
    if config.seed_mode not in ("submission", "secret"):
        raise GraderError(f"seed_mode must be 'submission' or 'secret', got {config.seed_mode!r}")
    if config.seed_mode == "secret" and config.seed is None:
        raise GraderError("seed_mode 'secret' needs the class seed (grader/seeds.py)")
    return problems.submission_seed(rubric.seed, content_hash) if config.seed is None else int(config.seed)


def grade_submission(
    submission_path: str | Path, out_dir: str | Path | None, config: GradeConfig, student: str | None = None
) -> GradeRecord:
    """Grade one submission and (if ``out_dir``) write results.json, junit.xml, summary.md, result.json.

    Never raises for anything the submission does; grader-side failures give a record with status 'error'.
    A non-existent submission path raises SubmissionError (a usage error).
    """
    from grader import reports

    started_at, t0 = now(), time.perf_counter()
    sub = load_submission(submission_path, student)
    try:
        record = grade_loaded(sub, config)
    except Exception as exc:  # noqa: BLE001 - reported as an autograder error, never as a score
        message = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, (GraderError, RubricError)):  # configuration errors explain themselves
            message += "\n" + traceback.format_exc(limit=8)
        record = error_record(
            str(submission_path), config, message, sub.student, sub.content_hash, started_at, time.perf_counter() - t0
        )
    if out_dir is not None:
        reports.write_all(record, Path(out_dir))
    return record
