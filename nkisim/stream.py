"""The kernel's program as plain data: recorded where the kernel's Python runs, executed elsewhere.

On Trainium a kernel's Python is a meta-program: it runs once, at specialization, and what it leaves behind is the
instruction stream the device executes (NKI language guide, "Specialization").  nkisim keeps the same split
(``nkisim.core.ops.registers``: no device value reaches the kernel's Python), so the program a run makes can be
written down and executed again without the kernel's Python: a :class:`Recorder` handed to ``run_kernel(...,
stream=...)`` writes every front-end call that makes instructions or allocations (``registers.api`` /
``registers.stream_only``), with its arguments as plain data, and :func:`replay` executes that stream with the same
front-end functions on inputs of the caller's choosing.  The grader uses it so that what it costs and judges comes
from trusted code only (docs/grading-security.md, item 5): the sandboxed child ships the stream, the parent replays
it.

The stream is JSON (never pickle): a header and a list of events.

* ``["call", "module:function", args, kwargs, statement, symbolic loops, results, raised]``: one call of a
  function of the kernel's front end that ``registers.STREAMABLE`` lists (nothing else can be named);
* ``["drop", allocation id]``: the kernel's last reference to an allocation died (physical buffers rotate and
  capacity is charged by liveness, ``core.memory``); a drop the child saw during a call is written before it;
* ``["set", register id, value]`` (an immediate), ``["order", 1|0]`` (``nl.no_reorder`` block), ``["depends",
  handle, [handles]]`` (``NkiInstruction.depends_on``), ``["program", ids]`` (an SPMD program starts);
* ``["fori"|"while"|"drange", params, body events, statement]``: a dynamic loop, its body recorded once;
* values: JSON scalars as themselves, everything else a list whose first item is a tag: ``["T", allocation,
  view]`` a tensor view (``core.aps.view_state``), ``["R", id]`` a register, ``["H", id]`` an instruction handle,
  ``["L", "module:name"]`` an object of the front end's public modules (operators, dtypes, enums, buffers),
  ``["t"|"l", items]``, ``["d", [[k, v], ...]]``, ``["s", start, stop, step]``, ``["E"]`` (Ellipsis), ``["D",
  dtype]``, ``["n", dtype, value]`` (a NumPy scalar), ``["N", name]`` (a NumPy type, ufunc or operator function),
  ``["A", dtype, shape, values]`` (a small NumPy array).  The legacy API's own: ``["X", values, variables]`` an
  index expression (``nl.arange``), ``["M", values, [values, variables]]`` a ``mask=`` predicate, ``["pd", n]``
  ``nl.par_dim(n)``, ``["B", "sbuf"|"psum", ...]`` a ``mod_alloc`` buffer, ``["Bc", "sbuf"|"psum", [[block,
  place], ...]]`` an ``alloc(f)`` buffer (the places ``f`` returned), ``["T", allocation, ["g", ...]]`` a
  gather view of ``nl.arange`` indices and ``["T", allocation, view, [variables, block]]`` a view with the index
  variables of its axes (masks are evaluated through them) or a wrapped direct-allocation block.

Both front ends are recorded (the header's ``frontend``: ``"nki"`` or ``"legacy"``), each marking which of its calls
a stream may name: the current API's ``registers.api`` / ``registers.stream_only`` wrappers, the legacy API's
``registers.stream_only`` on every instruction- or allocation-making function and on the methods of its semantics
(operators and assignment on tiles).  A stream names only its own front end's functions and objects.

What the replay trusts from the stream is only the program: which documented functions were called with which
arguments, in which order, and when the kernel dropped its tensors.  Every check, every value and every cost comes
from nkisim running that program; a stream that names anything else, or views outside their storage, raises
:class:`StreamError` naming the event.  Not recorded (the recorder raises :class:`NotRecordable`): an LNC=2 launch,
``nl.shared_constant`` of a file path and a legacy view indexed again after a tile indexed it.  A placement function
(``ncc.sbuf.alloc(f)``) is recorded as the places it returned (``["Bc", buffer, table]``), a legacy view indexed by a
tile's values (``t[idx_tile, i_f]``) as that indexing (``["T", allocation, ["ix", base, index]]``; ``["Y", tile,
offset]`` a tile plus an offset), which the replay makes again with the tile's values of its own run.
"""

from __future__ import annotations

import importlib
import json
import keyword
import time
import warnings
import weakref
from collections.abc import Callable

import numpy as np

from nkisim import frontends
from nkisim.core import aps, dtypes
from nkisim.core.access import allocation, operand
from nkisim.core.aps import _DYNAMIC_TYPES
from nkisim.core.buffers import BufferSpec
from nkisim.core.context import LIVE, KernelContext, Site, current
from nkisim.core.indexing import DynIndex, IndexExpr, Mask
from nkisim.core.instr import B_HBM, Buf, Trace
from nkisim.core.ops import registers
from nkisim.core.placement import CallbackAlloc, PsumModAlloc, SbufModAlloc
from nkisim.core.runtime import KernelRun, run_kernel
from nkisim.core.semantics import Semantics
from nkisim.core.tensor import ParDim, Tensor

FORMAT = "nkisim-stream/1"
# the front ends whose programs are recorded and replayed (registry keys): the legacy one has no dynamic loops,
# registers or instruction handles, and its own argument objects (index expressions, masks, par_dim, mod_alloc)
REPLAYABLE = ("nki", "legacy")
# bounds on what a replay accepts (a stream is untrusted data): nesting of loop bodies and values, sizes
MAX_DEPTH = 32
MAX_ARRAY = 1 << 20
MAX_NAME = 200


_NONE = object()


class StreamError(ValueError):
    """A malformed or forged stream: the message names the event and the problem."""


class NotRecordable(NotImplementedError):
    """The kernel used something the stream cannot express (the message says what)."""


def _library(fe: frontends.FrontEnd) -> tuple[dict, dict, list]:
    """The public objects of the front end's modules: ``{id: path}``, ``{path: object}`` and the module names.
    Built from the registry (trusted data), never from a stream."""
    names = [fe.top] + [f"{fe.package}.{m}" for m in fe.submodules]
    by_id: dict = {}
    by_path: dict = {}
    import enum

    for mname in names:
        mod = importlib.import_module(mname)
        for n in sorted(vars(mod)):
            if n.startswith("_"):
                continue
            obj = vars(mod)[n]
            if isinstance(obj, (int, float, str, bool, type(None), type(importlib))):
                continue
            path = f"{mname}:{n}"
            by_path.setdefault(path, obj)
            by_id.setdefault(id(obj), path)
            if isinstance(obj, type) and issubclass(obj, enum.Enum):
                for m in obj:
                    p = f"{mname}:{n}.{m.name}"
                    by_path.setdefault(p, m)
                    by_id.setdefault(id(m), p)
    return by_id, by_path, names


_LIB: dict = {}


def library(fe: frontends.FrontEnd) -> tuple[dict, dict, list]:
    lib = _LIB.get(fe.key)
    if lib is None:
        lib = _LIB[fe.key] = _library(fe)
    return lib


