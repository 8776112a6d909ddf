"""Which on-chip tiles a kernel can still read: static liveness of kernel variables, for the capacity check.

A tile dies, for nkisim's SBUF/PSUM accounting, when Python drops its last reference.  Python keeps a variable's
value until the name is rebound or the function returns, so a tile bound to a name that the kernel never reads
again (``tile_block`` after the loop that used it; last iteration's ``operand_local`` while this iteration
allocates a new one before the assignment rebinds the name) still counts.  neuronx-cc allocates by liveness, so
such a kernel fits on hardware (AWS's select-and-scatter and double-row matmul samples do).

This module runs only when an allocation would over-subscribe SBUF/PSUM (never on the per-instruction path): it
walks the Python stack, keeps every variable of nkisim's own frames, keeps in kernel frames only the variables that
are *live* at the frame's current line (a variable is live when some path from here reads it before rebinding
it; classic backward dataflow over the function's statements, loops iterated to a fixpoint), and returns the
allocations reachable from what it keeps.  Anything it cannot analyse (no source, ``try``, module code) is kept.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap
import types

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../nkisim
_CACHE: dict = {}  # code object -> {line: frozenset(live names)} or None (not analysable)


def dead_allocations(alloc_type, tensor_type, stop_code=None) -> dict:
    """The allocations (id -> allocation) held only by dead variables: reachable from a variable that an analysed
    kernel frame never reads again, and not from any live variable of the frames on the stack up to and including
    the kernel function's frame (``stop_code``; all frames when None).  A tile no variable holds (an operand being
    evaluated, a list a comprehension is building) is never reported: positive evidence only."""
    seen: set[int] = set()
    live_found: dict = {}
    dead_vals = []
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        try:
            local = frame.f_locals
        except Exception:  # noqa: BLE001 - a frame we cannot read: nothing to keep from it
            local = {}
        live = None if code.co_filename.startswith(_PKG) else live_names(code, frame.f_lineno)
        for name, value in local.items():
            if live is None or name in live:
                _walk(value, alloc_type, tensor_type, live_found, seen, 0)
            else:
                dead_vals.append(value)
        if code is stop_code:
            break
        frame = frame.f_back
    dead_found: dict = {}
    seen_dead: set[int] = set()
    for value in dead_vals:
        _walk(value, alloc_type, tensor_type, dead_found, seen_dead, 0)
    return {k: a for k, a in dead_found.items() if k not in live_found}


def _walk(obj, alloc_type, tensor_type, found: dict, seen: set[int], depth: int) -> None:
    if depth > 4 or obj is None or isinstance(obj, (int, float, str, bytes, bool, types.ModuleType, type)):
        return
    oid = id(obj)
    if oid in seen:
        return
    seen.add(oid)
    if isinstance(obj, tensor_type):
        found[id(obj._a)] = obj._a
        return
    if isinstance(obj, alloc_type):
        found[oid] = obj
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            _walk(v, alloc_type, tensor_type, found, seen, depth + 1)
    elif isinstance(obj, dict):
        for v in obj.values():
            _walk(v, alloc_type, tensor_type, found, seen, depth + 1)
    elif type(obj).__module__.startswith("nkisim."):
        return  # nkisim's own bookkeeping (the kernel context, its trace): holds no kernel-visible tile
    elif isinstance(obj, (types.FunctionType, types.MethodType)):
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                _walk(cell.cell_contents, alloc_type, tensor_type, found, seen, depth + 1)
            except ValueError:  # empty cell
                pass
    else:
        d = getattr(obj, "__dict__", None)
        if isinstance(d, dict):
            for v in d.values():
                _walk(v, alloc_type, tensor_type, found, seen, depth + 1)


def live_names(code: types.CodeType, line: int | None) -> frozenset | None:
    """Variables of ``code``'s function live at ``line`` (None: not analysable, keep everything)."""
    if line is None:
        return None
    table = _CACHE.get(code, False)
    if table is False:
        table = _CACHE[code] = _analyse(code)
    if table is None:
        return None
    return table.get(line)


