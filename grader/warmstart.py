"""Warm kernel servers started as the grader process starts, before it imports NumPy and the grading's modules.

A grading's first kernel process (the import check, then the 224x224 group's specializations: the critical path
of a two-worker grading) is a fork of a warm server (grader/forkserver.py), and a server takes 0.2-0.3 s of wall to
start on an idle machine (an interpreter, NumPy, nkisim and the front end: 0.15 CPU s), up to 0.9 s beside a
grading's other start-up work under load.  Started when the grading starts (``KernelServers.prestart``, beside the
static screen), the import check waited for it: 0.38 s of the critical lane on an idle machine (docs/grading.md,
"round 12, prestart").  ``python -m grader grade`` starts it here instead, first thing (:func:`early`), while its
own process imports the grader (0.15-0.35 s) and loads the submission and the rubric; the grading's
:class:`grader.runner.KernelServers` then adopts it (:func:`take`) when it was started for the same API, target,
limits and temporary directory, and starts its own otherwise.  A server never runs student code (each call is a
fork that does), so starting one before the screen is what ``prestart`` already did; one not adopted is closed
with the grading's servers (:func:`discard`).

Layering: this module and what it imports (grader.sandbox, grader.scratch, grader.rubric's ``Limits``) load no
NumPy, so that the server's start is not queued behind the grader's own imports."""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

from grader import scratch
from grader.rubric import Limits
from grader.sandbox import WarmServer

CHILD_SCRIPT = str(Path(__file__).with_name("child.py"))
SERVER_SCRIPT = str(Path(__file__).with_name("forkserver.py"))

ServerItem = tuple[str, WarmServer, Path]  # (API, server, its directory)


def _nkisim_dir() -> Path:
    import nkisim

    return Path(nkisim.__file__).resolve().parent


def _nkibench_dir() -> Path:
    import nkibench

    return Path(nkibench.__file__).resolve().parent


@functools.cache
def _compile_nkisim() -> None:
    """Byte-compile nkisim once per grader process, before any child starts.

    Every child runs ``python -I -B``: it reads ``__pycache__`` but never writes it, so without this step each of a
    submission's ~20 kernel processes compiles nkisim from source again (0.12-0.15 CPU s of the ~0.4 s start-up).
    The parent is trusted and writes the bytecode next to nkisim's sources, where the child's read-only view and
    its symlinked ``lib/nkisim`` find it.  Unwritable (a read-only install): children compile, as before.

    The grader's own package and nkibench too: a warm server loads grader/child.py by path under ``-B``, and the
    grader process itself imports about 11,000 lines of them; where PYTHONDONTWRITEBYTECODE is set (this
    project's development machines) no process ever wrote their bytecode, so every grading compiled them anew
    (0.08-0.12 CPU s before its first test; docs/grading.md, "Outside the timeline's spans, round 11").  Written
    here, by the process that just imported them, for the next one; up-to-date files are only checked (a stat
    and 16 bytes read each, about 3 ms in all)."""
    import compileall

    here = Path(__file__).resolve().parent
    for package, depth in ((_nkisim_dir(), 10), (here, 1), (_nkibench_dir(), 10)):
        try:  # the grader's modules and grader/problems; never the staff reference beside them
            compileall.compile_dir(str(package), maxlevels=depth, quiet=2, optimize=0,
                                   rx=re.compile(re.escape(str(here / "reference"))))
        except OSError:
            pass


def _lib_links(root: Path) -> Path:
    """``root/lib``: links to the nkisim and nkibench packages only (the child's whole sys.path addition)."""
    lib = root / "lib"
    lib.mkdir()
    _compile_nkisim()
    (lib / "nkisim").symlink_to(_nkisim_dir(), target_is_directory=True)
    (lib / "nkibench").symlink_to(_nkibench_dir(), target_is_directory=True)
    os.chmod(lib, 0o755)
    return lib


def _nkisim_env(target: str) -> dict[str, str]:
    env = {"NEURON_PLATFORM_TARGET_OVERRIDE": target, "NKISIM_TARGET": target}
    if os.environ.get("NEURON_RT_VISIBLE_CORES"):
        env["NEURON_RT_VISIBLE_CORES"] = os.environ["NEURON_RT_VISIBLE_CORES"]
    return env


def start_server(api: str, *, target: str, limits: Limits, tmp_root: str | None) -> ServerItem:
    """A new warm server of ``api`` in a directory of its own (raises ServerGone / OSError when it cannot start)."""
    root = scratch.make_dir("server", tmp_root)
    try:
        lib = _lib_links(root)
        os.chmod(root, 0o711)
        server = WarmServer([sys.executable, "-I", "-B", SERVER_SCRIPT, CHILD_SCRIPT, str(lib), api],
                            cwd=str(root), limits=limits, env_extra=_nkisim_env(target))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return api, server, root


# the servers started by early(), by (API, target, limits, temporary directory, the environment they were given)
_EARLY: dict[tuple[object, ...], Future[ServerItem]] = {}
_LOCK = threading.Lock()


def _key(api: str, target: str, limits: Limits, tmp_root: str | None) -> tuple[object, ...]:
    return api, target, limits, tmp_root, tuple(sorted(_nkisim_env(target).items()))


def early(apis: list[str], *, target: str, limits: Limits, tmp_root: str | None) -> None:
    """Start a server of each of ``apis`` now, each from a thread of its own (the caller goes on at once), for the
    grading this process is about to make to :func:`take`."""
    for api in apis:
        future: Future[ServerItem] = Future()
        with _LOCK:
            if _key(api, target, limits, tmp_root) in _EARLY:
                continue
            _EARLY[_key(api, target, limits, tmp_root)] = future

        def run(api: str = api, future: Future[ServerItem] = future) -> None:
            try:
                future.set_result(start_server(api, target=target, limits=limits, tmp_root=tmp_root))
            except BaseException as exc:  # noqa: BLE001 - take() reports no server: the grading starts its own
                future.set_exception(exc)

        threading.Thread(target=run, name="grader-server-early", daemon=True).start()


def take(api: str, *, target: str, limits: Limits, tmp_root: str | None) -> ServerItem | None:
    """The server :func:`early` started for exactly this API, target, limits and temporary directory (waiting for
    its start), once: None when there is none, or it did not start or has ended meanwhile."""
    with _LOCK:
        future = _EARLY.pop(_key(api, target, limits, tmp_root), None)
    if future is None:
        return None
    try:
        item = future.result()
    except Exception:  # noqa: BLE001 - it did not start (ServerGone, OSError, ...): the grading starts its own
        return None
    if not item[1].alive or item[1].proc.poll() is not None:
        _close(item)
        return None
    return item


def discard() -> None:
    """Close the servers :func:`early` started that no grading took (a submission the screen stopped whole, an
    API the grading did not use, a grading that never started)."""
    with _LOCK:
        left = list(_EARLY.values())
        _EARLY.clear()
    for future in left:
        try:
            item = future.result()
        except BaseException:  # noqa: BLE001 - nothing started, nothing to close
            continue
        _close(item)


def _close(item: ServerItem) -> None:
    item[1].close()
    shutil.rmtree(item[2], ignore_errors=True)