# ---- recording ----------------------------------------------------------------------------------------------------
class Recorder:
    """Writes the program one kernel run makes (``run_kernel(..., stream=Recorder())``); :meth:`data` is the stream.

    Called by the core (``ctx.stream``) at every front-end call the kernel's Python makes, at dynamic loops, at
    immediates, ``no_reorder`` blocks and handles' ``depends_on``."""

    def __init__(self) -> None:
        self.header: dict = {}
        self.events: list = []
        self._stack: list = []
        self._cur: list = self.events
        self._open: list | None = None  # [event list, index of the call being made]
        self._allocs: dict = {}  # id(allocation) -> (aid, weakref)
        self._next_aid = 0
        self._consts: dict = {}  # (type, repr) of a plain argument value -> index into _const_list
        self._const_list: list = []
        self._views: dict = {}  # a strided view's state -> index into _view_list
        # id(Operand) of an on-chip strided view -> (the Operand, the view's shape, index into _view_list): the
        # Operand is interned by a key (access.make_operand) that determines the view's state (aps.strided_key)
        self._op_views: dict = {}
        self._view_list: list = []
        self._funcs: dict = {}  # "module:function" -> index
        self._last_res = None  # weak reference to the last call's tensor result (item assignment retargets it)
        self._derived: dict = {}  # id(view) -> (weak reference, how it was derived): gather views
        self._in_check: list | None = None  # allocations dropped while a capacity check walks the frames
        self._codes: dict = {}  # id(code) -> index
        self._sites: dict = {}  # Site (a kernel statement of this run) -> index of its code
        self._loops: list = []  # the last call's copy of the symbolic loops' iterations (never changed once made)
        self._dtype_keys: dict = {}  # id(np.dtype) -> (the dtype, its constant-table key): repr(dtype) is Python
        self._code_list: list = []
        self._code_keep: list = []
        self._handles: dict = {}  # id(handle) -> hid
        self._handle_keep: list = []
        self._lib: dict = {}
        self._closed = True
        self._last: list | None = None
        self._ctx: KernelContext | None = None  # the run being recorded (dynamically indexed views: ctx.dyn)
        self._placements: dict = {}  # id(CallbackAlloc) -> the places its function returned in this call
        self._legacy = False
        self._mark = 0  # trace length after the last recorded call or loop: nothing else may add instructions

    # -- set-up and end (run_kernel) -----------------------------------------------------------------------------
    def begin(self, ctx: KernelContext, kernel, names, hbm_args, hbm_kwargs) -> None:
        if ctx.frontend.key not in REPLAYABLE:
            raise NotRecordable(f"nkisim records instruction streams of {' and '.join(REPLAYABLE)} kernels, not of "
                                f"the {ctx.frontend.title}")
        self.__init__()
        self._closed = False
        self._ctx = ctx
        self._legacy = ctx.frontend.key == "legacy"
        self._lib = library(ctx.frontend)[0]
        from nkisim.core.runtime import launch_grid, lockstep_launch, unwrap

        if lockstep_launch(kernel):
            # the two cores' programs interleave at their synchronisations (core.lockstep): one sequential stream
            # of programs cannot express that
            raise NotRecordable("nkisim records instruction streams of single-core launches, not of an LNC=2 "
                                "launch (kernel[2]: two programs run in lockstep); call the kernel without [2]")
        grid, cores = launch_grid(kernel)
        fn = unwrap(kernel)
        self._code(ctx.kernel_code)  # the kernel function's code is code 0
        args, mutable = [], []
        for t in (*hbm_args, *hbm_kwargs.values()):
            if isinstance(t, Tensor):
                args.append(self._new_alloc(t))
                mutable.append(not allocation(t).immutable)
            else:
                args.append(None)
                mutable.append(False)
        self.header = {
            "format": FORMAT, "frontend": ctx.frontend.key, "target": ctx.target, "mode": "full" if ctx.full else
            "timing", "kernel": getattr(fn, "__name__", "kernel"), "names": list(names),
            "kwargs": list(hbm_kwargs), "args": args, "mutable": mutable, "grid": list(grid),
            "cores": list(cores) if cores else None, "middle_end": ctx.middle_end, "simulate": ctx.mem.simulate,
        }
        ctx.stream = self
        ctx.mem.on_reclaim = self._reclaimed
        self._mark = len(ctx.trace.instrs)
        LIVE[0] = True

    def end(self, ctx: KernelContext, ret) -> None:
        self._check_gap(ctx)
        self.events.append(["return", self._enc(ret, 0)])
        self._closed = True
        self._ctx = None
        ctx.stream = None

    def data(self) -> dict:
        """The stream: header, code table and events (plain data, ready for ``json.dumps``)."""
        return {**self.header, "codes": self._code_list, "consts": self._const_list, "views": self._view_list,
                "functions": list(self._funcs), "events": self.events}

    # -- events ---------------------------------------------------------------------------------------------------
    def event(self, ev: list) -> None:
        if not self._closed:
            self._cur.append(ev)

    def before(self, ctx: KernelContext, key: str, args, kwargs):
        """A front-end call is about to be made (``registers.api``): written down with its arguments as they are
        now.  Returns the token :meth:`after` takes.  Not in the call chain: the kernel statement a call's
        ``settle`` finds is the first frame outside the emulator, which must stay the kernel's."""
        if self._closed:
            return None
        if len(ctx.trace.instrs) != self._mark:
            self._check_gap(ctx)
        fid = self._funcs.get(key)
        if fid is None:
            fid = self._funcs[key] = len(self._funcs)
        loops = ctx.sym_loops
        if loops:
            # the symbolic loops' iterations as they are now; consecutive calls of one iteration share one copy
            # (the legacy API's ``acc += nisa.nc_matmul(..)`` is two calls)
            if loops != self._loops:
                self._loops = [list(e) for e in loops]
            loops = self._loops
        else:
            loops = None
        try:
            # a tensor straight to _tensor (what _arg does with one after its scalar tests): most arguments are views
            enc = self._tensor
            arg = self._arg
            entry = ["call", fid, [enc(a, 0) if isinstance(a, Tensor) else arg(a) for a in args] if args else [],
                     [[k, enc(v, 0) if isinstance(v, Tensor) else arg(v)] for k, v in kwargs.items()] if kwargs
                     else [], None, loops, None, False]
        except NotRecordable as exc:
            # the call's own error (an argument the front end refuses) comes first: raised by after() otherwise
            return (None, self._open, exc)
        lst = self._cur
        token = (entry, self._open, None)
        self._open = [lst, len(lst)]
        lst.append(entry)
        return token

    def after(self, ctx: KernelContext, token, res, raised: bool) -> None:
        """The call made by :meth:`before` returned ``res`` (or raised)."""
        if token is None:
            return
        entry, self._open, unrecordable = token
        if unrecordable is not None:
            if raised:
                return
            raise unrecordable
        entry[4] = self._stmt(ctx)
        self._mark = len(ctx.trace.instrs)
        if raised:
            entry[7] = True
            return
        if res is not None:  # an instruction returns None (entry[6] stays None, what _bind makes of it)
            entry[6] = self._bind(res)
        self._last = entry
        self._last_res = weakref.ref(res) if isinstance(res, Tensor) else None

    def derived(self, view, how: tuple) -> None:
        """A view the storage layer cannot describe as a pattern (``vector_select``'s gather): how it was made."""
        if not self._closed:
            self._derived[id(view)] = (weakref.ref(view), how)

    def handle(self, h) -> None:
        if self._closed or self._last is None:
            return
        hid = len(self._handle_keep) + 1
        self._handles[id(h)] = hid
        self._handle_keep.append(h)
        self._last[6] = ["H", hid]

    def depends(self, h, producers) -> None:
        if self._closed:
            return
        ids = [self._handles.get(id(p)) for p in producers]
        mine = self._handles.get(id(h))
        if mine is None or None in ids:
            raise NotRecordable("depends_on on an instruction handle the stream does not know")
        self._cur.append(["depends", mine, ids])

    def _check_gap(self, ctx: KernelContext) -> None:
        """Every instruction of the run comes from a recorded call (or a recorded loop's execution): anything else
        would be missing from the replay, silently cheaper and different, so it stops the recording."""
        n = len(ctx.trace.instrs)
        if n != self._mark and not self._stack:
            last = ctx.trace.instrs[-1]
            raise NotRecordable(f"an instruction ({last.op} at {last.where}) was made outside the calls nkisim "
                                "records in an instruction stream")

    def executed(self, ctx: KernelContext) -> None:
        """A recorded dynamic loop ran at the kernel's top level: its instructions are the loop's."""
        if not self._stack:
            self._mark = len(ctx.trace.instrs)

    def push(self, ctx: KernelContext) -> None:
        self._stack.append((self._cur, self._stmt(ctx)))
        self._cur = []

    def loop(self, ctx: KernelContext, kind: str, params: tuple) -> None:
        body = self._cur
        self._cur, stmt = self._stack.pop()
        if not self._closed:
            self._cur.append([kind, self._enc(list(params), 0), body, stmt])

    # -- helpers ------------------------------------------------------------------------------------------------
    def _dropped(self, aid: int, key: int) -> None:
        known = self._allocs.get(key)
        if known is not None and known[0] == aid:
            del self._allocs[key]
        if self._closed:
            return
        if self._in_check is not None:
            self._in_check.append(aid)
            return
        ev = ["drop", aid]
        if self._open is not None:  # died during a call: the kernel had let it go before the call
            lst, i = self._open
            lst.insert(i, ev)
            self._open[1] = i + 1
        else:
            self._cur.append(ev)

    def _reclaimed(self, allocs: list | None) -> None:
        """The capacity check found these tiles dead (``core.liveness``, from the kernel's frames): the replay,
        which has no kernel frames, takes the same ones (during the same call).  Called with None when the check
        starts: tiles dropped while it walks the frames (it refreshes their locals snapshots) are dropped at the
        same point of the replay."""
        if self._closed:
            return
        if allocs is None:
            self._in_check = []
            return
        dropped, self._in_check = self._in_check or [], None
        aids = []
        for a in allocs:
            known = self._allocs.get(id(a))
            if known is not None and known[1]() is a:
                aids.append(known[0])
        ev = ["reclaim", aids, dropped]
        if self._open is not None:
            lst, i = self._open
            lst.insert(i, ev)
            self._open[1] = i + 1
        else:
            self._cur.append(ev)

    def _new_alloc(self, t: Tensor) -> int:
        a = allocation(t)
        self._next_aid += 1
        aid = self._next_aid
        cb = self._dropped
        self._allocs[id(a)] = (aid, weakref.ref(a, lambda _r, aid=aid, key=id(a): cb(aid, key)))
        return aid

    def _stmt(self, ctx: KernelContext):
        site = ctx.site
        if site is None:
            return None
        k = self._sites.get(site)  # Site objects are one per kernel statement and run, hashed by identity
        if k is None:
            k = self._sites[site] = self._code(site[0])
        return [k, site[1]]

    def _code(self, code) -> int:
        k = self._codes.get(id(code))
        if k is None:
            k = self._codes[id(code)] = len(self._code_list)
            self._code_keep.append(code)
            self._code_list.append([str(getattr(code, "co_filename", "?")), str(getattr(code, "co_name", "?"))])
        return k

    def _bind(self, res):
        if isinstance(res, Tensor):
            a = allocation(res)
            known = self._allocs.get(id(a))
            if known is not None and known[1]() is a:
                return None
            return ["T", self._new_alloc(res)]
        if isinstance(res, registers.Register):
            return ["R", res.rid]
        if isinstance(res, (tuple, list)):
            return ["t", [self._bind(r) for r in res]]
        return None

    def _arg(self, x):
        """One argument: a plain value once into the constant table (most arguments repeat: operators, dtypes,
        engines, shapes), the rest encoded where it stands."""
        t = type(x)
        if t is int or t is float or t is bool or x is None or t is str:
            return x
        if isinstance(x, Tensor):  # the usual argument: no tensor is a constant or an object of the library
            return self._tensor(x, 0)
        if isinstance(x, Semantics):  # the legacy API's operators and assignment: a method of its semantics
            return ["S"]
        if t is tuple and all(type(v) in _SCALARS for v in x) or isinstance(x, _INTERNED) or id(x) in self._lib:
            if id(x) in self._lib:
                key = (t, id(x))
            elif isinstance(x, np.dtype):  # a tensor's dtype passed on (``dtype=out.dtype``): one repr per object
                known = self._dtype_keys.get(id(x))
                if known is None or known[0] is not x:
                    known = self._dtype_keys[id(x)] = (x, (t, repr(x)))
                key = known[1]
            else:
                key = (t, repr(x))
            k = self._consts.get(key)
            if k is None:
                k = self._consts[key] = len(self._const_list)
                self._const_list.append(self._enc(x, 0))
            return ["c", k]
        return self._enc(x, 0)

    def _enc(self, x, depth: int):
        if depth > MAX_DEPTH:
            raise NotRecordable("an argument nested too deeply to record")
        if x is None or x is True or x is False or type(x) in (int, str):
            return x
        if type(x) is float:
            return x
        if isinstance(x, Tensor):
            return self._tensor(x, depth)
        if isinstance(x, registers.Register):
            return ["R", x.rid]
        if type(x) in (list, tuple):
            return ["l" if type(x) is list else "t", [self._enc(v, depth + 1) for v in x]]
        if type(x) is dict:
            return ["d", [[self._enc(k, depth + 1), self._enc(v, depth + 1)] for k, v in x.items()]]
        if type(x) is slice:
            return ["s", self._enc(x.start, depth + 1), self._enc(x.stop, depth + 1), self._enc(x.step, depth + 1)]
        if x is Ellipsis:
            return ["E"]
        hid = self._handles.get(id(x))
        if hid is not None:
            return ["H", hid]
        path = self._lib.get(id(x))
        if path is not None:
            return ["L", path]
        if isinstance(x, np.dtype):
            return ["D", dtypes.name(x)]
        if isinstance(x, np.generic):
            return ["n", x.dtype.name, x.item() if x.dtype.kind != "V" else float(x)]  # bfloat16, fp8: exact
        if isinstance(x, (np.ufunc, type)) and getattr(np, getattr(x, "__name__", ""), None) is x:
            return ["N", x.__name__]
        if callable(x) and getattr(np, getattr(x, "__name__", ""), None) is x and _np_operator(x):
            return ["N", x.__name__]  # np.max, np.sum, ...: operators the front ends take (frontends._operators)
        if isinstance(x, np.ndarray) and x.dtype.kind in "biuf" and x.size <= MAX_ARRAY:
            return ["A", x.dtype.name, list(x.shape), x.reshape(-1).tolist()]
        if isinstance(x, Semantics):  # a method of the running front end's semantics (item assignment)
            return ["S"]
        if isinstance(x, (int, float)):  # subclasses of int/float (IntEnum members not in the library)
            return int(x) if isinstance(x, int) else float(x)
        if self._legacy:
            return self._enc_legacy(x, depth)
        raise NotRecordable(f"nkisim cannot record a {type(x).__name__} argument in an instruction stream")

    def _tensor(self, x: Tensor, depth: int):
        """A tensor view: its allocation's id and, for a strided view, the index of its state in the view table
        (interned by :func:`aps.strided_key`, the fields the table's entry holds); other views where they stand."""
        a = x._a  # access.allocation, read as the core reads it
        known = self._allocs.get(id(a))
        if known is None or known[1]() is not a:
            raise NotRecordable(f"tensor '{x.name}' was not made by a recorded call (nl.shared_constant and "
                                "internal results are not recordable)")
        if self._last_res is not None and self._last_res() is x:  # the previous call's own result object
            return ["P", known[0]]
        if self._derived:
            d = self._derived.get(id(x))
            if d is not None and d[0]() is x:
                how = d[1]
                if how[0] == "ix":  # legacy t[idx_tile, i_f]: the base view and the index, resolved by the replay
                    return ["T", known[0], ["ix", self._enc(how[1], depth + 1), self._enc(list(how[2]), depth + 1)]]
                return ["T", known[0], [how[0], self._enc(how[1], depth + 1), how[2], self._enc(how[3], depth + 1)]]
        op = None
        if a.buf != B_HBM and x._ix is None and type(x) not in _DYNAMIC_TYPES:
            # an on-chip strided view: its interned Operand (access.make_operand, keyed by everything the view
            # table's entry holds) names its entry; the emit computes the same Operand for the call anyway
            op = x._opnd
            if op is None:
                try:
                    op = operand(x)
                except Exception:  # noqa: BLE001 - left to the call, which raises its own error first
                    op = None
            hit = self._op_views.get(id(op)) if op is not None else None
            if hit is not None and hit[0] is op and hit[1] == x._shape:
                vid = hit[2]
                if not self._legacy:
                    return ["T", known[0], vid]
                return self._with_extras(x, known[0], vid)
        vkey = aps.strided_key(x)
        if vkey is None:
            return self._other_view(x, known[0], depth)
        vid = self._views.get(vkey)
        if vid is None:
            vid = self._views[vkey] = len(self._view_list)
            self._view_list.append(["v", vkey[0], list(vkey[1]), list(vkey[2]), int(vkey[3]), int(vkey[4])])
        if op is not None:
            self._op_views[id(op)] = (op, vkey[1], vid)  # holds the Operand: its id stays its own
        if not self._legacy:
            return ["T", known[0], vid]
        return self._with_extras(x, known[0], vid)

    def _with_extras(self, x: Tensor, aid: int, vid: int) -> list:
        """A legacy strided view's entry, with what it carries beyond its addresses (:func:`aps.view_extras`)."""
        axv, lblk = aps.view_extras(x)
        if axv is not None or lblk is not None:
            return ["T", aid, vid, [[[k, v] for k, v in axv.items()] if axv else None, lblk]]
        return ["T", aid, vid]

    def _other_view(self, x: Tensor, aid: int, depth: int):
        """A view :func:`aps.strided_key` does not intern: a gather, a run-time offset (or a shape the state
        refuses)."""
        try:
            state = aps.view_state(x)
        except NotImplementedError as exc:
            raise NotRecordable(str(exc)) from None
        extra = None
        if self._legacy:
            axv, lblk = aps.view_extras(x)
            if axv is not None or lblk is not None:
                extra = [[[k, v] for k, v in axv.items()] if axv else None, lblk]
        if state[0] == "g":
            ctx = self._ctx
            if ctx is not None and ctx.dyn:
                # a view indexed further from one indexed by a tile's values holds stand-in indices here (no
                # values): its addresses cannot be written down; the one the tile indexed is recorded as made
                raise NotRecordable(f"a view of '{x.name}' indexed again after a dynamic index (a tile's "
                                    "values) cannot be recorded in an instruction stream yet: index the tensor "
                                    "once, with the tile and the nl.arange expressions together")
            state = ["g", state[1], state[2], state[3], state[4], [self._enc(a, depth + 1) for a in state[5]],
                     state[6]]
            return ["T", aid, state] if extra is None else ["T", aid, state, extra]
        if state[0] != "v":
            state = (state[0], self._enc(state[1], depth + 1), state[2], state[3], self._enc(state[4], depth + 1),
                     state[5], self._enc(state[6], depth + 1), state[7])
            return ["T", aid, list(state)]
        vkey = (state[1], tuple(state[2]), tuple(state[3]), state[4], state[5])
        vid = self._views.get(vkey)
        if vid is None:
            vid = self._views[vkey] = len(self._view_list)
            self._view_list.append(list(state))
        return ["T", aid, vid] if extra is None else ["T", aid, vid, extra]

    def _enc_legacy(self, x, depth: int):
        """The legacy API's own argument objects: index expressions and masks (pure data: values and the index
        variable of each axis), ``nl.par_dim`` in shapes, and direct-allocation buffers (``ncc.sbuf.mod_alloc``)."""
        if isinstance(x, IndexExpr):
            return ["X", self._enc(x.values, depth + 1), list(x.axv) if x.axv is not None else None]
        if isinstance(x, Mask):
            named = None
            if x.named is not None:
                named = [self._enc(x.named[0], depth + 1), list(x.named[1])]
            return ["M", self._enc(x.values, depth + 1) if x.values is not None else None, named]
        if isinstance(x, ParDim):
            return ["pd", x.size]
        if isinstance(x, DynIndex):
            return ["Y", self._enc(x.tile, depth + 1), self._enc(x.offset, depth + 1)]
        if isinstance(x, BufferSpec) and x.direct is not None:
            d = x.direct
            if type(d) is SbufModAlloc:
                return ["B", "sbuf", d.base_addr, d.base_partition, list(d.num_free_tiles)]
            if type(d) is PsumModAlloc:
                return ["B", "psum", d.base_bank, d.base_addr, list(d.num_bank_tiles)]
            if type(d) is CallbackAlloc:
                # ncc.sbuf.alloc(f): the compiler calls the kernel's f per block; the stream holds the places it
                # returned (filled in by placed() while the call runs), never f
                table = self._placements[id(d)] = []
                return ["Bc", "psum" if x.kind == Buf.PSUM else "sbuf", table]
        raise NotRecordable(f"nkisim cannot record a {type(x).__name__} argument in an instruction stream")

    def placed(self, spec, idx: tuple, got: tuple) -> None:
        """A placement function (``ncc.sbuf.alloc(f)``) placed block ``idx`` at ``got`` during a recorded call."""
        table = self._placements.get(id(spec))
        if table is None or self._closed:
            raise NotRecordable("a placement function was called outside the call that allocates with it")
        table.append([list(idx), list(got)])


