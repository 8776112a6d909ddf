"""Allocations, poisoning, physical buffer ids and SBUF/PSUM capacity by liveness.

An :class:`Allocation` owns a NumPy array in *physical* layout: on-chip tensors keep the partition axis first
(``(P, blocks..., free...)``) so a byte offset splits into (partition, byte within partition) exactly as SBUF
addressing does; HBM tensors are plain row-major arrays.  A tile dies when Python drops its last reference;
``__del__`` returns its bytes to the capacity tracker and its physical id to its allocation site, where the next
allocation reuses it (tile-buffer reuse, so WAR hazards appear in the trace as on hardware).
"""

from __future__ import annotations

from itertools import count
from sys import getrefcount

import numpy as np

from nkisim.core import dtypes
from nkisim.core.blocks import BlockRecord
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, Buf
from nkisim.core.rules import fail, message
from nkisim.core.sites import ROTATION_DEPTH, site_str

# process-wide serial numbers of allocations (Allocation.uid)
_next_uid = count(1).__next__
BUF_NAMES = {B_HBM: "hbm", B_SBUF: "sbuf", B_PSUM: "psum"}
# dead storage arrays kept per geometry for reuse in full mode (core.buffers): a loop's tiles die and are replaced
# a few at a time, so a short free list serves them; more would only hold memory a finished loop no longer needs
POOL_DEPTH = 16


class StorageView:
    """Base class of every view of an :class:`Allocation` (``nkisim.core.tensor.Tensor`` and its front-end
    subclasses): ``_a`` is the allocation.  Lets this layer find the tiles kernel variables hold (capacity by
    liveness) without importing the tensor layer above it."""

    __slots__ = ("_a",)


class Allocation:
    """One tensor's storage.  Never exposed to kernel code (kernels only hold :class:`Tensor` views)."""

    __slots__ = (
        "buf", "base", "addr", "row_bytes", "phys", "site", "name", "immutable", "bytes_pp", "tracker",
        "acc", "vinit", "charged", "block_mod", "slot_owner", "space", "block_bytes", "block_record", "provisional",
        "placed", "fresh", "pool", "uid", "gen", "raw", "pend", "chain", "__weakref__",
    )

    def __init__(self, buf: Buf, base: np.ndarray, phys: int, site, name: str, bytes_pp: int,
                 tracker: MemoryTracker | None) -> None:
        self.buf = buf
        self.base = base
        self.addr = 0  # base address; only needed (and set) where views are created from raw offsets
        self.row_bytes = base.strides[0] * base.shape[0] if buf == B_HBM else bytes_pp
        self.phys = phys
        self.site = site
        self.name = name
        self.immutable = False
        self.bytes_pp = bytes_pp
        self.tracker = tracker
        self.acc = None  # PSUM: per-element "written by a matmul" flags (accumulation groups)
        self.vinit = None  # PSUM: per-element "value-initialised by a non-matmul instruction" flags (lazy)
        self.charged = False
        self.block_mod = 0  # direct allocation: block index wraps modulo num_free_tiles
        self.slot_owner: dict | None = None  # wrapped PSUM blocks: physical slot -> logical block that last wrote it
        self.space = BUF_NAMES[buf]  # the memory space it was created in: 'sbuf', 'psum', 'hbm', 'shared_hbm', ...
        # automatically allocated tensor with block dimensions: bytes per partition of one (P, F) block (SBUF: all
        # it is charged at allocation, per-block liveness is checked at the end of the run, core.blocks)
        self.block_bytes = 0
        self.block_record = None
        self.provisional = False  # a fresh instruction result (ops.common.new_result), until retargeted or kept
        # explicitly placed (nl.ndarray(address=...)): (first partition, partitions, first byte) of its region of the
        # arena ``base``; None where the tensor owns ``base``
        self.placed: tuple[int, int, int] | None = None
        # a placed PSUM tensor whose first inferred-flag matmul (accumulate=None) has not run yet: (first partition,
        # partitions, first byte, bytes per partition) of its region (core.access.start_tensor_groups)
        self.fresh: tuple[int, int, int, int] | None = None
        # full mode, automatic allocation: the free list of storage arrays of its geometry (core.buffers), which
        # its storage joins when it dies, if nothing else holds it (MemoryTracker.release)
        self.pool: list | None = None
        # the version of its values (core.sharing's equality memo): ``uid`` names this storage for the whole
        # process (a new allocation, including one taking a dead tile's pooled array, is a new one; ids are reused,
        # uids never), ``gen`` counts the writes of values into it -- every write path bumps it (core.access
        # write / scatter_add / psum_write / poison_now, the deferred result write of KernelContext._flush)
        self.uid = _next_uid()
        self.gen = 0
        # full mode: storage not filled with the poison yet (core.buffers), filled at the first access that could
        # read it (core.access.poison_now)
        self.raw = False
        # a lockstep group's member (core.sharing): the accumulation chain whose values its PSUM storage holds but
        # has not written yet (``raw`` is set while it is pending: the first access writes them, poison_now); and
        # the chain its storage's values are, (member, first matmul, last matmul, gen), which a later member's
        # pending chain of the same matmuls copies instead of adding them again
        self.pend = None
        self.chain = None

    def __del__(self) -> None:
        chain = self.chain
        if chain is not None and chain.wanted:  # a later group member copies these values (core.sharing._Chain)
            try:
                chain.keep(self)
            except Exception:  # noqa: BLE001 - never raise from a finalizer (the member then adds its own)
                pass
        tracker = self.tracker
        if tracker is not None:
            try:
                tracker.release(self)
            except Exception:  # noqa: BLE001 - never raise from a finalizer
                pass


