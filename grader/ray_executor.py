"""``--executor ray``: grade a batch on a Ray cluster, one Ray task per submission.

Every task calls the same ``grade_one`` as the local process pool, so the guarantees carry over unchanged: each
kernel call runs in its own sandboxed child, results land in ``out/<student>/<hash>/`` by one atomic rename made
by the process that graded, and finished work is skipped on the next run.  The results directory and the
submissions must then be on a file system every node sees at the same path (NFS/EFS/FSx); paths are made
absolute on the driver.  Without one, ``ship_files`` keeps grade_one on the driver (reading, resume check,
atomic publish) and sends only the grading step, with the files and the rubric as bytes, to the task.

Resources: an nkisim task asks for one CPU per kernel run it may have in flight.  A hardware task asks for one
``neuron_cores`` (Ray's own NeuronCore accelerator resource, detected with ``neuron-ls`` on Trainium nodes), so
Ray runs at most one measurement per NeuronCore at a time; the task pins that core with
``NEURON_RT_VISIBLE_CORES`` (Ray sets it too; we set it again from the assigned ids and fail loudly when none
were assigned; runner.py passes it into the sandboxed kernel process) and grades its kernels one after
another.  Unpinned, the Neuron runtime reserves every core of the instance for the first process that starts
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/guides/configuration-guide.html).

Retries are made by the driver, not by Ray's ``max_retries``: grade_one turns everything the submission can do
into a verdict, so anything that escapes it (a worker or node lost, a task killed or cancelled, Ray's OOM
killer, a failure of the grader itself) is infrastructure.  Resubmitting from the driver lets the progress line
count retries as they happen and, once the bounded retries are used up, report the job as a grader error (not a
score) that the next run grades again.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import importlib
import os
import re
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.batch import GradeJob, JobResult, grade_one, register_executor
from grader.records import JobStatus

if TYPE_CHECKING:
    from grader.records import GradeConfig, GradeRecord
    from grader.submission import Submission

NEURON_RESOURCE = "neuron_cores"  # ray._private.accelerators.neuron.NeuronAcceleratorManager.get_resource_name()
VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"  # Neuron runtime: which NeuronCores this process may use
INSTALL_HINT = 'the ray executor needs Ray, an optional extra: pip install ".[ray]" (or pip install "ray>=2.9,<3")'
DEFAULT_RETRIES = 2
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# On Linux, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes a new local cluster advertise and bind 127.0.0.1 only
# (ray._private.services.get_node_ip_address); the private cluster of one run needs no network.
_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class InfrastructureError(RuntimeError):
    """Ray could not run a grading task within the allowed retries (never the submission's fault)."""


class RayUnavailableError(ValueError):
    """Ray is not installed (or is too old); the message says how to install it."""


@dataclass(frozen=True)
class TaskResources:
    """What one grading task asks Ray for."""

    num_cpus: float
    neuron_cores: int = 0

    def ray_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.num_cpus}
        if self.neuron_cores:
            opts["resources"] = {NEURON_RESOURCE: self.neuron_cores}
        return opts


def task_resources(backend: str, workers: int) -> TaskResources:
    """nkisim: a CPU per concurrent kernel run.  neuron: one NeuronCore, held exclusively, plus the grading CPU."""
    if backend == "nkisim":
        return TaskResources(num_cpus=max(1, int(workers)))
    if backend == "neuron":
        return TaskResources(num_cpus=1, neuron_cores=1)
    raise ValueError(f"backend must be nkisim or neuron here, got {backend!r}")


def choose_backend(requested: str, cluster_neuron_cores: float) -> str:
    """The backend every task of the batch uses; 'auto' follows the cluster (NeuronCores present -> neuron)."""
    if requested == "nkisim":
        return "nkisim"
    if requested == "neuron":
        if cluster_neuron_cores < 1:
            raise ValueError(
                f"--backend neuron: no node of the Ray cluster offers the {NEURON_RESOURCE!r} resource; start the "
                f"Trainium nodes with `ray start ... --resources='{{\"{NEURON_RESOURCE}\": N}}'` (see docs/grading.md, "
                "'Grading on a Ray cluster')"
            )
        return "neuron"
    if requested == "auto":
        return "neuron" if cluster_neuron_cores >= 1 else "nkisim"
    raise ValueError(f"--backend must be auto, nkisim or neuron, got {requested!r}")