_SCALARS = (int, float, bool, str, type(None))
_VALUE_TYPES = (bool, int, float, str)  # a stream's scalar values besides None (JSON's)
# what a legacy program cannot hold: the current API's dynamic loops, registers and instruction handles
_NKI_ONLY = ("set", "depends", "fori", "while", "drange")
_NKI_TAGS = {"R": "register", "H": "instruction handle"}
_INTERNED = (np.dtype, np.generic)


def _np_operator(x) -> bool:
    """A NumPy function the front ends take as an operator (``np.max`` for ``nisa.tensor_reduce``)."""
    from nkisim.frontends._operators import NP_ACT, NP_ALU

    try:
        return x in NP_ALU or x in NP_ACT
    except TypeError:
        return False




def record(kernel, args=(), kwargs=None, *, mode: str = "timing", target: str | None = None,
           simulate: bool = False) -> tuple[dict, KernelRun]:
    """Run ``kernel`` (specialize it; ``mode='timing'`` computes no values) and return its stream and the run."""
    rec = Recorder()
    run = run_kernel(kernel, args, kwargs, mode=mode, target=target, simulate=simulate, stream=rec)
    return rec.data(), run


def dumps(stream: dict) -> bytes:
    # check_circular=False: a recorded stream is built by the Recorder from fresh lists and exact JSON scalars
    # (no container of the kernel's own reaches it), so it holds no cycle; the check costs a fifth of the encoding
    return json.dumps(stream, separators=(",", ":"), allow_nan=True, check_circular=False).encode()


