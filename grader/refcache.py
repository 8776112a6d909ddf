"""Inputs and NumPy references shared across the submissions of a batch (runs only in the grader's process).

With one class seed (grader/seeds.py) every submission of a batch gets the same inputs, so the expensive part of
a reference -- the convolution, up to 233 GFLOP per 224x224 batch-4 case -- is computed once per (inputs,
precision) and reused by the correctness and the performance tests of every submission:

* in this process: a byte-bounded LRU of inputs and convolutions (a local pool worker or a Ray worker grades many
  submissions one after another);
* on disk, next to the batch results (``OUT/.grader/refcache/``): content-addressed entries, so the other
  workers, a resumed batch, a regrade after a rubric change and Ray tasks on a shared file system reuse them.

An entry's address is the SHA-256 of what determines its value: the reference function's version, the
accumulation precision and the SHA-256 of every input array (dtype, shape, bytes), made when first needed
(``ArrayDigest``); a store without a disk directory (memory only: a per-submission seed) addresses its entries by
tokens of the memoised input objects instead and digests nothing (``ArrayDigest`` says why).  Each entry carries an
HMAC-SHA256 under a key derived from the secret class seed, checked on every load, so a file that was changed
or swapped in (e.g. by a submission that escaped the sandbox) is recomputed instead of trusted.  Files are
written atomically (tmp + os.replace; the MAC last, as the commit mark); a lock file per entry keeps two workers
from computing the same entry at once.  The sandbox hides the directory from student code (runner.py masks the
configured private directories; they are 0700 besides).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import io
import itertools
import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grader.problems.base import Invocation, SharedInvocation

REFERENCE_VERSION = 1  # bump when the arithmetic of a reference function changes (part of every address)
MEMORY_BUDGET_MIB = int(os.environ.get("GRADER_MEMO_MIB", "1536"))  # per process: inputs + convolutions


def array_digest(arr: np.ndarray) -> str:
    h = hashlib.sha256(f"{arr.dtype.str}|{arr.shape}|".encode())
    h.update(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return h.hexdigest()


class ArrayDigest:
    """:func:`array_digest` of a read-only array, made on the first call and only once, whichever threads call (a
    :class:`grader.problems.base.SharedInvocation`'s digest made when a reference is looked up: see there), and a
    ``token`` naming the array object in this process, which costs nothing.

    Which of the two addresses a reference (:meth:`ReferenceStore.persistent`): the SHA-256 of the content where
    entries outlive the process (the disk cache of a class batch: another process, or a later batch, looks them up
    by what the inputs are), the token where they live in this process's memory only (a student's own run, a
    grading with a per-submission seed, ``python -m grader grade``).  There the content digest bought nothing: the
    inputs are generated once per process and (problem, case, seed) and memoised (this module's ``memoised``), so
    every test on the same inputs gets the same read-only array object, hence the same token; a token names one
    object only, so two tokens never stand for different values, and the worst a second object of equal content
    can cost is a reference computed twice.  The digests of a staff grading's inputs were about 0.2 CPU s (a
    224x224 batch-4 X: 196 MiB at 1.8 GB/s)."""

    __slots__ = ("_array", "_value", "_lock", "token", "__weakref__")

    def __init__(self, arr: np.ndarray) -> None:
        if arr.flags.writeable:
            raise ValueError("ArrayDigest: the array must be read-only (its digest is made later)")
        self._array: np.ndarray | None = arr
        self._value: str | None = None
        self._lock = threading.Lock()
        # unique in this process (and unlike any SHA-256 hex digest); a forked child's new tokens restart from the
        # counter's state at the fork, but its memory is its own
        self.token = f"object:{os.getpid()}:{next(_TOKENS)}"

    def __call__(self) -> str:
        value = self._value
        if value is None:
            with self._lock:
                value = self._value
                if value is None:
                    assert self._array is not None
                    value = self._value = array_digest(self._array)
                    self._array = None  # the digest no longer keeps the array alive
        return value


_TOKENS = itertools.count()


class _Lru:
    """Thread-safe LRU of read-only values bounded by their total bytes."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        with self._lock:
            if key in self._items or nbytes > self.budget:
                return
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.budget and self._items:
                _, (_, freed) = self._items.popitem(last=False)
                self._bytes -= freed

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


