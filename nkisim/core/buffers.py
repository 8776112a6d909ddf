"""Memory spaces and tensor creation: :class:`BufferSpec` (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ``nl.shared_hbm``,
direct placements) and :func:`allocate`, which every front end's ``nl.ndarray`` / ``nl.zeros`` and every fresh
instruction result go through.

Allocation gives each on-chip tile a physical buffer id (reused by later allocations at the same site once the tile
is dead), checks the partition limit and charges SBUF/PSUM capacity by liveness (``nkisim.core.memory``); a buffer
spec with a ``direct`` placement (``nkisim.core.placement``) places the tensor itself.  Tensors are created as the
running front end's tensor class (``KernelContext.tensor_type``).
"""

from __future__ import annotations

import os
import weakref

import numpy as np

from nkisim.core import dtypes
from nkisim.core.access import fresh_operand, uniform_flags
from nkisim.core.context import KernelContext, current
from nkisim.core.instr import B_HBM, B_PSUM, B_SBUF, Buf
from nkisim.core.memory import Allocation, make_storage
from nkisim.core.rules import applies, fail
from nkisim.core.sealed import Sealed
from nkisim.core.tensor import Tensor, parse_shape


class BufferSpec(metaclass=Sealed):
    """A memory space argument (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm, ncc.sbuf.mod_alloc(...))."""

    __slots__ = ("kind", "name", "direct")

    def __init__(self, kind: Buf, name: str, direct=None) -> None:
        init = object.__setattr__
        init(self, "kind", kind)
        init(self, "name", name)
        init(self, "direct", direct)

    def __setattr__(self, name: str, value) -> None:
        # immutable: nl.sbuf & co. are shared by every kernel of the process, and allocate() calls
        # ``direct.place(ctx, ...)`` -- a placement planted by kernel code would be handed the running kernel
        raise AttributeError(f"nl.{self.name} is immutable (cannot set '{name}')")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"nl.{self.name} is immutable (cannot delete '{name}')")

    def __repr__(self) -> str:
        return f"nl.{self.name}"


def allocate(shape, dtype, buffer: BufferSpec | None, *, name: str = "", fill=None, provisional: bool = False,
             ctx: KernelContext | None = None, site=None, hooked: bool = False, poison: bool = True) -> Tensor:
    """Create a tensor in ``buffer``; on-chip tensors are checked against the partition limit and capacity.
    ``poison=False``: the caller writes every element before anything can read one (``nl.zeros``' memset), so the
    poison fill of a fresh tile would be overwritten unseen."""
    if ctx is None:
        ctx = current("nl.ndarray")
        ctx.settle()
    if ctx.alloc_hook is not None and not hooked:
        # a dynamic loop body (core.ops.registers): allocated once when recorded, the same tensor in every iteration
        return ctx.alloc_hook(lambda: allocate(shape, dtype, buffer, name=name, fill=fill, provisional=provisional,
                                               ctx=ctx, site=site, hooked=True, poison=poison))
    if buffer is None:
        buffer = SBUF_SPEC
    elif buffer.__class__ is not BufferSpec and not isinstance(buffer, BufferSpec):
        raise TypeError(f"buffer must be nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or nl.private_hbm, not {buffer!r}")
    dims, pdim = parse_shape(shape)
    if site is None:
        site = ctx.site
    mem = ctx.mem
    geo = mem.geometry.get((dims, pdim, id(dtype), buffer, provisional))
    if geo is None or geo[0] is not dtype:
        geo = _geometry(ctx, dims, pdim, dtype, buffer, provisional, name)
        if geo is None:  # HBM or a direct placement
            return _allocate_other(ctx, dims, pdim, dtype, buffer, name, fill, site, provisional)
    _, dt, bytes_pp, nblocks, kept, pool, operands = geo
    kind = buffer.kind
    if kind == B_SBUF and not provisional:
        if ctx.direct_alloc is True:
            fail("nkisim_direct_alloc", detail="automatic (nl.sbuf) and direct (ncc.sbuf.mod_alloc) allocation "
                 "cannot be mixed in one kernel")
        ctx.direct_alloc = False
    # full mode: the poison fill is left to the first access to the tile's values (core.access.poison_now), which
    # makes it unless that access writes every element: a raw tile
    raw = False
    if kept is not None and fill is None:
        base, view = kept  # a timing run: geometry only (_geometry)
    elif pool and fill is None and ctx.full:
        # full mode: the storage of a dead tile of this geometry that nothing else holds (MemoryTracker.release),
        # raw as a new one is (a provisional result is written in full at once, as below)
        base = pool.pop()
        raw = poison and not provisional
        view = np.moveaxis(base, 0, pdim) if pdim else base
    else:
        # A provisional result is written in full right after allocation (ops.finish poisons it first when a mask
        # leaves elements unwritten), so it skips the poison fill.
        raw = fill is None and ctx.full and poison and not provisional
        base, view = make_storage(dims, pdim, dt, fill, raw or not ctx.full or provisional or not poison)
    if nblocks > 1 and kind == B_SBUF and not provisional:
        # block dimensions are logical tiles, not physical ones (nki.compiler.sbuf.alloc; NKI Block Dimension
        # Migration Guide): charge one block now, check per-block liveness at the end of the run (core.blocks)
        block_pp = bytes_pp // nblocks
        alloc = Allocation(kind, base, mem.phys_for(site, kind, block_pp), site, name, bytes_pp, mem)
        alloc.block_bytes = block_pp
        alloc.raw = raw
        mem.track_blocks(alloc, nblocks)
        mem.charge(alloc)
        return ctx.tensor_type(alloc, view, pdim, None, None, False, 0)
    alloc = Allocation(kind, base, mem.phys_for(site, kind, bytes_pp, provisional), site, name, bytes_pp, mem)
    alloc.pool = pool
    alloc.raw = raw
    if provisional:
        alloc.provisional = True
    if nblocks > 1:
        alloc.block_bytes = bytes_pp // nblocks  # PSUM: each block is a tile of its own, within one bank
    if not provisional and mem.charge(alloc):
        ctx.spill(alloc)
    if kind == B_PSUM and not provisional:
        # per-element "written" flags of the matmul accumulation groups; provisional PSUM results (acc None) were
        # written by the instruction that produced them, i.e. all flags set.  Kept in both modes: the accumulate
        # rules read them, and a rule must not depend on whether values are computed (grading security, S4)
        alloc.acc = uniform_flags(base.shape, False)
    t = ctx.tensor_type(alloc, view, pdim, None, None, False, 0)
    fresh_operand(t, operands)
    return t


