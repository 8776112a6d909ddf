"""Direct allocation: tensors the kernel places itself at real SBUF byte offsets / PSUM banks.

The current API spells it ``nl.ndarray(..., address=(partition_offset, free_offset))`` (:func:`placed`,
:class:`AddressPlacement`, at the end of this module).

The legacy API spells it ``buffer=ncc.sbuf.mod_alloc(base_addr=..., num_free_tiles=...)``,
``ncc.psum.mod_alloc(base_bank=..., num_bank_tiles=...)`` and ``ncc.sbuf.alloc(func)`` / ``ncc.psum.alloc(func)``
(``nkisim/frontends/legacy/compiler.py`` wraps these classes in :class:`~nkisim.core.buffers.BufferSpec`s);
:func:`nkisim.core.buffers.allocate` calls a spec's ``place``.  Placements are views of one per-kernel arena per
memory (``KernelContext.sbuf_arena`` / ``psum_arena``), so overlapping placements alias as they do on hardware; a
newly placed PSUM tensor starts fresh accumulation groups (``KernelContext.psum_arena_acc``).  Placements nkisim
cannot express as views get storage of their own (docs/nkisim.md, "Direct allocation").
"""

from __future__ import annotations

import numpy as np

from nkisim.core.access import operand
from nkisim.core.context import KernelContext, traced_once
from nkisim.core.instr import Buf
from nkisim.core.memory import Allocation, base_addr, make_storage
from nkisim.core.rules import fail, message
from nkisim.core.tensor import Tensor


class SbufModAlloc:
    """Direct SBUF placement: block i of the tensor lands at base_addr + (i % num_free_tiles) * tile bytes."""

    def __init__(self, base_addr: int, base_partition: int, num_par_tiles, num_free_tiles) -> None:
        self.base_addr = int(base_addr)
        self.base_partition = int(base_partition)
        self.num_free_tiles = tuple(int(n) for n in (num_free_tiles or ()))

    def place(self, ctx: KernelContext, dims, pdim, dt, name, bytes_pp) -> Tensor:
        self.base_addr = traced_once(ctx, self.base_addr)
        if self.base_partition != 0:
            fail("nkisim_direct_alloc", detail=f"base_partition must be 0 (got {self.base_partition})")
        if ctx.direct_alloc is False:
            fail("nkisim_direct_alloc", detail="automatic (nl.sbuf) and direct (ncc.sbuf.mod_alloc) allocation "
                  "cannot be mixed in one kernel")
        ctx.direct_alloc = True
        arena = _sbuf_arena(ctx)
        nblocks = 1
        for d in dims[:pdim]:
            nblocks *= d
        tile_bytes = bytes_pp // max(nblocks, 1)
        wrap = self.num_free_tiles[0] if self.num_free_tiles and pdim == 1 else 0
        used_blocks = min(nblocks, wrap) if wrap else nblocks
        end = self.base_addr + used_blocks * tile_bytes
        if self.base_addr < 0 or end > ctx.limits.sbuf_usable_bytes:
            detail = (f"tensor '{name or 'tile'}' at base_addr {self.base_addr} needs bytes [{self.base_addr}, {end}) "
                      f"per partition, beyond the {ctx.limits.sbuf_usable_bytes} usable")
            # nki.simulate_kernel does not check capacity (rules.NKICapacityWarning): past the usable bytes but
            # inside the physical partition it warns; memory that does not exist is still an error
            if ctx.mem.simulate and self.base_addr >= 0 and end <= ctx.limits.sbuf_bytes_per_partition:
                ctx.mem.overflows.append(message("nkisim_direct_alloc", detail=detail))
            else:
                fail("nkisim_direct_alloc", detail=detail)
        parts = dims[pdim]
        raw = arena.base[:parts, self.base_addr:end]
        free_shape = dims[pdim + 1:]
        phys = raw.view(dt).reshape((parts, used_blocks) + free_shape) if pdim == 1 else \
            raw.view(dt).reshape((parts,) + dims[:pdim] + free_shape)
        view = np.moveaxis(phys, 0, pdim) if pdim else phys
        alloc = Allocation(Buf.SBUF, arena.base, arena.phys, None, name, bytes_pp, None)
        alloc.addr = base_addr(arena)
        alloc.row_bytes = arena.row_bytes
        if wrap and nblocks > wrap:
            alloc.block_mod = wrap
            return ctx.tensor_type(alloc, view, pdim, shape=dims)
        return ctx.tensor_type(alloc, view, pdim)


