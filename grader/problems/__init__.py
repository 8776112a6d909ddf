"""The graded problems: one module each (vector_add.py, transpose.py, conv2d.py), found by name.

A rubric test's ``problem = "NAME"`` is the module ``grader/problems/NAME.py``, whose ``PROBLEM`` implements the
:class:`~grader.problems.base.Problem` protocol: inputs, reference, size, description, timing keys and targets,
work check.  Nothing else in the grader knows a problem by name, so a new problem (another course's NKI
assignment) is one module here plus its rubric entries (tests/test_grader_problems.py adds a toy one that way).

Runs only in the grader's (trusted) process: the sandboxed child gets an invocation's arrays, never a problem.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

import numpy as np

from grader.problems.base import (
    ACCUMULATORS,
    DEFAULT_TOLERANCE,
    DTYPES,
    PRECISION_SHARE,
    UNIT_ROUNDOFF,
    Invocation,
    Problem,
    SharedInvocation,
    accumulation_error_bound,
    case_dtype,
    case_seed,
    hbm_traffic,
    inputs_into,
    io_bytes,
    new_input,
    precision_for,
    submission_seed,
)

__all__ = [
    "ACCUMULATORS",
    "DEFAULT_TOLERANCE",
    "DTYPES",
    "PRECISION_SHARE",
    "UNIT_ROUNDOFF",
    "Invocation",
    "Problem",
    "SharedInvocation",
    "UnknownProblem",
    "accumulated_terms",
    "accumulation_error_bound",
    "case_dtype",
    "case_seed",
    "get",
    "hbm_traffic",
    "input_elements",
    "inputs_into",
    "io_bytes",
    "make_invocation",
    "names",
    "new_input",
    "precision_for",
    "reference_output",
    "reference_precision",
    "settle",
    "submission_seed",
]

_NOT_PROBLEMS = frozenset({"base", "generic"})  # the package's shared modules


class UnknownProblem(ValueError):
    """A rubric names a problem this package has no module for (or whose module defines no PROBLEM)."""


def names() -> tuple[str, ...]:
    """The problems this package holds (every module but the shared ones), sorted."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if m.name not in _NOT_PROBLEMS and not m.name.startswith("_")))


@functools.cache
def get(name: str) -> Problem:
    """The problem ``name`` (module ``grader.problems.<name>``'s ``PROBLEM``)."""
    if not isinstance(name, str) or not name.isidentifier() or name in _NOT_PROBLEMS or name.startswith("_"):
        raise UnknownProblem(f"unknown problem {name!r} (problems: {', '.join(names())})")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise  # the problem's module exists but an import inside it failed: say so
        raise UnknownProblem(f"unknown problem {name!r} (problems: {', '.join(names())})") from None
    problem = getattr(module, "PROBLEM", None)
    if not isinstance(problem, Problem) or problem.name != name:
        raise UnknownProblem(f"grader/problems/{name}.py must define PROBLEM, a Problem named {name!r}")
    return problem


def settle() -> None:
    """Finish or drop what the loaded problem modules do in the background (a module's own ``settle()``, e.g.
    conv2d's judge preparations): called when a grading ends, so that no thread of it outlives it."""
    import sys

    for name in names():
        module = sys.modules.get(f"{__name__}.{name}")
        hook = getattr(module, "settle", None)
        if callable(hook):
            hook()


# Shortcuts by name (tools and tests; the pipeline holds the Problem itself).
def make_invocation(problem: str, case: dict[str, Any], seed: int) -> Invocation:
    return get(problem).invocation(case, seed)


def reference_output(problem: str, inv: Invocation, precision: str = "float64") -> np.ndarray:
    return get(problem).reference(inv, precision)


def input_elements(problem: str, case: dict[str, Any]) -> int:
    """How large a case's inputs are (elements of every input array), known without generating them: the
    measure by which a call that hit a time or memory limit stops larger calls of the same kernel.  Elements, not
    bytes: the emulator's time follows the work, which a float16 copy of a float32 case does not halve."""
    return get(problem).input_elements(case)


def accumulated_terms(problem: str, case: dict[str, Any]) -> int:
    """Terms summed per output value (0: the reference is exact, e.g. a transpose)."""
    return get(problem).accumulated_terms(case)


def reference_precision(problem: str, case: dict[str, Any], tolerances: Mapping[str, tuple[float, float]]) -> str:
    """'exact', 'float32' or 'float64' for this case (grader/problems/base.py: precision_for)."""
    return precision_for(accumulated_terms(problem, case), str(case.get("dtype", "float32")), tolerances)