_MEMORY = _Lru(MEMORY_BUDGET_MIB << 20)
_KEY_LOCKS: dict[Any, threading.Lock] = {}
_KEY_LOCKS_LOCK = threading.Lock()


def _key_lock(key: Any) -> threading.Lock:
    with _KEY_LOCKS_LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def clear_memory() -> None:
    """Forget everything memoised in this process (tests; a batch after a seed rotation)."""
    _MEMORY.clear()


# ------------------------------------------------------------------------------------------------ inputs ----


def memoised(key: Any, make: Callable[[], tuple[Any, int]]) -> Any:
    """The value memoised under ``key`` in this process, made once (``make`` returns it and its size in bytes)
    even when several threads ask at the same moment."""
    hit = _MEMORY.get(key)
    if hit is not None:
        return hit
    with _key_lock(key):
        hit = _MEMORY.get(key)
        if hit is None:
            hit, nbytes = make()
            _MEMORY.put(key, hit, nbytes)
        return hit


def shared_inputs(problem: str, case: dict[str, Any], seed: int, make: Callable[[], Invocation]) -> SharedInvocation:
    """``make()`` memoised per process under (problem, case, seed), its arrays read-only and digested: the same
    (problem, case, seed) gives the same arrays (grader/problems/generic.py; conv2d shares more, see there)."""

    def build() -> tuple[SharedInvocation, int]:
        inv = make()
        for a in inv.args:
            a.flags.writeable = False
        return SharedInvocation(inv, [ArrayDigest(a) for a in inv.args]), sum(a.nbytes for a in inv.args)

    return memoised(("inputs", problem, json.dumps(case, sort_keys=True), int(seed)), build)


# -------------------------------------------------------------------------------------------- references ----


@dataclass
class CacheStats:
    """What the references of one grading cost (recorded in result.json's timings)."""

    computed_s: float = 0.0
    loaded_s: float = 0.0
    computed: int = 0
    from_disk: int = 0
    from_memory: int = 0
    rejected: int = 0  # disk entries whose MAC did not verify (recomputed)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **kw: float) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def as_timings(self) -> dict[str, float]:
        return {
            "references:computed_s": self.computed_s,
            "references:loaded_s": self.loaded_s,
            "references:computed": float(self.computed),
            "references:from_disk": float(self.from_disk),
            "references:from_memory": float(self.from_memory),
            "references:rejected": float(self.rejected),
        }


