"""Several full runs of kernels in one process, in lockstep, sharing the matrix products whose operands are identical.

The grader's batch-4 224x224 correctness cases (``part2.large``, ``part2.bias``, ``part2.maxpool``) run the same
program (or programs whose matmul sequences coincide) on the same X and W: their ~16,000 [128, 128] x [128, 444]
float32 products each are byte-identical, and computing them three times is most of a full-credit grading's CPU
time (docs/grading.md, "What grading costs").  Hashing an operand costs as much as the product (a SHA-1 of a
moving tile 240 us, the SGEMM 250 us) and keeping a whole run's operands is ~8 GB, so products cannot be cached
across separate runs.  Run side by side, they can: a :class:`ShareGroup` runs its members' kernels in threads of
one process, one at a time, handing over every ``WINDOW`` matmuls (as an LNC=2 launch's cores hand over at their
synchronisations, ``core.lockstep``).  Every member but the last keeps copies of its last ``WINDOW`` matmuls' raw
operands with their products; when a member reaches its n-th matmul, the members before it in the round have made
theirs: if one of them multiplied the same bits -- same dtype names, shapes and memory layout, compared with
``np.array_equal`` on unsigned-integer views (bitwise: -0.0 is not 0.0, a NaN equals its own bits), a memory-bound
compare several times cheaper than the product, never a hash -- its product is reused; otherwise the member
computes its own.  (The moving operand's copy is the one ``reshape(K, N)`` makes of a strided window anyway, so the
first member pays only for the stationary's.)

Why the values are the ones a separate run computes: a product is reused only for operands of the same bits, the
same dtype names (tf32 rounding follows the name) and the same array layout, i.e. for the same NumPy/BLAS call on
the same data, and BLAS is deterministic for a given call on one machine (the runs' arrays differ only in their
addresses, as they do between processes).  The reused array is only read (``access.psum_write`` adds or copies
it into PSUM).  Nothing else is shared: each member has its own context (SBUF, PSUM, registers, trace,
allocation bookkeeping), its own inputs and outputs, and the module-level state a run touches (the kernel context
stack, ``access.FROZEN``, the index-variable and loop-instance counters) is swapped at every hand-over, so each
member's trace is the one it makes alone.  A member whose program raises stops there (its own error); the others
run on.  Members whose products never coincide (other inputs, another program) just run one after another,
paying a failed first-row compare per matmul and a hand-over per ``WINDOW``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.core import access, context, indexing

# Matmuls a member makes per turn: a hand-over costs ~25 us (two thread switches), a member's last WINDOW products
# are kept (~0.5 MB each for the course's [128, 128] x [128, 444] matmuls)
WINDOW = 16
# the unsigned integer type of each operand itemsize: the compare is bitwise
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bits(a: np.ndarray) -> np.ndarray:
    t = _BITS.get(a.dtype.itemsize)
    return a if t is None or a.dtype.kind in "biu" else a.view(t)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one dtype and shape hold the same bits.  The first partition row is compared first:
    operands that differ usually differ there, at 1/128 of the cost."""
    ab, bb = _bits(a), _bits(b)
    if ab.ndim > 1 and ab.shape[0] > 1 and not np.array_equal(ab[0], bb[0]):
        return False
    return bool(np.array_equal(ab, bb))