def _arena(ctx: KernelContext, buf: Buf, row_bytes: int) -> Allocation:
    """The kernel's byte arena of one on-chip memory (every partition, ``row_bytes`` per partition), NaN-poisoned."""
    base = np.full((ctx.limits.pmax, row_bytes), 0xFF, dtype=np.uint8)
    arena = Allocation(buf, base, ctx.mem.new_phys(), None, f"{buf.name.lower()}_arena", 0, None)
    arena.row_bytes = row_bytes
    return arena


def _sbuf_arena(ctx: KernelContext) -> Allocation:
    if ctx.sbuf_arena is None:
        ctx.sbuf_arena = _arena(ctx, Buf.SBUF, ctx.limits.sbuf_bytes_per_partition)
    return ctx.sbuf_arena


class PsumModAlloc:
    """Direct PSUM placement: block i of the tensor lands in bank base_bank + (i % num_bank_tiles) at byte
    base_addr of the bank, so blocks beyond num_bank_tiles alias earlier ones as on hardware (AWS's allocated
    fused RMSNorm+QKV puts 16 transposed tiles in one bank this way)."""

    def __init__(self, base_bank: int, base_addr: int, num_bank_tiles) -> None:
        self.base_bank = int(base_bank)
        self.base_addr = int(base_addr)
        self.num_bank_tiles = tuple(int(n) for n in (num_bank_tiles or ()))

    def place(self, ctx: KernelContext, dims, pdim, dt, name, bytes_pp) -> Tensor:
        self.base_bank, self.base_addr = traced_once(ctx, (self.base_bank, self.base_addr))
        lim = ctx.limits
        bank = lim.psum_bank_bytes
        nbanks = lim.psum_bytes_per_partition // bank
        nblocks = 1
        for d in dims[:pdim]:
            nblocks *= d
        tile_bytes = bytes_pp // max(nblocks, 1)
        if pdim > 1 and any(0 < n < d for n, d in zip(self.num_bank_tiles, dims[:pdim])):
            # modulo wrap over several block dimensions is not a strided view: unaliased blocks (values agree for
            # kernels that do not rely on the aliasing; docs/nkisim.md)
            return _unaliased(ctx, Buf.PSUM, dims, pdim, dt, name, bytes_pp)
        wrap = self.num_bank_tiles[0] if self.num_bank_tiles and pdim == 1 else 0
        used = min(nblocks, wrap) if wrap else nblocks
        stride = -(-tile_bytes // bank) * bank
        start = self.base_bank * bank + self.base_addr
        end = start + (used - 1) * stride + tile_bytes
        if self.base_bank < 0 or self.base_addr < 0 or end > nbanks * bank:
            fail("nkisim_direct_alloc", detail=f"PSUM tensor '{name or 'tile'}' at bank {self.base_bank} + "
                  f"{self.base_addr} B needs bytes [{start}, {end}) per partition, beyond the {nbanks} banks of "
                  f"{bank} B")
        arena = _psum_arena(ctx)
        parts = dims[pdim]
        raw = arena.base[:parts]
        blocks = np.lib.stride_tricks.as_strided(raw[:, start:], shape=(parts, used, tile_bytes),
                                                  strides=(raw.strides[0], stride, 1))
        free_shape = dims[pdim + 1:]
        phys = blocks.view(dt).reshape((parts, used) + free_shape)
        if pdim == 0:
            view = phys.reshape((parts,) + free_shape)
        else:
            view = np.moveaxis(phys.reshape((parts,) + (tuple(dims[:pdim]) if not wrap else (used,)) + free_shape),
                                0, pdim)
        typed = arena.base.view(dt)
        alloc = Allocation(Buf.PSUM, typed, arena.phys, None, name, bytes_pp, None)
        alloc.addr = base_addr(arena)
        alloc.row_bytes = arena.row_bytes
        if ctx.full:  # accumulation-group flags, shared by the tensors of one dtype placed in the arena
            flags = ctx.psum_arena_acc.get(dt)
            if flags is None:
                flags = ctx.psum_arena_acc[dt] = np.zeros(typed.shape, dtype=bool)
            alloc.acc = flags
            _fresh_groups(ctx, parts, [start + b * stride for b in range(used)], tile_bytes)
        if wrap and nblocks > wrap:
            alloc.block_mod = wrap
            return ctx.tensor_type(alloc, view, pdim, shape=dims)
        return ctx.tensor_type(alloc, view, pdim)


def _unaliased(ctx: KernelContext, kind, dims, pdim, dt, name, bytes_pp) -> Tensor:
    """Storage of its own for a directly allocated tensor whose placement nkisim cannot express as a view.

    Its blocks then neither alias other placements nor share their buffer's hazards, as they would on hardware,
    so the trace records how many such tensors the kernel made (``meta["unaliased_placements"]``): the grader
    gives such a timing no credit (grader/plausibility.py; grading security, G7)."""
    meta = ctx.trace.meta
    meta["unaliased_placements"] = int(meta.get("unaliased_placements", 0)) + 1

    base, view = make_storage(tuple(dims), pdim, dt, None, not ctx.full)
    alloc = Allocation(kind, base, ctx.mem.new_phys(), None, name, bytes_pp, None)
    if kind == Buf.PSUM and ctx.full:
        alloc.acc = np.zeros(base.shape, dtype=bool)
    return ctx.tensor_type(alloc, view, pdim, off=0)


class CallbackAlloc:
    """``ncc.sbuf.alloc(func)`` / ``ncc.psum.alloc(func)``: ``func(block_idx, pdim_size, fdim_bytes)`` places each
    logical block ((start_partition, byte_addr) for SBUF, (bank, start_partition, byte_addr) for PSUM).  Placements
    affine in the block index (the usual case: fixed strides, banks per interleave group) become a view of the
    arena, aliasing like hardware; any other placement gets storage of its own."""

    def __init__(self, func, kind) -> None:
        self.func = func
        self.kind = kind

    def _call(self, idx, pdim_size, fdim_size):
        # AWS's allocated attention passes functools.partial(f, bank_map=...) with f(bank_map, idx, pdim_size,
        # fdim_size): the compiler calls by keyword; plain lambdas with other parameter names get positions
        try:
            return self.func(idx=idx, pdim_size=pdim_size, fdim_size=fdim_size)
        except TypeError:
            return self.func(idx, pdim_size, fdim_size)

    def place(self, ctx: KernelContext, dims, pdim, dt, name, bytes_pp) -> Tensor:
        import itertools

        psum_kind = self.kind == Buf.PSUM
        lim = ctx.limits
        block_dims = tuple(dims[:pdim])
        parts = dims[pdim]
        nblocks = 1
        for d in block_dims:
            nblocks *= d
        tile_bytes = bytes_pp // max(nblocks, 1)
        addrs = {}
        for idx in itertools.product(*(range(d) for d in block_dims)):
            got = tuple(int(v) for v in self._call(idx, parts, tile_bytes))
            if ctx.stream is not None:  # the program is being recorded: the replay takes these places (nkisim.stream)
                ctx.stream.placed(self, idx, got)
            if psum_kind:
                if len(got) != 3:
                    raise ValueError(f"ncc.psum.alloc: the placement function must return (bank, start_partition, "
                                     f"byte_addr), got {got!r} for block {idx}")
                bank, start_p, addr = got
                addr += bank * lim.psum_bank_bytes
            else:
                if len(got) != 2:
                    raise ValueError(f"ncc.sbuf.alloc: the placement function must return (start_partition, "
                                     f"byte_addr), got {got!r} for block {idx}")
                start_p, addr = got
            if start_p != 0:
                fail("nkisim_direct_alloc", detail=f"start_partition must be 0 (got {start_p} for block {idx})")
            addrs[idx] = addr
        if not psum_kind:
            if ctx.direct_alloc is False:
                fail("nkisim_direct_alloc", detail="automatic (nl.sbuf) and direct (ncc.sbuf.alloc) allocation "
                      "cannot be mixed in one kernel")
            ctx.direct_alloc = True
        row = lim.psum_bytes_per_partition if psum_kind else lim.sbuf_usable_bytes
        lo, hi = min(addrs.values()), max(addrs.values()) + tile_bytes
        if lo < 0 or hi > row:
            detail = f"tensor '{name or 'tile'}' placed at bytes [{lo}, {hi}) per partition, beyond the {row} available"
            if ctx.mem.simulate and not psum_kind and lo >= 0 and hi <= lim.sbuf_bytes_per_partition:
                ctx.mem.overflows.append(message("nkisim_direct_alloc", detail=detail))  # as in mod_alloc
            else:
                fail("nkisim_direct_alloc", detail=detail)
        zero = (0,) * pdim
        steps = []
        for d in range(pdim):
            unit = tuple(1 if k == d else 0 for k in range(pdim))
            steps.append(addrs[unit] - addrs[zero] if block_dims[d] > 1 else 0)
        affine = all(addrs[idx] == addrs[zero] + sum(i * st for i, st in zip(idx, steps)) for idx in addrs)
        if not affine:
            return _unaliased(ctx, self.kind, dims, pdim, dt, name, bytes_pp)
        arena = _psum_arena(ctx) if psum_kind else _sbuf_arena(ctx)
        raw = arena.base[:parts]
        blocks = np.lib.stride_tricks.as_strided(raw[:, addrs[zero]:], shape=(parts,) + block_dims + (tile_bytes,),
                                                  strides=(raw.strides[0],) + tuple(steps) + (1,))
        phys = blocks.view(dt).reshape((parts,) + block_dims + tuple(dims[pdim + 1:]))
        view = np.moveaxis(phys, 0, pdim) if pdim else phys
        typed = arena.base.view(dt) if psum_kind else arena.base
        alloc = Allocation(self.kind, typed, arena.phys, None, name, bytes_pp, None)
        alloc.addr = base_addr(arena)
        alloc.row_bytes = arena.row_bytes
        if psum_kind and ctx.full:
            flags = ctx.psum_arena_acc.get(dt)
            if flags is None:
                flags = ctx.psum_arena_acc[dt] = np.zeros(typed.shape, dtype=bool)
            alloc.acc = flags
            _fresh_groups(ctx, parts, list(addrs.values()), tile_bytes)
        return ctx.tensor_type(alloc, view, pdim)


def _fresh_groups(ctx: KernelContext, parts: int, starts: list[int], tile_bytes: int, p0: int = 0) -> None:
    """A newly allocated PSUM tensor starts new accumulation groups: its first nc_matmul overwrites, as for an
    automatically allocated one, even where an earlier tensor (e.g. the previous iteration's) used the same bank
    (AWS's allocated SD attention re-declares ``attn_res_psum`` per q tile and accumulates with ``+=``)."""
    for dt, flags in ctx.psum_arena_acc.items():
        isz = np.dtype(dt).itemsize
        for a in starts:
            flags[p0:p0 + parts, a // isz:-(-(a + tile_bytes) // isz)] = False


def _psum_arena(ctx: KernelContext) -> Allocation:
    if ctx.psum_arena is None:
        ctx.psum_arena = _arena(ctx, Buf.PSUM, ctx.limits.psum_bytes_per_partition)
    return ctx.psum_arena


# ---- explicit placement of the current API: nl.ndarray(..., address=(partition_offset, free_offset)) ----------
# Sources (aws-neuron-sdk @HEAD): nki/api/nki/language/__init__.py ``def ndarray`` ("address: optional memory address
# (partition_offset, free_offset)"); nki/migration/index.rst "Improved allocation API" (the partition offset is a
# physical partition lane; PSUM is 128 partitions x 16 KB in 8 banks of 2 KB; "The allocation for PSUM tensors must
# start at the beginning of each bank -- the compiler will throw an error otherwise").
#
# free_offset is a BYTE offset within each partition here.  The migration guide's prose says "element offset" and
# its first example comment "offset by 128 elements of your data type", but every worked example with a size in it
# counts bytes: its PSUM bank example (``bank_id * PSUM_BANK_SIZE`` with PSUM_BANK_SIZE = 2048, the bank's bytes, for
# a bfloat16 tensor), its NKI 0.1 translation ("lists of virtual byte addresses", ``... * n_k * 2`` for bfloat16),
# nki/library/kernel-utils/allocator.rst (``addr += 512 * 2  # 1024`` after a (128, 512) bfloat16 tensor), AWS's
# nki-library SbufManager (src/nkilib_src/nkilib/core/utils/allocator.py: ``address=(base_partition,
# self.stack_curr_addr)`` with the stack address advanced by bytes per partition) and its kernels ("Offset by one PSUM
# bank: psum_fmax elements * 4 bytes per float32"), nki/get-started/about/data-representation-overview.rst (the free
# offset "1024 bytes from the beginning of each partition") and nl.tile_size.sbuf_min_align / psum_min_align
# ("Minimum byte alignment requirement for ... free dimension address").


def placed(buffer, address):
    """The buffer spec of ``nl.ndarray(..., buffer=buffer, address=address)``: ``buffer`` with an
    :class:`AddressPlacement` (rules ``nkisim_address_form``, ``nkisim_address_negative``, ``nkisim_address_hbm``)."""
    from nkisim.core.buffers import BufferSpec

    try:
        pair = tuple(address)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                 for v in pair):
        fail("nkisim_address_form", got=repr(address))
    p0, f0 = int(pair[0]), int(pair[1])
    if p0 < 0 or f0 < 0:
        fail("nkisim_address_negative", p=p0, f=f0)
    kind = getattr(buffer, "kind", None)
    if kind not in (Buf.SBUF, Buf.PSUM):
        fail("nkisim_address_hbm", buffer=getattr(buffer, "name", repr(buffer)), p=p0, f=f0)
    return BufferSpec(kind, buffer.name, AddressPlacement(kind, p0, f0))


class AddressPlacement:
    """A tensor the kernel placed at partitions [partition_offset, partition_offset + P) and bytes [free_offset,
    free_offset + bytes per partition) of SBUF or PSUM: a view of the kernel's arena of that memory, as the legacy
    placements are, so overlapping placements alias values and hazards (one physical buffer id per arena) and the
    operands' regions carry absolute partitions and byte offsets.  The bytes it covers stay reserved against
    automatic allocation for the rest of the kernel (``MemoryTracker.reserve``)."""

    def __init__(self, kind: Buf, partition_offset: int, free_offset: int) -> None:
        self.kind = kind
        self.p0 = partition_offset
        self.f0 = free_offset

    def place(self, ctx: KernelContext, dims, pdim, dt, name, bytes_pp) -> Tensor:
        lim = ctx.limits
        p0, f0 = self.p0, self.f0
        parts = dims[pdim]
        label = name or "tile"
        if p0 + parts > lim.pmax:
            fail("nkisim_address_partitions", name=label, p=p0, parts=parts, limit=lim.pmax)
        end = f0 + bytes_pp
        if self.kind == Buf.PSUM:
            bank = lim.psum_bank_bytes
            if f0 % bank:
                fail("nkisim_address_psum_bank", name=label, f=f0, bank=bank, lo=f0 // bank * bank,
                     hi=-(-f0 // bank) * bank)
            if end > lim.psum_bytes_per_partition:
                fail("nkisim_address_psum_range", name=label, f=f0, end=end, nbytes=bytes_pp,
                     limit=lim.psum_bytes_per_partition, banks=lim.psum_banks, bank=bank)
            arena = _psum_arena(ctx)
        else:
            if end > lim.sbuf_usable_bytes:
                text = message("nkisim_address_sbuf_range", name=label, f=f0, end=end, nbytes=bytes_pp,
                               target=ctx.mem.target, limit=lim.sbuf_usable_bytes)
                # nki.simulate_kernel does not check capacity (rules.NKICapacityWarning): past the usable bytes but
                # inside the physical partition it warns, as for the legacy mod_alloc
                if ctx.mem.simulate and end <= lim.sbuf_bytes_per_partition:
                    ctx.mem.overflows.append(text)
                else:
                    fail("nkisim_address_sbuf_range", name=label, f=f0, end=end, nbytes=bytes_pp,
                         target=ctx.mem.target, limit=lim.sbuf_usable_bytes)
            arena = _sbuf_arena(ctx)
        raw = arena.base[p0:p0 + parts, f0:end]
        view = raw.view(dt).reshape((parts,) + tuple(dims[pdim + 1:]))
        if pdim:  # the current API has no block dimensions (partition axis first); kept general for the core
            view = np.moveaxis(view, 0, pdim)
        if self.kind == Buf.PSUM:
            typed = arena.base.view(dt)
            alloc = Allocation(Buf.PSUM, typed, arena.phys, None, name, bytes_pp, None)
            if ctx.full:  # accumulation-group flags shared by the tensors of one dtype placed in the arena
                flags = ctx.psum_arena_acc.get(dt)
                if flags is None:
                    flags = ctx.psum_arena_acc[dt] = np.zeros(typed.shape, dtype=bool)
                alloc.acc = flags
                _fresh_groups(ctx, parts, [f0], bytes_pp, p0)
                alloc.fresh = (p0, parts, f0, bytes_pp)  # and again at its first matmul (access.start_tensor_groups)
        else:
            alloc = Allocation(Buf.SBUF, arena.base, arena.phys, None, name, bytes_pp, None)
        alloc.addr = base_addr(arena)
        alloc.row_bytes = arena.row_bytes
        alloc.placed = (p0, parts, f0)
        ctx.mem.reserve(self.kind, f0, end)
        return ctx.tensor_type(alloc, view, pdim)


def placed_address(t: Tensor) -> tuple[int, int] | None:
    """(first partition, byte offset in each partition) of a view of a placed tensor in the running kernel's arena;
    None for tensors the compiler places (and outside a kernel run)."""
    from nkisim.core.context import active

    ctx = active()
    if ctx is None or t.kind == Buf.HBM:
        return None
    arena = ctx.sbuf_arena if t.kind == Buf.SBUF else ctx.psum_arena
    region = operand(t).region
    if arena is None or region.phys != arena.phys:
        return None
    return region.p_lo, region.b_lo
