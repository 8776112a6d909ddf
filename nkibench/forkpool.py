"""Independent kernel runs in forked worker processes: the student scripts' second core (issue 35).

The Part 2 harness emulates a dozen independent kernel runs (correctness cases, timed tests) one after the other
on one core; on nkisim each is pure CPU work, so on a machine with two cores a full ``--test_maxpool`` run of the
handout's starting point took about twice the wall time it needs.  :class:`ForkPool` runs such jobs in worker
processes forked from the script, and hands each job's result back when the script asks for it, in the script's
own order, so what it prints is what the serial run prints.

Why fork: a forked worker starts with everything the script loaded -- the kernel module, nkisim, the inputs -- at
no cost, and runs the very function objects the script registered (only job numbers and results cross the
pipes).  Forking is only safe from a single-threaded process (another thread may hold a lock, e.g. inside BLAS,
that the child would wait on forever), so the script must start no thread while the pool lives; the pool itself
uses none.  It is offered on Linux only (:func:`available`): macOS's system libraries do not support work in a
forked child of a process that used them, and Windows cannot fork.  The workers are forked once and run job after
job (not a fork per job): a fresh process pays a page fault for every page its NumPy arrays touch, a worker that
has run one kernel reuses its memory as the serial harness does (measured: 3.7 CPU s more system time for the
staff kernel's ``--test_maxpool`` run with a fork per job).

Each job's standard output and error (the kernel's ``print``, nkisim's warnings) go to files and are replayed by
:meth:`ForkPool.result` when the script takes the result, so they appear where the serial run would print them.
A large NumPy array in a job's result whose shape and dtype the job announces (``outputs``, or
``out_shape``/``out_dtype`` for one: a kernel's expected output) is written into memory shared with the parent
instead of through the pipe, wherever it sits in the result (a ``("out", array)`` tuple, a list of them: the
pickler hands each announced array to its buffer by ``persistent_id``), saving the pickling and piping of 200 MB
per batch-4 224x224 output.
"""

from __future__ import annotations

import io
import os
import pickle
import selectors
import signal
import struct
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

_PICKLE = 5
_READ = 1 << 20
_LEN = struct.Struct("<Q")
_IDX = struct.Struct("<I")


