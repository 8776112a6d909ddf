"""One BLAS thread while a product's values matter: the process's single limiter of OpenBLAS's thread count.

Why one thread: OpenBLAS splits a product between its threads and rounds the elements at the edges of their shares
differently (a 224x224 float64 convolution image: 31 of its 12.6 M values differ in their last bit between one and
two threads), so values computed with its default thread count depend on the machine's cores.  The rule of issue 35:
values are deterministic for a given nkisim version, inputs and platform.  One thread is also what the emulator
wants anyway: kernels issue many small products (<= 128x128x512), where BLAS threads only add contention.

Why not ``threadpoolctl.threadpool_limits`` alone: OpenBLAS's pool (pthreads builds, NumPy's wheels) is the
process's, and threadpoolctl >= 3.8 lets only one Python thread change it -- the first that set a limit, until it
leaves its ``with`` -- and silently ignores the others.  A limit entered from a grouped run's thread, a reference
thread or a harness worker thread while another thread held one did nothing, and concurrent set/restore pairs could
restore two threads under the feet of a product still running.  So every user in the process goes through here:
OpenBLAS's own ``openblas_set_num_threads`` is called directly, reference-counted across threads (the first holder
sets one thread, the last restores what was there), and ``set_default_threads`` changes what the last one restores.
A BLAS with its own threads other than a pthreads OpenBLAS (MKL, BLIS, an OpenMP OpenBLAS, whose limits are
per-thread) is limited through threadpoolctl for the calling thread, which is what it can do there.

Layer 1 of the core (nothing of nkisim below it): ``runtime``, ``nkisim.stream``, the grader and the Part 2 harness
all use it.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from typing import Any

_LOCK = threading.Lock()
_USERS = 0  # holders of one_blas_thread in this process, any thread
_HOLDERS: dict[int, int] = {}  # thread ident -> its holds (what a forked child keeps: _after_fork_in_child)
_SAVED: list[int] = []  # each OpenBLAS's thread count before the first holder, restored by the last
_CONTROLS: list[tuple[Any, Any]] | None = None  # (get, set) per OpenBLAS with a process-wide pool


def openblas_thread_controls() -> list[tuple[Any, Any]]:
    """(get, set) of the thread count of every OpenBLAS in this process with a process-wide thread pool (NumPy's
    wheels' pthreads build), as ctypes functions.  Looked up once (threadpoolctl's ``threadpool_info`` walks the
    loaded libraries: about a millisecond).  Empty without threadpoolctl or without such an OpenBLAS."""
    global _CONTROLS
    if _CONTROLS is not None:
        return _CONTROLS
    with _LOCK:
        if _CONTROLS is None:
            try:
                from threadpoolctl import threadpool_info
            except ImportError:  # optional: without it NumPy keeps its default threading
                _CONTROLS = []
                return _CONTROLS
            controls = []
            for lib in threadpool_info():
                if lib.get("internal_api") != "openblas" or lib.get("threading_layer") == "openmp":
                    continue
                dll = ctypes.CDLL(lib["filepath"])
                for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
                    get = getattr(dll, f"{prefix}openblas_get_num_threads{suffix}", None)
                    put = getattr(dll, f"{prefix}openblas_set_num_threads{suffix}", None)
                    if get is not None and put is not None:
                        get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                        controls.append((get, put))
                        break
            _CONTROLS = controls
        return _CONTROLS


class one_blas_thread:  # noqa: N801 - used as a function: ``with one_blas_thread():``
    """BLAS on one thread while the block runs (while any thread of the process is in such a block).

    ``with one_blas_thread(): ...``; or ``limit = one_blas_thread(); limit.hold()`` ... ``limit.release()`` where a
    ``with`` does not fit.  Nested and concurrent holders are counted: the first sets one thread, the last restores
    the count it found (or the one ``set_default_threads`` gave meanwhile)."""

    __slots__ = ("_fallback", "_held", "_thread")

    def __init__(self) -> None:
        self._fallback: Any = None
        self._held = False
        self._thread = 0

    def hold(self) -> one_blas_thread:
        global _USERS, _SAVED
        if self._held:
            raise RuntimeError("this one_blas_thread is held already")
        controls = openblas_thread_controls()
        if controls:
            self._thread = threading.get_ident()
            with _LOCK:
                if _USERS == 0:
                    _SAVED = [get() for get, _ in controls]
                    for _, put in controls:
                        put(1)
                _USERS += 1
                _HOLDERS[self._thread] = _HOLDERS.get(self._thread, 0) + 1
        else:
            try:
                from threadpoolctl import threadpool_limits
            except ImportError:
                pass
            else:
                self._fallback = threadpool_limits(limits=1, user_api="blas")
                self._fallback.__enter__()
        self._held = True
        return self

    def release(self) -> None:
        global _USERS
        if not self._held:
            return
        self._held = False
        if self._fallback is not None:
            fallback, self._fallback = self._fallback, None
            fallback.__exit__(None, None, None)
            return
        with _LOCK:
            left = _HOLDERS.get(self._thread, 0) - 1
            if left < 0:  # held before a fork, by a thread the child does not have: counted out already
                return
            if left:
                _HOLDERS[self._thread] = left
            else:
                del _HOLDERS[self._thread]
            _USERS -= 1
            if _USERS == 0:
                _restore()

    __enter__ = hold

    def __exit__(self, *exc: object) -> None:
        self.release()


def _restore() -> None:
    for (_, put), threads in zip(openblas_thread_controls(), _SAVED):
        put(threads)


def _after_fork_in_child() -> None:
    """A child forked while threads held the limit has only the forking thread: the others' holds end now (the
    last restores the count), the forking thread's stay; and the lock is new (another thread may have held it)."""
    global _LOCK, _USERS, _HOLDERS
    _LOCK = threading.Lock()
    me = threading.get_ident()
    mine = _HOLDERS.get(me, 0)
    _HOLDERS = {me: mine} if mine else {}
    if _USERS and not mine:
        _restore()
    _USERS = mine


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def set_default_threads(threads: int) -> None:
    """The process's BLAS thread count outside ``one_blas_thread`` blocks (a batch worker's share of the cores):
    set now if no thread holds one, else what the last holder restores.  Without a pthreads OpenBLAS, through
    threadpoolctl (a lasting limit, from the calling thread)."""
    global _SAVED
    controls = openblas_thread_controls()
    if not controls:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            return
        threadpool_limits(limits=threads, user_api="blas")
        return
    with _LOCK:
        if _USERS == 0:
            for _, put in controls:
                put(threads)
        else:
            _SAVED = [threads] * len(controls)


def current_threads() -> list[int]:
    """Each process-wide OpenBLAS's thread count now (for tests and diagnostics)."""
    return [get() for get, _ in openblas_thread_controls()]
