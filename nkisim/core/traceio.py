"""Trace files: ``dump(trace, path)`` / ``load(path) -> Trace``.

The grader runs student kernels in a sandboxed child process and costs the trace it ships back, so a trace file
is untrusted input: the format is NumPy ``.npz`` of plain integer columns plus one JSON document of strings (no
pickle, ``allow_pickle=False``), and ``load`` validates every column, index and string before building the
Trace; anything malformed raises ``ValueError`` naming the problem.  Writes are atomic (tmp file + os.replace).
"""

from __future__ import annotations

import gc
import io
import json
import math
import os
import tempfile
import zipfile

import numpy as np

from nkisim.core.instr import Buf, Engine, Instr, Operand, Region, Trace

FORMAT = "nkisim-trace"
VERSION = 1
MAX_INSTRS = 20_000_000
MAX_UNCOMPRESSED = 4 << 30  # refuse archives that expand beyond 4 GiB
MAX_STRING = 4096
MAX_ATTR_JSON = 1 << 16

_I_COLS = ("seq", "op", "engine", "where", "attrs")
_O_COLS = (
    "instr", "role", "buf", "phys", "p_lo", "p_hi", "b_lo", "b_hi", "itemsize", "partitions", "free_elems",
    "inner_stride", "contiguous", "dtype", "shape",
)
_ENGINES = {int(e) for e in Engine}
_BUFS = {int(b) for b in Buf}


def _jsonable(v):
    if isinstance(v, (bool, str)) or v is None:
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else str(f)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


class _Interner:
    def __init__(self) -> None:
        self.index: dict = {}
        self.items: list = []

    def __call__(self, key, item=None) -> int:
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.items)
            self.items.append(key if item is None else item)
        return i


def _narrow(values) -> np.ndarray:
    """An integer column in the narrowest signed dtype that holds it (``load`` widens every column to int64)."""
    a = np.asarray(values, dtype=np.int64)
    if a.size:
        lo, hi = int(a.min()), int(a.max())
        for dt in (np.int8, np.int16, np.int32):
            info = np.iinfo(dt)
            if info.min <= lo and hi <= info.max:
                return a.astype(dt)
    return a


# attrs values whose class and equality fix their JSON text: an attrs dict made only of these (under str keys) is
# looked up by its items instead of being serialised again (floats are left out: -0.0 == 0.0, but not as JSON)
_PLAIN = frozenset({int, bool, str, type(None)})
_STR = frozenset({str})


def _interned(values: list, interner: _Interner) -> list[int]:
    """``interner(str(v))`` of every value, in order, calling it once per distinct value (first appearances in
    order: the interner's items come out as a call per value would make them)."""
    try:
        index = {v: interner(str(v)) for v in dict.fromkeys(values)}
    except TypeError:  # an unhashable value: one by one
        return [interner(str(v)) for v in values]
    return list(map(index.__getitem__, values))