def available() -> bool:
    """Whether this platform runs jobs in forked workers (Linux); elsewhere the scripts run jobs in process."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def usable_cores() -> int:
    """CPUs this process may run on (the affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# A cgroup v1 limit at or above this is "no limit" (the kernel reports PAGE_COUNTER_MAX pages: 2^63 - 4096 bytes).
_NO_LIMIT = 1 << 60


def _read_int(path) -> int | None:
    try:
        text = open(path).read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _inactive_file(directory: str, key: str) -> int:
    """Page cache the cgroup can drop under pressure (memory.stat's ``key``), so not taken from its headroom."""
    try:
        with open(os.path.join(directory, "memory.stat")) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_headroom(proc: str, cgroup_root: str) -> int | None:
    """The least room left (limit - usage, reclaimable page cache counted as free) in this process's memory cgroup
    and its ancestors, v2 (``memory.max``, ``memory.current``) or v1 (``memory.limit_in_bytes``,
    ``memory.usage_in_bytes``); None when no cgroup limits memory.  A container's own cgroup may be mounted as the
    hierarchy's root (its path in /proc/self/cgroup is then the host's): the mount's root is read too."""
    try:
        lines = open(os.path.join(proc, "self", "cgroup")).read().splitlines()
    except OSError:
        return None
    dirs: list[tuple[str, str, str, str]] = []  # (directory, limit file, usage file, memory.stat key)
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: "0::/path"
            mount, files = os.path.join(cgroup_root, "unified"), ("memory.max", "memory.current", "inactive_file")
            if not os.path.exists(os.path.join(mount, "cgroup.controllers")):
                mount = cgroup_root
        elif "memory" in controllers.split(","):
            mount = os.path.join(cgroup_root, "memory")
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        parts = [q for q in path.strip("/").split("/") if q]
        for depth in range(len(parts), -1, -1):
            d = os.path.join(mount, *parts[:depth])
            if os.path.isdir(d):
                dirs.append((d, *files))
        dirs.append((mount, *files))
    room = None
    for d, limit_file, usage_file, stat_key in dict.fromkeys(dirs):
        limit = _read_int(os.path.join(d, limit_file))
        usage = _read_int(os.path.join(d, usage_file))
        if limit is None or usage is None or limit >= _NO_LIMIT:
            continue
        left = max(0, limit - max(0, usage - _inactive_file(d, stat_key)))
        room = left if room is None else min(room, left)
    return room


def memory_available(proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process and its workers may still use: the machine's ``MemAvailable`` (/proc/meminfo: free memory
    plus what the kernel can reclaim without swapping) or, when less, what the memory cgroups this process runs in
    (a container's, a Slurm job's) leave under their limits.  None where neither can be read (not Linux)."""
    avail = None
    try:
        with open(os.path.join(proc, "meminfo")) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    room = _cgroup_headroom(proc, cgroup_root)
    if room is not None:
        avail = room if avail is None else min(avail, room)
    return avail


class WorkerError(RuntimeError):
    """A worker died or failed outside the job's own error handling (killed, out of memory, a result that
    could not be sent back)."""


class _Job:
    __slots__ = ("key", "index", "fn", "slots", "bufs", "result")

    def __init__(self, key, index: int, fn, slots: list[tuple], bufs: list) -> None:
        self.key, self.index, self.fn, self.slots, self.bufs = key, index, fn, slots, bufs
        self.result: tuple | None = None


class _Worker:
    __slots__ = ("pid", "tasks", "results", "job", "data")

    def __init__(self, pid: int, tasks: int, results: int) -> None:
        self.pid, self.tasks, self.results = pid, tasks, results
        self.job: _Job | None = None
        self.data = bytearray()


class ForkPool:
    """Jobs registered with :meth:`add` before the workers start, run (:meth:`queue`) by at most ``workers``
    forked processes in queue order; :meth:`result` waits for one.  :meth:`submit` is add + queue."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, not {workers}")
        self.size = workers
        self._jobs: dict[Any, _Job] = {}
        self._table: list[_Job] = []
        self._queue: list[_Job] = []
        self._workers: dict[int, _Worker] = {}  # result pipe fd -> worker
        self._sel = selectors.DefaultSelector()
        self._started = False
        self.worker_cpu: list[float] = []  # CPU seconds (user + system) of each worker reaped, in reaping order

    def add(self, key, fn: Callable[[], Any], *, out_shape: tuple | None = None, out_dtype=None,
            outputs: list[tuple] | None = None) -> None:
        """Register ``fn()`` under ``key`` (the workers inherit the table when they fork: add every job first).
        ``outputs``: the (shape, dtype) of each large array the result may hold (``out_shape``, ``out_dtype``: of
        one), each sent back through a shared-memory buffer of its own; arrays of other shapes go through the pipe."""
        if self._started:
            raise RuntimeError("jobs must be added before the workers start (they inherit the job table)")
        if key in self._jobs:
            raise ValueError(f"job {key!r} added twice")
        slots = list(outputs or []) + ([(out_shape, out_dtype)] if out_shape is not None else [])
        bufs: list = []
        if slots:
            import mmap

            import numpy as np

            slots = [(tuple(int(n) for n in shape), np.dtype(dtype)) for shape, dtype in slots]
            for shape, dtype in slots:  # MAP_SHARED | MAP_ANONYMOUS: the workers' writes are ours
                bufs.append(mmap.mmap(-1, max(int(np.prod(shape)) * dtype.itemsize, 1)))
        job = _Job(key, len(self._table), fn, slots, bufs)
        self._jobs[key] = job
        self._table.append(job)

    def queue(self, key) -> None:
        """Run job ``key`` when a worker is free (in queue order); starts the workers at the first call."""
        job = self._jobs[key]
        if job in self._queue or job.result is not None:
            return
        self._queue.append(job)
        self._fill()

    def submit(self, key, fn: Callable[[], Any], *, out_shape: tuple | None = None, out_dtype=None) -> None:
        self.add(key, fn, out_shape=out_shape, out_dtype=out_dtype)
        self.queue(key)

    def result(self, key):
        """What ``fn()`` returned for job ``key``, once done (WorkerError if its worker died); the job's captured
        output is written to this process's stdout/stderr first."""
        job = self._jobs[key]
        if job.result is None and job not in self._queue and all(w.job is not job for w in self._workers.values()):
            self.queue(key)
        while job.result is None:
            self._step()
        kind, value, out, err = job.result
        job.result = ("taken", None, "", "")
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
        if err:
            sys.stderr.write(err)
            sys.stderr.flush()
        job.bufs = []  # the result's arrays (if any) keep their shared memory alive; nothing else does
        if kind == "died":
            raise WorkerError(value)
        return value

    def close(self) -> None:
        """Stop the workers (running jobs are abandoned) and drop the queue."""
        self._queue.clear()
        for fd, w in list(self._workers.items()):
            try:
                os.kill(w.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._drop(fd, w)
        self._sel.close()

    def __enter__(self) -> ForkPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the parent's side ------------------------------------------------------------------------------------
    def _fill(self) -> None:
        if not self._queue:
            return
        if not self._started:
            self._started = True
            for _ in range(self.size):
                self._fork()
        for w in self._workers.values():
            if not self._queue:
                break
            if w.job is None:
                w.job = self._queue.pop(0)
                os.write(w.tasks, _IDX.pack(w.job.index))

    def _fork(self) -> None:
        task_r, task_w = os.pipe()
        res_r, res_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            os.close(task_w)
            os.close(res_r)
            for w in self._workers.values():  # the other workers' pipes are not this one's
                os.close(w.tasks)
                os.close(w.results)
            _serve(self._table, task_r, res_w)
        os.close(task_r)
        os.close(res_w)
        self._workers[res_r] = _Worker(pid, task_w, res_r)
        self._sel.register(res_r, selectors.EVENT_READ)

    def _step(self) -> None:
        for key, _ in self._sel.select():
            w = self._workers[key.fd]
            chunk = os.read(key.fd, _READ)
            if not chunk:  # the worker died (killed, out of memory)
                job = w.job
                status = self._drop(key.fd, w)
                if job is not None:
                    why = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else
                           f"exit status {os.WEXITSTATUS(status)}")
                    job.result = ("died", f"the worker process running {job.key!r} ended without a result ({why})",
                                  "", "")
                if self._queue or any(x.job for x in self._workers.values()) or not self._workers:
                    self._fork()  # a replacement: the table is still this process's
                continue
            w.data += chunk
            if len(w.data) >= _LEN.size:
                (n,) = _LEN.unpack_from(w.data)
                if len(w.data) >= _LEN.size + n:
                    w.job.result = _Unpickler(io.BytesIO(memoryview(w.data)[_LEN.size:_LEN.size + n]),
                                              w.job).load()
                    w.data = bytearray()
                    w.job = None
        self._fill()

    def _drop(self, fd: int, w: _Worker) -> int:
        self._sel.unregister(fd)
        os.close(fd)
        os.close(w.tasks)
        del self._workers[fd]
        _, status, usage = os.wait4(w.pid, 0)
        self.worker_cpu.append(usage.ru_utime + usage.ru_stime)
        return status


