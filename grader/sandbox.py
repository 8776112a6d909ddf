"""Run untrusted code in a fresh, limited, killable process.

Layers (each one alone would not be enough; the grader uses whatever the OS allows and records which):
* a new session/process group, killed as a whole when the run ends or times out, and ``setpriv --pdeathsig``
  so nothing outlives the grader process that started it;
* rlimits via ``prlimit`` (and again by grader/child.py itself): CPU seconds, address space, file size, open
  files, no core dumps, process count (RLIMIT_NPROC binds non-root users only, hence the next two layers);
* a per-run pids cgroup when the grader may create one (root in a container, Gradescope): a process limit
  that holds for root too, and a handle to kill every process of the run;
* ``unshare``: network namespace (no network), PID namespace whose processes all die with its init
  (``--kill-child``) and which sees only its own processes in /proc (``--mount-proc``, where allowed), mount
  namespace in which grader/child.py makes the file system read-only except its own work and output
  directories before dropping privileges;
* the child marks itself not dumpable before student code runs, so no other sandboxed run (same uid, no
  capabilities) can open its /proc/<pid>/root, fd or mem;
* an unprivileged uid (``GRADER_SANDBOX_USER``, default ``nobody``) when the grader runs as root and that user
  can run the interpreter; otherwise uid 0 of the namespace without any capability;
* a scrubbed environment: minimal PATH, HOME/TMPDIR in the work dir, one BLAS thread, nkisim settings fixed.
No Python runs between fork and exec (a preexec_fn can deadlock a multi-threaded parent).  Output is drained
through a pipe and only its tail is kept, so a printing loop cannot fill the disk or the grader's memory.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grader import cgroups
from grader.rubric import Limits

OUTPUT_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Isolation:
    """What this machine lets the grader use; recorded in result.json."""

    unshare_argv: tuple[str, ...]
    uid: int | None
    gid: int | None
    features: tuple[str, ...]


@dataclass
class ProcessResult:
    returncode: int | None
    timed_out: bool
    wall_seconds: float
    output_tail: str
    signal_name: str | None = None
    features: tuple[str, ...] = field(default_factory=tuple)
    peak_processes: int | None = None
    clock_started: bool = True  # False: the run timed out before it signalled the start of its timed part


def _probe(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _as_user(unshare_argv: tuple[str, ...], uid: int, gid: int, argv: list[str]) -> list[str]:
    if unshare_argv:
        return [*unshare_argv, "--setuid", str(uid), "--setgid", str(gid), *argv]
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]
    return ["false"]


@functools.lru_cache(maxsize=1)
def detect_isolation() -> Isolation:
    """Probe once per process which isolation features work here (container, CI runner, laptop, Gradescope)."""
    if os.environ.get("GRADER_NO_NAMESPACES") == "1":
        unshare_argv: tuple[str, ...] = ()
    else:
        unshare_argv = ()
        exe = shutil.which("unshare")
        if exe:
            base = [exe, "--mount", "--net", "--pid", "--fork", "--kill-child"]
            if os.geteuid() != 0:
                base.insert(1, "--map-root-user")
            # --mount-proc: a /proc of the run's own PID namespace, so student code does not even see the other
            # runs' processes (mounting it can be refused in containers that mask parts of /proc; then the
            # children's PR_SET_DUMPABLE 0 alone keeps them apart, grader/child.py)
            for argv in ([*base, "--mount-proc"], base):
                if _probe([*argv, "true"]):
                    unshare_argv = tuple(argv)
                    break
    uid = gid = None
    if os.geteuid() == 0:
        name = os.environ.get("GRADER_SANDBOX_USER", "nobody")
        try:
            entry = pwd.getpwnam(name)
            uid, gid = entry.pw_uid, entry.pw_gid
        except KeyError:
            uid = gid = None
        # The unprivileged user must be able to run this interpreter (not so when it lives under /root).
        if uid is not None and not _probe(_as_user(unshare_argv, uid, gid, [sys.executable, "-c", "import numpy"])):
            uid = gid = None
    features = ["process-group", "rlimits", "scrubbed-env"]
    if shutil.which("setpriv") and sys.platform.startswith("linux"):
        features.append("pdeathsig")
    if unshare_argv:
        features += ["mount-namespace", "network-namespace", "pid-namespace"]
        if "--mount-proc" in unshare_argv:
            features.append("private-proc")
    cgroups.reap_stale()
    probe_group = cgroups.PidsCgroup.create(8)
    if probe_group is not None:
        probe_group.destroy()
        features.append("pids-cgroup")
    if uid is not None:
        features.append(f"uid:{uid}")
    elif os.geteuid() != 0:
        features.append(f"uid:{os.geteuid()}")
    return Isolation(unshare_argv, uid, gid, tuple(features))


def _processes_of(uid: int) -> int:
    """How many processes this uid runs now (RLIMIT_NPROC counts them all, not just the sandbox's)."""
    count = 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    return count


def limit_args(limits: Limits, cpu_seconds: int, nproc: int) -> list[str]:
    """``prlimit`` options for the run (util-linux), applied before anything else is exec'd.

    No preexec_fn: running Python between fork and exec in a multi-threaded grader (BLAS threads, the
    per-submission thread pool) can deadlock on locks held by other threads at fork time.
    """
    mib = 1024 * 1024
    return [
        f"--cpu={cpu_seconds}:{cpu_seconds + 5}",
        f"--as={limits.address_space_mib * mib}",
        f"--fsize={limits.file_size_mib * mib}",
        f"--nofile={limits.open_files}",
        "--core=0",
        f"--nproc={nproc}",
    ]


def rlimit_table(limits: Limits, cpu_seconds: int, nproc: int) -> dict[str, list[int]]:
    """The same limits for grader/child.py to set on itself (when prlimit is missing, and to be sure)."""
    mib = 1024 * 1024
    return {
        "RLIMIT_CPU": [cpu_seconds, cpu_seconds + 5],
        "RLIMIT_AS": [limits.address_space_mib * mib] * 2,
        "RLIMIT_FSIZE": [limits.file_size_mib * mib] * 2,
        "RLIMIT_NOFILE": [limits.open_files] * 2,
        "RLIMIT_CORE": [0, 0],
        "RLIMIT_NPROC": [nproc, nproc],
    }


def _wrappers(cpu_seconds: int, limits: Limits, nproc: int) -> list[str]:
    argv: list[str] = []
    setpriv = shutil.which("setpriv")
    if setpriv and sys.platform.startswith("linux"):
        argv += [setpriv, "--pdeathsig", "KILL", "--"]
    prlimit = shutil.which("prlimit")
    if prlimit:
        argv += [prlimit, *limit_args(limits, cpu_seconds, nproc), "--"]
    return argv


def scrubbed_env(home: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        # NumPy asks for transparent huge pages on every array of 4 MiB or more (madvise); the kernel processes
        # allocate ~1.6 GB of such arrays per batch-4 224x224 group replay (inputs copied into nkisim's HBM,
        # outputs), and faulting them in as huge pages cost 3-5 s of system time per group on the grading machine
        # against ~1.4 s in 4 KiB pages, for the same user time (docs/grading.md, round 7)
        "NUMPY_MADVISE_HUGEPAGE": "0",
    }
    if os.environ.get("NKISIM_SHARE_SELFCHECK") == "1":
        # the test suite's check of nkisim's product sharing (nkisim/core/sharing.py): it only adds compares that
        # raise on an emulator bug, so it may reach the group replays it checks
        env["NKISIM_SHARE_SELFCHECK"] = "1"
    env.update(extra or {})
    return env


def _drain(stream, tail: deque[bytes], budget: list[int]) -> None:
    """Keep the last OUTPUT_TAIL_BYTES of the child's output; discard the rest as it arrives."""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        tail.append(chunk)
        budget[0] += len(chunk)
        while budget[0] - len(tail[0]) >= OUTPUT_TAIL_BYTES and len(tail) > 1:
            budget[0] -= len(tail.popleft())


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def run_sandboxed(
    python_argv: list[str],
    *,
    stdin_bytes: bytes | Callable[[dict[str, Any]], bytes],
    cwd: str,
    limits: Limits,
    timeout_s: float,
    env_extra: dict[str, str] | None = None,
    isolation: Isolation | None = None,
    child_drops_privileges: bool = False,
    clock_file: str | None = None,
    startup_limit_s: float = 120.0,
) -> ProcessResult:
    """Run ``python_argv`` (a Python command line) under every available layer; never raises for child misbehaviour.

    ``clock_file``: the ``timeout_s`` clock starts when the child creates this file (so a short limit measures
    the student's code, not interpreter start-up on a loaded machine); before that, ``startup_limit_s`` applies.
    """
    iso = isolation or detect_isolation()
    cpu_seconds = int(timeout_s) + limits.cpu_seconds_slack
    run_uid = iso.uid if iso.uid is not None else os.geteuid()
    nproc = limits.processes
    if iso.uid is None:
        # Not a dedicated uid: the user's other processes count against the same limit.
        nproc += _processes_of(run_uid)
    popen_user: dict[str, Any] = {}
    if iso.uid is not None and iso.unshare_argv and not child_drops_privileges:
        # unshare needs root to create the namespaces; it switches to the unprivileged uid inside them.
        inner = [*iso.unshare_argv, "--setuid", str(iso.uid), "--setgid", str(iso.gid), *python_argv]
    else:
        inner = [*iso.unshare_argv, *python_argv]
        if iso.uid is not None and not (iso.unshare_argv and child_drops_privileges):
            popen_user = {"user": iso.uid, "group": iso.gid, "extra_groups": []}
    argv = [*_wrappers(cpu_seconds, limits, nproc), *inner]
    group = cgroups.PidsCgroup.create(limits.processes) if "pids-cgroup" in iso.features else None
    joined_by_shell = False
    if group is not None and not popen_user and os.path.exists("/bin/sh"):
        # The first process of the run moves itself into the cgroup and only then execs the wrappers, so
        # every later process (unshare's child, a fork bomb) is born inside it.
        argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', group.procs_file, *argv]
        joined_by_shell = True
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=scrubbed_env(cwd, env_extra),
        start_new_session=True,
        close_fds=True,
        **popen_user,
    )
    if group is not None and not joined_by_shell:
        # The wrappers exec in place, so this usually catches the run before anything forks; grader/child.py
        # joins again itself (job["cgroup"]) before it reads its job, which closes the window for student code.
        try:
            cgroups.join_pid(group.procs_file, proc.pid)
        except OSError:
            pass
    tail: deque[bytes] = deque()
    reader = threading.Thread(target=_drain, args=(proc.stdout, tail, [0]), daemon=True)
    reader.start()
    if callable(stdin_bytes):
        # The child also applies the run's limits and cgroup to itself before touching its job.
        stdin_bytes = stdin_bytes(
            {
                "cgroup": group.procs_file if group is not None else None,
                "rlimits": rlimit_table(limits, cpu_seconds, nproc),
            }
        )
    try:
        proc.stdin.write(stdin_bytes)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    timed_out, clock_started = _wait(proc, started, timeout_s, clock_file, startup_limit_s)
    # Whatever happened, nothing of this run may survive it (daemonised grandchildren included).
    _kill_group(proc)
    proc.wait()
    peak = None
    if group is not None:
        peak = group.peak()
        group.destroy()
    reader.join(timeout=5)
    wall = time.perf_counter() - started
    output = b"".join(tail)[-OUTPUT_TAIL_BYTES:].decode("utf-8", errors="replace")
    rc = proc.returncode
    sig = None
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
    elif rc is not None and rc > 128 and iso.unshare_argv:
        # unshare --fork reports a child killed by signal N as exit status 128 + N.
        try:
            sig = signal.Signals(rc - 128).name
        except ValueError:
            sig = None
    return ProcessResult(rc, timed_out, wall, output, sig, iso.features, peak, clock_started)