class ShareGroup:
    """The members of one lockstep group and whose turn it is (module docstring).

    :meth:`run` calls each member's function in a thread of its own; exactly one runs at a time (a baton lock per
    member).  The core calls :meth:`product` from ``nc_matmul`` of a member's run (``KernelContext.share``) and the
    member hands over to the next unfinished one there.  ``hits`` / ``misses`` count reused and computed products.
    """

    def __init__(self, n: int, window: int | None = None) -> None:
        self.n = n
        self.batons = [threading.Lock() for _ in range(n)]
        for b in self.batons:
            b.acquire()
        self.done = [False] * n
        self.results: list[Any] = [None] * n
        self.errors: list[BaseException | None] = [None] * n
        self.cpu_seconds = [0.0] * n
        # the last ``window`` products of each member but the last: (matmul index, key, copies of the raw stationary
        # and moving operands, their strides, the product, the member that made the copies), by matmul index modulo
        # ``window``
        self.window = max(1, window or WINDOW)
        self.rings: list[list] = [[None] * self.window for _ in range(n)]
        self.count = [0] * n
        self.hits = 0
        self.misses = 0
        self._saved: list[tuple] = []
        self._main = threading.Lock()
        self._main.acquire()

    # -- module-level state of a run, swapped at every hand-over ---------------------------------------------------
    @staticmethod
    def _state() -> tuple:
        return (list(context._STACK), access.FROZEN[0], indexing._NEXT_VAR[0], context._LOOP_IDS[0])

    def _restore(self, k: int) -> None:
        stack, frozen, var, loop = self._saved[k]
        context._STACK[:] = stack
        access.FROZEN[0], indexing._NEXT_VAR[0], context._LOOP_IDS[0] = frozen, var, loop

    def _next(self, k: int) -> int | None:
        for d in range(1, self.n + 1):
            j = (k + d) % self.n
            if not self.done[j]:
                return j
        return None

    def run(self, fns: list[Callable[[], Any]]) -> tuple[list[Any], list[BaseException | None]]:
        """Run ``fns[k]()`` as member ``k``, in lockstep; each member's return value and the exception it raised
        (None when it returned).  Every member starts from the module state the caller's thread has now."""
        if len(fns) != self.n:
            raise ValueError(f"a group of {self.n} members was given {len(fns)} functions")
        start = self._state()
        self._saved = [start] * self.n
        threads = [threading.Thread(target=self._member, args=(k, fn), name=f"nkisim-share{k}", daemon=True)
                   for k, fn in enumerate(fns)]
        for t in threads:
            t.start()
        self.batons[0].release()
        self._main.acquire()  # released by the last member to finish
        for t in threads:
            t.join()
        context._STACK[:] = start[0]
        access.FROZEN[0] = start[1]
        return self.results, self.errors

    def _member(self, k: int, fn: Callable[[], Any]) -> None:
        self.batons[k].acquire()
        self._restore(k)
        t0 = time.thread_time()
        try:
            self.results[k] = fn()
        except BaseException as exc:  # noqa: BLE001 - the member's own error, reported by run()
            self.errors[k] = exc
        finally:
            self.cpu_seconds[k] = time.thread_time() - t0
            self.done[k] = True
            nxt = self._next(k)
            if nxt is None:
                self._main.release()
            else:
                self._saved[k] = self._state()
                self.batons[nxt].release()

    def _hand_over(self, k: int) -> None:
        nxt = self._next(k)
        if nxt is None or nxt == k:
            return
        self._saved[k] = self._state()
        self.batons[nxt].release()
        self.batons[k].acquire()
        self._restore(k)

    # -- the core's hook ----------------------------------------------------------------------------------------
    def product(self, k: int, stationary: np.ndarray, moving: np.ndarray, key: tuple,
                compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Member ``k``'s next matmul product: reused from an earlier member whose same-numbered matmul had ``key``
        (dtype names, shapes) and bit-identical raw operands of the same layout, else ``compute()``.  Every
        ``window`` matmuls the next member's turn comes."""
        i = self.count[k]
        self.count[k] = i + 1
        slot = i % self.window
        entry = None
        for j in range(k):
            e = self.rings[j][slot]
            if e is not None and e[0] == i and e[1] == key and _same_layout(stationary, e[2], e[4]) \
                    and _same_layout(moving, e[3], e[5]) and same_bits(stationary, e[2]) \
                    and same_bits(moving, e[3]):
                entry = e
                break
        if entry is None:
            self.misses += 1
            if k < self.n - 1:  # a later member may multiply the same operands: keep a copy of them
                old = self.rings[k][slot]
                # contiguous copies (the one reshape(K, N) makes of a strided window anyway), into this member's own
                # copies of the slot's previous matmul when they fit (no page faults for fresh 0.3 MB buffers per
                # matmul); never into another member's, which a hit put in this ring
                mine = old is not None and old[7] == k
                st = _copy_into(old[2] if mine else None, stationary)
                mv = _copy_into(old[3] if mine else None, moving)
                values = compute(mv)
                entry = (i, key, st, mv, stationary.strides, moving.strides, values, k)
            else:
                values = compute(moving)
        else:
            values = entry[6]
            self.hits += 1
        if k < self.n - 1:
            self.rings[k][slot] = entry
        if i % self.window == self.window - 1:
            self._hand_over(k)
        return values


def _copy_into(buf: np.ndarray | None, a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a``, written into ``buf`` when it has the same dtype and shape."""
    if buf is not None and buf.dtype == a.dtype and buf.shape == a.shape:
        np.copyto(buf, a)
        return buf
    return np.array(a, copy=True)


def _same_layout(raw: np.ndarray, snap: np.ndarray, strides: tuple) -> bool:
    """``raw`` has the dtype, shape and strides of the operand ``snap`` is a copy of (the same NumPy call)."""
    return raw.dtype == snap.dtype and raw.shape == snap.shape and raw.strides == strides


class Member:
    """What a member's kernel context carries (``KernelContext.share``): its group and its number in it."""

    __slots__ = ("group", "k")

    def __init__(self, group: ShareGroup, k: int) -> None:
        self.group, self.k = group, k

    def product(self, stationary: np.ndarray, moving: np.ndarray, key: tuple,
                compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        return self.group.product(self.k, stationary, moving, key, compute)
