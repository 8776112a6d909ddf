"""A lockstep group's products handed to a group in another process (``core.sharing``; docs/grading.md, round 9).

The grader's 224x224 group (``part2.large``, ``bias``, ``maxpool`` and the two float32 timed calls) holds one core
for most of a grading while the other worker idles; split into two processes, each half would compute the leader's
15,984 products itself.  A :class:`Channel` lets the two halves share them instead: the first member of one group
(the *producer*'s leader) publishes every matmul it makes -- the product, the operands' descriptions (a snapshot of
their storage version, or a copy of the operand) and what the product cost -- into a shared file the trusted grader
created for these two processes only, and the other group (the *consumer*) runs a stand-in member 0
(:meth:`core.sharing.ShareGroup.remote`) whose ring entries are the producer's.  Its members then take a product
exactly as they take a sibling's in their own process: only for operands of the same dtype names, layout and bits,
checked against the published snapshot or copy (bitwise, never a hash), so the values are the ones each computes
alone, and the product's CPU seconds are charged to the member that reuses it (``borrowed``, the time guard's L9).

What crosses: products and operand snapshots, nothing else (no code, no objects: fixed binary records, checked
for bounds before use).  Both processes replay recorded streams (no student Python runs in them).  The file lives
in the grading's private scratch directory and is removed when both halves ended.

It can never deadlock: the producer writes entry ``i`` into ring slot ``i % SLOTS`` only once the consumer has
acknowledged entry ``i - SLOTS`` (its members are past it) and a snapshot slot only once no unacknowledged entry
uses it; every wait is bounded (``STALL`` seconds without progress on the other side), and a side that gives up,
ends or stops sharing says so in the header: the producer then goes on without publishing, the consumer's members
compute their own products.  A slow or absent side costs time, never a hang or a value.

Ordering: data are written before the header counter that publishes them, each side a single thread; on x86-64
(total store order) the other side sees them in that order.  On other machines :func:`supported` is False and the
grader does not link the halves.
"""

from __future__ import annotations

import mmap
import os
import platform
import struct
import time

import numpy as np

MAGIC = 0x6E6B697363683031  # "nkisch01"
SLOTS = 64  # ring entries: four hand-over windows of 16
PROD_BYTES = 128 * 512 * 4  # the largest PSUM matmul result, fp32
OP_BYTES = 128 * 512 * 4  # a copied operand (the moving window's largest fp32 extent)
SNAPS = 8
SNAP_BYTES = 8 << 20  # a storage version larger than this is described by copies of its operands
MAXDIM = 6
HEADER = 4096
META = 1024
DATA0 = HEADER + SLOTS * META
SLOT_BYTES = PROD_BYTES + 2 * OP_BYTES
SNAP0 = DATA0 + SLOTS * SLOT_BYTES
SIZE = SNAP0 + SNAPS * SNAP_BYTES
# header words (int64): magic, published (entries < it are readable), acknowledged (entries < it are no longer read),
# producer state, consumer state
_MAGIC, _PUB, _ACK, _PSTATE, _CSTATE = range(5)
RUNNING, DONE, STOPPED = 0, 1, 2  # producer states
ABSENT, ATTACHED, GONE = 0, 1, 2  # consumer states
# seconds a side waits without the other making progress before it goes on alone
STALL = 5.0

# an entry: index, spent, flags (1: usable), key (two dtype names, k, m, n), the product's dtype, ndim, shape
_ENTRY = struct.Struct(f"<qdq16s16sqqq8sq{MAXDIM}q")
# an operand: kind (0: snapshot, 1: copy), snapshot slot, its storage's uid and gen, byte offset, the storage's dtype,
# ndim and shape, then the operand's dtype, ndim, shape, strides
_OPER = struct.Struct(f"<qqqqq8sq{MAXDIM}q8sq{MAXDIM}q{MAXDIM}q")


def supported() -> bool:
    """Whether two processes may share products through a channel here (x86-64's store order, above)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def create(path: str) -> None:
    """The grader: make an empty channel file (mode 0600) for one producer and one consumer."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.ftruncate(fd, SIZE)
        os.pwrite(fd, struct.pack("<q", MAGIC), 0)
    finally:
        os.close(fd)