def _columns(trace: Trace) -> tuple[dict[str, np.ndarray], dict]:
    ops, wheres, dts, shapes, attrs = _Interner(), _Interner(), _Interner(), _Interner(), _Interner()
    instrs = trace.instrs
    n = len(instrs)
    icol: dict[str, list] = {"seq": [int(i.seq) for i in instrs], "op": _interned([i.op for i in instrs], ops),
                             "engine": [int(i.engine) for i in instrs],
                             "where": _interned([i.where for i in instrs], wheres)}
    # attrs: one JSON text per distinct dict, looked up by its items and their values' classes; only dicts whose
    # classes fix their JSON (str names, _PLAIN values) are remembered, so a key found was such a dict's, whose
    # items and classes are equal to this one's (1 == True, but not their classes), hence so is its JSON
    attr_col: list[int] = []
    attr_memo: dict[tuple, int] = {}
    plain, strs = _PLAIN, _STR
    for a in [i.attrs for i in instrs]:
        classes = tuple(map(type, a.values()))
        key = (tuple(a.items()), classes)
        try:
            j = attr_memo.get(key)
        except TypeError:  # an unhashable value (a list): never remembered
            j = key = None
        if j is None:
            j = attrs(json.dumps(_jsonable(a), sort_keys=True, separators=(",", ":")))
            if key is not None and plain.issuperset(classes) and strs.issuperset(map(type, a)):
                attr_memo[key] = j
        attr_col.append(j)
    icol["attrs"] = attr_col
    # one row per operand, in _O_COLS order: its instruction and role (sources, then destinations), and the rest
    # of its columns (a row of ``tails``, np.array turns the ints into int64) by the operand object: the core hands
    # out one Operand per view and reuses it (2,402 objects for the 51,232 operands of a 224x224 batch-4 conv's
    # trace), so a row is made per distinct object, in order of first use; every operand stays alive here, so no
    # id is reused
    objs = [o for i in instrs for group in (i.srcs, i.dsts) for o in group]
    counts = np.array([(len(i.srcs), len(i.dsts)) for i in instrs], dtype=np.int64).reshape(n, 2)
    o_instr = np.repeat(np.arange(n, dtype=np.int64), counts.sum(axis=1))
    o_role = np.repeat(np.tile(np.array([0, 1], dtype=np.int64), n), counts.reshape(-1))
    ids = list(map(id, objs))
    rows = {k: j for j, k in enumerate(dict.fromkeys(ids))}
    o_tail = list(map(rows.__getitem__, ids))
    by_id = dict(zip(ids, objs, strict=True))
    dt_index: dict = {}  # fast paths of the dts / shapes interners, keyed by the operand's own values
    shape_index: dict = {}
    tails: list[tuple] = []
    for o in map(by_id.__getitem__, rows):
        d = dt_index.get(o.dtype)
        if d is None:
            d = dt_index[o.dtype] = dts(str(o.dtype))
        sh = shape_index.get(o.shape)
        if sh is None:
            shp = tuple(int(x) for x in o.shape)
            sh = shape_index[o.shape] = shapes(shp, list(shp))
        tails.append((*o.region, o.itemsize, o.partitions, o.free_elems, o.inner_stride_bytes, o.contiguous_bytes,
                      d, sh))
    arrays = {f"i_{k}": _narrow(v) for k, v in icol.items()}
    table = np.array(tails, dtype=np.int64).reshape(len(tails), len(_O_COLS) - 2)[np.array(o_tail, dtype=np.intp)]
    arrays["o_instr"], arrays["o_role"] = _narrow(o_instr), _narrow(o_role)
    arrays.update({f"o_{k}": _narrow(table[:, c]) for c, k in enumerate(_O_COLS[2:])})
    strings = {
        "format": FORMAT,
        "version": VERSION,
        "target": str(trace.target),
        "kernel_name": str(trace.kernel_name),
        "meta": _jsonable(getattr(trace, "meta", {}) or {}),
        "ops": ops.items,
        "wheres": wheres.items,
        "dtypes": dts.items,
        "shapes": shapes.items,
        "attrs": attrs.items,
    }
    return arrays, strings