def loads(data: bytes) -> dict:
    try:
        s = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise StreamError(f"the stream is not valid JSON: {exc}") from None
    if not isinstance(s, dict) or s.get("format") != FORMAT:
        raise StreamError(f"not an instruction stream of format {FORMAT}")
    return s


# ---- replay -------------------------------------------------------------------------------------------------------
class _Code:
    """The stand-in of a kernel code object: what sites and locations read of one (file name, function name)."""

    __slots__ = ("co_filename", "co_name")

    def __init__(self, filename: str, name: str) -> None:
        self.co_filename, self.co_name = filename, name


class _ReplayContext(KernelContext):
    """The running replay's context: each call's kernel statement comes from the stream, not from a Python frame
    (``stmt_now``, which ``KernelContext.settle`` takes instead of walking the stack)."""


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise StreamError(f"{where}: {what}")


class _Replayer:
    """Executes a stream's events inside ``run_kernel`` (the kernel function it is called as)."""

    def __init__(self, s: dict) -> None:
        self.s = s
        fe_key = s.get("frontend")
        _need(fe_key in REPLAYABLE, "header", f"front end {fe_key!r:.40} (streams of {', '.join(REPLAYABLE)} replay)")
        self.fe = frontends.BY_KEY[fe_key]
        self.legacy = fe_key == "legacy"
        _, self.lib, modules = library(self.fe)
        self.modules = {m: importlib.import_module(m) for m in (*modules, self.fe.semantics.split(":")[0])}
        name = s.get("kernel")
        _need(isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and len(name) <= MAX_NAME,
              "header", f"kernel name {name!r}")
        self.__name__ = name
        names = s.get("names")
        _need(isinstance(names, list) and all(isinstance(n, str) and n.isidentifier() and not keyword.iskeyword(n)
                                              and len(n) <= MAX_NAME for n in names) and len(set(names)) == len(names),
              "header", "argument names")
        # only for run_kernel's argument names (wrap_host): compiled from identifiers only, never executed
        ns: dict = {}
        exec(compile(f"def {name}({', '.join(names)}): pass", "<stream>", "exec"), {}, ns)  # noqa: S102 - checked
        self.__code__ = ns[name].__code__
        codes = s.get("codes")
        _need(isinstance(codes, list) and codes and all(
            isinstance(c, list) and len(c) == 2 and all(isinstance(v, str) and len(v) <= 4096 for v in c)
            for c in codes), "header", "code table")
        self.codes = [_Code(f, n) for f, n in codes]
        self.sites: dict = {}
        grid = s.get("grid") or []
        _need(isinstance(grid, list) and all(type(g) is int and 1 <= g <= 64 for g in grid) and len(grid) <= 3,
              "header", "launch grid")
        self.nki_grid = tuple(grid) or None
        cores = s.get("cores")
        _need(cores is None or (isinstance(cores, list) and all(type(c) is int and 0 <= c < 64 for c in cores)),
              "header", "cores")
        self.nki_cores = cores
        if not s.get("middle_end", True):
            self.directive = "skip_middle_end_transformations"
        events = s.get("events")
        _need(isinstance(events, list), "header", "events")
        self.events = events
        self.functions = s.get("functions")
        _need(isinstance(self.functions, list), "header", "function table")
        self.consts = s.get("consts")
        self.views = s.get("views")
        _need(isinstance(self.consts, list) and isinstance(self.views, list), "header", "constant or view table")
        self.share = None  # core.sharing.Member when replayed in a group (replay_group)
        self.fcache: dict = {}
        self.path_fids: set = set()  # function indices of nl.shared_constant (_call refuses a file path)
        self.checked: set = set()  # (view index, storage key) pairs core.aps.rebuild has checked
        self._reset()

    def _reset(self) -> None:
        """The state of one run of the stream."""
        self.pos = 0
        self.allocs: dict = {}
        self.regs: dict = {}
        self.handles: dict = {}
        self.orders: list = []
        self.last_res = None
        self.reclaims: list = []  # the dead tiles of each capacity check still to come, in order
        self.reclaimed: set = set()
        self.vcache: dict = {}  # aid -> {view index: the view} (dropped with the allocation)
        self.ccache: dict = {}

    # -- run_kernel calls this once per program ------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        ctx = current("replay")
        if not isinstance(ctx, _ReplayContext):
            # a new run (the first, or run_kernel's full rerun of a timing run that needs register values)
            self._reset()
            ctx.__class__ = _ReplayContext  # the statements come from the stream from now on
            if not self.nki_grid:  # a member of a lockstep group (replay_group); grid launches never hand over
                ctx.share = self.share
            ctx.kernel_code = ctx.mem.stop_code = self.codes[0]
            ctx.mem.dead_source = self._dead
            self._bind_args(ctx, args, kwargs)
        evs = self.events
        if self.nki_grid:
            _need(self.pos < len(evs) and isinstance(evs[self.pos], list) and evs[self.pos][:1] == ["program"],
                  f"event {self.pos}", "a launch-grid program should start here")
            self.pos += 1
        while self.pos < len(evs):
            ev = evs[self.pos]
            head = ev[0] if isinstance(ev, list) and ev else None
            if head == "program":
                return None
            self.pos += 1
            if head == "return":
                _need(len(ev) == 2, f"event {self.pos - 1}", "malformed return")
                _need(self.pos == len(evs), f"event {self.pos}", "events after the kernel returned")
                ret = self._dec(ev[1], 0, f"event {self.pos - 1}", {})
                ctx.stmt_now = None
                return ret
            self._event(ctx, ev, self.pos - 1, 0)
        raise StreamError("the stream ends without the kernel's return")

    def _dead(self) -> dict:
        """The tiles the recording run's capacity check found dead at this point (``MemoryTracker.reclaim``)."""
        aids, dropped = self.reclaims.pop(0) if self.reclaims else ([], [])
        for aid in dropped:
            self._drop(aid)
        self.reclaimed.update(aids)
        out = {}
        for aid in aids:
            t = self.allocs.get(aid)
            if t is not None:
                a = allocation(t)
                out[id(a)] = a
        return out

    def _drop(self, aid: int) -> None:
        """The kernel let allocation ``aid`` go: so does the replay (it dies when nkisim holds it no more)."""
        gone = self.allocs.pop(aid, None)
        self.vcache.pop(aid, None)
        if gone is not None and self.last_res is not None and allocation(self.last_res) is allocation(gone):
            self.last_res = None

    def _bind_args(self, ctx, args, kwargs) -> None:
        s = self.s
        given = [*args, *kwargs.values()]
        want = s.get("args")
        _need(isinstance(want, list) and len(want) == len(given), "header",
              f"the stream's kernel takes {len(want) if isinstance(want, list) else '?'} arguments, "
              f"the replay was given {len(given)}")
        _need(s.get("kwargs") == list(kwargs), "header", "keyword argument names differ from the replay's")
        mutable = s.get("mutable")
        _need(isinstance(mutable, list) and len(mutable) == len(given), "header", "mutable flags")
        for i, (aid, t, mut) in enumerate(zip(want, given, mutable)):
            if isinstance(t, Tensor):
                _need(type(aid) is int, "header", f"argument {i} is a tensor in the replay, not in the stream")
                self.allocs[aid] = t
                if mut is True:
                    allocation(t).immutable = False
            else:
                _need(aid is None, "header", f"argument {i} is a tensor in the stream, not in the replay")

    # -- events ---------------------------------------------------------------------------------------------------
    def _stmt(self, st, where: str):
        if st is None:
            return None
        if type(st) is list and len(st) == 2 and type(st[0]) is int and type(st[1]) is int:
            w = self.sites.get((st[0], st[1]))
            if w is not None:  # checked when it was made (below)
                return w
        _need(isinstance(st, list) and len(st) == 2 and type(st[0]) is int and 0 <= st[0] < len(self.codes)
              and type(st[1]) is int and 0 <= st[1] < 1 << 24, where, "malformed statement")
        key = (st[0], st[1])
        w = self.sites.get(key)
        if w is None:
            code = self.codes[st[0]]
            w = self.sites[key] = (f"{code.co_filename.rsplit('/', 1)[-1]}:{st[1]}", Site((code, st[1])))
        return w

    def _event(self, ctx: _ReplayContext, ev, i: int, depth: int) -> None:
        where = f"event {i}" if depth == 0 else f"event {i} (loop body depth {depth})"
        if not (isinstance(ev, list) and ev and isinstance(ev[0], str)):
            raise StreamError(f"{where}: not an event")
        kind = ev[0]
        if kind == "call":
            self._call(ctx, ev, where)
        elif kind == "drop":
            if len(ev) != 2 or type(ev[1]) is not int:
                raise StreamError(f"{where}: malformed drop")
            self._drop(ev[1])
        elif kind == "reclaim":
            _need(len(ev) == 3 and isinstance(ev[1], list) and isinstance(ev[2], list)
                  and all(type(a) is int for a in ev[1] + ev[2]), where, "malformed reclaim")
            self.reclaims.append((ev[1], ev[2]))
        elif self.legacy and kind in _NKI_ONLY:
            raise StreamError(f"{where}: {kind!r} events do not exist in a legacy API program")
        elif kind == "set":
            _need(len(ev) == 3 and type(ev[1]) is int and type(ev[2]) is int, where, "malformed set")
            registers.immediate(self._reg(ev[1]), ev[2])
        elif kind == "order":
            _need(len(ev) == 2 and ev[1] in (0, 1), where, "malformed order")
            if ev[1]:
                from nkisim.core.context import NoReorder

                o = NoReorder()
                o.__enter__()
                self.orders.append(o)
            else:
                _need(bool(self.orders), where, "no_reorder block closed but not opened")
                self.orders.pop().__exit__(None, None, None)
        elif kind == "depends":
            _need(len(ev) == 3 and type(ev[1]) is int and isinstance(ev[2], list), where, "malformed depends")
            h = self.handles.get(ev[1])
            prods = [self.handles.get(p) for p in ev[2]]
            _need(h is not None and None not in prods, where, "depends_on names an unknown instruction handle")
            h.depends_on(*prods)
        elif kind in ("fori", "while", "drange"):
            self._loop(ctx, ev, where, depth)
        else:
            raise StreamError(f"{where}: unknown event {kind!r}")

    def _function(self, fid, where: str):
        fn = self.fcache.get(fid) if type(fid) is int else None
        if fn is not None:
            return fn
        _need(type(fid) is int and 0 <= fid < len(self.functions), where, "malformed function index")
        key = self.functions[fid]
        _need(isinstance(key, str) and key.count(":") == 1, where, f"function {key!r:.100}")
        mname, name = key.split(":")
        _need((mname, name) in registers.STREAMABLE and mname in self.modules, where,
              f"{key!r:.100} is not a function of the kernel's front end that a stream may call")
        fn = getattr(self.modules[mname], name, None)
        if fn is None and mname == self.fe.semantics.split(":")[0]:  # a method of the front end's semantics
            fn = getattr(current("replay").sem.__class__, name, None)
        _need(callable(fn), where, f"{key!r:.100} is not a function of the front end")
        self.fcache[fid] = fn
        if name == "shared_constant":
            self.path_fids.add(fid)  # its calls' first argument is checked (_call)
        return fn

    def _call(self, ctx: _ReplayContext, ev, where: str) -> None:
        if not (len(ev) == 8 and isinstance(ev[2], list) and isinstance(ev[3], list)):
            raise StreamError(f"{where}: malformed call")
        fn = self._function(ev[1], where)
        if ev[1] in self.path_fids:
            _need(not ev[2] or not isinstance(ev[2][0], str), where, "nl.shared_constant of a file path is not "
                  "replayed (the path is the child's; under grading every path is refused)")
        memo: dict = {}
        dec = self._dec
        args = [dec(a, 1, where, memo) for a in ev[2]]
        kwargs = {}
        for kv in ev[3]:
            if not (type(kv) is list and len(kv) == 2 and type(kv[0]) is str):
                raise StreamError(f"{where}: malformed keyword argument")
            kwargs[kv[0]] = dec(kv[1], 1, where, memo)
        sym = ev[5]
        if sym is None:
            ctx.sym_loops = []
        else:
            _need(isinstance(sym, list) and all(isinstance(e, list) and len(e) == 2 and all(type(v) is int for v in e)
                                                for e in sym), where, "malformed loop state")
            ctx.sym_loops = [list(e) for e in sym]
        ctx.stmt_now = self._stmt(ev[4], where)
        try:
            res = fn(*args, **kwargs)
        except Exception:
            if ev[7] is not True:
                raise
            res = None  # the kernel caught this call's error in the child too
        del args, kwargs, memo
        self.last_res = res if isinstance(res, Tensor) else None
        if ev[6] is not None and ev[7] is not True:
            self._bind_result(ev[6], res, where)

    def _bind_result(self, spec, res, where: str) -> None:
        if not (isinstance(spec, list) and spec):
            raise StreamError(f"{where}: malformed result")
        tag = spec[0]
        if tag == "T":
            if not (isinstance(res, Tensor) and len(spec) == 2 and type(spec[1]) is int):
                raise StreamError(f"{where}: the call returned no tensor where the stream says it did")
            self.allocs[spec[1]] = res
        elif tag == "R":
            _need(isinstance(res, registers.Register) and len(spec) == 2 and type(spec[1]) is int, where,
                  "the call returned no register where the stream says it did")
            self.regs[spec[1]] = res
        elif tag == "H":
            if not (len(spec) == 2 and type(spec[1]) is int and type(res).__name__ == "NkiInstruction"):
                raise StreamError(f"{where}: the call returned no instruction handle where the stream says it did")
            self.handles[spec[1]] = res
        elif tag == "t":
            _need(isinstance(res, (tuple, list)) and len(spec) == 2 and isinstance(spec[1], list)
                  and len(res) == len(spec[1]), where, "the call's results differ from the stream's")
            for s, r in zip(spec[1], res):
                if s is not None:
                    self._bind_result(s, r, where)
        else:
            raise StreamError(f"{where}: malformed result")

    def _reg(self, rid):
        r = self.regs.get(rid)
        if r is None:
            from nkisim.frontends.nki.objects import VirtualRegister

            r = self.regs[rid] = VirtualRegister()
        return r

    def _loop(self, ctx: _ReplayContext, ev, where: str, depth: int) -> None:
        _need(len(ev) == 4 and isinstance(ev[2], list) and depth < MAX_DEPTH, where, "malformed loop")
        kind = ev[0]
        raw = ev[1]
        _need(isinstance(raw, list) and len(raw) == 2 and raw[0] == "l" and isinstance(raw[1], list)
              and len(raw[1]) == (3 if kind == "while" else 4), where, "malformed loop parameters")
        regs = [k for k in ((1, 2) if kind == "while" else (3,))]
        for k in regs:
            r = raw[1][k]
            _need(isinstance(r, list) and len(r) == 2 and r[0] == "R" and type(r[1]) is int, where,
                  "malformed loop register")
        params = [r[1] if k in regs else self._dec(r, 1, where, {}) for k, r in enumerate(raw[1])]
        body = ev[2]
        stmt = self._stmt(ev[3], where)
        nl = self.modules[f"{self.fe.package}.language"]

        def run_body():
            for k, e in enumerate(body):
                self._event(ctx, e, k, depth + 1)
            ctx.stmt_now = stmt

        ctx.stmt_now = stmt
        if kind == "fori":
            _need(isinstance(params, list) and len(params) == 4, where, "malformed fori_loop")
            lower, upper, step, index = params

            def fori_body(i):
                self.regs[index] = i
                run_body()

            nl.fori_loop(lower, upper, fori_body, step=step)
        elif kind == "while":
            _need(isinstance(params, list) and len(params) == 3, where, "malformed while_loop")
            init, cond, nxt = params

            def while_body(c):
                self.regs[cond] = c
                run_body()
                return self._reg(nxt)

            nl.while_loop(init, while_body)
        else:
            _need(isinstance(params, list) and len(params) == 4, where, "malformed dynamic_range")
            start, stop, step, index = params
            with warnings.catch_warnings():  # the kernel's own run warned about the deprecated loop already
                warnings.simplefilter("ignore", DeprecationWarning)
                loop = nl.dynamic_range(start, stop, step)
            for i in loop:
                self.regs[index] = i
                run_body()
                del i

    def _dec(self, x, depth: int, where: str, memo: dict):
        # the checks raise with their messages formatted only when they fail: this runs for every argument of every
        # call (the repr of each value, made for a message never shown, was a tenth of a replay's bookkeeping)
        if type(x) is not list:
            if x is not None and type(x) not in _VALUE_TYPES:
                raise StreamError(f"{where}: malformed value {x!r:.100}")
            return x
        if not x or type(x[0]) is not str or depth >= MAX_DEPTH:
            raise StreamError(f"{where}: malformed value {x!r:.100}")
        tag = x[0]
        if tag == "T" and len(x) == 3:
            # the common case first: a view of the stream's table already rebuilt for this allocation (vcache
            # holds only views made after the checks below, and is dropped with the allocation)
            aid = x[1]
            if type(aid) is int and type(x[2]) is int:
                cache = self.vcache.get(aid)
                if cache is not None and aid not in self.reclaimed:
                    v = cache.get(x[2])
                    if v is not None:
                        return v
        if tag == "c":
            _need(len(x) == 2 and type(x[1]) is int and 0 <= x[1] < len(self.consts), where, "malformed constant")
            c = self.ccache.get(x[1], _NONE)
            if c is _NONE:
                c = self.ccache[x[1]] = self._dec(self.consts[x[1]], depth + 1, where, {})
            return c
        if tag == "T":
            if len(x) == 4 and self.legacy:
                return self._legacy_view(x, depth, where, memo)
            if len(x) != 3 or type(x[1]) is not int:
                raise StreamError(f"{where}: malformed tensor")
            root = self.allocs.get(x[1])
            if root is None:
                raise StreamError(f"{where}: tensor of allocation {x[1]} used after it was dropped, or never made")
            if x[1] in self.reclaimed:
                raise StreamError(f"{where}: tensor of allocation {x[1]} used after the capacity check found it dead")
            vid = x[2]
            if type(vid) is int:
                cache = self.vcache.get(x[1])
                if cache is None:
                    cache = self.vcache[x[1]] = {}
                v = cache.get(vid)
                if v is None:
                    _need(0 <= vid < len(self.views), where, "malformed view index")
                    ok = (vid, aps.storage_key(root))
                    try:
                        v = cache[vid] = aps.rebuild(root, self.views[vid], ok in self.checked)
                    except (ValueError, TypeError) as exc:
                        raise StreamError(f"{where}: {exc}") from None
                    self.checked.add(ok)
                return v
            _need(isinstance(vid, list), where, "malformed tensor view")
            key = json.dumps(x, separators=(",", ":"))
            v = memo.get(key)
            if v is None:
                state = x[2]
                if state[:1] == ["vsel"]:
                    _need(len(state) == 4 and type(state[2]) is int, where, "malformed vector_select view")
                    base = self._dec(state[1], depth + 1, where, memo)
                    _need(isinstance(base, Tensor) and allocation(base) is allocation(root), where,
                          "a vector_select view's base is not a view of its allocation")
                    try:
                        v = memo[key] = aps.vector_select(base, state[2], self._dec(state[3], depth + 1, where, memo))
                    except (ValueError, TypeError) as exc:
                        raise StreamError(f"{where}: {exc}") from None
                    return v
                if state[:1] == ["ix"]:
                    _need(self.legacy and len(state) == 3 and isinstance(state[2], list), where,
                          "malformed dynamically indexed view")
                    base = self._dec(state[1], depth + 1, where, memo)
                    idx = self._dec(state[2], depth + 1, where, memo)
                    _need(isinstance(base, Tensor) and allocation(base) is allocation(root), where,
                          "a dynamically indexed view's base is not a view of its allocation")
                    _need(any(isinstance(i, (Tensor, DynIndex)) for i in idx), where,
                          "a dynamically indexed view without a tile among its indices")
                    try:
                        v = memo[key] = base[tuple(idx)]  # registered as dynamic in this run, as the kernel's was
                    except (ValueError, TypeError, IndexError) as exc:
                        raise StreamError(f"{where}: {exc}") from None
                    return v
                if state[:1] == ["g"]:
                    _need(self.legacy and len(state) == 7 and isinstance(state[5], list) and len(state[5]) <= 8, where,
                          "malformed gather view")
                    state = [*state[:5], [self._dec(a, depth + 1, where, memo) for a in state[5]], state[6]]
                elif state[:1] in (["dyn"], ["vec"]):
                    _need(len(state) == 8, where, "malformed run-time-offset view")
                    state = [state[0], self._dec(state[1], depth + 1, where, memo), state[2], state[3],
                             self._dec(state[4], depth + 1, where, memo), state[5],
                             self._dec(state[6], depth + 1, where, memo), state[7]]
                try:
                    v = memo[key] = aps.rebuild(root, state)
                except StreamError:
                    raise
                except (ValueError, TypeError) as exc:
                    raise StreamError(f"{where}: {exc}") from None
            return v
        if self.legacy and tag in _NKI_TAGS:
            raise StreamError(f"{where}: a {_NKI_TAGS[tag]} does not exist in a legacy API program")
        if tag == "R":
            _need(len(x) == 2 and type(x[1]) is int, where, "malformed register")
            return self._reg(x[1])
        if tag == "H":
            _need(len(x) == 2 and x[1] in self.handles, where, "unknown instruction handle")
            return self.handles[x[1]]
        if tag in ("t", "l"):
            _need(len(x) == 2 and isinstance(x[1], list), where, "malformed sequence")
            items = [self._dec(v, depth + 1, where, memo) for v in x[1]]
            return tuple(items) if tag == "t" else items
        if tag == "d":
            _need(len(x) == 2 and isinstance(x[1], list) and all(isinstance(p, list) and len(p) == 2 for p in x[1]),
                  where, "malformed dict")
            out = {}
            for k, v in x[1]:
                k = self._dec(k, depth + 1, where, memo)
                _need(isinstance(k, (str, int)), where, "malformed dict key")
                out[k] = self._dec(v, depth + 1, where, memo)
            return out
        if tag == "s":
            _need(len(x) == 4, where, "malformed slice")
            return slice(*(self._dec(v, depth + 1, where, memo) for v in x[1:]))
        if tag == "E":
            return Ellipsis
        if tag == "S":
            return current("replay").sem
        if tag == "P":
            r = self.last_res
            _need(len(x) == 2 and r is not None and x[1] in self.allocs and allocation(r) is allocation(
                self.allocs[x[1]]), where, "the previous call's result is not a view of that allocation")
            return r
        if tag == "L":
            _need(len(x) == 2 and x[1] in self.lib, where, f"unknown library object {x[1:]!r:.100}")
            return self.lib[x[1]]
        if tag == "D":
            return np.dtype(self._dtype(x, where, numeric=False))
        if tag == "n":
            _need(len(x) == 3 and type(x[2]) in (int, float, bool), where, "malformed NumPy scalar")
            return np.asarray(x[2]).astype(self._dtype(x, where, numeric=False))[()]
        if tag == "N":
            _need(len(x) == 2 and isinstance(x[1], str) and not x[1].startswith("_"), where, "malformed NumPy name")
            obj = getattr(np, x[1], None)
            _need(isinstance(obj, np.ufunc) or (isinstance(obj, type) and issubclass(obj, np.generic))
                  or _np_operator(obj), where,
                  f"np.{x[1]:.50} is not a NumPy type or ufunc")
            return obj
        if tag == "A":
            _need(len(x) == 4 and isinstance(x[2], list) and isinstance(x[3], list) and len(x[3]) <= MAX_ARRAY
                  and all(type(n) is int and n >= 0 for n in x[2]), where, "malformed array")
            dt = self._dtype(x, where)
            _need(int(np.prod(x[2])) == len(x[3]), where, "array shape and values differ")
            return np.asarray(x[3]).astype(dt).reshape(x[2])
        if self.legacy and tag in ("X", "M", "pd", "B", "Bc", "Y"):
            return self._legacy_value(x, depth, where, memo)
        raise StreamError(f"{where}: unknown value tag {tag!r:.20}")

    def _placement(self, x, where: str):
        """``["Bc", "sbuf"|"psum", [[block index, place], ...]]``: ``ncc.<buffer>.alloc`` of a function answering with
        the places the kernel's function returned; the core checks them as it checks the kernel's."""
        _need(len(x) == 3 and x[1] in ("sbuf", "psum") and isinstance(x[2], list) and len(x[2]) <= MAX_ARRAY, where,
              "malformed placement table")
        places = {}
        for e in x[2]:
            _need(isinstance(e, list) and len(e) == 2 and all(isinstance(v, list) and len(v) <= 8 for v in e)
                  and all(type(n) is int for v in e for n in v), where, "malformed placement table")
            places[tuple(e[0])] = tuple(e[1])

        def place(idx, pdim_size, fdim_size):
            got = places.get(tuple(idx))
            if got is None:
                raise StreamError(f"{where}: the placement table has no place for block {tuple(idx)}")
            return got

        ncc = self.modules[f"{self.fe.package}.compiler"]
        return (ncc.sbuf if x[1] == "sbuf" else ncc.psum).alloc(place)

    def _legacy_view(self, x, depth: int, where: str, memo: dict):
        """``["T", allocation, view, [index variables, logical block]]``: a legacy view with its extras."""
        extra = x[3]
        _need(isinstance(extra, list) and len(extra) == 2, where, "malformed view extras")
        axv, lblk = extra
        _need(axv is None or (isinstance(axv, list) and len(axv) <= 64 and all(
            isinstance(p, list) and len(p) == 2 and all(type(v) is int and v >= 0 for v in p) for p in axv)), where,
            "malformed index variables of a view")
        _need(lblk is None or (type(lblk) is int and lblk >= 0), where, "malformed logical block")
        base = self._dec(x[:3], depth + 1, where, {})  # a fresh view, never the cached one: the extras are its own
        if type(x[2]) is int:
            base = aps.rebuild(self.allocs[x[1]], self.views[x[2]], True)
        return aps.annotate(base, {k: v for k, v in axv} if axv else None, lblk)

    def _legacy_value(self, x, depth: int, where: str, memo: dict):
        tag = x[0]
        if tag == "X":
            _need(len(x) == 3, where, "malformed index expression")
            vals = self._dec(x[1], depth + 1, where, memo)
            _need(isinstance(vals, np.ndarray) and vals.dtype.kind in "iu", where, "malformed index expression")
            axv = x[2]
            _need(axv is None or (isinstance(axv, list) and len(axv) == vals.ndim and all(
                v is None or type(v) is int for v in axv)), where, "malformed index variables")
            return IndexExpr(vals.astype(np.int64), tuple(axv) if axv is not None else None)
        if tag == "M":
            _need(len(x) == 3 and (x[1] is not None or x[2] is not None), where, "malformed mask")
            vals = None if x[1] is None else self._dec(x[1], depth + 1, where, memo)
            _need(vals is None or isinstance(vals, np.ndarray), where, "malformed mask values")
            named = None
            if x[2] is not None:
                _need(isinstance(x[2], list) and len(x[2]) == 2 and isinstance(x[2][1], list), where, "malformed mask")
                arr = self._dec(x[2][0], depth + 1, where, memo)
                names = x[2][1]
                _need(isinstance(arr, np.ndarray) and arr.ndim == len(names) and all(type(v) is int for v in names)
                      and len(set(names)) == len(names), where, "malformed mask predicate")
                named = (arr.astype(bool), tuple(names))
            return Mask(vals, named)
        if tag == "pd":
            _need(len(x) == 2 and type(x[1]) is int and x[1] >= 0, where, "malformed par_dim")
            return ParDim(x[1])
        if tag == "Y":
            _need(len(x) == 3, where, "malformed dynamic index")
            tile, off = self._dec(x[1], depth + 1, where, memo), self._dec(x[2], depth + 1, where, memo)
            _need(isinstance(tile, Tensor) and (type(off) is int or isinstance(off, IndexExpr)), where,
                  "malformed dynamic index")
            return DynIndex(tile, off)
        if tag == "Bc":
            return self._placement(x, where)
        _need(len(x) == 5 and x[1] in ("sbuf", "psum") and type(x[2]) is int and type(x[3]) is int
              and isinstance(x[4], list) and len(x[4]) <= 8 and all(type(n) is int for n in x[4]), where,
              "malformed direct allocation")
        ncc = self.modules[f"{self.fe.package}.compiler"]
        try:
            if x[1] == "sbuf":
                return ncc.sbuf.mod_alloc(base_addr=x[2], base_partition=x[3], num_free_tiles=tuple(x[4]))
            return ncc.psum.mod_alloc(base_bank=x[2], base_addr=x[3], num_bank_tiles=tuple(x[4]))
        except (TypeError, ValueError) as exc:
            raise StreamError(f"{where}: {exc}") from None

    def _dtype(self, x, where: str, numeric: bool = True):
        """The dtype a stream names: one of nkisim's (``core.dtypes``); ``numeric``: a NumPy one (arrays), not
        bfloat16 or fp8, which nkisim takes as dtypes and scalars only."""
        from nkisim.core.dtypes import to_dtype

        _need(isinstance(x[1], str) and len(x[1]) <= 32, where, "malformed dtype")
        try:
            dt = to_dtype(x[1])
        except Exception:  # noqa: BLE001 - any failure is a malformed stream
            raise StreamError(f"{where}: unknown dtype {x[1]!r}") from None
        _need(dt.kind in "biuf" or not numeric, where, f"dtype {x[1]!r} is not numeric")
        return dt