class MemoryTracker:
    """Live SBUF/PSUM bytes per partition of one kernel run, checked at every allocation."""

    def __init__(self, limits, target: str) -> None:
        self.limits = limits
        self.target = target
        # legacy namespace only: block dimensions (nl.par_dim) exist; the current API puts partitions first always
        self.block_dimensions = True
        self.live = {B_SBUF: 0, B_PSUM: 0}
        self.peak = {B_SBUF: 0, B_PSUM: 0}
        # id -> (buf, name, dtype, bytes, site, shape, phys, trace position when charged, provisional, bytes charged);
        # no strong refs
        self.live_allocs: dict[int, tuple] = {}
        self._free_phys: dict[object, list[int]] = {}
        self._next_phys = 1
        self._owned: dict[object, int] = {}  # (site, buf) -> physical buffers the site holds (live or dead)
        # dead buffers kept for rotation, oldest death first: phys id -> ((site, buf), bytes per partition); with
        # the bytes they hold per memory.  Live tiles plus these never exceed the memory's capacity.
        self._dead: dict[Buf, dict[int, tuple[object, int]]] = {B_SBUF: {}, B_PSUM: {}}
        self._dead_bytes = {B_SBUF: 0, B_PSUM: 0}
        self._bank = limits.psum_bank_bytes
        self.closed = False
        self.stop_code = None  # the kernel function's code: frames older than it cannot hold its tiles
        # a run whose program is recorded (nkisim.stream) is told which tiles reclaim found dead; a replayed run has
        # no kernel frames to analyse and takes the recorded ones instead (checked there: never used again)
        self.on_reclaim = None
        self.dead_source = None
        self.spills: list[tuple] = []  # (name, bytes per partition, site) of PSUM tiles spilled past the 8 banks
        # nki.simulate_kernel: capacity is the compiler's check, not the simulator's (rules.NKICapacityWarning);
        # over-subscriptions are collected here as messages instead of raised
        self.simulate = False
        self.overflows: list[str] = []
        # GCA035 as the NKI 0.6 compiler applies it (the "nki" era): an instruction's distinct tiles, each once,
        # placed apart by partition range where they are narrow enough (core.spill.packed_bytes); the legacy
        # eras keep the summed count of every operand
        self.pack_partitions = False
        # per-block liveness of block-dimension tensors (core.blocks): SBUF live bytes after every change, keyed by
        # the trace position; the tensors' records; an upper bound on the peak (every block live at once)
        self.position = None  # () -> number of instructions traced so far (set by the kernel context)
        self.sbuf_events: list[tuple[int, int]] = []
        self.block_records: list = []
        self._block_extra = 0
        self.block_upper_peak = 0
        # explicit placements (nl.ndarray(address=...), core.placement.AddressPlacement): the merged byte ranges per
        # partition they cover, per memory, reserved against automatic allocation for the rest of the kernel
        self._reserved: dict[Buf, list[tuple[int, int]]] = {}
        self.reserved_bytes = {B_SBUF: 0, B_PSUM: 0}
        # SBUF over-subscription by automatically allocated tiles: the compiler spills (core.spill), nkisim decides
        # what at the end of the run.  ``over`` is set at the first allocation past the usable bytes; from then on
        # (and from the first block-dimension tensor on) every SBUF tile's life is logged for that pass:
        # (phys, first trace position, end position, bytes per partition, name, site, provisional).  Tiles dead
        # before logging starts cannot matter: until then every allocation fitted.
        self.over = False
        self.sbuf_log: list[tuple] | None = None
        # the largest automatically allocated SBUF location so far (bytes per partition; a block of a block tensor):
        # KernelContext.emit checks an instruction's accessed bytes only when this could exceed a partition
        self.big_tile = 0
        # core.buffers: what each (shape, dtype, memory) of automatic allocation is, checked once per run, and
        # whether the run computes values (its mode, set by the kernel context; ``ctx.full`` is off while a call
        # runs dry, core.ops.registers)
        self.geometry: dict = {}
        self.values = True

    # -- physical ids -------------------------------------------------------------------------------------
    def phys_for(self, site, buf: Buf = B_SBUF, bytes_pp: int = 0, provisional: bool = False) -> int:
        """The physical buffer id for a new tile of ``bytes_pp`` bytes per partition allocated at ``site``.

        A site reuses its own dead buffers, oldest first, only once it owns ROTATION_DEPTH + 1 buffers (live or
        dead): a tile allocated every iteration (an instruction's temporary too) rotates through several physical
        buffers, so iteration i+1's writer does not wait for iteration i's reader.  neuronx-cc materialises
        loop-local tiles "in multiple copies" (NKI block-dimension migration guide) and PSUM tiles across banks
        ("with 8 banks, up to 8 accumulation groups can be outstanding", trainium arch guide).  Counting owned
        rather than dead buffers keeps Python scoping (a helper's temporaries) out of the copy count.

        The copies must fit: live tiles plus the dead copies kept for rotation stay within usable SBUF (PSUM: its
        8 banks).  A copy that would not fit takes over the longest-dead buffer of any site (a finished loop's
        copies give way to the next loop's), so the trace keeps the WAR hazard on the memory it reuses.  A
        provisional result takes nothing over: it may never hold memory (`acc += matmul` accumulates in place).
        """
        if bytes_pp > self.big_tile and buf == B_SBUF:
            self.big_tile = bytes_pp
        key = (site, buf)
        free = self._free_phys.get(key)
        owned = self._owned.get(key, 0)
        dead = self._dead.get(buf)  # None for HBM: no capacity to respect
        short = False
        if not (free and owned > ROTATION_DEPTH) and dead is not None:
            short = not self._fits(buf, bytes_pp)
        if free and (owned > ROTATION_DEPTH or (short and (provisional or not dead))):
            pid = free.pop(0)  # rotate: this site's longest-dead buffer
            if dead is not None:
                kept = dead.pop(pid, None)
                if kept is not None:
                    self._dead_bytes[buf] -= kept[1]
            return pid
        self._owned[key] = owned + 1
        if short and dead and not provisional:
            return self._take_longest_dead(buf, bytes_pp)
        return self.new_phys()

    def _take_longest_dead(self, buf: Buf, bytes_pp: int) -> int:
        """Free the longest-dead kept buffers until ``bytes_pp`` fits; the first one's id is reused."""
        dead = self._dead[buf]
        taken = None
        while dead and not self._fits(buf, bytes_pp):
            pid, (okey, nbytes) = next(iter(dead.items()))
            del dead[pid]
            self._dead_bytes[buf] -= nbytes
            self._free_phys[okey].remove(pid)
            self._owned[okey] -= 1
            if taken is None:
                taken = pid
        assert taken is not None
        return taken

    def charged_bytes(self, alloc: Allocation) -> int:
        """What ``alloc`` is charged while live: one block of an SBUF block-dimension tensor (core.blocks checks
        the rest), a whole bank per block of a PSUM one (each block is a tile of its own, within one bank), else
        all its bytes."""
        bb = alloc.block_bytes
        if not bb:
            return self._cost(alloc.buf, alloc.bytes_pp)
        if alloc.buf == B_PSUM:
            return (alloc.bytes_pp // bb) * self._cost(B_PSUM, bb)
        return self._cost(alloc.buf, bb)

    def _note_sbuf(self) -> None:
        # only kernels with block-dimension tensors need the history (from their first one on): keep it off the
        # allocation path of every other kernel
        if self.block_records and self.position is not None:
            self.sbuf_events.append((self.position(), self.live[B_SBUF]))

    def track_blocks(self, alloc: Allocation, nblocks: int) -> None:
        """Record a block-dimension tensor for the end-of-run per-block liveness check (core.blocks)."""
        rec = BlockRecord(alloc.phys, alloc.buf, alloc.block_bytes, nblocks, alloc.name, alloc.site,
                          self.position() if self.position is not None else 0)
        self.block_records.append(rec)
        if self.sbuf_log is None:
            self.sbuf_log = []
        self._note_sbuf()  # the live bytes when the history starts
        alloc.block_record = rec
        self._block_extra += (nblocks - 1) * alloc.block_bytes
        self.block_upper_peak = max(self.block_upper_peak, self.live[B_SBUF] + self._block_extra)

    def _cost(self, buf: Buf, bytes_pp: int) -> int:
        """Bytes per partition a tile occupies: PSUM tiles take whole 2 KiB banks."""
        if buf == B_PSUM:
            return -(-bytes_pp // self._bank) * self._bank
        return bytes_pp

    def _capacity(self, buf: Buf) -> int:
        return self.limits.sbuf_usable_bytes if buf == B_SBUF else self.limits.psum_bytes_per_partition

    def _fits(self, buf: Buf, bytes_pp: int) -> bool:
        return self.live[buf] + self._dead_bytes[buf] + self._cost(buf, bytes_pp) <= self._capacity(buf)

    def new_phys(self) -> int:
        pid = self._next_phys
        self._next_phys += 1
        return pid

    # -- capacity -----------------------------------------------------------------------------------------
    def reserve(self, buf: Buf, lo: int, hi: int) -> None:
        """Hold bytes [lo, hi) per partition of ``buf`` for an explicit placement, for the rest of the kernel.

        The current API lets a kernel mix explicit and automatic placement (AWS's nki-library does: its
        FlashAttention forward places its pipeline buffers with ``address=`` and leaves ``SoftmaxState``
        "compiler-placed"); the docs do not say how the compiler shares the memory.  nkisim assumes it allocates
        around every explicitly placed byte range, so the union of those ranges (whole 2 KiB banks in PSUM) counts
        as live: automatic tiles get what is left (beyond it they spill, core.spill; a tile that cannot fit beside
        the placements on its own is the capacity error)."""
        if self.closed or buf not in self.live:
            return
        if buf == B_PSUM:
            lo, hi = lo // self._bank * self._bank, -(-hi // self._bank) * self._bank
        spans = self._reserved.setdefault(buf, [])
        before = sum(b - a for a, b in spans)
        merged: list[tuple[int, int]] = []
        for a, b in sorted(spans + [(lo, hi)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        spans[:] = merged
        grow = sum(b - a for a, b in merged) - before
        if not grow:
            return
        self.live[buf] += grow
        total = before + grow
        self.reserved_bytes[buf] = total
        self.live_allocs[-int(buf)] = (buf, "explicit placements (nl.ndarray address=)", np.dtype(np.uint8), total,
                                       None, (self.limits.pmax, total), 0, 0, False, total)
        if self.live[buf] > self.peak[buf]:
            self.peak[buf] = self.live[buf]
        if buf == B_SBUF:
            self._note_sbuf()
            capacity = self._capacity(buf)
            if self.live[buf] > capacity:
                # automatic tiles live beside the placements spill (core.spill) unless one of them cannot fit
                # beside the placements at all
                largest = max((a[9] for k, a in self.live_allocs.items() if a[0] == B_SBUF and k >= 0), default=0)
                if total + largest > capacity:
                    fields = dict(target=self.target, peak=self.live[buf], capacity=capacity,
                                  tiles=self.largest(buf) + self.partition_hint(buf))
                    if self.simulate:
                        self.overflows.append(message("nkisim_sbuf_capacity", **fields))
                    else:
                        fail("nkisim_sbuf_capacity", **fields)
                self.over = True
                if self.sbuf_log is None:
                    self.sbuf_log = []

    def charge(self, alloc: Allocation) -> bool:
        """Count ``alloc`` as live; True when it is a PSUM tile the compiler spills (no bank left)."""
        buf = alloc.buf
        if alloc.charged or buf == B_HBM or self.closed:
            return False
        alloc.charged = True
        # the per-allocation path: _cost and _capacity inlined
        if alloc.block_bytes:
            cost = self.charged_bytes(alloc)
        elif buf == B_PSUM:
            cost = -(-alloc.bytes_pp // self._bank) * self._bank
        else:
            cost = alloc.bytes_pp
        live = self.live
        live[buf] += cost
        base = alloc.base
        position = self.position
        self.live_allocs[id(alloc)] = (buf, alloc.name, base.dtype, alloc.bytes_pp, alloc.site, base.shape,
                                       alloc.phys, position() if position is not None else 0,
                                       alloc.provisional, cost)
        capacity = self.limits.sbuf_usable_bytes if buf == B_SBUF else self.limits.psum_bytes_per_partition
        if live[buf] > capacity:
            self.reclaim(buf, alloc)
        if buf == B_PSUM and self.live[buf] > capacity:
            # Automatically allocated PSUM beyond the 8 banks: neuronx-cc spills instead of failing (AWS's
            # nki-samples flash_attn_bwd: "we will have psum spilling in the current implementation"; the attention
            # tutorial's attn_fwd_v3 declares 256 PSUM tiles and runs in nki.simulate_kernel).  The tile keeps its
            # values but holds no bank; the caller emits the spill copy that the cost model charges.  Direct
            # allocation (ncc.psum.mod_alloc) never reaches here and keeps its documented errors.
            self.live[buf] -= cost
            alloc.charged = False
            self.live_allocs.pop(id(alloc), None)
            self.spills.append((alloc.name, alloc.bytes_pp, alloc.site))
            return True
        if self.live[buf] > self.peak[buf]:
            self.peak[buf] = self.live[buf]
        if buf == B_SBUF and self.block_records:  # block-dimension bookkeeping (core.blocks), else nothing
            self._note_sbuf()
            if self.live[buf] + self._block_extra > self.block_upper_peak:
                self.block_upper_peak = self.live[buf] + self._block_extra
        if self.live[buf] > capacity:
            # Over-subscribed by automatically allocated tiles: neuronx-cc spills to device memory instead of
            # failing ("If the total size of the live data ... overflows the capacity of any on-chip memory, the
            # Neuron compiler will insert the necessary spills or refills", NKI memory hierarchy overview); which
            # tiles and when is decided once the whole trace is known (core.spill).  It cannot help a tile that
            # does not fit beside the explicit placements on its own: that stays the capacity error.
            if self.reserved_bytes[B_SBUF] + cost > capacity:
                peak = self.live[buf]
                tiles = self.largest(buf) + self.partition_hint(buf)
                if self.simulate:
                    self.overflows.append(message("nkisim_sbuf_capacity", target=self.target, peak=peak,
                                                  capacity=capacity, tiles=tiles))
                    return False
                # undo so the error leaves the tracker consistent
                self.live[buf] -= cost
                alloc.charged = False
                self.live_allocs.pop(id(alloc), None)
                fail("nkisim_sbuf_capacity", target=self.target, peak=peak, capacity=capacity, tiles=tiles)
            self.over = True
            if self.sbuf_log is None:
                self.sbuf_log = []
        return False

    def _log_end(self, rec: tuple | None, alloc: Allocation) -> None:
        """A logged SBUF tile stops being live (core.spill reads the log)."""
        if rec is not None and rec[0] == B_SBUF and not alloc.block_bytes:
            self.sbuf_log.append((rec[6], rec[7], self.position() if self.position is not None else 0, rec[9],
                                  rec[1], rec[4], rec[8]))

    def reclaim(self, buf: Buf, keep: Allocation) -> None:
        """Stop charging tiles the kernel can no longer read although a Python name still holds them (a name
        rebound only after this allocation, a loop temporary never read after its loop): neuronx-cc allocates by
        liveness.  Runs only when an allocation would over-subscribe ``buf`` (nkisim.core.liveness)."""
        from nkisim.core.liveness import dead_allocations

        if self.dead_source is not None:
            dead = self.dead_source()
        else:
            if self.on_reclaim is not None:
                self.on_reclaim(None)  # the frame walk may let tiles go (a frame's locals snapshot is refreshed)
            dead = dead_allocations(Allocation, StorageView, self.stop_code)
            if self.on_reclaim is not None:
                self.on_reclaim(list(dead.values()))
        for aid, alloc in dead.items():
            if alloc is keep or alloc.buf != buf or not alloc.charged or alloc.tracker is not self:
                continue
            alloc.charged = False
            self.live[buf] -= self.charged_bytes(alloc)
            rec = self.live_allocs.pop(aid, None)
            if self.sbuf_log is not None:
                self._log_end(rec, alloc)
            self._released(alloc)
        if buf == B_SBUF:
            self._note_sbuf()

    def largest(self, buf: Buf, n: int = 5) -> str:
        allocs = sorted((a for a in self.live_allocs.values() if a[0] == buf), key=lambda a: -a[3])[:n]
        return ", ".join(
            f"'{name or 'tile'}' {dt} {_layout(shape)} = {nbytes} B/partition (allocated at {site_str(site)})"
            for _, name, dt, nbytes, site, shape, *_ in allocs
        )

    def partition_hint(self, buf: Buf) -> str:
        """For the largest live tile whose partition axis is smaller than a later axis of at most pmax: which axis
        was taken as the partition axis, and the two ways to put the other one there (students' commonest
        over-subscription: a list-of-tiles shape such as (2, 128, 9, 256), read as 2 partitions)."""
        pmax = self.limits.pmax
        for _, name, _, _, _, shape, *_ in sorted(
            (a for a in self.live_allocs.values() if a[0] == buf), key=lambda a: -a[3]
        ):
            parts, rest = shape[0], shape[1:]
            later = [i for i, d in enumerate(rest) if parts < d <= pmax]
            if parts >= pmax or not later:
                continue
            axis = 1 + max(later, key=lambda i: rest[i])
            first = (shape[axis], *shape[:axis], *shape[axis + 1 :])
            marked = ", ".join(f"nl.par_dim({d})" if i == axis else str(d) for i, d in enumerate(shape))
            hint = (
                f". '{name or 'tile'}' {tuple(shape)} was taken with its first axis on the partitions: {parts} "
                f"partitions, each holding the {_count(rest)} elements of the other axes. If axis {axis} (size "
                f"{shape[axis]}) is the one to spread over the partitions, make it the first axis, {first}"
            )
            if not self.block_dimensions:  # NKI 0.4+: no nl.par_dim, the first axis is always the partition axis
                return hint + " (in this API the partition axis is always the first)"
            return hint + f", or mark it: ({marked}), which makes the axes before it block dimensions"
        return ""

    def release(self, alloc: Allocation) -> None:
        buf = alloc.buf
        site = alloc.site
        if not alloc.charged:  # never held memory (HBM, or a matmul result folded into `acc +=`)
            pool = alloc.pool
            if pool is not None and len(pool) < POOL_DEPTH and not self.closed:
                base = alloc.base
                if getrefcount(base) == _SOLE_REFS:
                    pool.append(base)
            if site is not None and not self.closed:
                self._free_phys.setdefault((site, buf), []).append(alloc.phys)
            return
        alloc.charged = False
        rec = self.live_allocs.pop(id(alloc), None)
        # what charge() counted (the record's last field); recomputed only for a tile charged without a record
        cost = rec[9] if rec is not None else self.charged_bytes(alloc)
        self.live[buf] -= cost
        if self.sbuf_log is not None:
            self._log_end(rec, alloc)
        if self.block_records:  # block-dimension bookkeeping (core.blocks), else nothing
            self._released(alloc)
            if buf == B_SBUF:
                self._note_sbuf()
        pool = alloc.pool
        if pool is not None and len(pool) < POOL_DEPTH and not self.closed:
            base = alloc.base
            if getrefcount(base) == _SOLE_REFS:  # no view of the storage is left anywhere: reusable as fresh
                pool.append(base)
        if site is not None and not self.closed:
            key = (site, buf)
            self._free_phys.setdefault(key, []).append(alloc.phys)
            self._dead[buf][alloc.phys] = (key, cost)
            self._dead_bytes[buf] += cost

    def _released(self, alloc: Allocation) -> None:
        """A block-dimension tensor stops being live: close its record's window."""
        rec = alloc.block_record
        if rec is not None and rec.end is None:
            rec.end = self.position() if self.position is not None else 0
            self._block_extra -= (rec.nblocks - 1) * rec.block_bytes


def _layout(shape: tuple[int, ...]) -> str:
    """'[2 partitions] x (128, 9, 256)': the physical layout, partition axis first."""
    return f"[{shape[0]} partitions] x {tuple(shape[1:])}" if len(shape) > 1 else f"[{shape[0]} partitions]"


def _count(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def base_addr(alloc: Allocation) -> int:
    """Address of the allocation's storage (cached: views compute their byte offsets from it)."""
    if not alloc.addr:
        alloc.addr = alloc.base.__array_interface__["data"][0]
    return alloc.addr


def make_storage(shape: tuple[int, ...], pdim: int, dtype: np.dtype, fill, timing: bool,
                 empty=None) -> tuple[np.ndarray, np.ndarray]:
    """(physical base array, logical view) with the partition axis moved first physically.  ``empty`` (full mode,
    poisoned storage only): what makes the uninitialised array instead of ``np.empty`` (``core.buffers``: HBM
    tensors in files of the caller's directory)."""
    if pdim:
        phys_shape = (shape[pdim],) + shape[:pdim] + shape[pdim + 1:]
    else:
        phys_shape = shape
    if timing:
        base = np.empty(phys_shape, dtype=dtype)
    elif fill is None:
        # the poison (NaN, 4, True) is exact in every dtype: ndarray.fill gives np.full's bytes at half its cost
        base = (empty or np.empty)(phys_shape, dtype=dtype)
        if empty is None or not getattr(empty, "ready", False):  # a prepared file is poisoned already
            base.fill(dtypes.poison_value(dtype))
    else:
        base = np.full(phys_shape, fill, dtype=dtype)
    view = np.moveaxis(base, 0, pdim) if pdim else base
    return base, view


def _sole_refs() -> int:
    """What ``getrefcount`` says in ``MemoryTracker.release`` of a storage array that only its allocation holds
    (the slot, the local name, the call's argument in CPython 3.11; measured, not assumed, so another interpreter
    can only make pooling rarer, never unsafe)."""
    a = Allocation.__new__(Allocation)
    a.tracker = a.chain = None
    a.base = np.empty(1)
    base = a.base
    return getrefcount(base)


_SOLE_REFS = _sole_refs()