def _wait(
    proc: subprocess.Popen, started: float, timeout_s: float, clock_file: str | None, startup_limit_s: float
) -> tuple[bool, bool]:
    """Wait for the child within its limit: (timed out, clock started)."""
    if clock_file is None:
        try:
            proc.wait(timeout=timeout_s)
            return False, True
        except subprocess.TimeoutExpired:
            return True, True
    deadline, clock_started = started + startup_limit_s, False
    while True:
        now = time.perf_counter()
        if not clock_started and os.path.exists(clock_file):
            clock_started, deadline = True, now + timeout_s
        if now >= deadline:
            return True, clock_started
        try:
            proc.wait(timeout=(deadline - now) if clock_started else min(deadline - now, 0.05))
            return False, clock_started or os.path.exists(clock_file)
        except subprocess.TimeoutExpired:
            continue


# ------------------------------------------------------------------------------------------ warm servers ----
SERVER_CPU_SECONDS = 7 * 24 * 3600  # the server's own limit; each call sets its own (grader/child.py: _confine)
SERVER_NPROC = 1 << 15  # likewise: each call lowers RLIMIT_NPROC to its own limit before student code


@functools.cache
def _spawner() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="grader-server-spawner")


class ServerGone(RuntimeError):
    """A warm server did not start or died between calls: the call runs in a one-off process instead."""


