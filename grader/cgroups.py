"""A per-run pids cgroup: the process-count limit that also holds for root.

RLIMIT_NPROC does not apply to uid 0, and on some machines the sandbox cannot switch to an unprivileged uid
(e.g. the interpreter lives under a 0700 home directory).  When the grader may create cgroups (root in a
container or on Gradescope), every sandboxed run gets its own pids cgroup with ``pids.max``; the run's processes
are killed through it afterwards, so nothing escapes by daemonising either.  Both cgroup v1 (a ``pids``
hierarchy) and cgroup v2 (a ``pids`` controller enabled for children) are handled; elsewhere this is a no-op.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

_counter = itertools.count()


def _pids_root() -> Path | None:
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1
    v2 = Path("/sys/fs/cgroup")
    try:
        if "pids" in (v2 / "cgroup.subtree_control").read_text().split() and os.access(v2, os.W_OK):
            return v2
    except OSError:
        pass
    return None


class PidsCgroup:
    """Create with :meth:`create`; :attr:`procs_file` is written by the child before exec; :meth:`destroy` after."""

    def __init__(self, path: Path):
        self.path = path
        self.procs_file = str(path / "cgroup.procs")

    @classmethod
    def create(cls, max_pids: int) -> PidsCgroup | None:
        root = _pids_root()
        if root is None:
            return None
        path = root / f"asst4-grader-{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_pids))
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return cls(path)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in Path(self.procs_file).read_text().split()]
        except OSError:
            return []

    def peak(self) -> int | None:
        """Most processes the run had at once (pids.peak where the kernel provides it)."""
        try:
            return int((self.path / "pids.peak").read_text())
        except (OSError, ValueError):
            return None

    def destroy(self) -> None:
        """Kill every process still in the cgroup, then remove it."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)
        for _ in range(250):  # exiting processes leave the cgroup a little after SIGKILL
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def reap_stale() -> int:
    """Remove empty run cgroups left by grader processes that died (kill -9) before cleaning up."""
    root = _pids_root()
    if root is None:
        return 0
    removed = 0
    for d in root.glob("asst4-grader-*-*"):
        owner = d.name.split("-")[2]
        if not owner.isdigit() or _alive(int(owner)):
            continue
        try:
            if not (d / "cgroup.procs").read_text().split():
                d.rmdir()
                removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def join_pid(procs_file: str, pid: int) -> None:
    """Move process ``pid`` into the cgroup (its later children are born inside it)."""
    with open(procs_file, "w") as fh:
        fh.write(str(pid))
