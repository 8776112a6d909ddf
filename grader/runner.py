"""Run one kernel call of a submission in the sandbox and bring back what the parent needs to judge it.

The parent lays out a private run directory per call::

    run-XXXX/            0711: the child may traverse it but not list it
      work/              the child's cwd and HOME: only the student's one source file
      in-<random>/       the input .npy files (read-only for the child)
      out-<random>/      where the child writes output_*.npy, trace.bin and status.json

and hands the child the random names over stdin only.  Everything the child writes is treated as hostile data:
status.json is size-capped and only used for messages; arrays are loaded with allow_pickle=False and checked
against the expected shape before being read in full; the trace is parsed by nkisim.core.traceio in the parent
and costed there.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import mmap
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grader import scratch, timeline, warmstart
from grader.problems import Invocation
from grader.records import Status, Verdict
from grader.rubric import Limits
from grader.sandbox import Isolation, ProcessResult, ServerGone, WarmServer, detect_isolation, run_sandboxed
from grader.seeds import registered_private_dirs
from grader.staff import reference_dir
from grader.warmstart import (
    CHILD_SCRIPT,
    _lib_links,
    _nkisim_dir,
    _nkisim_env,
)

MAX_STATUS_BYTES = 1 << 20
# inputs at least this large are drawn straight into their input file (KernelServers.input_array); smaller ones
# are not worth a mapping
INPUT_ARRAY_MIN_BYTES = 4 << 20
# Bounds on what the parent parses and costs (the staff kernels issue ~4e4 instructions on the largest test).
MAX_TRACE_BYTES = 256 << 20
MAX_TRACE_INSTRS = 2_000_000


@dataclass
class CaseRun:
    """Outcome of one sandboxed kernel call.  ``verdict`` is 'ok' or the kind of failure."""

    verdict: str  # a Verdict: ok | error | timeout | crashed | bad-output | grader-error
    message: str = ""
    outputs: list[np.ndarray] = field(default_factory=list)
    trace: Any = None
    hardware_p99_us: float | None = None
    hardware: dict | None = None  # the hardware run's backend and tool versions (child status)
    wall_seconds: float = 0.0
    kernel_seconds: float | None = None
    cpu_seconds: float | None = None  # as the kernel's process reported it (informational)
    output_tail: str = ""
    features: tuple[str, ...] = ()
    # Set when the call hit a resource limit ("timed out", "ran out of memory", ...): the grader then does not
    # call the same function again on inputs at least as large (grader/pipeline.py).
    exhausted: str | None = None
    # the instruction stream a specializing child shipped (nkisim.stream, JSON bytes), until the parent replays it
    stream: bytes | None = None


def _student_frames(tb: str, module_file: str, shown_as: str | None = None) -> str:
    """The traceback lines that point into the student's file, plus the final error line.  ``shown_as``: the
    name to print instead of the file's path in the private run directory (e.g. part2/conv2d.py)."""
    lines = tb.rstrip().splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if module_file in line and line.lstrip().startswith("File"):
            if shown_as:
                line = re.sub(r'File "[^"]*' + re.escape(module_file) + '"', f'File "{shown_as}"', line)
            keep.append(line.strip())
            if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith("File"):
                keep.append("    " + lines[i + 1].strip())
    return "\n".join(keep[-8:])


