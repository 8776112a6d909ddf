"""Handout rules the kernels' values cannot show: which NKI calls a part may use.

The Part 1 handout allows only ``nisa.nc_transpose`` to compute a transpose ("nl.transpose, nisa.dma_transpose and
other DMA-side transposes are not allowed").  A kernel that uses one still computes the right values, and the
course's own harness scores it like any other, so the grader does not change the score: it names each use (file
and line) in the test's message, for course staff to decide.  The rubric lists the calls per test
(``disallowed_apis``, dotted names under ``nki.``).  A DMA-side transpose needs no forbidden name: a DMA through a
reordering view of HBM (``a[...].permute((1, 0))``, swapped index expressions) does it, so where the rubric forbids
``nki.isa.dma_transpose`` the traced runs are searched for such DMAs too (:func:`dma_reorders`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from nkisim.core.instr import B_HBM, Trace
from nkisim.frontends import FRONT_ENDS

# The NKI namespaces (neuronxcc.nki, nki): a rubric names calls under ``nki.``, whichever namespace a file imports.
NKI_NAMESPACES = tuple(fe.namespace for fe in FRONT_ENDS)


def _canonical(dotted: str) -> str:
    """``neuronxcc.nki.language.transpose`` (or ``nki.language.transpose``) -> ``nki.language.transpose``."""
    for ns in NKI_NAMESPACES:
        if dotted == ns or dotted.startswith(ns + "."):
            return "nki" + dotted[len(ns):]
    return dotted


def _nki_name(dotted: str) -> bool:
    return any(dotted == ns or dotted.startswith(ns + ".") for ns in NKI_NAMESPACES)


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted name it is bound to by the file's imports (NKI namespace names only)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _nki_name(a.name):
                    if a.asname:
                        names[a.asname] = a.name
                    else:  # `import neuronxcc.nki.language` binds `neuronxcc`
                        top = a.name.split(".", 1)[0]
                        names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                dotted = f"{node.module}.{a.name}"
                if _nki_name(dotted):
                    names[a.asname or a.name] = dotted
    return names


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def disallowed_uses(source: str, disallowed: Iterable[str]) -> list[tuple[int, str]]:
    """(line, name) of every reference to a ``disallowed`` call, through any import alias; sorted by line.
    A file that does not parse has none (the static screen reports it)."""
    wanted = {_canonical(d) for d in disallowed}
    if not wanted:
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    aliases = _aliases(tree)
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            dotted = _dotted(node, aliases)
            if dotted is not None and _canonical(dotted) in wanted:
                found.add((node.lineno, _canonical(dotted)))
    return sorted(found)


def policy_note(file: str, uses: list[tuple[int, str]]) -> str:
    """The line appended to a test's message (its score is unchanged)."""
    where = ", ".join(f"{name} at {file}:{line}" for line, name in uses[:5])
    more = f" and {len(uses) - 5} more" if len(uses) > 5 else ""
    return (f"handout rule: {where}{more} is not allowed for this part (only nisa.nc_transpose may transpose); "
            "the score above does not count this, course staff may")


# a rubric that forbids this forbids every DMA-side transpose, named or not
DMA_TRANSPOSE = "nki.isa.dma_transpose"


def dma_reorders(trace: Trace) -> list[str]:
    """``file:line`` of every DMA that reads or writes HBM one element at a time (a contiguous run of one element,
    a non-zero stride, more than one element per row): the signature of a transpose done by the DMA through a
    reordering view.  A row-wise load or store of a transpose moves whole rows, so an honest transpose has none."""
    found: dict[str, None] = {}
    for ins in trace.instrs:
        if ins.op != "dma_copy" or ins.attrs.get("via") in ("atomic_rmw", "hbm_init"):
            continue
        for o in ins.srcs[:1] + ins.dsts[:1]:
            if (o.region.buf == B_HBM and o.free_elems > 1 and o.contiguous_bytes <= o.itemsize
                    and o.inner_stride_bytes not in (0, o.itemsize)):
                found[ins.where] = None
                break
    return list(found)


def reorder_note(file: str, wheres: list[str]) -> str:
    """The line appended to a test's message for :func:`dma_reorders` finds (its score is unchanged)."""
    base = file.rsplit("/", 1)[-1]
    places = [file + w[len(base):] if w.startswith(base + ":") else w for w in wheres]
    more = f" and {len(places) - 5} more" if len(places) > 5 else ""
    return (f"handout rule: the DMA at {', '.join(places[:5])}{more} moves HBM data one element at a time through a "
            "reordering view, a DMA-side transpose, which is not allowed for this part (only nisa.nc_transpose may "
            "transpose); the score above does not count this, course staff may")
