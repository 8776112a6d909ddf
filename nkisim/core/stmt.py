"""The kernel statement an API call sits in: for APIs whose destination is the assignment target.

``b = nl.loop_reduce(a, op, loop_indices)`` reduces into ``b``'s *current* tile ("the destination tile is also the
rhs input to op", nki.language.loop_reduce docs; shared/nki-api.md 2.7).  The NKI compiler sees the statement;
nkisim reads the same statement from the kernel's source and evaluates its target in the kernel's frame (a plain
name or a subscript of one, e.g. ``b[1]``).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

_CACHE: dict = {}


def assignment_target(frame: types.FrameType, func: str) -> tuple[str, object] | None:
    """(source text, current value) of the target of ``<target> = ...func(...)`` at the frame's line, or None."""
    key = (frame.f_code, frame.f_lineno)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _find(frame, func)
    if hit is False:
        return None
    text, code = hit
    try:
        return text, eval(code, frame.f_globals, frame.f_locals)  # noqa: S307 - the kernel's own expression
    except NameError:
        return text, None


def _find(frame: types.FrameType, func: str):
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        return False
    src = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return False
    line = frame.f_lineno - (first or 1) + 1
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and node.lineno <= line <= node.end_lineno:
            call = node.value
            name = getattr(getattr(call, "func", None), "attr", None) or getattr(getattr(call, "func", None),
                                                                               "id", None)
            target = node.targets[0]
            if name == func and isinstance(target, (ast.Name, ast.Subscript)):
                expr = ast.Expression(body=target)
                target.ctx = ast.Load()
                for sub in ast.walk(target):
                    if hasattr(sub, "ctx"):
                        sub.ctx = ast.Load()
                ast.fix_missing_locations(expr)
                return ast.unparse(target), compile(expr, frame.f_code.co_filename, "eval")
    return False