def pinned_env(core_ids: Sequence[Any]) -> dict[str, str]:
    """The environment that restricts the Neuron runtime to the NeuronCore(s) Ray assigned to this task."""
    ids = [str(c).strip() for c in core_ids]
    if not ids or not all(i.isdigit() for i in ids):
        raise RuntimeError(f"Ray assigned no usable NeuronCore ids to this task: {list(core_ids)!r}")
    return {VISIBLE_CORES_ENV: ",".join(ids)}


def describe_failure(exc: BaseException) -> str:
    """One line naming what went wrong in Ray (WorkerCrashedError, NodeDiedError, RayTaskError(...), ...)."""
    cause = getattr(exc, "cause", None)  # RayTaskError: the exception raised inside the task
    text = str(cause if isinstance(cause, BaseException) else exc)
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")


def _absolute(job: GradeJob, backend: str) -> GradeJob:
    """Paths that mean the same on every node; the resolved backend (hardware grades one kernel at a time)."""
    config = job.config
    config = replace(
        config,
        backend=backend,
        workers=1 if backend == "neuron" else config.workers,
        rubric_path=os.path.abspath(config.rubric_path) if config.rubric_path else None,
    )
    return replace(
        job, submission=os.path.abspath(job.submission), out_root=os.path.abspath(job.out_root), config=config
    )


def _pin_assigned_core() -> None:
    import ray

    ids = ray.get_runtime_context().get_accelerator_ids().get(NEURON_RESOURCE, [])
    os.environ.update(pinned_env(ids))


def run_on_worker(fn: Callable[[GradeJob], JobResult], job: GradeJob, pin_core: bool) -> JobResult:
    """Body of one Ray task: pin the assigned NeuronCore (hardware only), then grade exactly as locally."""
    if pin_core:
        _pin_assigned_core()
    return fn(job)


