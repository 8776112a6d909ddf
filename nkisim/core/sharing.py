"""Several full runs of kernels in one process, in lockstep, sharing the matrix products whose operands are identical.

The grader's batch-4 224x224 correctness cases (``part2.large``, ``part2.bias``, ``part2.maxpool``) run the same
program (or programs whose matmul sequences coincide) on the same X and W: their ~16,000 [128, 128] x [128, 444]
float32 products each are byte-identical, and computing them three times is most of a full-credit grading's CPU
time (docs/grading.md, "What grading costs").  Hashing an operand costs as much as the product (a SHA-1 of a
moving tile 240 us, the SGEMM 250 us) and keeping a whole run's operands is ~8 GB, so products cannot be cached
across separate runs.  Run side by side, they can: a :class:`ShareGroup` runs its members' kernels in threads of
one process, one at a time, handing over every ``WINDOW`` matmuls (as an LNC=2 launch's cores hand over at their
synchronisations, ``core.lockstep``).  Every member but the last keeps its last ``WINDOW`` matmuls' products with a
description of their operands; when a member reaches its n-th matmul, the members before it in the round have made
theirs: if one of them multiplied the same bits -- same dtype names, shapes and memory layout, the same bits
(bitwise: -0.0 is not 0.0, a NaN equals its own bits; never a hash) -- its product is reused; otherwise the member
computes its own.

**Establishing "the same bits" cheaply: storage versions and an equality memo.**  Comparing each operand costs a
third to a half of the product it saves (a strided 227 KB window and a 64 KB stationary: 60-140 us), so operands
are compared by their storage instead.  Every allocation carries ``uid`` (unique in the process: a new allocation,
also one that takes a dead tile's pooled array, is a new storage) and ``gen``, bumped by every write of values into
it (``core.access.write`` / ``scatter_add`` / ``psum_write`` and the deferred result write of
``KernelContext._flush``: every instruction's values reach storage through these).  ``(uid, gen)`` therefore names
one version of a storage's bits.  An operand whose view is a basic view of an automatically allocated on-chip tensor
(``access.own_storage``: such a tensor owns its array, no other allocation's view reaches into it, so no write
escapes its ``gen``) is described, once operands have read a quarter of the bytes of its storage version that the
storage holds (``SNAPSHOT_SHARE``), as (a snapshot of its whole storage at this version, the view's byte offset,
shape, strides, dtype); the member takes the snapshot while the version lasts (it may overwrite the storage before a
later member gets there) and keeps it as long as a ring entry uses it.  A later member's operand with the same
offset, shape, strides and dtype, in storage of the snapshot's shape and dtype, is the earlier operand bit for bit
when its whole storage is bitwise equal to the snapshot -- and that is compared once per pair of versions,
``memo[(uid, gen, snapshot uid, snapshot gen)]``, at the pair's first use: every later matmul reading any view of
the two unchanged versions reuses without a compare.  The byte threshold keeps the whole-storage work paid for: a
version one small operand reads is never copied or compared whole (its operands are described by copies and
compared alone), so no kernel pays much more than the operand compares it paid before.  In the staff conv an input
band (one version per band, 18 times a moving window) feeds 288 matmuls and the resident weights (one version, 36
times a stationary block) all of them, so a batch-4 224x224 group makes about 150 storage compares instead of 63,936
operand compares.  Anything else -- a gather view, a placed or ``mod_alloc``
tensor (a view of an arena), storage found unequal to the snapshot somewhere -- is compared operand by operand as
before (against a contiguous copy, or the snapshot's window of it).

Why a memo hit is exact: the two storages' bits were equal when compared; neither changed since, because a change
is a write and every write bumps ``gen`` (a new key); the operands are the same offset and strides in storages of
the same shape and dtype, so they address the same bytes.  ``NKISIM_SHARE_SELFCHECK=1`` (``SELF_CHECK``) re-checks
that on every hit, and on every reuse of a snapshot, with the full bitwise compare, and raises
:class:`SharingSelfCheckError` if it disagrees: the tests run with it on, which is what catches a write path that
forgot to bump.

Why the values are the ones a separate run computes: a product is reused only for operands of the same bits,
the same dtype names (tf32 rounding follows the name) and the same array layout, i.e. for the same NumPy/BLAS call on
the same data, and BLAS is deterministic for a given call on one machine (the runs' arrays differ only in their
addresses, as they do between processes).  The reused array is only read (``access.psum_write`` adds or copies
it into PSUM).  Nothing else is shared: each member has its own context (SBUF, PSUM, registers, trace,
allocation bookkeeping), its own inputs and outputs, and the module-level state a run touches (the kernel context
stack, ``access.FROZEN``, the index-variable and loop-instance counters) is swapped at every hand-over, so each
member's trace is the one it makes alone.  A member whose program raises stops there (its own error); the others
run on.  A member that finishes early (the grader's batch-1 timed call, a prefix of the batch-4 calls' program:
its n-th matmul is theirs for the first image) leaves its turn to the others; its ring's entries keep matmul indices
no later matmul has, so they are never taken.  Members whose products never coincide (other inputs, another
program) just run one after another, paying one storage compare per pair of versions (or a failed operand compare
per matmul) and a hand-over per ``WINDOW`` -- until the group has seen what sharing costs it.

**PSUM accumulation: chains copied, not added again.**  A later member that reuses every product of an accumulation
group also repeats the leader's PSUM work: an overwrite by the first product, then ``acc += product`` for each
later one (227 KB read twice and written once per matmul of the staff conv, 0.2-0.3 CPU s per batch-4 follower).
Its tile ends with the leader's tile's bits when both made the same overwrite and float32 adds of the same arrays
in the same order.  So every member notes, on each whole fp32 PSUM storage a matmul of its writes, the chain of
matmul numbers its values are (``Allocation.chain``, a :class:`_Chain`: ``(member, first, last, gen)``, broken by
any other write, which bumps ``gen``), and a later member whose chain's products all come from one earlier member's
ring (the arrays that member added itself) keeps them pending instead of adding (``Allocation.pend``, a
:class:`_Pending`; the storage is ``raw`` meanwhile, so its first access, through ``core.access`` like every access,
writes them first: ``access.poison_now``).  At that access the chain is written by one copy of the earlier
member's storage when that storage holds exactly the same chain -- the same first and last matmul and its ``gen``
unmoved since; or, if it died meanwhile, the values it was found to hold when it died (its allocation's finalizer
copies a chain a later member is waiting for, before the array can go to another tile) -- and otherwise by the
overwrite and the adds themselves, as ``access.psum_write`` would have made them.  ``SELF_CHECK`` recomputes every
copied chain.  A chain of a channel's products (``link``: its slots are written again) is never kept pending.
Nothing a kernel or its trace sees changes: the flags are set as the writes set them, ``gen`` bumps per matmul as
before, and the values are written before anything reads them.

**Sharing that does not pay stops.**  Where the operands cannot be matched by their storage versions (every matmul
of the handout's starting point reads tiles written just before it), each operand is copied by an earlier member and
compared by a later one, which costs most of the product it saves, and the runs' interleaving (two working sets
sharing the caches, a hand-over per ``WINDOW``) costs about as much again.  So the group keeps the CPU time its
members spend describing and comparing operands (``check_seconds``) beside the compute time of the products they
reused (``borrowed``): once its later members have looked for ``PROBE`` products, at every hand-over, if the checks
cost more than ``COST_LIMIT`` times what they saved (or anything while nothing was reused: other inputs, another
program), ``sharing`` turns off for the rest of the group: every member computes its own products from then on and
runs to its end without handing over (each run then goes as it goes alone).  The values are the same either way (a
reused product is the bits the member computes itself, above); only which products are computed twice depends on
the timing.  The time guard's charge (``borrowed``) stays exact: a product computed by its own member is charged to
it as its own time, as alone.

**What the checks cost is measured without a system call per product.**  A thread's CPU clock has no vDSO path on
Linux, so each ``time.thread_time()`` is a system call (1.4-1.7 us here): two per reused product and three per
computed one cost the staff grading's critical group about 0.2 CPU s.  The products' own cost (``borrowed``) is
still read around each product on the thread clock.  A check's compares, snapshots and copies -- the work that makes
sharing not pay where tiles are written just before each matmul -- are timed on the thread clock where they are
made (:meth:`ShareGroup._heavy`); the rest of the check, its bookkeeping, on the wall clock (``time.perf_counter``,
a vDSO read), each check's at most ``LIGHT_CLAMP``: a preemption falling in one adds at most that much, where it
would add the other thread's time slice.  ``SELF_CHECK``'s compares are not charged (:meth:`ShareGroup._unbilled`):
they are no cost of sharing where it runs without them, and charged they put the course's shapes at the limit.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.core import access, context, indexing
from nkisim.core.access import own_storage

_thread_time = time.thread_time
_wall = time.perf_counter

# Matmuls a member makes per turn: a hand-over costs ~25 us (two thread switches), a member's last WINDOW products
# are kept (~0.5 MB each for the course's [128, 128] x [128, 444] matmuls)
WINDOW = 16
# The group stops sharing (ShareGroup.sharing) once its later members have looked for PROBE products and what
# describing and comparing operands cost so far is more than COST_LIMIT times the products reused: for the handout's
# starting point (each matmul reads fresh tiles) the compares cost 0.86 of the products they saved and the group of
# two 0.5 CPU s more than its runs alone (batch 1 224x224: 5.0 against 4.5 CPU s; the two runs' working sets sharing
# the caches and the hand-overs cost about as much again as the compares), for the staff conv 0.12 (1.8 against 3.2)
PROBE = 1024
COST_LIMIT = 0.5
# The checks' light part (module docstring, "What the checks cost is measured without a system call per product") is
# timed by the wall clock, each check's at most LIGHT_CLAMP seconds (a check preempted meanwhile is not charged the
# other thread's time slice): the bookkeeping of one check is 3-10 us
LIGHT_CLAMP = 50e-6
# A member snapshots a storage version once its operands have read 1/SNAPSHOT_SHARE of the bytes the storage holds,
# and a later member compares its own storage whole with that snapshot at its first operand of the pair of versions.
# Before, both waited for a whole storage's bytes (each operand copied, then compared alone, until then): the staff
# conv's batch-4 224x224 group compared 3.2 GB, a third of it each operand against the earlier member's copy, a third
# against the snapshot's window of it; now about 1.3 GB.  The whole-storage work stays paid for: the snapshot costs
# at most SNAPSHOT_SHARE times the bytes the member's operands read of the version, a later member's whole compare
# the same (it runs the program whose operands read them)
SNAPSHOT_SHARE = 4
# the self-check: on every memo hit the operand is compared bitwise too, and a disagreement raises
# SharingSelfCheckError (tests run with it on: it is what catches a write path that does not bump Allocation.gen)
SELF_CHECK = os.environ.get("NKISIM_SHARE_SELFCHECK", "") not in ("", "0")
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

    def __init__(self, n: int, window: int | None = None, probe: int | None = None, link: Any = None) -> None:
        self.n = n
        # a group in another process this one shares with (core.channel): a Producer (member 0 publishes every
        # matmul it makes) or a Consumer (member 0 is :meth:`remote`, the producer's stand-in); None: on its own
        self.link = link
        self.batons = [threading.Lock() for _ in range(n)]
        for b in self.batons:
            b.acquire()
        self.done = [False] * n
        self.results: list[Any] = [None] * n
        self.errors: list[BaseException | None] = [None] * n
        self.cpu_seconds = [0.0] * n
        # the last ``window`` products of each member but the last: (matmul index, key, descriptions of the stationary
        # and moving operands (_describe), the product, the member that described them), by matmul index modulo
        # ``window``
        self.window = max(1, window or WINDOW)
        self.rings: list[list] = [[None] * self.window for _ in range(n)]
        self.count = [0] * n
        self.hits = 0
        self.misses = 0
        # the equality memo (module docstring): per member, {(uid, gen, earlier member's snapshot uid, gen): equal};
        # per member, {uid: [gen, bytes its operands read of that version, weak reference to its snapshot]}; per
        # member, {memo key: bytes of operands compared alone so far}; what the checks cost
        self.memo: list[dict] = [{} for _ in range(n)]
        self.snaps: list[dict] = [{} for _ in range(n)]
        self.snapshots = 0
        self.root_compares = 0
        self.memo_hits = 0
        self.view_compares = 0
        self.copy_compares = 0
        # each member's CPU seconds of the products it reused: computed by another member, they are part of its time
        # alone (the grader's per-call time guard reads them: a call that reused a sibling's products is no
        # cheaper alone); the compute time of the live products, by id and a weak reference (:meth:`_book`)
        self.borrowed = [0.0] * n
        self._cost: dict[int, tuple] = {}
        # whether products are still looked for and offered (module docstring, "Sharing that does not pay stops");
        # the CPU seconds spent describing and comparing operands; the products later members looked for
        self.sharing = True
        self.check_seconds = 0.0
        # the wall time of the compares, snapshots and copies made in the check under way (:meth:`_heavy`), which
        # its light part leaves out
        self.heavy_wall = 0.0
        self.looked = 0
        self.probe = PROBE if probe is None else probe
        # accumulation chains (module docstring, "PSUM accumulation"): each member's last product, (matmul index,
        # the ring it was taken from or None: its own); per member, {first matmul of a chain: weak reference to the
        # PSUM storage it started}; pending chains written by a copy of an earlier member's storage / by their adds
        self.last: list[tuple | None] = [None] * n
        self.starts: list[dict] = [{} for _ in range(n)]
        self.chain_copies = 0
        self.chain_adds = 0
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
            if k == 0 and self.link is not None and hasattr(self.link, "publish"):
                self.link.finish()
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
                compute: Callable[[np.ndarray, bool], np.ndarray], views: tuple | None = None) -> np.ndarray:
        """Member ``k``'s next matmul product: reused from an earlier member whose same-numbered matmul had ``key``
        (dtype names, shapes) and bit-identical raw operands of the same layout, else ``compute(moving, keep)``
        (``keep``: the group keeps the product for later members, so it must be an array of its own; or the fp32
        [m, n] array to write it into: a producer's channel slot).  ``views``: the
        operands' tensor views, whose storage versions let the equality memo answer without a compare (module
        docstring).  Every ``window`` matmuls the next member's turn comes."""
        if not self.sharing:
            self.last[k] = None
            return compute(moving, False)
        i = self.count[k]
        self.count[k] = i + 1
        slot = i % self.window
        w0 = _wall()
        self.heavy_wall = 0.0
        if views is not None:
            rs, rm = own_storage(views[0]), own_storage(views[1])
        else:
            rs = rm = None
        entry = None
        if k:
            self.looked += 1
            for j in range(k):
                e = self.rings[j][slot]
                if e is not None and e[0] == i and e[1] == key and self._matches(k, e[2], stationary, rs) \
                        and self._matches(k, e[3], moving, rm):
                    entry = e
                    self.last[k] = (i, j)
                    break
        if entry is None:
            self.last[k] = (i, None)
            self.misses += 1
            publish = k == 0 and self.link is not None and self.link.live and hasattr(self.link, "publish")
            if k < self.n - 1 or publish:  # a later member may multiply the same operands: describe them
                old = self.rings[k][slot]
                mine = old is not None and old[5] == k
                ds = self._describe(k, stationary, rs, old[2] if mine else None)
                dm = self._describe(k, moving, rm, old[3] if mine else None)
                self._light(w0)
                # the product's CPU time: the time guard's charge (a thread-time read is a system call here, 1.4-1.7
                # us: five per computed product before round 10, three then, two now)
                t1 = _thread_time()
                # a producer computes its product straight into the channel's slot (``compute``'s ``keep`` an array)
                out = self.link.reserve(i, key[3], key[4]) if publish else None
                # a copy of the moving window is the one reshape(K, N) makes anyway: the product reads it
                values = compute(moving if dm[0] is not None else dm[1], True if out is None else out)
                spent = _thread_time() - t1
                entry = (i, key, ds, dm, values, k)
                self._book(values, spent)
                if publish:
                    self.link.publish(i, key, ds, dm, values, spent)
            else:  # the last member's own product, kept for no one: nothing to book
                self._light(w0)
                values = compute(moving, False)
        else:
            self._light(w0)
            values = entry[4]
            self.hits += 1
            # what the member that computed it spent on it is part of this member's time alone (:attr:`borrowed`)
            c = self._cost.get(id(values))
            if c is not None and c[0]() is values:
                self.borrowed[k] += c[1]
        if k < self.n - 1 or (k == 0 and self.link is not None):  # (a producer's snapshots live as long as here)
            self.rings[k][slot] = entry
        if i % self.window == self.window - 1:
            if self.looked >= self.probe and self.check_seconds >= COST_LIMIT * sum(self.borrowed):
                self._stop()
            else:
                self._hand_over(k)
        return values

    def _light(self, w0: float) -> None:
        """Charge the check that began at wall time ``w0``: its compares, snapshots and copies charged their CPU
        time (:meth:`_heavy`); the rest, its bookkeeping, its wall time up to LIGHT_CLAMP."""
        light = _wall() - w0 - self.heavy_wall
        self.check_seconds += light if light < LIGHT_CLAMP else LIGHT_CLAMP

    def _heavy(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``: a compare, snapshot or copy a check makes, charged its CPU time (the thread clock, read
        around it: these are few, and long enough for a preemption to fall in them)."""
        w, t = _wall(), _thread_time()
        try:
            return fn(*args)
        finally:
            self.check_seconds += _thread_time() - t
            self.heavy_wall += _wall() - w

    def _unbilled(self, a: np.ndarray, b: np.ndarray) -> bool:
        """``same_bits(a, b)`` for ``SELF_CHECK``: not what sharing costs where it runs without the self-check, so
        neither charged nor left in the check's light part (a group stops sharing where it would without it)."""
        w = _wall()
        try:
            return same_bits(a, b)
        finally:
            self.heavy_wall += _wall() - w

    def chain(self, k: int, a: Any, vals: np.ndarray, start: bool) -> bool:
        """``access.psum_write``'s hook for member ``k``'s matmul just made (:meth:`product`) into the whole fp32
        PSUM storage ``a`` (its ``gen`` bumped already): ``start`` overwrites every element, else it adds onto
        elements every one of which a matmul wrote.  Notes the chain of matmuls the storage's values are
        (``a.chain``, a :class:`_Chain`, and ``starts`` for a later member to find it); when the product is an
        earlier member's (taken from its ring), the values are kept pending (``a.pend``) instead of written, and
        True returned: the storage is written at its first access, by a copy of that member's storage of the same
        chain when there is one (:class:`_Pending`).  False: the caller writes them as always."""
        last = self.last[k]
        self.last[k] = None
        if last is None:
            return False
        i, j = last
        if start:
            rec = a.chain = _Chain(k, i, a.gen)
            starts = self.starts[k]
            if len(starts) >= 64:  # chains every later member is past (a member is at most a turn behind)
                for key in list(starts)[:32]:
                    del starts[key]
            starts[i] = (weakref.ref(a), rec)
            a.pend = None  # every element is overwritten
            if j is None or self.link is not None:  # its own product; or a channel's slot, which is written again
                return False
            src = self.starts[j].get(i)
            if src is None:  # no chain of that member's to copy
                return False
            src[1].wanted = True  # copied if its storage dies before this one's values are written
            a.pend = _Pending(self, j, i, src, vals)
            a.raw = True
            return True
        rec = a.chain
        if rec is None or rec.k != k or rec.i1 != i - 1 or rec.gen != a.gen - 1:
            a.chain = None  # another write came between: not a chain
            return False
        rec.i1, rec.gen = i, a.gen
        pend = a.pend
        if pend is not None and j == pend.j and pend.i0 == rec.i0:
            pend.arrays.append(vals)
            return True
        return False

    def _stop(self) -> None:
        """Sharing does not pay (module docstring): from now on every member computes its own products and runs to
        its end without handing over; the kept products and snapshots are let go."""
        self.sharing = False
        self.starts = [{} for _ in range(self.n)]
        if self.link is not None:
            (self.link.finish if hasattr(self.link, "publish") else self.link.leave)()
        self.rings = [[None] * self.window for _ in range(self.n)]
        self.snaps = [{} for _ in range(self.n)]
        self.memo = [{} for _ in range(self.n)]
        self._cost.clear()

    def remote(self) -> None:
        """Member 0 of a group that takes its products from another process's (``link``, a ``core.channel``
        Consumer): each turn, the producer's next ``window`` entries become this member's ring entries (waiting for
        them, bounded), as if it had made those matmuls here, with their cost for the :attr:`borrowed` charge; the
        entries of the turn before are acknowledged first (every other member is past them: they had their turns),
        but for its last, whose product a member uses after it handed over.
        It ends when the producer ends, stops or stalls (after the turn that uses what it took: the producer never
        writes a slot of an entry not acknowledged), when sharing stops here, or when every other member is done;
        its ring is emptied then."""
        link, w = self.link, self.window
        ring = self.rings[0]
        i = 0
        more = True
        try:
            while more and self.sharing and not all(self.done[1:]):
                if i:
                    # every other member made its matmuls before i, but the last one's product is used only once
                    # its turn comes back (a member hands over inside its window's last matmul): i - 1 is kept
                    link.ack(i - 1)
                for j in range(i, i + w):
                    got = link.take(j)
                    if got is False:
                        more = False
                        break
                    if got is not None:
                        entry, spent = got
                        ring[j % w] = entry
                        self._cost[id(entry[4])] = (weakref.ref(entry[4]), spent)
                i += w
                self.count[0] = i
                self._hand_over(0)
        finally:
            self.rings[0] = [None] * w
            link.leave()

    def _book(self, values: np.ndarray, spent: float) -> None:
        """Keep what computing the kept product ``values`` cost (``spent`` CPU seconds), by its id and a weak
        reference: a later member that reuses it adds that to its :attr:`borrowed` time (:meth:`product`)."""
        if len(self._cost) >= 4 * self.n * self.window:  # drop the products no ring holds any more
            for i in [i for i, (ref, _) in self._cost.items() if ref() is None]:
                del self._cost[i]
        self._cost[id(values)] = (weakref.ref(values), spent)

    def _describe(self, k: int, raw: np.ndarray, root: tuple | None, old: tuple | None) -> tuple:
        """What a later member checks an operand against: ``(snapshot, byte offset, shape, strides, dtype)`` --
        the operand as a view of a snapshot of its whole storage at this version -- once the version has been read
        by operands of a quarter of the storage's bytes (``SNAPSHOT_SHARE``: the copy pays for itself, a storage
        version one small operand reads is never copied whole), else ``(None, contiguous copy, strides)`` (written
        into this member's own copy of the slot's previous operand when it fits: no page faults for fresh buffers
        per matmul)."""
        if root is not None:
            a, base, off = root
            if base.flags.c_contiguous:
                snap = self._snapshot(k, a, base, raw.nbytes)
                if snap is not None:
                    d = (snap, off, raw.shape, raw.strides, raw.dtype)
                    if SELF_CHECK and not self._unbilled(raw, _window(snap.arr, d)):
                        raise SharingSelfCheckError(
                            f"member {k}: an operand is not what its offset and strides address in its storage")
                    return d
        buf = old[1] if old is not None and old[0] is None else None
        return (None, self._heavy(_copy_into, buf, raw), raw.strides)

    def _snapshot(self, k: int, a: Any, base: np.ndarray, nbytes: int) -> _Snap | None:
        """Member ``k``'s copy of storage ``a`` at its current version, once operands of ``nbytes`` each have read
        1/SNAPSHOT_SHARE of the bytes the storage holds (None before).  Taken while the version lasts (the member
        may write the storage again before a later member gets there); kept alive only by the ring entries that use
        it (taken again if a use comes after the ring let it go)."""
        seen = self.snaps[k]
        st = seen.get(a.uid)
        if st is None or st[0] != a.gen:
            if len(seen) >= 4096:  # storages that died or moved on: their records serve nothing
                seen.clear()
            st = seen[a.uid] = [a.gen, 0, None]
        ref = st[2]
        s = ref() if ref is not None else None
        if s is not None:
            if SELF_CHECK and not self._unbilled(base, s.arr):
                raise SharingSelfCheckError(f"member {k}: storage '{a.name}' changed without a new version "
                                            "(a write path that does not bump Allocation.gen)")
            return s
        st[1] += nbytes
        if st[1] * SNAPSHOT_SHARE < base.nbytes:
            return None
        s = _Snap(a.uid, a.gen, self._heavy(np.array, base))
        self.snapshots += 1
        st[2] = weakref.ref(s)
        return s

    def _matches(self, k: int, d: tuple, raw: np.ndarray, root: tuple | None) -> bool:
        """Whether operand ``raw`` of member ``k`` has the bits and layout of the earlier member's operand ``d``."""
        s = d[0]
        if s is None:
            if not _same_layout(raw, d[1], d[2]):
                return False
            self.copy_compares += 1
            return self._heavy(same_bits, raw, d[1])
        if raw.shape != d[2] or raw.strides != d[3] or raw.dtype != d[4]:
            return False
        if root is not None and root[2] == d[1]:
            a, base = root[0], root[1]
            arr = s.arr
            if base.shape == arr.shape and base.dtype == arr.dtype and base.flags.c_contiguous:
                mk = (a.uid, a.gen, s.uid, s.gen)
                memo = self.memo[k]
                eq = memo.get(mk)
                if eq is None:
                    # the whole storage is compared at the pair's first use: the earlier member's operands read a
                    # share of it before it took the snapshot (SNAPSHOT_SHARE), and this member runs that program
                    if len(memo) >= 65536:
                        memo.clear()
                    eq = memo[mk] = self._heavy(same_bits, base, arr)
                    self.root_compares += 1
                else:
                    self.memo_hits += 1
                if eq:
                    # the whole storage has the snapshot's bits, so the operand, the same offset and strides in it,
                    # has the earlier operand's
                    if SELF_CHECK and not self._unbilled(raw, _window(arr, d)):
                        raise SharingSelfCheckError(
                            f"member {k}: the memo found storage '{a.name}' equal to an earlier member's, but the "
                            "operand's bits differ (a write path that does not bump Allocation.gen)")
                    return True
                if eq is False and raw.nbytes == base.nbytes and (raw.flags.c_contiguous or raw.flags.f_contiguous):
                    return False  # the operand is every byte of its storage: it differs where the storage does
        # not compared whole yet, storage that differs (somewhere), or storage that does not qualify: the operand
        # alone against the snapshot's window of it
        self.view_compares += 1
        return self._heavy(same_bits, raw, _window(s.arr, d))


class SharingSelfCheckError(BaseException):
    """The self-check (``NKISIM_SHARE_SELFCHECK=1``) found the equality memo wrong: a write path forgot to bump
    ``Allocation.gen``, or a view's offset does not address its bits.  An emulator bug, never the kernel's outcome:
    a BaseException, so that no ``except Exception`` on the way (an instruction's value error becomes a device
    fault, core.ops.registers) turns it into one."""


class _Chain:
    """The accumulation chain a member's PSUM storage holds (``Allocation.chain``): member ``k``'s matmuls ``i0``
    to ``i1``, an overwrite of every element by the first product and an fp32 add of each later one, with no other
    write between -- the storage's values while its ``gen`` is still ``gen``.  ``wanted``: a later member's pending
    chain will copy it; the storage's values are then copied into ``vals`` should the storage die first (its
    allocation's finalizer calls :meth:`keep` before its array may be reused for another tile)."""

    __slots__ = ("k", "i0", "i1", "gen", "wanted", "vals")

    def __init__(self, k: int, i0: int, gen: int) -> None:
        self.k, self.i0, self.i1, self.gen, self.wanted, self.vals = k, i0, i0, gen, False, None

    def keep(self, a: Any) -> None:
        if a.gen == self.gen and a.chain is self:
            if a.pend is not None:
                access.poison_now(a)
            self.vals = a.base.copy()


class _Pending:
    """A member's PSUM storage's values not written yet: the accumulation chain of products ``arrays`` (an
    overwrite by the first, then one add of each later one, in order), matmuls ``i0`` onwards, every product taken
    from member ``j``'s ring (the arrays member ``j`` used for its own matmuls of those numbers).  Called with the
    storage at its first access (``access.poison_now``), it writes them: by a copy of member ``j``'s storage of the
    chain that started at the same matmul (``src``: a weak reference to that storage and its :class:`_Chain`) when
    that chain went exactly as far (the same overwrite and float32 adds of the same arrays in the same order, so the
    same bits) and the storage still holds it (its ``gen`` has not moved; or its values were kept when it died),
    otherwise by making the overwrite and the adds here, as ``access.psum_write`` would have."""

    __slots__ = ("group", "j", "i0", "src", "arrays")

    def __init__(self, group: ShareGroup, j: int, i0: int, src: tuple, first: np.ndarray) -> None:
        self.group, self.j, self.i0, self.src, self.arrays = group, j, i0, src, [first]

    def __call__(self, a: Any) -> None:
        g, arrays, src = self.group, self.arrays, self.src
        base = a.base
        got = None
        rec = src[1]
        if rec.i0 == self.i0 and rec.i1 == self.i0 + len(arrays) - 1:
            owner = src[0]()
            if owner is None:
                got = rec.vals
            elif owner.chain is rec and owner.gen == rec.gen:
                if owner.pend is not None:  # that member's values are pending too: written first (no new gen)
                    access.poison_now(owner)
                got = owner.base
        if got is not None and got.shape == base.shape and got.dtype == base.dtype:
            np.copyto(base, got)
            g.chain_copies += 1
            if SELF_CHECK:
                mine = np.empty_like(base)
                _accumulate(mine, arrays)
                if not np.array_equal(mine.view(np.uint32), base.view(np.uint32)):
                    raise SharingSelfCheckError(f"PSUM storage '{a.name}': the copy of member {self.j}'s chain "
                                                f"from matmul {self.i0} is not the chain's values")
            return
        _accumulate(base, arrays)
        g.chain_adds += 1


def _accumulate(out: np.ndarray, arrays: list) -> None:
    """The fp32 overwrite and adds ``access.psum_write`` makes for an accumulation chain's products, in order."""
    out[...] = arrays[0]
    for v in arrays[1:]:
        out += v


class _Snap:
    """A copy of one storage version: ``uid`` and ``gen`` of the allocation it copies, ``arr`` the bits."""

    __slots__ = ("uid", "gen", "arr", "__weakref__")

    def __init__(self, uid: int, gen: int, arr: np.ndarray) -> None:
        self.uid, self.gen, self.arr = uid, gen, arr


def _window(arr: np.ndarray, d: tuple) -> np.ndarray:
    """The operand described by ``d`` as a view of the snapshot ``arr`` (the constructor checks it stays inside)."""
    return np.ndarray(d[2], dtype=d[4], buffer=arr, offset=d[1], strides=d[3])


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
                compute: Callable[[np.ndarray, bool], np.ndarray], views: tuple | None = None) -> np.ndarray:
        """The member's next matmul product (:meth:`ShareGroup.product`, which books what its own products cost
        and charges it the ones it reuses)."""
        return self.group.product(self.k, stationary, moving, key, compute, views)

    def chain(self, a: Any, vals: np.ndarray, start: bool) -> bool:
        """``access.psum_write``'s hook for the product just returned (:meth:`ShareGroup.chain`)."""
        return self.group.chain(self.k, a, vals, start)