def open_channel(path: str, role: str) -> Channel | None:
    """A replay process's side of the channel file ``path`` (``role``: "producer" or "consumer"), mapped before its
    sandbox makes the file system read-only; None when it is not a channel file (the group runs on its own)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size != SIZE:
            return None
        mm = mmap.mmap(fd, SIZE)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    ch = (Producer if role == "producer" else Consumer)(mm)
    if int(ch.head[_MAGIC]) != MAGIC:
        return None
    return ch


class Channel:
    def __init__(self, mm: mmap.mmap) -> None:
        self.mm = mm
        self.head = np.ndarray((8,), dtype=np.int64, buffer=mm, offset=0)
        self.waited = 0.0  # wall seconds spent waiting for the other side

    def _wait(self, ready, gone) -> bool:
        """Poll until ``ready()`` (True) or ``gone()`` or STALL seconds without ``ready`` (False)."""
        if ready():
            return True
        t0 = time.monotonic()
        pause = 5e-5
        try:
            while not gone():
                if time.monotonic() - t0 > STALL:
                    return False
                time.sleep(pause)
                pause = min(pause * 2, 1e-3)
                if ready():
                    return True
            return ready()
        finally:
            self.waited += time.monotonic() - t0


def _name(s: bytes) -> str:
    return s.rstrip(b"\0").decode("ascii")


class Producer(Channel):
    """The leader's side: :meth:`publish` every matmul, :meth:`finish` at its end or when sharing stops."""

    def __init__(self, mm: mmap.mmap) -> None:
        super().__init__(mm)
        self.live = True
        self.published = 0
        # per snapshot slot: (uid, gen, the last entry using it) or None
        self.snaps: list[tuple | None] = [None] * SNAPS

    def _consumer_gone(self) -> bool:
        return int(self.head[_CSTATE]) == GONE

    def reserve(self, i: int, m: int, n: int) -> np.ndarray | None:
        """Entry ``i``'s product slot as an fp32 [m, n] array to compute the product into (no copy to publish it),
        once the consumer is far enough (bounded wait); None when it does not fit or sharing ended (the caller
        computes as usual, and :meth:`publish` copies or gives up)."""
        if not self.live or i != self.published or m * n * 4 > PROD_BYTES or self._consumer_gone():
            return None
        head = self.head
        if not self._wait(lambda: i - int(head[_ACK]) < SLOTS, self._consumer_gone):
            self.finish(STOPPED)
            return None
        return np.ndarray((m, n), np.float32, buffer=self.mm, offset=DATA0 + (i % SLOTS) * SLOT_BYTES)

    def publish(self, i: int, key: tuple, ds: tuple, dm: tuple, values: np.ndarray, spent: float) -> None:
        """Entry ``i`` (the leader's i-th matmul): ``ds``/``dm`` the operands' descriptions (``ShareGroup._describe``),
        ``values`` the product, ``spent`` its CPU seconds.  Waits (bounded) for ring space; gives up sharing when the
        consumer is gone or stalls."""
        if not self.live:
            return
        head = self.head
        if i != self.published or self._consumer_gone() or not self._wait(
                lambda: i - int(head[_ACK]) < SLOTS, self._consumer_gone):
            self.finish(STOPPED)
            return
        s = i % SLOTS
        base = DATA0 + s * SLOT_BYTES
        ok = 1
        try:
            d1, d2, k1, m, n = key
            kb = (d1.encode("ascii"), d2.encode("ascii"), int(k1), int(m), int(n))
            if values.nbytes > PROD_BYTES or values.ndim > MAXDIM or not values.flags.c_contiguous:
                raise ValueError
            recs = [self._operand(i, d, base + PROD_BYTES + j * OP_BYTES) for j, d in enumerate((ds, dm))]
            dst = np.ndarray(values.shape, values.dtype, buffer=self.mm, offset=base)
            if dst.ctypes.data != values.ctypes.data:  # not computed in place (reserve)
                dst[...] = values
            shape = (*values.shape, *([0] * (MAXDIM - values.ndim)))
            meta = _ENTRY.pack(i, float(spent), 1, *kb, values.dtype.str.encode("ascii"), values.ndim, *shape)
        except (ValueError, TypeError, UnicodeError, struct.error):
            ok, recs = 0, []
            meta = _ENTRY.pack(i, 0.0, 0, b"", b"", 0, 0, 0, b"", 0, *([0] * MAXDIM))
        off = HEADER + s * META
        self.mm[off:off + _ENTRY.size] = meta
        if ok:
            for j, r in enumerate(recs):
                p = off + _ENTRY.size + j * _OPER.size
                self.mm[p:p + _OPER.size] = r
        self.published = i + 1
        head[_PUB] = i + 1

    def _operand(self, i: int, d: tuple, where: int) -> bytes:
        from nkisim.core.sharing import _window

        snap = d[0]
        if snap is not None:
            j = self._snap_slot(i, snap)
            if j is not None:
                arr = snap.arr
                ash = (*arr.shape, *([0] * (MAXDIM - arr.ndim)))
                return _OPER.pack(0, j, snap.uid, snap.gen, d[1], arr.dtype.str.encode("ascii"), arr.ndim, *ash,
                                  *_view(d[4], d[2], d[3]))
            raw = np.ascontiguousarray(_window(snap.arr, d))
            strides = d[3]
        else:
            raw, strides = d[1], d[2]
        if raw.nbytes > OP_BYTES or raw.ndim > MAXDIM or not raw.flags.c_contiguous:
            raise ValueError
        np.ndarray(raw.shape, raw.dtype, buffer=self.mm, offset=where)[...] = raw
        return _OPER.pack(1, 0, 0, 0, 0, b"", 0, *([0] * MAXDIM), *_view(raw.dtype, raw.shape, strides))

    def _snap_slot(self, i: int, snap) -> int | None:
        """The snapshot slot holding ``snap`` (copied in when new), or None when none is free (the operand goes as
        a copy).  A slot is free when no entry the consumer may still read uses it."""
        acked = int(self.head[_ACK])
        free = None
        for j, got in enumerate(self.snaps):
            if got is not None and got[0] == snap.uid and got[1] == snap.gen:
                self.snaps[j] = (got[0], got[1], i)
                return j
            if free is None and (got is None or got[2] < acked):
                free = j
        arr = snap.arr
        if free is None or arr.nbytes > SNAP_BYTES or arr.ndim > MAXDIM or not arr.flags.c_contiguous:
            return None
        np.ndarray(arr.shape, arr.dtype, buffer=self.mm, offset=SNAP0 + free * SNAP_BYTES)[...] = arr
        self.snaps[free] = (snap.uid, snap.gen, i)
        return free

    def finish(self, state: int = DONE) -> None:
        if self.live:
            self.live = False
            self.head[_PSTATE] = state


