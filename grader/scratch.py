"""The grader's private temporary directories (``asst4-case-*``, ``asst4-server-*``, ``asst4-inputs-*``), named
after the process that owns them, and the reaping of those whose owner died without removing them.

A grading removes its directories itself (``grader/runner.py``: ``finally`` blocks, and the SIGTERM handler of
``grader/cli.py``), but a SIGKILL (the OOM killer, ``kill -9``, a Ray node lost) leaves them behind: a case
directory holds the inputs, a copy of the submission and what the kernel wrote, up to hundreds of MB for the
conv2d cases.  So each name carries its owner: the boot, the PID namespace, the pid and the process's start time
(``/proc/<pid>/stat``, field 22: a pid reused by a later process has another start time).  At start-up a grading
removes (:func:`reap_stale`) only directories that

* match this module's name pattern exactly (``asst4-<kind>-<owner>-<mkdtemp suffix>``: directories of older
  graders, without an owner, are left alone),
* are real directories (not symlinks) owned by this process's user, and
* whose owner is provably gone: an earlier boot, or the same boot and PID namespace and no process with that pid
  and start time.  An owner in another PID namespace (another container sharing ``/tmp``) cannot be checked from
  here and is never reaped; nor is any directory when ``/proc`` cannot be read.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

KINDS = ("case", "server", "inputs")
# asst4-case-<boot>.<pid namespace>.<pid>.<start time>-<mkdtemp's suffix>
NAME = re.compile(r"asst4-(case|server|inputs)-([0-9a-f]{8})\.(\d+)\.(\d+)\.(\d+)-[A-Za-z0-9_]+")
_PROC = Path("/proc")


def _boot_id() -> str | None:
    """The first 8 hex digits of this boot's id (Linux: /proc/sys/kernel/random/boot_id); None without /proc."""
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8].lower() or None
    except OSError:
        return None


def _pid_namespace() -> int | None:
    """The inode of this process's PID namespace (``pid:[4026531836]``); None without /proc."""
    try:
        return int(re.sub(r"\D", "", os.readlink(_PROC / "self/ns/pid")))
    except (OSError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks after boot, /proc/<pid>/stat field 22); None when there is no
    such process.  Raises OSError when /proc cannot tell (a permission problem: the caller must not reap then)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields start after the last ')'
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 of the whole line is the 20th after comm


_OWNER: dict[int, str | None] = {}  # pid -> this process's owner tag (a forked worker computes its own)
_LOCK = threading.Lock()
_REAPED: set[str] = set()  # temp roots reaped by this process already


def owner_tag() -> str | None:
    """``<boot>.<pid namespace>.<pid>.<start time>`` of this process; None where /proc does not tell them."""
    pid = os.getpid()
    if pid not in _OWNER:
        boot, ns = _boot_id(), _pid_namespace()
        try:
            started = start_time(pid)
        except (OSError, ValueError, IndexError):
            started = None
        _OWNER[pid] = (f"{boot}.{ns}.{pid}.{started}"
                       if boot is not None and ns is not None and started is not None else None)
    return _OWNER[pid]


def make_dir(kind: str, tmp_root: str | None = None) -> Path:
    """A new private directory ``asst4-<kind>-<owner>-XXXXXXXX`` (mode 0700, ``tempfile.mkdtemp``) in ``tmp_root``
    (default: the system's temporary directory); without an owner tag (no /proc) the name has none and is never
    reaped."""
    if kind not in KINDS:
        raise ValueError(f"unknown scratch directory kind {kind!r}; expected one of {KINDS}")
    tag = owner_tag()
    return Path(tempfile.mkdtemp(prefix=f"asst4-{kind}-{tag}-" if tag else f"asst4-{kind}-", dir=tmp_root))


# Where the scratch of the processes that run no student code goes (a replay's case directory, the grading's shared
# input files): a tmpfs with room when the grader was given no temporary directory.  A replay's HBM tensors of 1 MiB
# or more are files of its output directory (nkisim run_kernel(hbm_dir=)), written once in full by the poison fill,
# and on this class of VM the first touch of memory the host has taken back dominates what they cost: ext4's page
# cache comes in large folios, whose first touch cost 0.24-0.42 CPU s per 200 MB against 0.12-0.14 on tmpfs's 4 KiB
# pages (alternating, 5 s apart; 0.05 when the memory was freed a moment before), and tmpfs writes nothing back.
# Processes that run student code (specializations, import checks) keep ``tmp_root``: a tmpfs is memory, so a
# kernel that escaped the Python sandbox could fill it past its memory limit, where on disk it fills disk space.
FAST_ROOT = "/dev/shm"
FAST_ROOT_MIN_FREE = 4 << 30  # bytes free on it, else the usual temporary directory (a container's 64 MiB /dev/shm)


def _is_tmpfs(path: str) -> bool:
    """Whether ``path`` is the mount point of a tmpfs (/proc/self/mountinfo: the field after the separator)."""
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 4 and fields[4] == path and "-" in fields:
                    kind = fields[fields.index("-") + 1]
                    return kind == "tmpfs"
    except OSError:
        pass
    return False


def fast_root(tmp_root: str | None = None) -> str | None:
    """The root for scratch that no student code writes to: ``tmp_root`` when given (or when TMPDIR, TEMP or TMP
    names the temporary directory: the caller chose), else FAST_ROOT when it is a writable tmpfs with
    FAST_ROOT_MIN_FREE bytes free, else None (the system's temporary directory)."""
    if tmp_root is not None or any(os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP")):
        return tmp_root
    try:
        st = os.statvfs(FAST_ROOT)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize < FAST_ROOT_MIN_FREE or not os.access(FAST_ROOT, os.W_OK | os.X_OK) \
            or not _is_tmpfs(FAST_ROOT):
        return None
    return FAST_ROOT


def _owner_gone(boot: str, ns: int, pid: int, started: int, my_boot: str, my_ns: int) -> bool:
    if boot != my_boot:
        return True  # every process of an earlier boot is gone
    if ns != my_ns:
        return False  # another PID namespace's pids mean nothing here
    try:
        now = start_time(pid)
    except (OSError, ValueError, IndexError):
        return False  # /proc could not tell: keep it
    return now != started


def stale_dirs(tmp_root: str | None = None) -> list[Path]:
    """The directories of ``tmp_root`` that :func:`reap_stale` would remove (see the module's docstring)."""
    root = Path(tmp_root or tempfile.gettempdir())
    my_boot, my_ns, uid = _boot_id(), _pid_namespace(), os.geteuid()
    if my_boot is None or my_ns is None:
        return []
    stale = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        m = NAME.fullmatch(entry.name)
        if m is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        _, boot, ns, pid, started = m.groups()
        if _owner_gone(boot, int(ns), int(pid), int(started), my_boot, my_ns):
            stale.append(Path(entry.path))
    return sorted(stale)


def reap_stale(tmp_root: str | None = None, *, once: bool = True) -> list[Path]:
    """Remove the scratch directories in ``tmp_root`` left by graders that died (SIGKILL) before removing them;
    returns them.  ``once``: only at the first call for that root in this process (a batch grades many submissions
    in one process; the dead owners' directories are gone after the first call)."""
    key = os.path.abspath(tmp_root or tempfile.gettempdir())
    with _LOCK:
        if once and key in _REAPED:
            return []
        _REAPED.add(key)
    removed = []
    for path in stale_dirs(tmp_root):
        shutil.rmtree(path, ignore_errors=True)  # rmtree does not follow symlinks inside the tree
        if not path.exists():
            removed.append(path)
    return removed