def _read_line(fd: int, buf: bytearray, deadline: float) -> bytes | None:
    """One line from ``fd`` before ``deadline`` (a warm server's ready line; what follows stays in ``buf``): None
    when the output ends or the deadline passes first."""
    import select

    while b"\n" not in buf:
        now = time.perf_counter()
        if now >= deadline:
            return None
        ready, _, _ = select.select([fd], [], [], deadline - now)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
    i = buf.index(b"\n")
    line = bytes(buf[:i])
    del buf[: i + 1]
    return line


KILL_REPLY_S = 10.0  # how long a warm server may take to report a call killed at the grader's word


class _Reply:
    """A call's reply from its warm server, once ``done`` is set (None: the server ended first)."""

    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: dict[str, Any] | None = None


class WarmServer:
    """grader/forkserver.py under every layer a one-off child gets from :func:`run_sandboxed` (setpriv, prlimit,
    unshare), serving the kernel calls of any of the grading's threads, side by side; each call is a fresh fork with
    its own pids cgroup, rlimits, mount and PID namespaces (grader/forkserver.py says why that keeps one process per
    call's isolation).  Replies come back in the order calls end; a reader thread hands each to its call's thread."""

    def __init__(self, python_argv: list[str], *, cwd: str, limits: Limits, env_extra: dict[str, str] | None = None,
                 isolation: Isolation | None = None, startup_limit_s: float = 120.0) -> None:
        self.iso = iso = isolation or detect_isolation()
        self.limits = limits
        popen_user: dict[str, Any] = {}
        inner = [*iso.unshare_argv, *python_argv]
        if iso.uid is not None and not iso.unshare_argv:
            popen_user = {"user": iso.uid, "group": iso.gid, "extra_groups": []}
        argv = [*_wrappers(SERVER_CPU_SECONDS, limits, SERVER_NPROC), *inner]
        # Started from a thread that lives as long as this process: setpriv's --pdeathsig fires when the *thread*
        # that forked the server ends (prctl(2), PR_SET_PDEATHSIG), and a grading's worker threads end with each
        # phase, while the server serves the whole grading.
        self.proc = _spawner().submit(
            subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
            env=scrubbed_env(cwd, env_extra), start_new_session=True, close_fds=True, **popen_user,
        ).result()
        self.alive = False
        self._lock = threading.Lock()  # the ids and the calls waiting for their replies; closing
        self._send_lock = threading.Lock()  # the job pipe (apart: a reply is handed over while a job is written)
        self._next_id = 0
        self._waiting: dict[int, _Reply] = {}
        self._running_dirs: dict[int, str] = {}  # under _send_lock: the private directories of the calls sent
        self._closed = False
        self._replies: threading.Thread | None = None
        self._err: deque[bytes] = deque()
        self._reader = threading.Thread(target=_drain, args=(self.proc.stderr, self._err, [0]), daemon=True)
        self._reader.start()
        rest = bytearray()  # what the server wrote after its ready line: the reply reader's
        line = _read_line(self.proc.stdout.fileno(), rest, time.perf_counter() + startup_limit_s)
        if line is None or not line.startswith(b'{"ready"'):
            self.close()
            raise ServerGone("the kernel server did not start: " + self.errors())
        self.alive = True
        self._replies = threading.Thread(target=self._read_replies, args=(bytes(rest),), daemon=True,
                                         name="grader-server-replies")
        self._replies.start()
        # the server's namespaces hold for every call; the PID namespace and /proc are each call's own, and the
        # call names them (grader/child.py's status)
        self.features = tuple(f for f in iso.features if f not in ("pid-namespace", "private-proc"))

    def errors(self) -> str:
        return b"".join(self._err)[-2000:].decode("utf-8", errors="replace")

    def _read_replies(self, buf: bytes) -> None:
        """The server's reply lines, each to the call (by id) waiting for it; at the end of the server's output
        every call still waiting is told (reply None)."""
        fd = self.proc.stdout.fileno()
        data = bytearray(buf)
        while True:
            while b"\n" in data:
                i = data.index(b"\n")
                line = bytes(data[:i])
                del data[: i + 1]
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                with self._lock:
                    waiter = self._waiting.get(reply.get("id")) if isinstance(reply, dict) else None
                if waiter is not None:
                    waiter.reply = reply
                    waiter.done.set()
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            data += chunk
        with self._lock:
            self.alive = False
            waiting = list(self._waiting.values())
        for waiter in waiting:
            waiter.done.set()

    def _send(self, body: bytes) -> None:
        """One message to the server: its length on a line, then the JSON (grader/forkserver.py ``_read_message``).
        The caller holds ``_send_lock``."""
        self.proc.stdin.write(b"%d\n" % len(body) + body)
        self.proc.stdin.flush()

    def run(self, job: Callable[[dict[str, Any]], bytes], *, timeout_s: float, clock_file: str | None = None,
            startup_limit_s: float = 120.0, private_dir: str | None = None, student: bool = True) -> ProcessResult:
        """One kernel call (``job`` as for :func:`run_sandboxed`'s ``stdin_bytes``); raises ServerGone when the
        server is no longer there to run it.  ``private_dir``: the call's own directory, which every call that runs
        the kernel's Python (``student``) started while this one runs masks (``mask_calls``).  A call that times out
        is killed (its process group and PID namespace by the server, its pids cgroup by this process); a server
        that does not report it within ``KILL_REPLY_S`` is killed with every call it runs."""
        if not self.alive or self.proc.poll() is not None:
            self.alive = False
            raise ServerGone("the kernel server has ended: " + self.errors())
        cpu_seconds = int(timeout_s) + self.limits.cpu_seconds_slack
        run_uid = self.iso.uid if self.iso.uid is not None else os.geteuid()
        nproc = self.limits.processes + (_processes_of(run_uid) if self.iso.uid is None else 0)
        group = cgroups.PidsCgroup.create(self.limits.processes) if "pids-cgroup" in self.iso.features else None
        context: dict[str, Any] = {"cgroup": group.procs_file if group is not None else None,
                                   "rlimits": rlimit_table(self.limits, cpu_seconds, nproc)}
        waiter = _Reply()
        with self._lock:
            ident = self._next_id
            self._next_id += 1
            self._waiting[ident] = waiter
        started = time.perf_counter()
        try:
            try:
                with self._send_lock:
                    # Whatever this server was sent before is in the memory of the fork that runs this call: a
                    # call that runs the kernel's Python masks the directories of the calls still running (their
                    # inputs and outputs), whose paths it would find there; one sent later is not (the server reads
                    # exactly one message before it forks).  So the set is taken and the job sent under one lock.
                    if student:
                        context["mask_calls"] = sorted(self._running_dirs.values())
                    if private_dir is not None:
                        self._running_dirs[ident] = private_dir
                    payload = job(context)
                    self._send(b'{"id": %d, "job": ' % ident + payload + b"}")
            except (BrokenPipeError, OSError, ValueError) as exc:
                self.alive = False
                raise ServerGone(f"the kernel server has ended: {exc}") from None
            deadline = started + (startup_limit_s if clock_file else timeout_s)
            clock_started = clock_file is None
            timed_out = False
            while not waiter.done.is_set():
                now = time.perf_counter()
                if not clock_started and os.path.exists(clock_file):
                    clock_started, deadline = True, now + timeout_s
                if now >= deadline:
                    timed_out = True
                    break
                waiter.done.wait(deadline - now if clock_started else min(deadline - now, 0.05))
            clock_started = clock_started or (clock_file is not None and os.path.exists(clock_file))
            if timed_out:
                try:
                    with self._send_lock:
                        self._send(b'{"kill": %d}' % ident)
                except (OSError, ValueError):
                    pass
                if not waiter.done.wait(KILL_REPLY_S) or waiter.reply is None:
                    self.close(kill=True)  # the server did not report the killed call: it goes, with its calls
                return ProcessResult(None, True, time.perf_counter() - started, "", None, self.features,
                                     group.peak() if group is not None else None, clock_started)
            if waiter.reply is None:
                self.close(kill=True)
                raise ServerGone("the kernel server ended during a call: " + self.errors())
        finally:
            with self._lock:
                self._waiting.pop(ident, None)
            with self._send_lock:
                self._running_dirs.pop(ident, None)
            peak = group.peak() if group is not None else None
            if group is not None:
                group.destroy()  # whatever of the call is left (a killed call's processes) dies here
        reply = waiter.reply
        rc = reply.get("returncode")
        sig = None
        if isinstance(rc, int) and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"signal {-rc}"
        output = str(reply.get("output", ""))[-OUTPUT_TAIL_BYTES:]
        return ProcessResult(rc, False, time.perf_counter() - started, output, sig, self.features, peak,
                             clock_started)

    def close(self, kill: bool = False) -> None:
        """End the server: an idle one by closing its stdin (it exits at once), a busy one (``kill``) by killing
        it, and with it every call still running (their PID namespaces and process groups go too)."""
        with self._lock:
            self.alive = False
            if self._closed:
                return
            self._closed = True
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if not kill:
            try:  # reaped, not killed: its calls' CPU time reaches the grader (RUSAGE_CHILDREN, result.json)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(self.proc)
        self.proc.wait()
        self._reader.join(timeout=5)
        if self._replies is not None and self._replies is not threading.current_thread():
            self._replies.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
