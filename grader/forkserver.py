"""A warm, trusted kernel-process server: one interpreter per grading and NKI API imports NumPy and nkisim once,
then forks a fresh process per kernel call, which runs grader/child.py's job exactly as a freshly started child would.

Started by grader/runner.py (``KernelServer``) as ``python -I -B grader/forkserver.py CHILD_SCRIPT`` behind the
same wrappers as a one-off child (setpriv --pdeathsig, prlimit, unshare: its own mount, network and PID
namespaces; the pids cgroup and the tighter rlimits are per call).  It never imports or runs student code: it
loads grader/child.py by path, pre-imports what every child imports before student code (NumPy, nkisim's
runtime, trace writer and both NKI front ends), and then serves the grading's jobs, several at once when the
grading's workers make calls side by side:

* the grader writes a job (grader/child.py's JSON, in a line with the call's id) to the server's stdin;
* the server forks at once; the fork closes every descriptor it inherited, sends its output into a pipe of its own,
  joins the call's pids cgroup, asks for SIGKILL when the server dies, and (where the server may: mount
  namespaces) unshares a mount and a PID namespace and forks once more, so the call runs as the init of a PID
  namespace of its own with a /proc of its own, exactly as ``unshare --fork --pid --mount-proc`` starts a
  one-off child: everything the call starts dies with it and it sees no other process.  That process runs
  ``child.run_job(job)``: rlimits, inputs, read-only file system, dropped privileges, undumpable, then the
  student's import and kernel call;
* the server drains each running call's output (keeping the last 64 KiB, like grader/sandbox.py) and, as a call
  ends, writes one JSON line to its stdout: the call's id, its exit status or signal and the output's tail.

Why this keeps the isolation of one process per call: each call is a fork of an interpreter that has run no student
code, so no call sees another's state (module globals, nkisim's caches, the NumPy heap), whether it was forked
before, after or while another call of the grading ran; each call runs in its own mount and PID namespaces with its
own directories writable, as before. What a call shares with the server is read-only after the fork (copy-on-write
memory); the server's memory may still hold earlier jobs of the same grading (paths of run directories already
removed, and of the grading's own input files), never a seed or a reference. The server is PID 1 of its namespace
and undumpable: a call, in a namespace nested below it, can neither see nor signal nor trace it, nor its sibling
calls (each is the init of a PID namespace of its own). A call that hangs is killed on the grader's word (``{"kill":
ID}``: its process group, whose end takes its PID namespace with it) and its pids cgroup is emptied by the grader; a
server that does not report the killed call soon is killed with every call it runs (a new server serves the next
call).

What changes for a kernel: NumPy's global random state is the server's, the same in every call of a grading
(it was seeded afresh per process before); nothing graded depends on it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import select
import signal
import sys
from collections import deque

CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
OUTPUT_TAIL_BYTES = 64 * 1024
MAX_JOB_BYTES = 1 << 20


def _load_child(path: str):
    """grader/child.py as a module (by path: the grader package is not on this interpreter's sys.path)."""
    spec = importlib.util.spec_from_file_location("asst4_child", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _preimport(child, lib: str, api: str) -> None:
    """What every child of ``api`` imports before student code, once (each fork shares it copy-on-write).  One
    API per server: a child of a one-off process imports only its own file's namespace, and so does this one."""
    sys.path[:0] = [lib]
    import numpy  # noqa: F401

    import nkisim.core.runtime  # noqa: F401
    import nkisim.core.traceio  # noqa: F401
    import nkisim.stream  # noqa: F401  (the current API's calls are specialized to a stream and replayed)
    from nkisim.core.blas import openblas_thread_controls

    # every call takes the one-BLAS-thread limiter; finding OpenBLAS's thread controls (threadpoolctl's import and
    # its walk of the loaded libraries: about 5 ms) is done once here, not in each fork
    openblas_thread_controls()
    # every call stops NumPy's clock (grader/child.py _stop_numpy_clock) through the GOT slots of NumPy's 10 MB
    # library, found by parsing it: once here (each fork inherits the answer), not 10-15 ms per call
    try:
        child._clock_slots(child._numpy_umath_path())
    except (OSError, ValueError, ImportError):
        pass  # each call finds (or fails to find) them itself, as a one-off child does

    try:
        child._ensure_nki_importable("nkisim", api)
        fe = child._frontends().get(api)
        for sub in fe.submodules:
            importlib.import_module(f"{fe.namespace}.{sub}")
        # the table of the front end's public objects every recording and every replay looks names up in
        # (nkisim.stream.library: trusted data, kept per process): built once here, ~2 ms less per call
        nkisim.stream.library(fe)
    except ImportError:
        pass  # the child reports it for the job that needs it


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    return libc


def _exit_like(status: int) -> None:
    """End this process as the process it waited for ended (the same exit code, or the same signal)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _case(child, job: dict, out_fd: int) -> None:
    """In the fork: isolate, then run the job (never returns)."""
    try:
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.closerange(3, 65536)  # the server's job and reply pipes above all
        os.setsid()
        libc = _libc()
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if job.get("cgroup"):
            try:
                with open(job["cgroup"], "w") as fh:  # before anything forks: every later process is born inside
                    fh.write(str(os.getpid()))
            except OSError:
                pass
        for key in ("HOME", "TMPDIR"):
            os.environ[key] = str(job.get("work_dir", "/"))
        features = []
        if job.get("jail") and libc.unshare(CLONE_NEWNS | CLONE_NEWPID) == 0:
            pid = os.fork()
            if pid:
                _, status = os.waitpid(pid, 0)
                _exit_like(status)
            # PID 1 of a namespace of its own, with a /proc that shows only this call's processes
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            features.append("pid-namespace")
            if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0 and libc.mount(
                b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None
            ) == 0:
                features.append("private-proc")
        job["server_features"] = features
        child.run_job(job)
    except BaseException:  # noqa: BLE001 - nothing may return into the server's loop
        pass
    os._exit(3)


class _Call:
    """One kernel call the server has forked and not yet reported: its fork, the read end of its output pipe (None
    once the output has ended), a pidfd of the fork (None without one) and the tail of its output."""

    __slots__ = ("ident", "pid", "r", "pidfd", "tail", "kept")

    def __init__(self, ident: object, pid: int, r: int, pidfd: int | None) -> None:
        self.ident, self.pid, self.r, self.pidfd = ident, pid, r, pidfd
        self.tail: deque[bytes] = deque()
        self.kept = 0

    def read(self) -> None:
        """One chunk of the call's output (the last 64 KiB kept); the end of its output closes the pipe."""
        chunk = os.read(self.r, 1 << 16)
        if not chunk:  # every writer gone; the call may still be ending (its pidfd or the poll says when)
            os.close(self.r)
            self.r = None
            return
        self.tail.append(chunk)
        self.kept += len(chunk)
        while self.kept - len(self.tail[0]) >= OUTPUT_TAIL_BYTES and len(self.tail) > 1:
            self.kept -= len(self.tail.popleft())

    def reply(self, status: int) -> dict:
        """The call has ended: what it left behind dies with it (its PID namespace did; without one, its process
        group), and the reply line for the grader."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        for fd in (self.r, self.pidfd):
            if fd is not None:
                os.close(fd)
        return {"id": self.ident, "returncode": os.waitstatus_to_exitcode(status),
                "output": b"".join(self.tail)[-OUTPUT_TAIL_BYTES:].decode("utf-8", errors="replace")}


def _start_call(child, ident: object, job: dict) -> _Call:
    """Fork one job's process (:func:`_case`) and watch it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _case(child, job, w)
    os.close(w)
    # The call's end wakes the loop through a pidfd (readable once the process has ended), so the server sleeps
    # until a call writes or ends or a job comes; without one (a kernel before Linux 5.3) it polls every 20 ms, as it
    # did: that poll woke the server 50 times a second through every call (about 600 select + waitpid rounds for
    # the 224x224 group's process), each a context switch on a machine whose two cores the grading keeps busy.
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    return _Call(ident, pid, r, pidfd)


def _read_exactly(fd: int, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            os._exit(0)  # the grader has gone: at once, no interpreter teardown; the calls die with the server
        data += chunk
    return bytes(data)


def _read_message(fd: int = 0) -> dict:
    """The next message of stdin: a line with its length, then that many bytes of JSON.  Read exactly, never a byte
    beyond it: a call is forked as soon as its job is read, and nothing the grader sends later (another call's
    job: the paths of its directories) may be in the fork's memory (docs/grading-security.md, "One warm server per
    API")."""
    header = bytearray()
    while not header.endswith(b"\n"):
        header += _read_exactly(fd, 1)
        if len(header) > 16:
            os._exit(0)
    n = int(header)
    if not 0 < n <= MAX_JOB_BYTES:
        os._exit(0)
    return json.loads(_read_exactly(fd, n).decode("utf-8"))


def serve(child_path: str, lib: str, api: str) -> None:
    """Pre-import, say ready, then serve the jobs of stdin until it closes: one message ``{"id": ID, "job": JOB}``
    per kernel call (:func:`_read_message`), forked at once (several calls of a grading may run side by side, each
    in a fork of its own), and ``{"kill": ID}`` to kill a call the grader gave up on; one reply line per call, with
    its ID, as each call ends.

    One server per API serves all of a grading's concurrent calls: a grading with two workers ran three servers
    (the 224x224 group's two specializations side by side beside the other worker's call), 0.15-0.2 CPU s of
    interpreter start and imports each (docs/grading.md, "Outside the timeline's spans, round 11").  A call is a fork
    of this process whichever calls run beside it: the server never runs student code, so no call sees another's
    state, as with one server per call at a time."""
    child = _load_child(child_path)
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no call can open its /proc/<pid>/mem (it cannot see it either)
    _preimport(child, lib, api)
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    calls: dict[object, _Call] = {}
    while True:
        watched = [0]
        polling = False
        for call in calls.values():
            if call.r is not None:
                watched.append(call.r)
            if call.pidfd is not None:
                watched.append(call.pidfd)
            else:
                polling = True
        ready, _, _ = select.select(watched, [], [], 0.02 if polling else None)
        if 0 in ready:
            message = _read_message()
            if "kill" in message:  # the grader gave up on the call (its time limit): it ends, and is reported
                call = calls.get(message["kill"])
                if call is not None:
                    try:
                        os.killpg(call.pid, signal.SIGKILL)
                    except OSError:
                        pass
            else:
                ident = message.get("id")
                calls[ident] = _start_call(child, ident, message["job"])
            del message
        for ident, call in list(calls.items()):
            if call.r is not None and call.r in ready:
                call.read()  # the output first: a call that wrote and ended is drained before it is reported
                continue
            if call.pidfd is not None and call.pidfd not in ready:
                continue  # still running (its pidfd becomes readable when it ends)
            done, status = os.waitpid(call.pid, os.WNOHANG)
            if done:
                del calls[ident]
                replies.write(json.dumps(call.reply(status)) + "\n")
                replies.flush()


if __name__ == "__main__":
    serve(*sys.argv[1:4])