def _geometry(ctx: KernelContext, dims: tuple[int, ...], pdim: int, dtype, buffer: BufferSpec, provisional: bool,
              name: str) -> tuple | None:
    """What an automatically allocated on-chip tensor of this shape, dtype and memory is, checked once per run:
    ``(dtype as given, storage dtype, bytes per partition, logical blocks, timing storage, full-mode storage pool,
    {physical buffer id: the Operand of a tile's own view})``, cached in ``MemoryTracker.geometry`` (the era and
    limits are the run's; only a geometry that passed its checks is kept, so a refused one raises at every
    allocation).  None for HBM and direct placements,
    which take the general path (``_allocate_other``).

    In a timing run no value is ever written or read, so every tile of one geometry shares one read-only array:
    a view of it gives the tile's shape, strides and byte offsets, which is all the operands and rules use (an
    allocation then costs no NumPy storage; a write by mistake raises instead of going unnoticed).  The run's mode
    decides, not ``ctx.full``: a full run's dynamic-loop body is allocated while it runs dry
    (``core.ops.registers._dry_call``), and its tiles hold values once it executes."""
    dt = dtypes.to_dtype(dtype if dtype is not None else np.float32)
    kind = buffer.kind
    if kind == B_HBM or buffer.direct is not None:
        return None
    bytes_pp = _on_chip_bytes(ctx, dims, pdim, dt, kind, name, provisional)
    nblocks = 1
    for d in dims[:pdim]:
        nblocks *= d
    kept = pool = None
    if ctx.mem.values:  # a full run (not ctx.full: see above)
        pool = []
    else:
        base = make_storage(dims, pdim, dt, None, True)[0]
        base.flags.writeable = False
        kept = (base, np.moveaxis(base, 0, pdim) if pdim else base)
    geo = (dtype, dt, bytes_pp, nblocks, kept, pool, {})
    cache = ctx.mem.geometry
    if len(cache) >= 4096:  # shapes computed at run time: keep the cache bounded
        cache.clear()
    cache[(dims, pdim, id(dtype), buffer, provisional)] = geo  # the entry holds ``dtype``: its id stays its own
    return geo