class ReferenceStore:
    """Convolutions (and any other costly intermediate) by content address: memory, then disk, then compute.

    ``directory`` None: memory only (a student's own run, per-submission seeds).  ``mac_key`` must be secret
    (derived from the class seed); without one nothing is read from or written to disk.
    """

    def __init__(self, directory: str | Path | None, mac_key: bytes | None) -> None:
        self.dir = Path(directory) if directory and mac_key else None
        self.mac_key = mac_key
        self.stats = CacheStats()

    # ---------------------------------------------------------------------------------------- public ----
    @property
    def persistent(self) -> bool:
        """Whether entries outlive this process (the disk cache): then they are addressed by their inputs' content
        (SharedInvocation.digests), else by the input objects' tokens (``SharedInvocation.keys``, ArrayDigest)."""
        return self.dir is not None

    def get(self, descriptor: dict[str, Any], compute: Callable[[], np.ndarray]) -> np.ndarray:
        address = self._address(descriptor)
        key = ("reference", address)
        found: list[bool] = []

        def make() -> tuple[np.ndarray, int]:
            value = self._from_disk_or_compute(address, compute)
            value.flags.writeable = False
            found.append(True)
            return value, value.nbytes

        value = memoised(key, make)
        if not found:
            self.stats.add(from_memory=1)
        return value

    def peek(self, descriptor: dict[str, Any]) -> np.ndarray | None:
        """The value under ``descriptor`` if this process or the disk cache has it; never computes.  When another
        thread of this process is computing it right now (:meth:`get`), waits for that and returns it: a grading's
        batch-1 timed calls may be judged while the reference thread is still computing the batch-4 convolution
        they are the first image of (their group hands over each call as it ends), and computing theirs alone
        instead cost 1.4 CPU s (58 GFLOP) for a value the slice gives."""
        address = self._address(descriptor)
        key = ("reference", address)
        hit = _MEMORY.get(key)
        if hit is None:
            with _KEY_LOCKS_LOCK:
                lock = _KEY_LOCKS.get(key)
            if lock is not None and lock.locked():  # being made (memoised holds the key's lock while it makes it)
                with lock:
                    hit = _MEMORY.get(key)
        if hit is not None or self.dir is None:
            return hit
        try:
            data_path, mac_path, _ = self._paths(address)
        except OSError:
            return None
        return self._load(address, data_path, mac_path)

    @staticmethod
    def _address(descriptor: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps({"v": REFERENCE_VERSION, **descriptor}, sort_keys=True).encode()).hexdigest()

    # ------------------------------------------------------------------------------------------ disk ----
    def _paths(self, address: str) -> tuple[Path, Path, Path]:
        assert self.dir is not None
        sub = self.dir / address[:2]
        return sub / f"{address}.npy", sub / f"{address}.mac", sub / f"{address}.lock"

    def _mac(self, address: str, payload: bytes | memoryview) -> str:
        assert self.mac_key is not None
        h = hmac.new(self.mac_key, address.encode() + b"\0", hashlib.sha256)
        h.update(payload)
        return h.hexdigest()

    def _compute(self, compute: Callable[[], np.ndarray]) -> np.ndarray:
        t0 = time.perf_counter()
        value = np.ascontiguousarray(compute())
        self.stats.add(computed_s=time.perf_counter() - t0, computed=1)
        return value

    def _from_disk_or_compute(self, address: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        if self.dir is None:
            return self._compute(compute)
        try:
            data_path, mac_path, lock_path = self._paths(address)
            data_path.parent.mkdir(mode=0o700, exist_ok=True)  # the cache directory itself must exist
            lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return self._compute(compute)  # an unusable cache directory costs speed, never a grade
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)  # another worker may be computing this entry right now
            except OSError:
                pass  # no locks on this file system: at worst two workers compute the same entry
            value = self._load(address, data_path, mac_path)
            if value is not None:
                return value
            value = self._compute(compute)
            self._store(address, value, data_path, mac_path)
            return value
        finally:
            os.close(lock_fd)

    def _load(self, address: str, data_path: Path, mac_path: Path) -> np.ndarray | None:
        t0 = time.perf_counter()
        try:
            expected_mac = mac_path.read_text().strip()
            data = data_path.read_bytes()  # read once: what is verified is what is used
        except OSError:
            return None
        if not hmac.compare_digest(expected_mac, self._mac(address, data)):
            self.stats.add(rejected=1)
            return None
        try:
            value = _parse_npy(data)
        except ValueError:
            self.stats.add(rejected=1)
            return None
        self.stats.add(loaded_s=time.perf_counter() - t0, from_disk=1)
        return value

    def _store(self, address: str, value: np.ndarray, data_path: Path, mac_path: Path) -> None:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, value, allow_pickle=False)
        payload = buf.getbuffer()
        tag = secrets.token_hex(4)
        try:
            _write_atomic(data_path, payload, tag)
            _write_atomic(mac_path, self._mac(address, payload).encode(), tag)  # the commit mark, last
        except OSError:
            pass  # a full disk costs speed, never a grade


def _write_atomic(path: Path, payload: bytes | memoryview, tag: str) -> None:
    tmp = path.with_name(f".{path.name}.{tag}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _parse_npy(data: bytes) -> np.ndarray:
    """A read-only array over ``data`` (an .npy file's bytes): no copy, no pickle."""
    stream = io.BytesIO(data)
    major, _ = np.lib.format.read_magic(stream)
    if major == 1:
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif major in (2, 3):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"unsupported .npy version {major}")
    if dtype.hasobject or fortran:
        raise ValueError("not a plain C-ordered numeric array")
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell()).reshape(shape)