def _read_status(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > MAX_STATUS_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _load_output(path: Path, inv: Invocation) -> np.ndarray:
    """Load one output array, refusing pickles, object arrays and anything larger than expected.

    The array is a read-only map of the file, not a copy: the judge reads a 224x224 batch-4 output (200 MB) once,
    and copying it first cost a 200 MB allocation (page faults) and a pass over it per call.  The writer is gone
    by now (the call's process and everything it started ended with it: one PID namespace, or the process group
    a one-off run kills) and the file is the call's own, in a directory only that call could write; removing the
    directory afterwards leaves the mapping valid (Linux keeps an unlinked file while it is mapped).  A group's
    member is read while the group's process still runs (:class:`_MemberWatch`), once the member's status.json
    exists: that process runs no student code (nkisim replaying streams, docs/grading-security.md item 5) and
    writes nothing into a member's directory after its status, and what was read counts only if the process
    then ends well."""
    expected = int(np.prod(inv.out_shape)) * max(inv.out_dtype.itemsize, 8) + 4096
    size = path.stat().st_size
    if size > max(expected, 1 << 20) * 2:
        raise ValueError(f"output file is {size} bytes, far more than a {inv.out_shape} array")
    arr = np.load(path, allow_pickle=False, mmap_mode="r")
    if arr.dtype.hasobject or arr.dtype.kind not in "biufc":
        raise ValueError(f"output has non-numeric dtype {arr.dtype}")
    return np.asarray(arr)


def _masked_dirs(hidden: tuple[str, ...] = (), run_root: Path | None = None) -> list[str]:
    """Directories the child hides from student code once it is jailed: the grader package (rubric, reference
    timings, this code), the staff reference wherever it lives, ``hidden`` (the current batch's private
    directory: the secret seed and the shared reference cache) and every other batch's (grader/seeds.py)."""
    dirs = {*_always_masked()}
    hidden = (*hidden, *registered_private_dirs())
    needed = [*_always_needed(), *([os.path.realpath(run_root)] if run_root else [])]
    for h in hidden:
        d = _resolved_dir(h)
        # never a directory the child itself needs (a seed file kept next to the interpreter, in /tmp, ...)
        if d is not None and not any(_within(n, d) for n in needed):
            dirs.add(d)
    return sorted(d for d in dirs if os.path.isdir(d))


def _resolved_dir(path: str) -> str | None:
    """The resolved path of the directory ``path`` now, or None when it is no directory: the kernel's own
    resolution (an O_PATH descriptor read back through /proc/self/fd), three system calls, where os.path.realpath
    walks the path component by component in Python (~80 us per directory: a grader may know dozens of private
    directories, and the masks are worked out for every kernel call); realpath where /proc cannot say."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, AttributeError):  # no O_PATH (not Linux), no permission to traverse
        return os.path.realpath(path)
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)
    return target if target.startswith(os.sep) and not target.endswith(" (deleted)") else os.path.realpath(path)


# Resolved once per process: they do not move while the grader runs (pathlib's resolve and parents over every
# registered private directory cost 7-24 ms per kernel call, ~40 calls per grading)
@functools.cache
def _always_masked() -> tuple[str, ...]:
    return os.path.realpath(Path(__file__).parent), os.path.realpath(reference_dir())


@functools.cache
def _always_needed() -> tuple[str, ...]:
    return tuple(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.executable, _nkisim_dir(),
                                               tempfile.gettempdir()))


def _within(path: str, d: str) -> bool:
    """Whether ``path`` is ``d`` or below it (both absolute and resolved)."""
    return path == d or path.startswith(d if d.endswith(os.sep) else d + os.sep)


# Passed to the kernel's process on Trainium only: what the Neuron runtime, nki.jit and the nrtpy/profiler steps
# of nkibench read (nkibench/envcheck.py names the documented ones; NRTPY_PYTHON: nkibench/detect.py).
NEURON_ENV_PREFIXES = ("NEURON_", "NKI_", "NRTPY_")
NEURON_ENV_NAMES = ("LD_LIBRARY_PATH",)
NEURON_BIN = "/opt/aws/neuron/bin"


def hardware_env(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    """The Neuron part of the grader's environment, for a kernel run on Trainium (nkisim runs get none of it)."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k.startswith(NEURON_ENV_PREFIXES) or k in NEURON_ENV_NAMES}
    env["PATH"] = os.pathsep.join([environ.get("PATH", "/usr/bin:/bin"), NEURON_BIN])
    return env


def _prepare_dirs(root: Path, iso: Isolation) -> tuple[Path, Path, Path]:
    # lib/ holds only links to the nkisim and nkibench packages: the child imports the same nkisim as the parent
    # (whose traceio reads the child's trace) and, on Trainium, times kernels through nkibench, without the
    # grader package or the staff reference on its sys.path.
    _lib_links(root)
    work = root / "work"
    inputs = root / f"in-{secrets.token_hex(16)}"
    outputs = root / f"out-{secrets.token_hex(16)}"
    for d in (work, inputs, outputs):
        d.mkdir()
    os.chmod(root, 0o711)
    os.chmod(inputs, 0o711)
    if iso.uid is not None:
        for d in (work, outputs):
            os.chown(d, iso.uid, iso.gid)
        os.chmod(work, 0o700)
        os.chmod(outputs, 0o700)
    return work, inputs, outputs


class KernelServers:
    """The warm kernel servers of one grading (grader/forkserver.py): one per NKI API the grading's calls use, each
    serving all of that API's calls, several side by side when the grading's workers make them so (``size``, the
    workers, bounds how many).  A grading that uses them saves a Python start-up and the NumPy and nkisim imports
    per kernel call (about 0.15-0.2 CPU s each, ~30 calls per submission); one server for the calls made side by
    side saves the second and third servers a grading with two workers started (docs/grading.md, "Outside the
    timeline's spans, round 11").

    Servers never run student code and never outlive the grading (:meth:`close`); a server that fails to start or
    dies is replaced, or the call runs as a one-off process (:func:`run_sandboxed`) as before.  Only nkisim runs
    use them: on Trainium every call gets a fresh process and runtime.  ``GRADER_WARM_SERVERS=0`` turns them off."""

    def __init__(self, *, target: str, limits: Limits, tmp_root: str | None = None, size: int = 1) -> None:
        self.target, self.limits, self.tmp_root, self.size = target, limits, tmp_root, max(1, size)
        self._servers: dict[str, tuple[str, WarmServer, Path]] = {}  # the live server of each API
        self._starting: set[str] = set()  # APIs whose server a thread is starting (the others wait for it)
        self._prestart: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.failed = False
        self.started = 0  # servers started
        self.one_off = 0  # calls that ran in a process of their own (no server could serve them)
        self.calls = 0
        self._inputs: dict[int, tuple[np.ndarray, str]] = {}
        self._drawn: dict[int, tuple[np.ndarray, str]] = {}  # input_array's files, until input_file names them
        self._inputs_dir: Path | None = None
        self._inputs_lock = threading.Lock()
        # prepared output files (prepare_outputs), complete, by (shape, dtype), until a group's replay takes them
        self._ready: dict[tuple[tuple[int, ...], str], list[str]] = {}
        self._closed = False
        self._wanted: set[tuple[tuple[int, ...], str]] = set()  # what prepare_outputs was asked for
        self._taking = False  # a group asked for one of them: prepare_outputs makes no more
        self.outputs_prepared = self.outputs_taken = 0

    @staticmethod
    def enabled() -> bool:
        return os.environ.get("GRADER_WARM_SERVERS", "1") != "0"

    def _start(self, api: str) -> tuple[str, WarmServer, Path]:
        # the one `python -m grader grade` started as it started, for this grading (grader/warmstart.py), else a new one
        item = (warmstart.take(api, target=self.target, limits=self.limits, tmp_root=self.tmp_root)
                or warmstart.start_server(api, target=self.target, limits=self.limits, tmp_root=self.tmp_root))
        self.started += 1
        return item

    def acquire(self, api: str) -> tuple[str, WarmServer, Path] | None:
        """The live server of ``api`` (started now if there is none: one thread starts it, the others wait for it);
        None when servers cannot be used here."""
        with self._changed:
            while True:
                if self.failed:
                    return None
                item = self._servers.get(api)
                if item is not None and item[1].alive:
                    return item
                if api not in self._starting:
                    break
                self._changed.wait()
            stale = self._servers.pop(api, None)
            self._starting.add(api)
        if stale is not None:
            self._discard(stale)
        try:
            item = self._start(api)
        except (ServerGone, OSError) as exc:
            print(f"grader: kernel server unavailable, one process per call instead: {exc}", file=sys.stderr)
            with self._changed:
                self.failed = True
                self._starting.discard(api)
                self._changed.notify_all()
            return None
        with self._changed:
            self._servers[api] = item
            self._starting.discard(api)
            self._changed.notify_all()
        return item

    def prestart(self, apis: list[str]) -> None:
        """Start the servers of ``apis`` now, in a thread, while the grading does other work (the static screen):
        the import check, the first call, then finds its server started or starting (:meth:`acquire` waits for
        it) instead of starting it.  A submission the screen stops costs this server's start (0.15-0.2 CPU s)."""
        self._prestart = [threading.Thread(target=self.acquire, args=(api,), name="grader-server-prestart",
                                           daemon=True) for api in apis]
        for thread in self._prestart:
            thread.start()

    def release(self, item: tuple[str, WarmServer, Path]) -> None:
        """A call is done with ``item``: a server that has ended (a call that took it down) is replaced at the
        next :meth:`acquire`; its directory goes now (its other calls, if any, have ended with it)."""
        if item[1].alive:
            return
        with self._changed:
            if self._servers.get(item[0]) is item:
                del self._servers[item[0]]
        self._discard(item)

    @staticmethod
    def _discard(item: tuple[str, WarmServer, Path]) -> None:
        item[1].close()
        shutil.rmtree(item[2], ignore_errors=True)

    def input_file(self, arr: np.ndarray) -> str:
        """The .npy file holding ``arr`` for this grading's calls, written on first use: the three 224x224 batch-4
        correctness tests share X and W (205 MB), which were written once per call before.  Keyed by the array
        object (held here, so its id stays unique): the grader's inputs are memoised, read-only arrays.  The files
        are the grading's own (a submission reads only its own inputs, as before), 0644 in a 0711 directory of a
        random name, removed by :meth:`close`."""
        with self._inputs_lock:
            hit = self._inputs.get(id(arr))
            if hit is not None and hit[0] is arr:
                return hit[1]
            drawn = self._drawn.pop(id(arr), None)
            if drawn is not None and drawn[0] is arr:  # drawn into its file (input_array): complete now
                path = Path(drawn[1])
                with timeline.span("input_file", f"{arr.nbytes >> 20} MiB drawn"):
                    pass
            else:
                path = self._make_inputs_dir() / f"in-{secrets.token_hex(16)}.npy"
                with timeline.span("input_file", f"{arr.nbytes >> 20} MiB"):
                    np.save(path, arr, allow_pickle=False)
            os.chmod(path, 0o644)
            self._inputs[id(arr)] = (arr, str(path))
            return str(path)

    def input_array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype`` in a new input file of this grading, mapped shared,
        for the caller to fill (grader/problems/base.py ``inputs_into``): :meth:`input_file` of the filled array
        then names that file without writing it.  A 224x224 batch-4 X drawn into fresh memory and then written
        with ``np.save`` was put into fresh pages twice (196 MiB of anonymous memory, then as many page-cache
        pages, ``write()`` copying them: 0.2-0.6 CPU s of the grader's system time per grading); drawn here, once.
        The file is np.save's byte for byte (the same version 1.0 header).  Its disk blocks are reserved before
        it is mapped, so a full disk is an OSError here (the array is then plain memory, and np.save reports
        it as before), never a SIGBUS while the values are drawn.  0600 until named; the file goes with the
        grading's directory (:meth:`close`), the mapping, which the grader's memoised inputs may keep for later
        gradings of a batch, stays valid.  The grader reads its inputs from these pages, so only the grader
        may write the file: the kernel processes map it copy-on-write (grader/child.py ``_load_input``), and
        the jail of every process that runs the kernel's Python masks the directory (docs/grading-security.md,
        L3)."""
        count = 1
        for n in shape:
            count *= int(n)
        nbytes = count * dtype.itemsize
        if nbytes < INPUT_ARRAY_MIN_BYTES or dtype.hasobject:
            return np.empty(shape, dtype)
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)})
        head = header.getvalue()
        with self._inputs_lock:
            path = self._make_inputs_dir() / f"in-{secrets.token_hex(16)}.npy"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                os.posix_fallocate(fd, 0, len(head) + nbytes)
                os.pwrite(fd, head, 0)
                mapped = mmap.mmap(fd, len(head) + nbytes, flags=mmap.MAP_SHARED,
                                   prot=mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
        except (OSError, AttributeError, ValueError):  # no posix_fallocate or shared maps here, a full disk
            path.unlink(missing_ok=True)
            return np.empty(shape, dtype)
        arr = np.frombuffer(mapped, dtype=dtype, count=count, offset=len(head)).reshape(shape)
        with self._inputs_lock:
            self._drawn[id(arr)] = (arr, str(path))
        return arr

    def prepare_outputs(self, shapes: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        """Write a poisoned ``.npy`` file for each (shape, dtype) of ``shapes`` (``nkisim.core.buffers
        .write_ready_file``), for a group replay to take as a member's output (:meth:`take_output`) instead of
        making and filling one in its process: the 224x224 group's outputs are 525 MB of fresh tmpfs pages, which
        cost its process 0.35-0.45 CPU s (fallocate, first touches, the poison fill) on the grading's critical path,
        while a core idles beside the screen and the import check.  For a thread at the lowest priority
        (grader/pipeline.py ``early_outputs``); stops at the first failure (a full tmpfs: the replays make their
        own as before), once a group asks for one of them (:meth:`take_output`: later files would be taken by
        no one) or once the grading closes.  The files are in the shared inputs' directory (0711, each 0600:
        only the grader reads or writes them, and every process that runs the kernel's Python masks the directory,
        L3) until taken."""
        from nkisim.core import buffers

        with self._inputs_lock:
            self._wanted.update((tuple(int(d) for d in shape), np.dtype(dtype).str) for shape, dtype in shapes)
        for shape, dtype in shapes:
            dt = np.dtype(dtype)
            if int(np.prod(shape, dtype=np.int64)) * dt.itemsize < buffers.HBM_FILE_BYTES:
                continue  # a replay keeps a tensor this small in memory (no file to take)
            with self._inputs_lock:
                if self._closed or self._taking:  # late: the group took what was ready and made the rest itself
                    return
                path = self._make_inputs_dir() / f"out-{secrets.token_hex(16)}.npy"
            try:
                with timeline.span("output_file", f"{'x'.join(str(int(d)) for d in shape)} prepared"):
                    buffers.write_ready_file(str(path), shape, dt)
                os.chmod(path, 0o600)
            except (OSError, ValueError):
                return
            with self._inputs_lock:
                if self._closed:  # the directory went with close(): nothing to register
                    return
                self._ready.setdefault((tuple(int(d) for d in shape), dt.str), []).append(str(path))
                self.outputs_prepared += 1

    def take_output(self, shape: tuple[int, ...], dtype: np.dtype, member_dir: Path) -> bool:
        """Move a prepared output file of ``shape`` and ``dtype`` (:meth:`prepare_outputs`), if one is complete,
        into ``member_dir`` (a group member's output directory, made here as the replay would make it, owned by the
        replay's uid) under the name ``nkisim.core.buffers.ready_file_name`` gives it: the member's replay takes it
        as the first HBM tensor of that shape and dtype it makes (``run_kernel(hbm_dir=)``)."""
        from nkisim.core import buffers

        dt = np.dtype(dtype)
        key = (tuple(int(d) for d in shape), dt.str)
        with self._inputs_lock:
            # the group the files were prepared for starts: a file made after now would be made for nothing (under
            # load the lowest priority may get no CPU before the group starts; then none is taken or made)
            self._taking = self._taking or key in self._wanted
            ready = self._ready.get(key)
            path = ready.pop() if ready else None
        if path is None:
            return False
        iso = detect_isolation()
        try:
            member_dir.mkdir(exist_ok=True)
            target = member_dir / buffers.ready_file_name(shape, dt)
            os.rename(path, target)
            if iso.uid is not None:
                for p in (member_dir, target):
                    os.chown(p, iso.uid, iso.gid)
                os.chmod(member_dir, 0o700)
        except OSError:
            Path(path).unlink(missing_ok=True)
            return False
        with self._inputs_lock:
            self.outputs_taken += 1
        return True

    def _make_inputs_dir(self) -> Path:
        if self._inputs_dir is None:
            # read by replays alone (a specializing child gets shapes, and its jail masks this directory): tmpfs
            self._inputs_dir = scratch.make_dir("inputs", scratch.fast_root(self.tmp_root))
            os.chmod(self._inputs_dir, 0o711)
        return self._inputs_dir

    def reserve_inputs_dir(self) -> None:
        """Make the directory of this grading's shared input files now, before calls whose specializing children
        must not see files written into it later: a child's jail masks the directory only when it exists at the
        child's launch (``_launch``: ``inputs_dirs``), and the grading writes a group's input files while the
        group's calls are specialized (grader/pipeline.py, docs/grading-security.md L3)."""
        with self._inputs_lock:
            self._make_inputs_dir()

    def inputs_dirs(self) -> tuple[str, ...]:
        """The directory of this grading's shared input files, once one was written or reserved."""
        with self._inputs_lock:
            return (str(self._inputs_dir),) if self._inputs_dir is not None else ()

    def as_timings(self) -> dict[str, float]:
        """For result.json's timings: sandboxed process start-ups and kernel calls (import checks included)."""
        return {"processes:started": float(self.started + self.one_off), "processes:calls": float(self.calls),
                **({"outputs:prepared": float(self.outputs_prepared), "outputs:taken": float(self.outputs_taken)}
                   if self.outputs_prepared else {})}

    def close(self) -> None:
        for thread in self._prestart:
            thread.join()
        with self._lock:
            idle, self._servers = list(self._servers.values()), {}
        for item in idle:
            self._discard(item)
        warmstart.discard()  # an early server this grading did not use: reaped within it, its CPU counted
        with self._inputs_lock:
            self._closed = True
            self._inputs.clear()
            self._drawn.clear()
            self._ready.clear()
            if self._inputs_dir is not None:
                shutil.rmtree(self._inputs_dir, ignore_errors=True)
                self._inputs_dir = None


def _dtype_spec(dtype: np.dtype) -> str:
    """A dtype as the child rebuilds it (grader/child.py ``_stand_ins``): NumPy's own by its type string, an
    ml_dtypes one (bfloat16, float8_*) by its name."""
    return dtype.str if dtype.kind in "biufc" else dtype.name


_PRIORITY = threading.local()


@contextmanager
def background(nice: int) -> Iterator[None]:
    """Kernel processes this thread starts meanwhile run ``nice`` steps below the grader's priority (0: as the
    grader): a grading with several workers runs the calls off its critical path so, and the call everything else
    waits for keeps a core (grader/pipeline.py; docs/grading.md round 8)."""
    before = getattr(_PRIORITY, "nice", 0)
    _PRIORITY.nice = nice
    try:
        yield
    finally:
        _PRIORITY.nice = before


def _launch(
    source: bytes,
    rel_file: str,
    inv: Invocation | None,
    job_fields: dict[str, Any],
    *,
    backend: str,
    target: str,
    api: str | None,
    limits: Limits,
    timeout_s: float,
    tmp_root: str | None,
    import_clock: bool,
    collect: Callable[[ProcessResult, Path, str], Any],
    hidden: tuple[str, ...] = (),
    servers: KernelServers | None = None,
    stream: bytes | None = None,
    prepare: Callable[[Path, Path], dict[str, Any]] | None = None,
) -> Any:
    """Lay out a private run directory, start grader/child.py on it in the sandbox (a fork of one of ``servers``
    for nkisim runs, else a fresh process) and hand the result to ``collect(process result, output dir, module
    file name)`` before the directory is removed.  ``prepare(input dir, output dir)`` writes more inputs (a group
    replay's streams) and returns the job fields naming them."""
    iso = detect_isolation()
    # a replay (a stream, or a group's streams) runs no student code: its scratch may be a tmpfs (scratch.fast_root)
    root = scratch.make_dir("case", scratch.fast_root(tmp_root) if stream is not None or prepare is not None
                            else tmp_root)
    try:
        work, in_dir, out_dir = _prepare_dirs(root, iso)
        module_file = work / Path(rel_file).name
        module_file.write_bytes(source)
        os.chmod(module_file, 0o644)
        input_paths = []
        # a specializing child computes no values (nkisim.stream records in timing mode, never rerun with them): it
        # gets the inputs' shapes and dtypes and makes zero-filled stand-ins, so no input data is ever in the process
        # that runs the kernel's Python (docs/grading-security.md L3)
        shapes_only = bool(job_fields.get("want_stream"))
        # a process that runs the kernel's Python, given no input data: a specializing child or an import check
        student_python = shapes_only or job_fields.get("mode") == "import"
        for i, arr in enumerate(inv.args if inv is not None and not shapes_only else ()):
            if servers is not None and not arr.flags.writeable:  # a shared, read-only input: one file per grading
                input_paths.append(servers.input_file(arr))
                continue
            p = in_dir / f"arg{i}.npy"
            np.save(p, arr, allow_pickle=False)
            os.chmod(p, 0o644)
            input_paths.append(str(p))
        if stream is not None:  # the parent's re-execution: the stream is one more (read-only) input
            p = in_dir / "stream.json"
            p.write_bytes(stream)
            os.chmod(p, 0o644)
        extra = prepare(in_dir, out_dir) if prepare is not None else {}
        job = {
            "backend": backend,
            "target": target,
            "api": api,
            "inputs": input_paths,
            **({"input_specs": [[list(a.shape), _dtype_spec(a.dtype)] for a in inv.args]}
               if shapes_only and inv is not None else {}),
            "kwargs": inv.kwargs if inv is not None else {},
            "module_path": str(module_file),
            "module_name": module_file.stem,
            "work_dir": str(work),
            "out_dir": str(out_dir),
            "sys_path": [str(root / "lib")],
            # In its own mount namespace the child makes the file system read-only (except work/ and out/)
            # and then drops to the unprivileged uid, or drops every capability when there is none.
            "jail": bool(iso.unshare_argv),
            # a specializing child or an import check (student code, no inputs: L3) also loses the grading's shared
            # input files: their paths may linger in the warm server's memory, which the fork inherits, and the
            # grading draws the largest inputs into their files while the submission's imports are checked
            "mask": _masked_dirs((*hidden, *(servers.inputs_dirs() if servers is not None and student_python else ())),
                                 root),
            "uid": iso.uid,
            "gid": iso.gid,
            **({"stream_file": str(in_dir / "stream.json")} if stream is not None else {}),
            **({"nice": nice} if (nice := getattr(_PRIORITY, "nice", 0)) else {}),
            **job_fields,
            **extra,
        }
        env = _nkisim_env(target)
        if backend == "neuron":  # includes NEURON_RT_VISIBLE_CORES, the NeuronCore a Ray task was given
            env = {**hardware_env(), **env}
        clock_file = str(out_dir / "import.started") if import_clock else None
        proc: ProcessResult | None = None
        served = servers.acquire(api or "legacy") if servers is not None and backend == "nkisim" else None
        if served is not None:
            try:
                proc = served[1].run(lambda context: json.dumps({**job, **context}).encode(), timeout_s=timeout_s,
                                     clock_file=clock_file, private_dir=str(root), student=student_python)
            except ServerGone:
                proc = None  # the call runs in a process of its own below, from an empty output directory
                for leftover in out_dir.iterdir():  # a group member's directory too (its prepared output)
                    if leftover.is_dir() and not leftover.is_symlink():
                        shutil.rmtree(leftover)
                    else:
                        leftover.unlink()
            finally:
                servers.release(served)
        if servers is not None:
            with servers._lock:
                servers.calls += 1
                servers.one_off += proc is None
        if proc is None:
            proc = run_sandboxed(
                [sys.executable, "-I", "-B", CHILD_SCRIPT],
                stdin_bytes=lambda context: json.dumps({**job, **context}).encode(),
                cwd=str(work),
                limits=limits,
                timeout_s=timeout_s,
                env_extra=env,
                isolation=iso,
                child_drops_privileges=True,
                clock_file=clock_file,
            )
        return collect(proc, out_dir, module_file.name)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_case(
    source: bytes,
    rel_file: str,
    function: str,
    inv: Invocation,
    *,
    mode: str,
    want_trace: bool,
    backend: str,
    target: str,
    limits: Limits,
    timeout_s: float,
    tmp_root: str | None = None,
    hidden: tuple[str, ...] = (),
    api: str | None = None,
    servers: KernelServers | None = None,
) -> CaseRun:
    """Run ``function`` from the student's ``rel_file`` on ``inv`` in a fresh sandboxed process (a fork of a warm
    server of ``servers``, or a process started for it).  A latency timed on
    Trainium is also recorded with nkisim's estimate of the same kernel (nkibench.feedback, docs/grading.md).

    On nkisim, a file of either API is specialized in that process and executed by the parent (:func:`_replayed`):
    the outputs judged and the trace costed come from nkisim running the program the child shipped, never from the
    process that ran student code."""
    if backend == "nkisim" and (api or "legacy") in REPLAYED_APIS:  # no API: the legacy one, as _launch has it
        return _replayed(source, rel_file, function, inv, mode=mode, want_trace=want_trace, target=target,
                         limits=limits, timeout_s=timeout_s, tmp_root=tmp_root, hidden=hidden, servers=servers,
                         api=api or "legacy")
    run = _launch(
        source,
        rel_file,
        inv,
        {"mode": mode, "want_trace": want_trace, "function": function},
        backend=backend,
        target=target,
        api=api,
        limits=limits,
        timeout_s=timeout_s,
        tmp_root=tmp_root,
        import_clock=False,
        hidden=hidden,
        servers=servers,
        collect=lambda proc, out_dir, name: _collect(
            proc, out_dir, inv, name, limits, timeout_s, want_trace and backend == "nkisim", rel_file
        ),
    )
    if backend == "neuron" and run.hardware_p99_us is not None:
        _record_hardware_pair(source, rel_file, function, inv, target, api, run)
    return run


# The APIs whose kernels the parent re-executes on nkisim (nkisim.stream records both: docs/grading-security.md,
# item 5); a file of another API (none today) would keep the child's outputs and trace.
REPLAYED_APIS: tuple[str, ...] = ("nki", "legacy")
MAX_STREAM_BYTES = 256 << 20


def _replayed(source: bytes, rel_file: str, function: str, inv: Invocation, *, mode: str, want_trace: bool,
              target: str, limits: Limits, timeout_s: float, tmp_root: str | None, hidden: tuple[str, ...],
              servers: KernelServers | None = None, api: str = "nki") -> CaseRun:
    """Specialize-then-execute: the sandboxed child runs the student's Python once, computing no values, and ships
    the program it made (``stream.json``, plain JSON); a second sandboxed process, which loads no student code,
    executes that program with nkisim on the parent's inputs (the same CPU, memory and time limits: a stream can be
    huge or loop forever).  Whatever stream a compromised child ships, the outputs and the trace are what nkisim
    gives for that program; a malformed one is the test's error (nkisim.stream.StreamError names the event)."""
    common = dict(backend="nkisim", target=target, api=api, limits=limits, tmp_root=tmp_root,
                  import_clock=False, hidden=hidden, servers=servers)
    first = _specialized(source, rel_file, function, inv, timeout_s=timeout_s, **common)
    if first.verdict != Verdict.OK:
        return first
    shipped, first.stream = first.stream, None
    return _with_specialization(first, _replay_one(rel_file, function, inv, shipped, mode=mode, want_trace=want_trace,
                                                   timeout_s=timeout_s, **common))


def _specialized(source: bytes, rel_file: str, function: str, inv: Invocation, **common: Any) -> CaseRun:
    """The specializing child's run: its verdict and, when it succeeded, the stream it shipped (``stream``)."""
    with timeline.span("specialize", f"{function}{_shapes(inv)}") as sp:
        run: CaseRun = _launch(
            source, rel_file, inv, {"mode": "timing", "want_trace": False, "want_stream": True, "function": function},
            collect=lambda proc, out_dir, name: _collect_stream(proc, out_dir, inv, name, common["limits"],
                                                                common["timeout_s"], rel_file),
            **common,
        )
        if sp is not None:
            sp.fields["proc_cpu"] = run.cpu_seconds
    return run


def _replay_one(rel_file: str, function: str, inv: Invocation, shipped: bytes, *, mode: str, want_trace: bool,
                **common: Any) -> CaseRun:
    """The replay of one shipped stream in a process of its own (the parent's half of :func:`_replayed`)."""
    with timeline.span("replay", f"{function}{_shapes(inv)} {mode}") as sp:
        run: CaseRun = _launch(
            b"", rel_file, inv, {"mode": mode, "want_trace": want_trace, "function": function},
            collect=lambda proc, out_dir, name: _collect(proc, out_dir, inv, name, common["limits"],
                                                         common["timeout_s"], want_trace, rel_file),
            stream=shipped, **common,
        )
        if sp is not None:
            sp.fields["proc_cpu"] = run.cpu_seconds
    return run


def _shapes(inv: Invocation | None) -> str:
    """A call's argument shapes, for the timeline (GRADER_TIMELINE)."""
    return str([list(a.shape) for a in inv.args]) if inv is not None and timeline.active() else ""


def _with_specialization(first: CaseRun | None, run: CaseRun) -> CaseRun:
    """A replay's outcome with the specializing run's time, output and features added (``first``: None when another
    call's specialization served it: the same signature, shared) and a refused stream named as such."""
    if first is not None:
        run.wall_seconds += first.wall_seconds
        if run.cpu_seconds is not None and first.cpu_seconds is not None:
            run.cpu_seconds += first.cpu_seconds
        run.features = tuple(dict.fromkeys((*first.features, *run.features)))
        run.output_tail = (first.output_tail + run.output_tail)[-4000:]
    if run.verdict == Verdict.ERROR and run.message.startswith("StreamError"):
        run.message = "the kernel's instruction stream was refused: " + run.message
    return run


def _signature(inv: Invocation) -> str:
    """What a kernel's specialization depends on: its arguments' shapes and dtypes and its keyword constants (NKI's
    jit compiles one kernel per such signature; the kernel's Python sees no values)."""
    return json.dumps([[[list(a.shape), a.dtype.str] for a in inv.args], inv.kwargs], sort_keys=True, default=str)


class CrossLink:
    """The two halves of one group made as two processes on two workers, the first (``producer``) publishing its
    leader's products and the other (``consumer``) taking them (nkisim.core.channel; docs/grading.md, round 9).
    The grader makes the channel file for these two processes only, in a private scratch directory of this
    grading, and removes it when both are over.  The halves meet before they start their processes (:meth:`meet`,
    bounded): a half that will not start one (its calls failed to specialize) or does not come in time leaves the
    other on its own."""

    WAIT = 10.0  # seconds a half waits for the other before it goes on alone

    def __init__(self, tmp_root: str | None = None) -> None:
        self.tmp_root = tmp_root
        self._cv = threading.Condition()
        self._coming: dict[str, bool] = {}
        self._dir: Path | None = None
        self._left = 0
        self.path: str | None = None

    def meet(self, role: str, coming: bool) -> str | None:
        """The channel file's path when both halves come (each then makes its process with it), else None."""
        from nkisim.core import channel

        with self._cv:
            self._coming[role] = coming
            if coming and self.path is None and self._dir is None and channel.supported():
                self._dir = scratch.make_dir("case", self.tmp_root)
                os.chmod(self._dir, 0o711)
                path = str(self._dir / f"channel-{secrets.token_hex(16)}")
                channel.create(path)
                self.path = path
            self._cv.notify_all()
            if not self._cv.wait_for(lambda: len(self._coming) == 2, self.WAIT):
                self._coming[role] = False  # the other half, when it comes, finds this one gone
                return None
            return self.path if all(self._coming.values()) else None

    def leave(self) -> None:
        """A half is over (its process ended, or it made none): the second one removes the file."""
        with self._cv:
            self._left += 1
            if self._left >= 2:
                self.close()

    def close(self) -> None:
        with self._cv:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


def run_group(source: bytes, rel_file: str, function: str, invs: list[Invocation], timeouts: list[float], *,
              want_trace: bool, target: str, limits: Limits, tmp_root: str | None = None,
              hidden: tuple[str, ...] = (), servers: KernelServers | None = None,
              api: str = "nki", speculative: list[bool] | None = None,
              inputs: Callable[[], list[Invocation]] | None = None,
              parallel: int = 1, cross: tuple[CrossLink, str] | None = None,
              early: Callable[[int, CaseRun], None] | None = None) -> tuple[list[CaseRun | None], dict]:
    """Several correctness calls of one kernel (``api``: its file's, one of :data:`REPLAYED_APIS`) on the same X
    and W (``part2.large``, ``bias`` and ``maxpool``), each the outcome :func:`run_case` would give it (full mode),
    for about the CPU time of fewer:

    1. one specializing child per distinct signature (:func:`_signature`: the same program for the same shapes, as
       NKI's jit cache has it), its verdict shared by the calls of that signature;
    2. one sandboxed replay process for every specialized call (nkisim.stream.replay_group: the calls run in
       lockstep and reuse the products of bit-identical matmul operands; each writes its own outputs, trace and
       status), limited to the sum of their times;
    3. a call whose group replay could not give its own outcome -- the process timed out, crashed or was killed,
       or the call ran out of memory beside the others -- is replayed alone, as :func:`run_case` does.

    ``speculative[k]``: call ``k`` is made ahead of being asked for (a timed run whose correctness tests have not
    passed yet: the batch-1 float32 timed runs multiply the first image of the batch-4 correctness calls' X by the
    same W).  It is specialized only after every other call's specialization succeeded (a kernel whose Python
    fails or hangs on the correctness shapes costs no more than today), and when a group's process cannot give it
    its own outcome its result is None: it is not replayed alone here, its test makes the call itself if it is
    still wanted.  Otherwise its outcome is the one :func:`run_case` gives it (mode ``full``).

    ``parallel``: how many specializing children may run at once (a grading with several workers: the group's
    specializations are on its critical path; the outcomes are the same).

    ``inputs``: when given, ``invs`` are the calls' stand-ins (``Problem.stand_in``: their shapes, dtypes and keyword
    constants, all a specializing child is given) and ``inputs()`` returns the calls themselves, asked for once the
    specializations are made (the parent generates the inputs meanwhile); a call whose signature differs from its
    stand-in's is a grader error (ValueError).

    ``cross``: this group is one half of a group split across two workers (:class:`CrossLink`, and its role): its
    process shares the leader's products with the other half's through a channel when both halves start one.

    ``early(k, run)``: call ``k``'s outcome as soon as its member of the group's process has ended and written it
    (:class:`_MemberWatch`), while the others still run: the run the call is given when the process ends well,
    the same object, which the caller may judge meanwhile; it is not the call's outcome otherwise (the process
    failed, or the time guard sends the call to run alone: a call's outcome is decided when the process ends, as
    before).  Called from another thread; an exception it raises is ignored.

    Returns the calls' outcomes (None only for a speculative call) and figures (``hits``/``misses``: reused and
    computed products, ``alone``: calls replayed alone after the group)."""
    try:
        return _run_group(source, rel_file, function, invs, timeouts, want_trace=want_trace, target=target,
                          limits=limits, tmp_root=tmp_root, hidden=hidden, servers=servers, api=api,
                          speculative=speculative, inputs=inputs, parallel=parallel, cross=cross, early=early)
    finally:
        if cross is not None:
            cross[0].leave()


def _run_group(source: bytes, rel_file: str, function: str, invs: list[Invocation], timeouts: list[float], *,
               want_trace: bool, target: str, limits: Limits, tmp_root: str | None, hidden: tuple[str, ...],
               servers: KernelServers | None, api: str, speculative: list[bool] | None,
               inputs: Callable[[], list[Invocation]] | None, parallel: int,
               cross: tuple[CrossLink, str] | None,
               early: Callable[[int, CaseRun], None] | None = None) -> tuple[list[CaseRun | None], dict]:
    common = dict(backend="nkisim", target=target, api=api, limits=limits, tmp_root=tmp_root,
                  import_clock=False, hidden=hidden, servers=servers)
    specs: dict[str, CaseRun] = {}
    shipped: dict[str, bytes | None] = {}
    # calls share a specialization when they share a signature and a time limit: each call's specializing run has
    # its own limit alone, so a call with a shorter one never rides on a sibling's longer one
    sigs = [f"{_signature(inv)}|{t!r}" for inv, t in zip(invs, timeouts, strict=True)]
    ahead = list(speculative) if speculative is not None else [False] * len(invs)
    if len(ahead) != len(invs):
        raise ValueError(f"run_group: {len(invs)} calls, {len(ahead)} speculative flags")
    firsts: list[CaseRun | None] = [None] * len(invs)
    streams: list[bytes | None] = [None] * len(invs)
    made = [False] * len(invs)  # the call's specialization is known (made, or shared with an earlier call's)
    # the asked-for calls' specializations first: a speculative call is made only when all of theirs succeeded;
    # within each of the two rounds, up to ``parallel`` distinct signatures at a time (each its own process and
    # limit, as alone)
    for speculative_round in (False, True):
        ks = [k for k in range(len(invs)) if ahead[k] == speculative_round]
        if speculative_round and any(not made[j] or streams[j] is None for j in range(len(invs)) if not ahead[j]):
            break
        first: dict[str, int] = {}  # the first call of each signature not specialized yet
        for k in ks:
            if sigs[k] not in specs:
                first.setdefault(sigs[k], k)
        new = list(first.items())
        for (sig, k), spec in zip(new, _specialize_all(source, rel_file, function,
                                                        [(invs[k], timeouts[k]) for _, k in new], parallel, common),
                                  strict=True):
            specs[sig] = spec
            shipped[sig], spec.stream = spec.stream, None
            firsts[k] = spec
        for k in ks:
            made[k] = True
            streams[k] = shipped[sigs[k]] if specs[sigs[k]].verdict == Verdict.OK else None
    if inputs is not None:
        with timeline.span("inputs_wait"):
            real = inputs()
        if len(real) != len(invs) or any(_signature(a) != _signature(b) for a, b in zip(real, invs, strict=False)):
            raise ValueError("run_group: a call's inputs do not have its stand-in's signature")
        invs = real
    out: list[CaseRun | None] = [None] * len(invs)
    for k, sig in enumerate(sigs):
        spec = specs.get(sig)
        if made[k] and spec is not None and spec.verdict != Verdict.OK:
            out[k] = dataclasses.replace(spec, outputs=[], stream=None)
    live = [k for k in range(len(invs)) if out[k] is None and made[k]]
    figures = {"hits": 0, "misses": 0, "alone": 0}
    path = None
    if cross is not None:
        with timeline.span("cross_meet", cross[1]):
            path = cross[0].meet(cross[1], bool(live))
    if len(live) > 1 or (path is not None and live):
        # each member's outcome read as soon as its member ends, while the others still run
        watch = _MemberWatch([invs[k] for k in live], [timeouts[k] for k in live], limits, want_trace, rel_file,
                             (lambda j, run: early(live[j], run)) if early is not None else None)

        def prepare(in_dir: Path, out_dir: Path) -> dict[str, Any]:
            job = {**_group_inputs(in_dir, out_dir, [(invs[k], streams[k]) for k in live], servers),
                   **({"channel": {"path": path, "role": cross[1]}} if path is not None and cross else {})}
            watch.start(out_dir)
            return job

        def collect(proc: ProcessResult, out_dir: Path, name: str) -> list[CaseRun | None] | None:
            watch.stop()
            return _collect_group(proc, out_dir, [invs[k] for k in live], [timeouts[k] for k in live], name,
                                  limits, want_trace, rel_file, figures, watch)

        with timeline.span("group_replay", f"{function} x{len(live)}") as sp:
            try:
                runs = _launch(
                    b"", rel_file, None, {"mode": "full", "want_trace": want_trace, "function": function},
                    prepare=prepare, collect=collect, timeout_s=sum(timeouts[k] for k in live), **common,
                )
            finally:
                watch.stop()
            if sp is not None:
                sp.fields["proc_cpu"] = [r.cpu_seconds if r is not None else None for r in runs or ()]
        for k, run in zip(live, runs or [None] * len(live), strict=True):
            out[k] = run
    grouped = len(live) > 1 or (path is not None and bool(live))
    for k in live:
        # not grouped (a speculative call too: its own run), or the group could not give this call its own outcome
        if out[k] is None and (not ahead[k] or not grouped):
            if grouped:
                figures["alone"] += 1
            out[k] = _replay_one(rel_file, function, invs[k], streams[k], mode="full", want_trace=want_trace,
                                 timeout_s=timeouts[k], **common)
        run = out[k]
        if run is not None:
            out[k] = _with_specialization(firsts[k], run)
    return out, figures


def _specialize_all(source: bytes, rel_file: str, function: str, calls: list[tuple[Invocation, float]], parallel: int,
                    common: dict[str, Any]) -> list[CaseRun]:
    """The specializing runs of ``calls`` ((stand-in or call, time limit) each), ``parallel`` at a time, in order.
    The threads making them start their processes as this thread would (its kernel slot on the timeline, its
    ``background`` priority)."""
    if parallel <= 1 or len(calls) <= 1:
        return [_specialized(source, rel_file, function, inv, timeout_s=t, **common) for inv, t in calls]
    nice, slot = getattr(_PRIORITY, "nice", 0), timeline.current_slot()

    def one(call: tuple[Invocation, float]) -> CaseRun:
        _PRIORITY.nice = nice
        timeline.set_slot(slot)
        try:
            return _specialized(source, rel_file, function, call[0], timeout_s=call[1], **common)
        finally:
            _PRIORITY.nice = 0
            timeline.set_slot(None)

    with ThreadPoolExecutor(max_workers=min(parallel, len(calls)), thread_name_prefix="grader-specialize") as pool:
        return list(pool.map(one, calls))


def _group_inputs(in_dir: Path, out_dir: Path, members: list[tuple[Invocation, bytes | None]],
                  servers: KernelServers | None) -> dict[str, Any]:
    """Write a group replay's streams and inputs (an array several members pass is written once) and name them,
    with each member's own output directory, in the job's ``group``."""
    written: dict[int, str] = {}
    group = []
    for k, (inv, shipped) in enumerate(members):
        paths = []
        for i, arr in enumerate(inv.args):
            path = written.get(id(arr))
            if path is None:
                if servers is not None and not arr.flags.writeable:
                    path = servers.input_file(arr)
                else:
                    p = in_dir / f"m{k}-arg{i}.npy"
                    np.save(p, arr, allow_pickle=False)
                    os.chmod(p, 0o644)
                    path = str(p)
                written[id(arr)] = path
            paths.append(path)
        sfile = in_dir / f"stream{k}.json"
        sfile.write_bytes(shipped or b"")
        os.chmod(sfile, 0o644)
        if servers is not None and shipped:  # its output's file, prepared and poisoned already, if there is one
            servers.take_output(tuple(inv.out_shape), inv.out_dtype, out_dir / f"m{k}")
        group.append({"stream_file": str(sfile), "inputs": paths, "kwargs": inv.kwargs,
                      "out_dir": str(out_dir / f"m{k}")})
    return {"group": group}


# A process still running, as _collect sees it while a group's member is read before the process ends
_RUNNING = ProcessResult(returncode=None, timed_out=False, wall_seconds=0.0, output_tail="")


class _MemberWatch:
    """Reads each member of a group's process as soon as that member has ended, while the others still run
    (grader/child.py writes a member's outputs, trace and, last, its status.json when its replay ends; the member's
    directory is never written again): its outputs mapped and its trace parsed in this thread -- the five traces
    of the 224x224 group took 0.15-0.25 s in one thread after the process ended (round 11) -- and the run handed
    to ``early``.  The member's outcome is still decided when the process ends (:func:`_collect_group`): the run
    read here is taken only when the process ended well, and the time guard applies to it as before.

    Polls the member directories (every :data:`POLL_S`: a stat of each member's status, no more) from when the job
    is written until :meth:`stop`, which the group's collection calls first: the process has ended by then."""

    # a look every 50 ms: a wake-up costs 50-100 us of CPU on this VM (0.2 CPU s over a grading's groups at 50 looks
    # a second, 0.03 at 20), and the last batch-4 member's status comes 0.1-0.3 s before its process has ended
    POLL_S = 0.05

    def __init__(self, invs: list[Invocation], timeouts: list[float], limits: Limits, want_trace: bool,
                 rel_file: str, early: Callable[[int, CaseRun], None] | None) -> None:
        self.invs, self.timeouts, self.limits, self.want_trace = invs, timeouts, limits, want_trace
        self.rel_file, self.early = rel_file, early
        self.runs: dict[int, CaseRun] = {}  # member -> its run, read while the process ran (verdict ok only)
        self.seen: dict = {}  # traceio.load's byte-identical traces, shared with _collect_group afterwards
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, out_dir: Path) -> None:
        self._thread = threading.Thread(target=self._watch, args=(out_dir,), name="grader-members", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _watch(self, out_dir: Path) -> None:
        # the status files' paths made once: a look is a stat each
        pending = {j: os.path.join(out_dir, f"m{j}", "status.json") for j in range(len(self.invs))}
        exists = os.path.exists
        while pending and not self._stop.wait(self.POLL_S):
            for j in [j for j, status in pending.items() if exists(status)]:
                del pending[j]
                if self._stop.is_set():
                    return
                try:
                    with timeline.span("member_read", f"m{j}"):
                        run = _collect(_RUNNING, out_dir / f"m{j}", self.invs[j], "", self.limits, self.timeouts[j],
                                       self.want_trace, self.rel_file, self.seen)
                except Exception:  # noqa: BLE001 - read again, and reported, when the process ends
                    continue
                if run.verdict != Verdict.OK:
                    continue  # what went wrong is read when the process ends, with its figures
                self.runs[j] = run
                if self.early is not None:
                    try:
                        self.early(j, run)
                    except Exception:  # noqa: BLE001 - the caller judges the run itself when the group returns
                        pass


def _collect_group(proc: ProcessResult, out_dir: Path, invs: list[Invocation], timeouts: list[float],
                   module_name: str, limits: Limits, want_trace: bool, rel_file: str,
                   figures: dict, watch: _MemberWatch | None = None) -> list[CaseRun | None] | None:
    """Each member's outcome from its own directory, as :func:`_collect` reads a single replay's; None for a member
    (or, when the process itself failed, for the group) whose outcome the group could not give: it is replayed
    alone.  A member that ran out of memory is too: it shared the process's memory limit with the others.  A
    member ``watch`` read while the process ran is not read again: its run is completed with the process's
    figures, as :func:`_collect` would have made it."""
    if proc.timed_out or proc.signal_name or proc.returncode:
        return None
    status = _read_status(out_dir / "status.json")
    if status is None or not status.get("ok"):
        return None
    got = status.get("group")
    if isinstance(got, dict):
        for key in ("hits", "misses"):
            if isinstance(got.get(key), int):
                figures[key] += got[key]
    runs: list[CaseRun | None] = []
    # members that differ only in their values ship byte-identical traces (large and bias): parsed once, then
    # cloned (traceio.load's ``seen``, shared with the watch), on the grading's critical path once the group's
    # process ends unless the watch read them before
    seen_traces: dict = watch.seen if watch is not None else {}
    cpu: list[float | None] = []
    borrowed: list[float | None] = []
    for k, (inv, t) in enumerate(zip(invs, timeouts, strict=True)):
        mdir = out_dir / f"m{k}"
        mstatus = _read_status(mdir / "status.json")
        if mstatus is None:
            runs.append(None)
            cpu.append(None)
            borrowed.append(None)
            continue
        got = mstatus.get("cpu_seconds")
        cpu.append(float(got) if isinstance(got, int | float) and got >= 0 else None)
        got = mstatus.get("borrowed_seconds", 0.0)  # written by grader/child.py's group job for every member
        borrowed.append(float(got) if isinstance(got, int | float) and got >= 0 else None)
        run = watch.runs.get(k) if watch is not None else None
        if run is not None and mstatus.get("ok"):
            # _collect's fields from the process, the rest read from the same files while the process ran
            run.output_tail, run.features = proc.output_tail, tuple(proc.features)
            if isinstance(mstatus.get("jail"), list):
                run.features += tuple(str(x) for x in mstatus["jail"][:10])
        else:
            run = _collect(proc, mdir, inv, module_name, limits, t, want_trace, rel_file, seen_traces)
        run.wall_seconds = proc.wall_seconds / len(invs)  # the group's wall time, split evenly
        if isinstance(status.get("jail"), list):  # the process's isolation layers, as a single replay reports them
            run.features = (*run.features, *(str(x) for x in status["jail"][:10]))
        runs.append(None if run.exhausted or run.verdict in (Verdict.CRASHED, Verdict.GRADER_ERROR) else run)
    # The group's process has the sum of the members' time limits; no member may use more of it than its own limit
    # gives it alone: a call whose share of the group's time nears its limit is replayed alone, where that limit
    # holds (a pooling call doing far more work than its siblings passed here and timed out alone: G11 in
    # docs/grading-security.md)
    for k in _over_their_time(proc.wall_seconds, cpu, timeouts, borrowed):
        runs[k] = None
    return runs


# A grouped call replayed alone when its estimated time alone is over this fraction of its time limit: the estimate
# (its thread's CPU time, scaled by the group's wall/CPU ratio for the machine's load) leaves out the process's own
# start-up and the load's variation, which the margin covers; honest calls use a few percent of their limit
GROUP_TIME_FRACTION = 0.5


def _over_their_time(wall_seconds: float, cpu: list[float | None], timeouts: list[float],
                     borrowed: list[float | None] | None = None) -> list[int]:
    """The members of a group whose time alone, estimated from their share of the group's, may be over their limit:
    ``cpu`` is each member's own thread's CPU seconds as the replay process measured them (it runs no student
    code; None: not reported, so not known to be under the limit), plus ``borrowed``, the CPU seconds a sibling
    spent on the products the member reused (alone it computes them itself: a call that times out alone must not
    pass on its siblings' products; None: not reported), scaled by the group's wall/CPU ratio (of the CPU the
    process really spent: the members' own)."""
    load = max(1.0, wall_seconds / max(sum(c for c in cpu if c is not None), 1e-3))
    if borrowed is None:
        borrowed = [0.0] * len(cpu)
    return [k for k, (c, b, t) in enumerate(zip(cpu, borrowed, timeouts, strict=True))
            if c is None or b is None or (c + b) * load >= GROUP_TIME_FRACTION * t]


def _collect_stream(proc: ProcessResult, out_dir: Path, inv: Invocation, module_name: str, limits: Limits,
                    timeout_s: float, rel_file: str | None) -> CaseRun:
    """The specializing child's verdict and, when it succeeded, the stream it wrote (size-capped bytes)."""
    run = _collect(proc, out_dir, inv, module_name, limits, timeout_s, False, rel_file)
    if run.verdict != Verdict.OK:
        return run
    path = out_dir / "stream.json"
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_STREAM_BYTES + 1)
    except OSError:
        return CaseRun(Verdict.BAD_OUTPUT, "the kernel's run shipped no instruction stream",
                       wall_seconds=run.wall_seconds, output_tail=run.output_tail, features=run.features)
    if len(data) > MAX_STREAM_BYTES:
        return CaseRun(Verdict.BAD_OUTPUT, f"the kernel's instruction stream is over {MAX_STREAM_BYTES >> 20} MiB; "
                       "no course kernel needs that much", wall_seconds=run.wall_seconds, output_tail=run.output_tail,
                       features=run.features)
    run.stream = data
    return run