def _allocate_other(ctx: KernelContext, dims, pdim: int, dtype, buffer: BufferSpec, name: str, fill, site,
                    provisional: bool) -> Tensor:
    """HBM tensors and direct placements (``buffer.direct``)."""
    dt = dtypes.to_dtype(dtype if dtype is not None else np.float32)
    kind = buffer.kind
    if kind == B_HBM:
        if fill is not None and not provisional and applies("err_hbm_tensor_with_init_value_not_supported",
                                                            ctx.era):
            fail("err_hbm_tensor_with_init_value_not_supported")
        if buffer.name == "shared_hbm" and site is not None and ctx.kernel_code is not None \
                and site[0] is not ctx.kernel_code and applies("err_shared_hbm_must_in_kernel_level", ctx.era):
            fail("err_shared_hbm_must_in_kernel_level")
        if buffer.name == "shared_hbm" and ctx.shared_hbm is not None:
            again = _shared_again(ctx, dims, dt, name)
            if again is not None:
                return again
        empty = _file_backed(ctx) if ctx.hbm_dir is not None and ctx.full and fill is None else None
        base, view = hbm_storage(ctx, dims, dt, name,
                                 lambda: make_storage(dims, 0, dt, fill, not ctx.full, empty))
        alloc = Allocation(B_HBM, base, ctx.mem.new_phys(), None, name or "hbm", 0, None)
        alloc.space = buffer.name
        t = ctx.tensor_type(alloc, view, 0, off=0)
        if buffer.name == "shared_hbm" and ctx.grid:
            ctx.shared_first.append(t)
        return t
    bytes_pp = _on_chip_bytes(ctx, dims, pdim, dt, kind, name, provisional)
    return buffer.direct.place(ctx, dims, pdim, dt, name, bytes_pp)