def _serve(table: list[_Job], tasks: int, results: int) -> None:
    """A worker: run job after job (job numbers from ``tasks``), send ("ok" | "died", value,
    stdout, stderr) for each, and exit when the parent closes the pipe, without running the parent's clean-up
    handlers (atexit, finalizers of objects the parent owns)."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        saved = os.dup(1), os.dup(2)
        while True:
            head = _read_exactly(tasks, _IDX.size)
            if head is None:
                break
            job = table[_IDX.unpack(head)[0]]
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                streams = sys.stdout, sys.stderr
                for stream in streams:
                    stream.flush()
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                # Python-level writes too (sys.stdout may be another object than file descriptor 1: a capture)
                sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
                try:
                    kind, value = _run(job)
                finally:
                    sys.stdout.close()
                    sys.stderr.close()
                    sys.stdout, sys.stderr = streams
                    os.dup2(saved[0], 1)
                    os.dup2(saved[1], 2)
                texts = []
                for f in (out, err):
                    f.seek(0)
                    texts.append(f.read().decode("utf-8", errors="replace"))
            try:
                payload = _dumps((kind, value, *texts), job)
            except Exception:  # noqa: BLE001
                payload = pickle.dumps(("died", f"the result of {job.key!r} could not be sent back:\n"
                                        f"{traceback.format_exc()}", *texts), protocol=_PICKLE)
            del value
            for buf in job.bufs:  # this worker's mappings; the parent's stay (the pages are freed when both are gone)
                try:
                    buf.close()
                except BufferError:  # an array over it still lives here (the job kept one): dropped at exit
                    pass
            view = memoryview(_LEN.pack(len(payload)) + payload)
            while view:
                view = view[os.write(results, view):]
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)


def _run(job: _Job) -> tuple[str, Any]:
    try:
        value = job.fn()
    except BaseException:  # noqa: BLE001 - the jobs handle their own errors; anything else is reported
        return "died", f"the worker running {job.key!r} raised:\n{traceback.format_exc()}"
    return "ok", value


def _dumps(obj: Any, job: _Job) -> bytes:
    """``obj`` pickled, each array of an announced (shape, dtype) written into that slot's shared buffer instead
    (the first free slot that fits; the pickle holds the slot's number)."""
    f = io.BytesIO()
    pickler = pickle.Pickler(f, protocol=_PICKLE)
    np = sys.modules.get("numpy") if job.slots else None
    if np is not None:
        free = list(range(len(job.slots)))

        def persistent_id(o: Any) -> int | None:
            if type(o) is not np.ndarray or not free:
                return None
            for i in free:
                shape, dtype = job.slots[i]
                if o.shape == shape and o.dtype == dtype:
                    view = np.frombuffer(job.bufs[i], dtype=dtype, count=o.size).reshape(shape)
                    np.copyto(view, o)
                    del view
                    free.remove(i)
                    return i
            return None

        pickler.persistent_id = persistent_id  # type: ignore[method-assign]
    pickler.dump(obj)
    return f.getvalue()


class _Unpickler(pickle.Unpickler):
    """Reads a result :func:`_dumps` wrote: a slot's number becomes an array over the parent's side of its buffer."""

    def __init__(self, f: Any, job: _Job) -> None:
        super().__init__(f)
        self.job = job

    def persistent_load(self, pid: Any) -> Any:
        import numpy as np

        shape, dtype = self.job.slots[pid]
        return np.frombuffer(self.job.bufs[pid], dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _read_exactly(fd: int, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