def _record_hardware_pair(source: bytes, rel_file: str, function: str, inv: Invocation, target: str,
                          api: str | None, run: CaseRun) -> None:
    """The grader's half of the hardware feedback loop: the student's file, the call and its hardware p99, with
    nkisim's estimate made outside the sandbox's process (nkibench.feedback; never fails a grading)."""
    from nkibench import feedback

    if not feedback.enabled():
        return
    try:
        desc = feedback.describe_source(source, rel_file, function, inv.args, inv.kwargs)
    except Exception as exc:  # noqa: BLE001 - recording must never break a grading
        print(f"grader: hardware/nkisim pair not recorded: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    if desc is None:
        return
    hw = run.hardware or {}
    versions = hw.get("versions") if isinstance(hw.get("versions"), dict) else {}
    feedback.record_pair(desc, target=target, api=api, backend=str(hw.get("backend", "neuron")),
                         versions={str(k): str(v) for k, v in versions.items()}, p99_us=run.hardware_p99_us,
                         iterations=None, by="grader")


@dataclass
class ImportCheck:
    """Outcome of importing one student file once, before any test: ``status`` is what the tests that need the
    file get when the import failed ('error' or 'timeout'); ``grader-error`` means the check itself could not
    run (the tests then run as usual)."""

    verdict: str  # a Verdict: ok | failed | grader-error
    message: str = ""
    status: str = Status.ERROR
    missing: tuple[str, ...] = ()
    wall_seconds: float = 0.0
    output_tail: str = ""


def check_import(
    source: bytes,
    rel_file: str,
    functions: list[str],
    *,
    backend: str,
    target: str,
    limits: Limits,
    timeout_s: float,
    tmp_root: str | None = None,
    hidden: tuple[str, ...] = (),
    api: str | None = None,
    servers: KernelServers | None = None,
) -> ImportCheck:
    """Import the student's ``rel_file`` once in the sandbox (no kernel call) within ``timeout_s`` seconds of
    import time, and report which of ``functions`` it lacks."""
    return _launch(
        source,
        rel_file,
        None,
        {"mode": "import", "want_trace": False, "function": "", "functions": list(functions)},
        backend=backend,
        target=target,
        api=api,
        limits=limits,
        timeout_s=timeout_s,
        tmp_root=tmp_root,
        import_clock=True,
        hidden=hidden,
        servers=servers,
        collect=lambda proc, out_dir, name: _collect_import(proc, out_dir, rel_file, name, limits, timeout_s),
    )


def _collect_import(
    proc: ProcessResult, out_dir: Path, rel_file: str, module_name: str, limits: Limits, timeout_s: float
) -> ImportCheck:
    base = {"wall_seconds": proc.wall_seconds, "output_tail": proc.output_tail}
    hang = f"{rel_file} did not finish importing within {timeout_s:g} s"
    if proc.timed_out and not proc.clock_started:
        return ImportCheck(Verdict.GRADER_ERROR, "the import check did not start in time (machine overloaded?)", **base)
    if proc.timed_out:
        return ImportCheck(Verdict.FAILED, hang, Status.TIMEOUT, **base)
    status = _read_status(out_dir / "status.json")
    if status is None:
        if proc.signal_name == "SIGXCPU":
            return ImportCheck(Verdict.FAILED, hang + " (CPU time limit)", Status.TIMEOUT, **base)
        if proc.signal_name == "SIGKILL":
            msg = f"{rel_file}: the process importing it was killed by SIGKILL (out of memory?)"
            return ImportCheck(Verdict.FAILED, msg, **base)
        how = f"was killed by {proc.signal_name}" if proc.signal_name else f"exited with code {proc.returncode}"
        msg = f"importing {rel_file} ended the process before it finished: it {how} (os._exit, crash or kill?)"
        return ImportCheck(Verdict.FAILED, msg, **base)
    if status.get("ok"):
        missing = status.get("missing")
        names = tuple(str(m) for m in missing[:20]) if isinstance(missing, list) else ()
        return ImportCheck(Verdict.OK, missing=names, **base)
    etype = str(status.get("error_type", "Error"))
    err = str(status.get("error", ""))[:4000]
    if status.get("stage") != "import":
        msg = f"the grader could not start the import check: {etype}: {err}"
        return ImportCheck(Verdict.GRADER_ERROR, msg, **base)
    if etype == "MemoryError":
        msg = f"{rel_file} ran out of memory while importing (limit {limits.address_space_mib} MiB of address space)"
    elif etype == "SystemExit":
        msg = f"{rel_file} called exit({err or 0}) while importing"
    else:
        msg = f"importing {rel_file} failed: {etype}: {err}"
    where = _student_frames(str(status.get("traceback", "")), module_name, rel_file)
    if where:
        msg += "\n" + where
    return ImportCheck(Verdict.FAILED, msg, **base)


def _collect(
    proc: ProcessResult,
    out_dir: Path,
    inv: Invocation,
    module_name: str,
    limits: Limits,
    timeout_s: float,
    want_trace: bool,
    rel_file: str | None = None,
    seen_traces: dict | None = None,
) -> CaseRun:
    base = {"wall_seconds": proc.wall_seconds, "output_tail": proc.output_tail, "features": proc.features}
    if proc.timed_out:
        msg = f"timed out: the kernel ran longer than the {timeout_s:g} s limit"
        return CaseRun(Verdict.TIMEOUT, msg, exhausted="timed out", **base)
    status = _read_status(out_dir / "status.json")
    if status is None:
        if proc.signal_name in ("SIGXCPU", "SIGKILL") and proc.wall_seconds >= timeout_s * 0.5:
            msg = f"CPU time limit exceeded ({proc.signal_name})"
            return CaseRun(Verdict.TIMEOUT, msg, exhausted="timed out", **base)
        how = f"was killed by {proc.signal_name}" if proc.signal_name else f"exited with code {proc.returncode}"
        # SIGKILL out of the blue is the kernel's OOM killer (or the cgroup's): a memory limit, like MemoryError.
        killed = "was killed by SIGKILL (out of memory?)" if proc.signal_name == "SIGKILL" else None
        return CaseRun(
            Verdict.CRASHED,
            f"the kernel process {how} before reporting a result (os._exit, crash or kill?)",
            exhausted=killed,
            **base,
        )
    jail = status.get("jail")
    if isinstance(jail, list):
        base["features"] = tuple(proc.features) + tuple(str(x) for x in jail[:10])
    if not status.get("ok"):
        etype = str(status.get("error_type", "Error"))
        err = str(status.get("error", ""))[:4000]
        stage = status.get("stage")
        where = _student_frames(str(status.get("traceback", "")), module_name, rel_file)
        if etype == "MemoryError":
            msg = f"ran out of memory (limit {limits.address_space_mib} MiB of address space)"
            base["exhausted"] = "ran out of memory"
        elif etype == "SystemExit":
            msg = f"the kernel called exit ({err or 0}) instead of returning an output"
        elif stage == "import":
            msg = f"importing {module_name} failed: {etype}: {err}"
        elif stage == "setup":
            msg = f"the grader could not start the kernel process: {etype}: {err}"
            return CaseRun(Verdict.GRADER_ERROR, msg, **base)
        else:
            msg = f"{etype}: {err}"
        if where:
            msg += "\n" + where
        return CaseRun(Verdict.ERROR, msg, **base)
    run = CaseRun(Verdict.OK, **base)
    run.kernel_seconds = status.get("kernel_seconds") if isinstance(status.get("kernel_seconds"), float) else None
    run.cpu_seconds = status.get("cpu_seconds") if isinstance(status.get("cpu_seconds"), float) else None
    if isinstance(status.get("hardware_p99_us"), float):
        run.hardware_p99_us = status["hardware_p99_us"]
    if isinstance(status.get("hardware"), dict):
        run.hardware = status["hardware"]
    outputs = sorted(out_dir.glob("output_*.npy"), key=lambda p: p.name)
    try:
        run.outputs = [_load_output(p, inv) for p in outputs[:4]]
    except (OSError, ValueError) as exc:
        return CaseRun(Verdict.BAD_OUTPUT, f"the kernel's output could not be read: {exc}", **base)
    if want_trace:
        trace_file = out_dir / "trace.bin"
        if not trace_file.exists():
            return CaseRun(Verdict.BAD_OUTPUT, "the timed run produced no instruction trace", **base)
        try:
            from nkisim.core import traceio

            with timeline.span("trace_load"):
                run.trace = traceio.load(str(trace_file), max_bytes=MAX_TRACE_BYTES, seen=seen_traces)
        except Exception as exc:  # noqa: BLE001 - a malformed trace is the submission's problem
            return CaseRun(Verdict.BAD_OUTPUT, f"the instruction trace could not be read: {exc}", **base)
        if len(run.trace.instrs) > MAX_TRACE_INSTRS:
            return CaseRun(
                Verdict.BAD_OUTPUT,
                f"the kernel issued {len(run.trace.instrs)} instructions (limit {MAX_TRACE_INSTRS}); "
                "no course kernel needs that many",
                **base,
            )
    return run