def _view(dtype: np.dtype, shape: tuple, strides: tuple) -> tuple:
    if len(shape) > MAXDIM or len(strides) != len(shape):
        raise ValueError
    pad = [0] * (MAXDIM - len(shape))
    return (np.dtype(dtype).str.encode("ascii"), len(shape), *shape, *pad, *strides, *pad)


class Consumer(Channel):
    """The other group's side: :meth:`take` entry ``i`` (waiting for it, bounded), :meth:`ack` what its members are
    past, :meth:`leave` at its end."""

    def __init__(self, mm: mmap.mmap) -> None:
        super().__init__(mm)
        self.live = True
        self._snaps: dict[int, object] = {}  # snapshot slot -> the _Snap standing for it (its uid, gen)
        self.head[_CSTATE] = ATTACHED

    def _producer_over(self) -> bool:
        return int(self.head[_PSTATE]) != RUNNING

    def take(self, i: int) -> tuple | None | bool:
        """Entry ``i`` as ``(ring entry, spent)``; None when it was not published usably (the members compute that
        product); False when no more will come (the producer ended, stopped or stalled)."""
        if not self.live:
            return False
        head = self.head
        if not self._wait(lambda: int(head[_PUB]) > i, self._producer_over):
            return False
        off = HEADER + (i % SLOTS) * META
        try:
            f = _ENTRY.unpack_from(self.mm, off)
            if f[0] != i or f[2] != 1:
                return None
            key = (_name(f[3]), _name(f[4]), int(f[5]), int(f[6]), int(f[7]))
            nd = f[9]
            if not 0 <= nd <= MAXDIM:
                return None
            values = np.ndarray(tuple(f[10:10 + nd]), np.dtype(_name(f[8])), buffer=self.mm,
                                offset=DATA0 + (i % SLOTS) * SLOT_BYTES)
            if values.nbytes > PROD_BYTES:
                return None
            values.flags.writeable = False
            base = DATA0 + (i % SLOTS) * SLOT_BYTES + PROD_BYTES
            ds, dm = (self._operand(off + _ENTRY.size + j * _OPER.size, base + j * OP_BYTES) for j in (0, 1))
        except (ValueError, TypeError, UnicodeError, struct.error, OverflowError):
            return None
        return (i, key, ds, dm, values, 0), float(f[1])

    def _operand(self, off: int, where: int) -> tuple:
        from nkisim.core.sharing import _Snap, _window

        f = _OPER.unpack_from(self.mm, off)
        kind, j, uid, gen, boff = f[:5]
        sd, sn = f[5], f[6]
        vd, vn = f[7 + MAXDIM], f[8 + MAXDIM]
        if not (0 <= sn <= MAXDIM and 0 <= vn <= MAXDIM):
            raise ValueError
        shape = tuple(f[9 + MAXDIM:9 + MAXDIM + vn])
        strides = tuple(f[9 + 2 * MAXDIM:9 + 2 * MAXDIM + vn])
        dtype = np.dtype(_name(vd))
        if kind == 1:
            copy = np.ndarray(shape, dtype, buffer=self.mm, offset=where)
            if copy.nbytes > OP_BYTES:
                raise ValueError
            copy.flags.writeable = False
            return (None, copy, strides)
        if kind != 0 or not 0 <= j < SNAPS:
            raise ValueError
        s = self._snaps.get(j)
        if s is None or s.uid != -1 - uid or s.gen != gen:
            arr = np.ndarray(tuple(f[7:7 + sn]), np.dtype(_name(sd)), buffer=self.mm, offset=SNAP0 + j * SNAP_BYTES)
            if arr.nbytes > SNAP_BYTES:
                raise ValueError
            arr.flags.writeable = False
            # the producer's storage uids are its process's: negative ones never meet this process's own
            s = self._snaps[j] = _Snap(-1 - uid, gen, arr)
        d = (s, boff, shape, strides, dtype)
        _window(s.arr, d)  # inside the snapshot (raises otherwise: the entry is not used)
        return d

    def ack(self, n: int) -> None:
        """The members are past entry ``n - 1``: the producer may reuse its slots."""
        self.head[_ACK] = n

    def leave(self) -> None:
        if self.live:
            self.live = False
            self._snaps.clear()
            self.head[_CSTATE] = GONE