def _analyse(code: types.CodeType) -> dict | None:
    if code.co_name.startswith("<"):  # module code, lambdas, comprehensions
        return None
    try:
        lines, start = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = _Liveness()
    try:
        a.block(fn.body, frozenset(), frozenset(), frozenset())
    except _Unsupported:
        return None
    table: dict[int, frozenset] = {}
    off = start - 1  # source line numbers of the parsed snippet (decorators included) -> file line numbers
    for (lo, hi), live in sorted(a.at.items(), key=lambda kv: kv[0][1] - kv[0][0], reverse=True):
        for ln in range(lo, hi + 1):
            table[ln + off] = live  # innermost (shortest) statement wins: written last
    return table


class _Unsupported(Exception):
    pass


def _uses(node) -> frozenset:
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))


def _defs(targets) -> frozenset:
    """Names a plain assignment rebinds (subscript / attribute targets rebind nothing)."""
    out = set()
    for t in targets:
        if isinstance(t, ast.Name):
            out.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            out |= _defs(t.elts)
        elif isinstance(t, ast.Starred):
            out |= _defs([t.value])
    return frozenset(out)


class _Liveness:
    """Backward liveness over structured Python statements; records live-in of each statement's line span."""

    def __init__(self) -> None:
        self.at: dict[tuple[int, int], frozenset] = {}

    def block(self, stmts, out: frozenset, brk: frozenset, cont: frozenset) -> frozenset:
        live = out
        for s in reversed(stmts):
            live = self.stmt(s, live, brk, cont)
        return live

    def _record(self, s, live: frozenset) -> frozenset:
        self.at[(s.lineno, getattr(s, "end_lineno", s.lineno) or s.lineno)] = live
        return live

    def stmt(self, s, out: frozenset, brk: frozenset, cont: frozenset) -> frozenset:
        if isinstance(s, (ast.Assign, ast.AnnAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            value = s.value
            uses = (_uses(value) if value is not None else frozenset()) | frozenset().union(
                *(_uses(t) for t in targets))
            kill = _defs(targets) if value is not None else frozenset()
            return self._record(s, (out - kill) | uses)
        if isinstance(s, ast.AugAssign):
            uses = _uses(s.value) | _uses(s.target)
            if isinstance(s.target, ast.Name):
                uses |= {s.target.id}
            return self._record(s, out | uses)
        if isinstance(s, ast.Delete):
            return self._record(s, (out - _defs(s.targets)) | frozenset().union(*(_uses(t) for t in s.targets)))
        if isinstance(s, ast.Return):
            return self._record(s, _uses(s.value) if s.value is not None else frozenset())
        if isinstance(s, ast.Break):
            return self._record(s, brk)
        if isinstance(s, ast.Continue):
            return self._record(s, cont)
        if isinstance(s, ast.If):
            live = _uses(s.test) | self.block(s.body, out, brk, cont) | self.block(s.orelse, out, brk, cont)
            return self._record(s, live)
        if isinstance(s, (ast.For, ast.AsyncFor)):
            after = self.block(s.orelse, out, brk, cont)
            tgt = _defs([s.target])
            head = after
            for _ in range(64):  # fixpoint: sets only grow, bounded by the function's names
                body_in = self.block(s.body, head, out, head)
                new = after | (body_in - tgt) | (_uses(s.target) - tgt)
                if new == head:
                    break
                head = new
            return self._record(s, _uses(s.iter) | head)
        if isinstance(s, ast.While):
            after = self.block(s.orelse, out, brk, cont)
            head = after | _uses(s.test)
            for _ in range(64):
                new = after | _uses(s.test) | self.block(s.body, head, out, head)
                if new == head:
                    break
                head = new
            return self._record(s, head)
        if isinstance(s, (ast.With, ast.AsyncWith)):
            items = frozenset().union(*(_uses(i.context_expr) for i in s.items))
            tgt = _defs([i.optional_vars for i in s.items if i.optional_vars is not None])
            return self._record(s, items | (self.block(s.body, out, brk, cont) - tgt))
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return self._record(s, (out - {s.name}) | _uses(s))
        if isinstance(s, (ast.Expr, ast.Assert, ast.Raise, ast.Pass, ast.Global, ast.Nonlocal, ast.Import,
                          ast.ImportFrom)):
            kill = frozenset(
                (a.asname or a.name).split(".")[0] for a in s.names
            ) if isinstance(s, (ast.Import, ast.ImportFrom)) else frozenset()
            return self._record(s, (out - kill) | _uses(s))
        raise _Unsupported(type(s).__name__)  # try/match/...: keep everything (caller falls back)