def replay(stream: dict, args=(), kwargs=None, *, mode: str = "full", target: str | None = None,
           graded: bool = False, hbm_dir: str | None = None) -> KernelRun:
    """Execute a recorded stream on ``args``/``kwargs`` (the caller's own inputs) with nkisim: the outputs, trace and
    every check are this run's.  A malformed or forged stream raises :class:`StreamError`; the program's own errors
    are nkisim's, as if the kernel had made them.  ``graded`` as in ``run_kernel`` (the grader's re-execution)."""
    if not isinstance(stream, dict) or stream.get("format") != FORMAT:
        raise StreamError(f"not an instruction stream of format {FORMAT}")
    rep = _Replayer(stream)
    tgt = stream.get("target")
    _need(tgt in ("trn1", "trn2"), "header", f"target {tgt!r:.40}")
    return run_kernel(rep, args, kwargs, mode=mode, target=target or tgt, frontend=rep.fe,
                      simulate=_simulated(stream, graded), graded=graded, hbm_dir=hbm_dir)


def _simulated(stream: dict, graded: bool) -> bool:
    """Whether the stream's program runs under the simulator's rules (``nki.simulate``: a compiler error such as the
    start-partition rule or the SBUF capacity check is a warning there).  A graded program is compiled, never
    simulated, and the grader's specializing child records it so: a graded stream asking for the simulator was
    forged by that child, and is refused (docs/grading-security.md L4: a copy at an illegal start partition scored
    full credit that way)."""
    sim = stream.get("simulate", False)
    _need(type(sim) is bool, "header", "simulate flag")
    _need(not (graded and sim), "header", "simulate=true: a graded program runs as compiled, never simulated")
    return sim