def dumps(trace: Trace) -> bytes:
    enabled = gc.isenabled()
    gc.disable()
    try:
        arrays, strings = _columns(trace)
    finally:
        if enabled:
            gc.enable()
    arrays["strings"] = np.frombuffer(json.dumps(strings).encode("utf-8"), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def dump(trace: Trace, path: str | os.PathLike) -> None:
    """Write ``trace`` to ``path`` atomically."""
    data = dumps(trace)
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".trace-", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---- loading -----------------------------------------------------------------------------------------------
def _bad(msg: str):
    raise ValueError(f"invalid nkisim trace file: {msg}")


def _str_list(strings: dict, key: str, limit: int = MAX_STRING) -> list[str]:
    v = strings.get(key)
    if not isinstance(v, list) or not all(isinstance(x, str) and len(x) <= limit for x in v):
        _bad(f"'{key}' must be a list of strings of at most {limit} characters")
    return v


def _scalar_ok(v, depth: int = 0) -> bool:
    if v is None or isinstance(v, (bool, int, float, str)):
        return not isinstance(v, str) or len(v) <= MAX_STRING
    if isinstance(v, list) and depth < 3:
        return len(v) <= 64 and all(_scalar_ok(x, depth + 1) for x in v)
    return False


def loads(data: bytes) -> Trace:
    """Parse and validate a trace file's bytes."""
    enabled = gc.isenabled()
    gc.disable()  # building ~10^5 small objects: cyclic GC passes would dominate
    try:
        return _loads(data)
    finally:
        if enabled:
            gc.enable()


def _read_archive(data: bytes) -> tuple[dict[str, np.ndarray], dict]:
    """The columns and the string table of a trace file, after the checks of its container (size, members,
    format tag and version); the columns' contents are checked by :func:`_loads`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        _bad("expected bytes")
    bio = io.BytesIO(bytes(data))
    try:
        with zipfile.ZipFile(bio) as zf:
            infos = zf.infolist()
            if sum(i.file_size for i in infos) > MAX_UNCOMPRESSED:
                _bad("archive expands beyond the size limit")
            names = {i.filename for i in infos}
    except zipfile.BadZipFile as e:
        raise ValueError(f"invalid nkisim trace file: not an npz archive ({e})") from None
    expected = {f"i_{k}.npy" for k in _I_COLS} | {f"o_{k}.npy" for k in _O_COLS} | {"strings.npy"}
    if names != expected:
        _bad(f"unexpected members {sorted(names ^ expected)}")
    bio.seek(0)
    try:
        npz = np.load(bio, allow_pickle=False)
        cols = {k: npz[k] for k in npz.files}
    except (ValueError, OSError) as e:
        raise ValueError(f"invalid nkisim trace file: {e}") from None
    raw = cols.pop("strings")
    if raw.dtype != np.uint8 or raw.ndim != 1:
        _bad("'strings' must be a uint8 vector")
    try:
        strings = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"invalid nkisim trace file: strings are not JSON ({e})") from None
    if not isinstance(strings, dict) or strings.get("format") != FORMAT:
        _bad("missing format tag")
    if strings.get("version") != VERSION:
        _bad(f"unsupported version {strings.get('version')!r}")
    return cols, strings


def _loads(data: bytes) -> Trace:
    cols, strings = _read_archive(data)
    for k, a in cols.items():
        if a.ndim != 1 or a.dtype.kind not in "iu":
            _bad(f"column {k} must be a 1-D integer array")
        cols[k] = a.astype(np.int64)  # dump writes narrow columns; checks and arithmetic below are on int64
    n = len(cols["i_seq"])
    if n > MAX_INSTRS:
        _bad(f"too many instructions ({n})")
    if any(len(cols[f"i_{k}"]) != n for k in _I_COLS):
        _bad("instruction columns differ in length")
    m = len(cols["o_instr"])
    if any(len(cols[f"o_{k}"]) != m for k in _O_COLS):
        _bad("operand columns differ in length")
    ops = _str_list(strings, "ops", 64)
    wheres = _str_list(strings, "wheres")
    dts = _str_list(strings, "dtypes", 32)
    attr_json = _str_list(strings, "attrs", MAX_ATTR_JSON)
    shapes = strings.get("shapes")
    if not isinstance(shapes, list) or not all(
        isinstance(s, list) and len(s) <= 8 and all(isinstance(x, int) and 0 <= x < 2**40 for x in s) for s in shapes
    ):
        _bad("'shapes' must be a list of integer lists")
    target = strings.get("target")
    kname = strings.get("kernel_name")
    meta = strings.get("meta")
    if not isinstance(target, str) or target not in ("trn1", "trn2"):
        _bad(f"unknown target {target!r}")
    if not isinstance(kname, str) or len(kname) > MAX_STRING:
        _bad("kernel_name must be a string")
    if not isinstance(meta, dict) or len(json.dumps(meta)) > MAX_ATTR_JSON:
        _bad("meta must be a small JSON object")
    attrs = []
    for s in attr_json:
        try:
            a = json.loads(s)
        except json.JSONDecodeError:
            _bad("attrs entry is not JSON")
        if not isinstance(a, dict) or not all(isinstance(k, str) and _scalar_ok(v) for k, v in a.items()):
            _bad("attrs entries must be objects of scalars or short lists")
        attrs.append(a)

    def check_index(col: str, limit: int):
        a = cols[col]
        if len(a) and (a.min() < 0 or a.max() >= limit):
            _bad(f"column {col} indexes outside its table")

    check_index("i_op", len(ops))
    check_index("i_where", len(wheres))
    check_index("i_attrs", len(attrs))
    check_index("o_instr", n)
    check_index("o_dtype", len(dts))
    check_index("o_shape", len(shapes))
    if n and not set(np.unique(cols["i_engine"]).tolist()) <= _ENGINES:
        _bad("unknown engine id")
    if m:
        if not set(np.unique(cols["o_buf"]).tolist()) <= _BUFS:
            _bad("unknown buffer kind")
        if not set(np.unique(cols["o_role"]).tolist()) <= {0, 1}:
            _bad("operand role must be 0 (src) or 1 (dst)")
        if np.any(np.diff(cols["o_instr"]) < 0):
            _bad("operands must be grouped by instruction in order")
        for k in ("phys", "p_lo", "b_lo", "partitions", "free_elems", "inner_stride", "contiguous"):
            if cols[f"o_{k}"].min() < 0:
                _bad(f"negative {k}")
        if np.any(cols["o_p_hi"] < cols["o_p_lo"]) or np.any(cols["o_b_hi"] < cols["o_b_lo"]):
            _bad("region bounds out of order")
        if cols["o_p_hi"].max() > 1 << 16 or cols["o_b_hi"].max() > 1 << 50:
            _bad("region bounds too large")
        if not set(np.unique(cols["o_itemsize"]).tolist()) <= {1, 2, 4, 8}:
            _bad("itemsize must be 1, 2, 4 or 8")
        if cols["o_partitions"].max() > 1 << 40 or cols["o_free_elems"].max() > 1 << 44:
            _bad("operand sizes too large")

    distinct, which = _distinct_rows(np.stack([cols[f"o_{k}"] for k in _O_COLS[2:]], axis=1) if m else
                                     np.zeros((0, len(_O_COLS) - 2), dtype=np.int64))

    # ---- build ----------------------------------------------------------------------------------------------
    trace = Trace(target, kname)
    trace.meta = meta
    engines = {int(e): e for e in Engine}
    bufs = {int(b): b for b in Buf}
    shape_t = [tuple(s) for s in shapes]
    # Operands are immutable (NamedTuples): equal rows share one object, as the recording run's trace shares them
    # (a 224x224 batch-4 conv's 53,008 operand rows are 1,406 distinct ones).  The distinct rows are found by
    # array work (_distinct_rows) and only they become objects; then every instruction takes its sources and
    # destinations as two slices of the operands ordered by (instruction, role).  Building an object per row
    # through a dict of row tuples took half of a load (0.04 of 0.075 CPU s for that trace; the grader loads
    # every traced call's trace after its kernel, on the grading's critical path).
    new = tuple.__new__
    made = [new(Operand, (new(Region, (bufs[buf], phys, p_lo, p_hi, b_lo, b_hi)), shape_t[shp], dts[dt], isz, parts,
                          free, inner, contig, True))
            for buf, phys, p_lo, p_hi, b_lo, b_hi, isz, parts, free, inner, contig, dt, shp in distinct]
    if m:
        key = cols["o_instr"] * 2 + cols["o_role"]  # instructions are in order (checked); roles 0 then 1
        order = np.argsort(key, kind="stable")
        ordered = [made[j] for j in which[order].tolist()]
        ends = np.cumsum(np.bincount(key, minlength=2 * n)).tolist()
    else:
        ordered, ends = [], [0] * (2 * n)
    starts = [0, *ends]
    srcs = [tuple(ordered[a:b]) for a, b in zip(starts[0::2], starts[1::2])]
    dst_s = [tuple(ordered[a:b]) for a, b in zip(starts[1::2], starts[2::2])]
    i_seq, i_op, i_engine, i_where, i_attrs = (cols[f"i_{k}"].tolist() for k in _I_COLS)
    trace.instrs = list(map(Instr, i_seq, map(ops.__getitem__, i_op), map(engines.__getitem__, i_engine), srcs, dst_s,
                            [dict(attrs[a]) for a in i_attrs], map(wheres.__getitem__, i_where)))
    return trace


_MIX = 0x9E3779B97F4A7C15  # _distinct_rows's multiplier (odd: a bijection of 64-bit words)


def _distinct_rows(table: np.ndarray) -> tuple[list[list[int]], np.ndarray]:
    """The distinct rows of an integer table (as lists of ints) and, for each row, the index of its distinct row.

    Rows are grouped by a 64-bit mix of their columns (one sort of integers), and the grouping is then checked
    against the rows themselves: a collision of the mix, which any file may contain, falls back to grouping by the
    rows' bytes, so the result is exact whatever the file holds."""
    if not len(table):
        return [], np.zeros(0, dtype=np.intp)
    with np.errstate(over="ignore"):
        h = np.zeros(len(table), dtype=np.uint64)
        for c in range(table.shape[1]):
            h ^= table[:, c].astype(np.uint64)
            h *= np.uint64(_MIX)
            h ^= h >> np.uint64(29)
    _, first, which = np.unique(h, return_index=True, return_inverse=True)
    distinct = table[first]
    if not np.array_equal(distinct[which], table):
        rows = np.ascontiguousarray(table).view(np.dtype((np.void, table.shape[1] * table.itemsize))).ravel()
        _, first, which = np.unique(rows, return_index=True, return_inverse=True)
        distinct = table[first]
    return distinct.tolist(), which.reshape(-1)


def load(path: str | os.PathLike, max_bytes: int = 1 << 31, seen: dict[bytes, Trace] | None = None) -> Trace:
    """Read and validate a trace file written by :func:`dump`.

    ``seen``: traces already loaded, by their files' bytes (the caller's, filled here).  A file whose bytes were
    loaded before is not parsed again: its trace is a :func:`clone` of the earlier one.  The calls of a group
    replay that differ only in their values ship byte-identical traces (``part2.large`` and ``part2.bias``: the
    same kernel on the same shapes), and the grader loads them one after the other once the group's process ends."""
    size = os.path.getsize(path)
    if size > max_bytes:
        _bad(f"file is {size} bytes, more than the {max_bytes} byte limit")
    with open(path, "rb") as f:
        data = f.read()
    if seen is None:
        return loads(data)
    earlier = seen.get(data)
    if earlier is not None:
        return clone(earlier)
    trace = seen[data] = loads(data)
    return trace


def clone(trace: Trace) -> Trace:
    """A copy of ``trace`` that shares nothing its consumers may change: new instructions with their own attrs
    dicts and scheduling fields (the cost model writes ``cost_ns``, ``start_ns`` and ``end_ns`` into the
    instructions it schedules; the grader replaces a timed run's unchecked hints' attrs), the same operand
    objects (immutable NamedTuples).  About a quarter of :func:`loads`'s time for the same trace."""
    copy = Trace(trace.target, trace.kernel_name)
    copy.meta = json.loads(json.dumps(trace.meta))
    enabled = gc.isenabled()
    gc.disable()  # ~10^4 new objects: a cyclic collection over the grader's heap meanwhile cost 30-40 ms (as loads)
    try:
        copy.instrs = [Instr(i.seq, i.op, i.engine, i.srcs, i.dsts, dict(i.attrs), i.where, i.cost_ns, i.start_ns,
                             i.end_ns) for i in trace.instrs]
    finally:
        if enabled:
            gc.enable()
    return copy