def grade_on_worker(sub: Submission, config: GradeConfig, rubric: bytes, pin_core: bool) -> GradeRecord:
    """Body of a ``ship_files`` task: the files and the rubric arrive with the task, the record goes back.

    Nothing is read from or written to a path the driver chose, so the nodes need no shared file system.
    """
    from grader.pipeline import grade_loaded

    if pin_core:
        _pin_assigned_core()
    with tempfile.TemporaryDirectory(prefix="grader-rubric-") as tmp:
        rubric_file = Path(tmp) / "rubric.toml"
        rubric_file.write_bytes(rubric)
        record = grade_loaded(sub, replace(config, rubric_path=str(rubric_file)))
    record.config["rubric_path"] = config.rubric_path
    return record


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds on a wrong HOST:PORT (ray.init would retry the GCS connection for minutes)."""
    match = re.fullmatch(r"\[?([\w.:\-]+?)\]?:(\d+)", address)
    if not match:
        return  # "auto", "ray://...", ...: left to Ray
    try:
        socket.create_connection((match.group(1), int(match.group(2))), timeout=timeout_s).close()
    except OSError as exc:
        raise ValueError(
            f"cannot reach the Ray cluster at {address}: {exc} (is `ray start --head` running there and the port "
            "open to this machine?)"
        ) from exc


def _import_ray(start_local: bool) -> Any:
    if start_local:
        for key, value in _LOOPBACK_ENV.items():
            os.environ.setdefault(key, value)  # read when ray is first imported
    try:
        ray = importlib.import_module("ray")
    except ImportError as exc:
        raise RayUnavailableError(f"{INSTALL_HINT} ({exc})") from exc
    if not hasattr(ray, "wait") or not hasattr(ray, "get_runtime_context"):
        raise RayUnavailableError(f"{INSTALL_HINT} (found an unusable ray module at {getattr(ray, '__file__', '?')})")
    return ray


class RayExecutor:
    """Grades each job as one Ray task; yields results as tasks finish; retries infrastructure failures.

    ``ship_files``: for clusters without a shared file system, the driver reads each submission (and the
    rubric), sends the bytes with the task, and writes the returned record itself; resume checks happen on the
    driver too.  Otherwise the task calls ``grade_one`` on paths every node sees.
    """

    name = "ray"

    def __init__(
        self, jobs: int = 2, *, address: str | None = None, retries: int = DEFAULT_RETRIES, ship_files: bool = False
    ):
        if retries < 0:
            raise ValueError(f"--retries must be >= 0, got {retries}")
        self.jobs = max(1, int(jobs))  # CPUs of the local cluster started when there is no address
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.retries = int(retries)
        self.ship_files = bool(ship_files)
        self.retried = 0
        self._retry_lock = threading.Lock()
        self.on_retry: Callable[[GradeJob, str], None] | None = None
        self.ray = _import_ray(start_local=self.address is None)

    # ----------------------------------------------------------------------------------------- cluster ----
    def _connect(self) -> bool:
        """Join the cluster at ``address`` or start a private loopback one; True if we must shut it down."""
        ray = self.ray
        if ray.is_initialized():
            return False
        quiet = {"log_to_driver": False, "logging_level": "WARNING", "configure_logging": True}
        if self.address:
            _check_reachable(self.address)
            try:
                ray.init(address=self.address, **quiet)
            except Exception as exc:  # noqa: BLE001 - ConnectionError, version mismatch, auth: a usage problem
                raise ValueError(f"cannot join the Ray cluster at {self.address!r}: {describe_failure(exc)}") from exc
        else:
            ray.init(num_cpus=self.jobs, include_dashboard=False, **quiet)
        return True

    def _live_nodes(self) -> list[dict[str, float]]:
        return [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]

    def _check_feasible(self, res: TaskResources) -> None:
        """A task no node can ever run would wait forever: refuse up front with the reason."""
        if not any(
            n.get("CPU", 0) >= res.num_cpus and n.get(NEURON_RESOURCE, 0) >= res.neuron_cores
            for n in self._live_nodes()
        ):
            need = f"{res.num_cpus:g} CPU" + (f" and {res.neuron_cores} {NEURON_RESOURCE}" if res.neuron_cores else "")
            raise ValueError(f"no live node of the Ray cluster has {need} for one grading task")

    def _slots(self, res: TaskResources) -> int:
        """How many such tasks the cluster runs at once."""
        per_node = [
            min(
                n.get("CPU", 0) // res.num_cpus,
                n.get(NEURON_RESOURCE, 0) // res.neuron_cores if res.neuron_cores else float("inf"),
            )
            for n in self._live_nodes()
        ]
        return max(1, int(sum(per_node)))

    def _retry(self, job: GradeJob, why: str) -> None:
        with self._retry_lock:  # ship_files retries from driver threads
            self.retried += 1
            if self.on_retry:
                self.on_retry(job, why)

    @staticmethod
    def _gave_up(attempts: int, why: str) -> str:
        return f"infrastructure failure, not the submission's fault, after {attempts} attempt(s) on Ray: {why}"

    # ------------------------------------------------------------------------------------------- batch ----
    def map_unordered(self, fn: Callable[[GradeJob], JobResult], jobs: list[GradeJob]) -> Iterator[JobResult]:
        if not jobs:
            return
        started = self._connect()
        try:
            cores = float(self.ray.cluster_resources().get(NEURON_RESOURCE, 0.0))
            backends = {job.config.backend: choose_backend(job.config.backend, cores) for job in jobs}
            resources: dict[str, TaskResources] = {}
            for job in jobs:
                backend = backends[job.config.backend]
                if backend not in resources:
                    resources[backend] = task_resources(backend, job.config.workers if backend == "nkisim" else 1)
                    self._check_feasible(resources[backend])
            # max_retries=0: the driver retries (see the module docstring) so that it can count and report.
            options = {
                b: {**r.ray_options(), "max_retries": 0, "retry_exceptions": False} for b, r in resources.items()
            }
            if self.ship_files:
                if fn is not grade_one:
                    raise ValueError("ship_files grades with grader.batch.grade_one only")
                slots = sum(self._slots(r) for r in resources.values())
                yield from self._run_shipped(jobs, backends, options, slots)
            else:
                yield from self._run_shared(fn, jobs, backends, options)
        finally:
            if started:
                self.ray.shutdown()

    def _run_shared(self, fn, jobs, backends, options) -> Iterator[JobResult]:
        """One task per job running ``fn`` (grade_one) on the shared paths; the task publishes the result."""
        ray = self.ray
        remote = ray.remote(run_on_worker)
        pending: dict[Any, tuple[GradeJob, GradeJob, int]] = {}  # ref -> (job as given, job as sent, attempt)

        def submit(original: GradeJob, sent: GradeJob, attempt: int) -> None:
            backend = sent.config.backend
            ref = remote.options(name=f"grade:{sent.student}", **options[backend]).remote(fn, sent, backend == "neuron")
            pending[ref] = (original, sent, attempt)

        try:
            for job in jobs:
                submit(job, _absolute(job, backends[job.config.backend]), 0)
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    original, sent, attempt = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - everything Ray raises here is infrastructure
                        why = describe_failure(exc)
                        if attempt < self.retries:
                            self._retry(original, why)
                            submit(original, sent, attempt + 1)
                        else:
                            yield JobResult(
                                original.student, original.submission, JobStatus.ERROR,
                                error=self._gave_up(attempt + 1, why),
                            )
                        continue
                    yield result
        finally:
            _cancel(ray, list(pending))  # interrupted (Ctrl-C, consumer stopped): leave nothing running

    def _run_shipped(self, jobs, backends, options, slots: int) -> Iterator[JobResult]:
        """grade_one on the driver (read, resume check, publish) with the grading step sent to a Ray task."""
        from grader.rubric import DEFAULT_RUBRIC

        ray = self.ray
        remote = ray.remote(grade_on_worker)
        closing = threading.Event()
        lock = threading.Lock()
        inflight: set[Any] = set()
        rubric_bytes: dict[str | None, bytes] = {}

        def grade_remotely(job: GradeJob, sub: Submission, config: GradeConfig) -> GradeRecord:
            backend = config.backend
            why = ""
            for attempt in range(self.retries + 1):
                if attempt:
                    self._retry(job, why)
                ref = remote.options(name=f"grade:{sub.student}", **options[backend]).remote(
                    sub, config, rubric_bytes[config.rubric_path], backend == "neuron"
                )
                with lock:
                    inflight.add(ref)
                try:
                    return ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - everything Ray raises here is infrastructure
                    if closing.is_set():
                        raise
                    why = describe_failure(exc)
                finally:
                    with lock:
                        inflight.discard(ref)
            raise InfrastructureError(self._gave_up(self.retries + 1, why))

        sent_jobs = []
        for job in jobs:
            backend = backends[job.config.backend]
            # the nodes share no file system: the reference cache lives in each Ray worker's memory only
            config = replace(job.config, backend=backend, workers=1 if backend == "neuron" else job.config.workers,
                             ref_cache=None)
            if config.rubric_path not in rubric_bytes:
                rubric_bytes[config.rubric_path] = Path(config.rubric_path or DEFAULT_RUBRIC).read_bytes()
            sent_jobs.append(replace(job, config=config))
        # Driver threads only read files, wait on Ray and write results: enough of them to keep every slot busy.
        pool = cf.ThreadPoolExecutor(max_workers=min(len(jobs), 2 * slots + 2), thread_name_prefix="ray-ship")
        try:
            futures = {pool.submit(grade_one, job, functools.partial(grade_remotely, job)): job for job in sent_jobs}
            for fut in cf.as_completed(futures):
                yield fut.result()
        finally:
            closing.set()
            with lock:
                _cancel(ray, list(inflight))
            pool.shutdown(wait=True, cancel_futures=True)


def _cancel(ray: Any, refs: list[Any]) -> None:
    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001 - best effort; the task may have finished meanwhile
            pass


register_executor("ray", RayExecutor)