def replay_group(members: list, *, mode: str = "full", target: str | None = None, graded: bool = False,
                 share: bool = True, hbm_dirs: list | None = None, link: object = None,
                 finished: Callable | None = None) -> tuple[list, dict]:
    """Replay several streams in one process, each on its own inputs, as :func:`replay` does one: ``members`` is a
    list of ``(stream, args, kwargs)``; returns each member's :class:`KernelRun` or the exception its replay raised
    (a malformed stream's :class:`StreamError`, the program's own error), and figures (``hits``/``misses``: reused
    and computed matmul products, ``cpu_seconds`` per member: its own thread's, and ``borrowed_seconds``: what the
    products it reused cost the member that computed them, which its time alone would include; ``stopped_sharing``:
    the group found sharing costing more than it saved and stopped it, ``core.sharing``).

    With ``share`` and values computed, the members run in lockstep and reuse each other's products of
    bit-identical operands (``core.sharing``: the grader's three batch-4 224x224 correctness cases multiply the same
    X and W); every member's outputs, trace and errors are the ones :func:`replay` gives it alone.  Without, they run
    one after another.  The BLAS thread count and the cycle collector are set once for the whole group (each run
    would restore them at its end, under the feet of the runs still going).  ``hbm_dirs``: each member's
    ``run_kernel(hbm_dir=)``.

    ``link``: this group's side of a channel to a group in another process (``core.channel``, opened by the
    grader's replay process): a Producer publishes member 0's products, a Consumer's products are taken as from a
    member 0 before this group's own; the values are the same either way.

    ``finished(k, run or exception, cpu_seconds, borrowed_seconds)``: called for ``members[k]`` as soon as its
    replay ends (a :class:`KernelRun`, or the Exception it raised), in its own turn, before the next member's; its
    entry in the list returned is then None and its figures are the ones passed.  A lockstep group's members end
    at different times -- the batch-1 timed calls beside the batch-4 correctness calls after about a quarter of
    the group's work -- and the grader's replay process writes each member's files as it ends, so that the
    grader reads, judges and costs it while the others still run."""
    import gc

    from nkisim.core import runtime
    from nkisim.core.sharing import Member, ShareGroup

    fns: list = []
    reps: list = []
    for k, (stream, args, kwargs) in enumerate(members):
        hbm_dir = hbm_dirs[k] if hbm_dirs is not None else None
        if not isinstance(stream, dict) or stream.get("format") != FORMAT:
            reps.append(StreamError(f"not an instruction stream of format {FORMAT}"))
            continue
        try:
            rep = _Replayer(stream)
            tgt = stream.get("target")
            _need(tgt in ("trn1", "trn2"), "header", f"target {tgt!r:.40}")
            sim = _simulated(stream, graded)
        except StreamError as exc:
            reps.append(exc)
            continue
        reps.append(rep)

        def fn(rep=rep, args=args, kwargs=kwargs, tgt=tgt, sim=sim, hbm_dir=hbm_dir, k=k, i=len(fns)):
            if finished is None:
                return run_kernel(rep, args, kwargs, mode=mode, target=target or tgt, frontend=rep.fe,
                                  simulate=sim, graded=graded, hbm_dir=hbm_dir)
            t0 = time.thread_time()
            try:
                got = run_kernel(rep, args, kwargs, mode=mode, target=target or tgt, frontend=rep.fe, simulate=sim,
                                 graded=graded, hbm_dir=hbm_dir)
            except Exception as exc:  # noqa: BLE001 - the member's own error, handed over as run() would report it
                got = exc
            finished(k, got, time.thread_time() - t0, group.borrowed[i + remote])
            return None

        fns.append(fn)
    live = [r for r in reps if isinstance(r, _Replayer)]
    sharing = share and mode == "full"
    if link is not None and (not sharing or not live):
        (link.finish if hasattr(link, "publish") else link.leave)()
        link = None
    remote = link is not None and not hasattr(link, "publish")  # a Consumer: member 0 is the producer's stand-in
    group = ShareGroup(len(live) + remote, link=link)
    if sharing:
        for k, rep in enumerate(live):
            rep.share = Member(group, k + remote)
    blas = runtime._single_thread_blas()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if sharing:
            results, errors = group.run([group.remote, *fns] if remote else fns)
        else:
            results, errors = [], []
            for fn in fns:
                try:
                    results.append(fn())
                    errors.append(None)
                except Exception as exc:  # noqa: BLE001 - the member's own error
                    results.append(None)
                    errors.append(exc)
    finally:
        blas.release()
        if gc_was_enabled:
            runtime._freeze()
            gc.enable()
    out: list = []
    cpu: list = []
    borrowed: list = []
    it = iter(zip(results[remote:], errors[remote:], group.cpu_seconds[remote:], group.borrowed[remote:]))
    for r in reps:
        if isinstance(r, _Replayer):
            res, err, sec, got = next(it)
            out.append(err if err is not None else res)
            cpu.append(sec)
            borrowed.append(got)
        else:
            out.append(r)
            cpu.append(0.0)
            borrowed.append(0.0)
    # The group outlives this call in a reference cycle (each member names it) until the collector runs, which a
    # replay job never does (grader/child.py): without its results each run dies with the caller's last reference
    # to it, and its outputs' memory (205 MB a batch-4 224x224 call) is free for the page cache the next member's
    # files are written into.
    group.results, group.errors = [], []
    return out, {"hits": group.hits, "misses": group.misses, "cpu_seconds": cpu, "borrowed_seconds": borrowed,
                 "compares": {"snapshots": group.snapshots, "storage": group.root_compares,
                              "memo_hits": group.memo_hits, "operands": group.view_compares,
                              "copies": group.copy_compares, "chains_copied": group.chain_copies,
                              "chains_added": group.chain_adds},
                 "stopped_sharing": not group.sharing,
                 **({"channel_wait": link.waited} if link is not None else {})}


__all__ = ["FORMAT", "NotRecordable", "Recorder", "StreamError", "Trace", "dumps", "loads", "record", "replay",
           "replay_group"]