def _on_chip_bytes(ctx: KernelContext, dims, pdim: int, dt: np.dtype, kind: int, name: str,
                   provisional: bool) -> int:
    """The bytes per partition of an on-chip tile of ``dims``, after the rules every on-chip allocation obeys
    (partitions, PSUM tile size): one place for the cached geometry path and the direct placements."""
    if not dims:
        raise ValueError("on-chip tensors need at least one dimension (the partition dimension)")
    parts = dims[pdim]
    if parts > ctx.limits.pmax:
        fail("err_num_partition_exceed_arch_limit", n=parts, limit=ctx.limits.pmax)
    bytes_pp = dt.itemsize
    for i, d in enumerate(dims):
        if i != pdim:
            bytes_pp *= d
    if kind == B_PSUM and not provisional and applies("nkisim_psum_tile_fmax", ctx.era):
        per_tile = bytes_pp
        for d in dims[:pdim]:
            per_tile //= max(d, 1)  # block dimensions hold separate tiles
        bank = ctx.limits.psum_bank_bytes
        if per_tile > bank:
            fail("nkisim_psum_tile_fmax", name=name or "tile", shape=list(dims), n=per_tile // dt.itemsize,
                 nbytes=per_tile, limit=bank // 4, bank=bank)
    return bytes_pp


# HBM tensors of at least this many bytes get a file of their own under run_kernel(hbm_dir=); smaller ones are not
# worth a file (creating and mapping one costs tens of microseconds)
HBM_FILE_BYTES = 1 << 20
# at most this many bytes of a run's HBM tensors are files (a batch-4 224x224 conv's output is 205 MB); past it,
# memory as without hbm_dir, so a run cannot turn its memory limit into as much disk space and write-back
HBM_FILES_BUDGET = 1 << 30
_HBM_FILES: dict[int, tuple] = {}  # id(storage array) -> (weak reference to it, its .npy file)


def _file_backed(ctx: KernelContext):
    """``make_storage``'s allocator for a run's HBM tensors under ``run_kernel(hbm_dir=)``: a tensor of a NumPy
    dtype and at least HBM_FILE_BYTES is the data of a new ``.npy`` file in that directory, mapped shared (a plain
    ndarray over ``np.lib.format.open_memmap``'s map), so that a caller writing the run's outputs to files there
    (the grader's replays, grader/child.py) renames the file instead of copying 205 MB (a batch-4 224x224 output)
    into fresh page cache; the values, the poison fill and every check are the same as in memory."""
    def empty(shape, dtype):
        empty.ready = False  # True: the array is a prepared file's, poisoned already (make_storage skips the fill)
        dt = np.dtype(dtype)
        nbytes = dt.itemsize
        for d in shape:
            nbytes *= int(d)
        # ml_dtypes (bfloat16, fp8) have no .npy header; a file past the process's file size limit is refused
        if dt.isbuiltin != 1 or nbytes < HBM_FILE_BYTES or nbytes + 4096 > _file_size_limit() \
                or ctx.hbm_file_bytes + nbytes > HBM_FILES_BUDGET:
            return np.empty(shape, dtype=dt)
        path = os.path.join(ctx.hbm_dir, f"hbm-{ctx.hbm_files}.npy")
        while os.path.lexists(path):  # the directory's files are never overwritten (an output of an earlier run)
            ctx.hbm_files += 1
            path = os.path.join(ctx.hbm_dir, f"hbm-{ctx.hbm_files}.npy")
        ctx.hbm_files += 1
        adopted = _adopt_ready(ctx.hbm_dir, path, tuple(int(d) for d in shape), dt)
        empty.ready = adopted is not None
        if adopted is not None:
            ctx.hbm_file_bytes += nbytes
            _HBM_FILES[id(adopted)] = (weakref.ref(adopted, lambda _, key=id(adopted): _HBM_FILES.pop(key, None)),
                                       path)
            return adopted
        try:
            mapped = np.lib.format.open_memmap(path, mode="w+", dtype=dt, shape=tuple(shape))
            # the file's blocks now: a full disk is an OSError here (memory is used instead), never a SIGBUS when
            # the kernel's first write reaches a page of a sparse file
            fd = os.open(path, os.O_RDWR)
            try:
                os.posix_fallocate(fd, mapped.offset, nbytes)
            finally:
                os.close(fd)
        except OSError:
            try:
                os.unlink(path)
            except OSError:
                pass
            return np.empty(shape, dtype=dt)
        arr = mapped.view(np.ndarray)
        ctx.hbm_file_bytes += nbytes
        _HBM_FILES[id(arr)] = (weakref.ref(arr, lambda _, key=id(arr): _HBM_FILES.pop(key, None)), path)
        return arr

    return empty


# A caller may prepare, in run_kernel(hbm_dir=), a poisoned file for an HBM tensor it knows will be made (the
# grader: each grouped call's output, made on an idle core before the group's process starts); the first tensor of
# that shape and dtype that gets a file takes it instead of a new one
READY_PREFIX = "ready-"
# madvise(MADV_POPULATE_WRITE) (Linux 5.14): maps a prepared file's pages writable in one call instead of a fault
# per 4 KiB page at the kernel's first store (0.05-0.07 against 0.07-0.09 CPU s per 200 MB of tmpfs here)
_MADV_POPULATE_WRITE = 23


def ready_file_name(shape, dtype) -> str:
    """The name a prepared file for an HBM tensor of ``shape`` and ``dtype`` has in ``run_kernel(hbm_dir=)``."""
    return f"{READY_PREFIX}{np.dtype(dtype).str.lstrip('<>=|')}-{'x'.join(str(int(d)) for d in shape)}.npy"


def write_ready_file(path: str, shape, dtype) -> None:
    """Make ``path``: a ``.npy`` file of ``shape`` and ``dtype`` whose every element is the poison of a fresh HBM
    tensor (``dtypes.poison_value``, as ``make_storage`` fills one), its blocks allocated (a full disk is an
    OSError here).  Written under a temporary name and renamed: a file with ``path``'s name is complete.  For a
    caller preparing a run's files (:func:`ready_file_name`); the run then skips the fill, so the caller vouches
    for the contents: only a process that wrote the file itself should name it as ready."""
    dt = np.dtype(dtype)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        mapped = np.lib.format.open_memmap(tmp, mode="w+", dtype=dt, shape=tuple(int(d) for d in shape))
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.posix_fallocate(fd, mapped.offset, mapped.nbytes)
        finally:
            os.close(fd)
        mapped.view(np.ndarray).fill(dtypes.poison_value(dt))
        del mapped
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _adopt_ready(hbm_dir: str, path: str, shape: tuple, dt: np.dtype) -> np.ndarray | None:
    """A prepared file's array for a new HBM tensor of ``shape`` and ``dt``, moved to ``path`` (the name the
    tensor's own file would have had), or None (there is none, or it is not exactly such an array)."""
    ready = os.path.join(hbm_dir, ready_file_name(shape, dt))
    try:
        os.rename(ready, path)  # taken: no later tensor can take it too
    except OSError:
        return None
    try:
        mapped = np.lib.format.open_memmap(path, mode="r+")
        if mapped.shape != shape or mapped.dtype != dt or not mapped.flags.c_contiguous:
            raise ValueError(f"{ready} holds a {mapped.dtype} {mapped.shape} array")
    except (OSError, ValueError):
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    try:
        mapped._mmap.madvise(_MADV_POPULATE_WRITE)
    except (AttributeError, OSError, ValueError):  # an older kernel: the pages are mapped as they are written
        pass
    return mapped.view(np.ndarray)


def _file_size_limit() -> float:
    """RLIMIT_FSIZE (the grader's sandbox sets one: 1 GiB per file), infinite where there is none."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return float("inf") if soft == resource.RLIM_INFINITY else soft


def hbm_file(arr: np.ndarray) -> str | None:
    """The ``.npy`` file whose data ``arr`` is (the whole of it), when ``run_kernel(hbm_dir=)`` made it so."""
    hit = _HBM_FILES.get(id(arr))
    return hit[1] if hit is not None and hit[0]() is arr else None


def hbm_storage(ctx: KernelContext, dims, dt: np.dtype, name: str, make):
    """``make()``, the host array behind an HBM tensor, once the tensor is known to fit in the device memory one
    NeuronCore addresses (``TargetLimits.hbm_bytes_per_core``, rule nkisim_hbm_capacity).

    Checked once per HBM tensor (kernel arguments, placeholders and nl.ndarray/nl.zeros in HBM, in both front
    ends and both modes), never per instruction.  Without it a kernel asking for a 128 TiB tensor got NumPy's bare
    "Unable to allocate 128. TiB" instead of an error naming the tensor and the device's limit; a legal tensor the
    host cannot hold gets a MemoryError that says so (it is the emulating machine's limit, not the kernel's)."""
    nbytes = dt.itemsize
    for d in dims:
        nbytes *= int(d)  # Python ints: the product of a huge shape must not wrap
    limits = ctx.limits
    limit = limits.hbm_bytes_per_core
    if nbytes > limit:
        size = f"{nbytes / (1 << 40):.4g} TiB" if nbytes >= 1 << 40 else f"{nbytes / (1 << 30):.4g} GiB"
        fail("nkisim_hbm_capacity", name=f" '{name}'" if name else "", shape=[int(d) for d in dims], dtype=dt.name,
             nbytes=nbytes, size=size, limit=limit, limit_gib=limit >> 30, target=limits.name)
    try:
        return make()
    except MemoryError:
        label = f" '{name}'" if name else ""
        raise MemoryError(f"nkisim: this machine ran out of memory for HBM tensor{label} {[int(d) for d in dims]} "
                          f"{dt.name} ({nbytes} bytes): the tensor fits in the {limit} bytes of HBM one NeuronCore "
                          f"of {limits.name} addresses, but the emulator holds it in host memory; run on a machine "
                          "with more free memory, or with smaller shapes") from None


def _shared_again(ctx: KernelContext, dims, dt, name: str) -> Tensor | None:
    """The n-th shared_hbm tensor of a later SPMD program is the n-th of the first program (visible to all).  In
    an LNC=2 launch the cores run in lockstep (core.lockstep), so either core may get to its n-th first: None then,
    and the caller creates it for both (``shared_first`` is the list both cores' ``shared_hbm`` name)."""
    i = ctx.shared_pos
    ctx.shared_pos += 1
    if i >= len(ctx.shared_hbm) and ctx.lockstep is not None:
        return None
    if i >= len(ctx.shared_hbm):
        raise ValueError(f"SPMD program {ctx.program_ids} creates more shared_hbm tensors than program "
                         f"{(0,) * len(ctx.grid)}: every program of a launch grid must create the same ones")
    t = ctx.shared_hbm[i]
    if tuple(t.shape) != tuple(dims) or t.dtype != dt:
        raise ValueError(f"SPMD program {ctx.program_ids} creates shared_hbm tensor '{name or t.name}' "
                         f"{list(dims)} {dt.name}, but {'the other core' if ctx.lockstep is not None else 'program '}"
                         f"{'' if ctx.lockstep is not None else (0,) * len(ctx.grid)} created it as "
                         f"{list(t.shape)} {t.dtype.name}")
    return t


def wrap_host(ctx: KernelContext, value, name: str, space: str = "argument", borrow: bool = False):
    """A read-only HBM tensor holding host data (kernel arguments, nl.shared_constant); anything that is not an
    array (ints, tuples, shape-only ``nt.tensor`` placeholders in full mode raise) is returned as given.  ``space``:
    the memory space the tensor reports (NKI 0.6's shared_constant is "a tensor in shared HBM").

    ``borrow`` (kernel arguments, ``runtime.run_kernel``): a C-contiguous array already of the tensor's dtype is
    not copied; the storage is a read-only view of it (a batch-4 224x224 X is 205 MB, copied and faulted in per run
    and per member of a lockstep group).  An immutable argument is never written (every write checks
    ``immutable``, and the read-only view would raise were one missed); an argument the kernel may write gets a copy
    of its own before the kernel starts (``access.own_copy``), as does an output handed back (``runtime._to_numpy``)."""
    if getattr(value, "__nkisim_placeholder__", False):  # nt.tensor[[shape], dtype]: shape only (nki.benchmark)
        if ctx.full:
            raise TypeError(f"argument '{name}' is {value!r}, a shape-only placeholder: it has no values, so it can "
                            "only be passed to nki.benchmark (timing); pass a NumPy array to run the kernel")
        dt = dtypes.to_dtype(value.dtype)
        shape = tuple(value.shape)
        alloc = Allocation(B_HBM, hbm_storage(ctx, shape, dt, name, lambda: np.empty(shape, dtype=dt)),
                           ctx.mem.new_phys(), None, name, 0, None)
        alloc.immutable = True
        return ctx.tensor_type(alloc, alloc.base, 0, off=0)
    # a class is never an array: np.float16 / ml_dtypes.bfloat16 passed as a dtype argument have __array__ and
    # dtype attributes too
    if isinstance(value, np.ndarray) or (hasattr(value, "__array__") and hasattr(value, "dtype")
                                        and not isinstance(value, (Tensor, np.generic, type))):
        arr = np.asarray(value)
        dt = dtypes.to_dtype(arr.dtype)
        if not ctx.full:
            make = lambda: np.empty(arr.shape, dtype=dt)  # noqa: E731
        elif borrow and arr.dtype is dt and arr.flags.c_contiguous \
                and arr.flags.aligned:
            def make():
                view = arr.view()
                view.flags.writeable = False
                return view
        else:
            make = lambda: np.array(arr, dtype=dt, copy=True, order="C")  # noqa: E731
        base = hbm_storage(ctx, arr.shape, dt, name, make)
        alloc = Allocation(B_HBM, base, ctx.mem.new_phys(), None, name, 0, None)
        alloc.immutable = True
        alloc.space = space
        return ctx.tensor_type(alloc, base, 0, off=0)
    return value


def shipped_constant(ctx: KernelContext, path) -> np.ndarray:
    """The array of the ``.npy`` file named by ``nl.shared_constant(path)``.

    On Trainium the file is read when the kernel is compiled, on the compiling machine, and the constant "is
    embedded in the compiled binary and loaded to HBM at model load time" (nki.language.shared_constant, NKI 0.6:
    "a numpy array or a file path to a .npy file").  Outside grading nkisim reads it as AWS's compiler does: any
    path, absolute or relative to the working directory (AWS's nki-library top-k writes its rotation matrix under
    /tmp and passes that path), a regular file holding a NumPy array (no pickles).

    Under grading (``ctx.graded``: ``run_kernel(graded=True)``, which only the grader's child passes) every path is
    refused: a file on the grading machine is not something the submission ships, and reading one would let a
    kernel load references or planted answers as a constant (C7, docs/grading-security.md).  The flag is the
    caller's, so kernel code cannot clear it."""
    name = os.fspath(path)
    if ctx.graded:
        raise ValueError(
            f"nl.shared_constant({name!r}): graded kernels cannot read constant files (the file is read on the "
            "compiling machine, and under grading that machine is the grader's); "
            "build the constant in the kernel and pass it as a NumPy array")
    if not name.endswith(".npy") or not os.path.isfile(name):
        raise ValueError(f"nl.shared_constant({name!r}): no .npy file at that path (relative paths are read from "
                         f"the working directory, {os.getcwd()!r}, as the compiler reads them)")
    try:
        arr = np.load(name, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"nl.shared_constant({name!r}): not a NumPy array file ({exc})") from None
    return arr


SBUF_SPEC = BufferSpec(B_SBUF, "sbuf")
PSUM_SPEC = BufferSpec(B_PSUM, "psum")
HBM_SPEC = BufferSpec(B_HBM, "hbm")
