"""Static screen of kernel source: sandbox escapes and Python the NKI compiler would reject.

``check_kernel(source | path | function | module) -> list[Violation]`` parses the source (never imports or
runs it) and reports:

* **sandbox** findings (always severity ``error``), for the WHOLE file: imports other than NumPy, ``math``,
  ``typing``, ``__future__`` and the NKI modules; file/pickle I/O; ``exec``/``eval``/``open``/``getattr`` and
  other builtins that reach outside the kernel; any ``_private``/``__dunder__`` attribute; frame and code
  introspection attributes; ``global``/``nonlocal``; attribute assignments outside a class's own methods and
  other monkey-patching; NumPy's global state (``np.seterr``, ``np.random.seed``); launcher keywords that
  write files; handlers that would swallow the grader's timeouts; classes that subclass library types;
  non-utf-8 coding declarations.  The grader scores a part 0 when its file has any finding of kind
  ``sandbox`` or ``syntax`` (:attr:`Violation.blocking`).
* **nki-subset** findings (``warning`` or ``info``), inside ``@nki.jit`` kernels and the module-level helpers
  they call: constructs the NKI compiler may reject or rewrite (nested functions, classes, try/with,
  generators, recursion, Python ``range``...).  nkisim runs them anyway; they never change a score.
* **api** findings (``error``, never blocking): NKI API misuse the compiler rejects -- a file importing both
  ``neuronxcc.nki`` and ``nki``; in files written against the current ``nki`` API, names it removed
  (``nl.arange``, ``mask=``, ...), keyword-only kernel parameters, ``is`` comparisons, ``@nki.jit`` sub-kernels.
  Which API a file is written against is the namespace it imports (``nkisim.frontends``); each rule names the
  APIs it applies to.

Sources for the NKI-subset rules: the NKI Language Guide ("not all Python constructs and libraries are
supported within a NKI function"), the ``nki.language.sequential_range`` notes ("any use of Python range(...)
will be replaced with sequential_range(...)"), the NKI error catalogue (err_nki_api_outside_of_nki_kernel,
err_dynamic_control_flow_not_supported) and the Fall 2025 course README tip to define kernels and helpers at
module level.  The legacy (neuronxcc.nki) front end traces Python, so these are warnings, not errors.

All rules live in :data:`RULES`; ``python -m nkisim check --list-rules`` prints them.

Layout: ``rules.py`` (the rule table and :class:`Violation`), ``analysis.py`` (import aliases, kernels, call graph),
``sandbox.py`` and ``subset.py`` (the two rule sets), ``walker.py`` (the walk that applies them); this module
loads and parses the input.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
import types
from pathlib import Path
from typing import Any

from nkisim.check.analysis import ModuleFacts
from nkisim.check.rules import (
    API,
    ERROR,
    INFO,
    NKI_SUBSET,
    RULES,
    RULES_BY_CODE,
    SANDBOX,
    SYNTAX,
    WARNING,
    Rule,
    Violation,
    blocking,
)
from nkisim.check.sandbox import CODING, SAFE_ENCODINGS
from nkisim.check.walker import Checker

__all__ = ["API", "ERROR", "INFO", "NKI_SUBSET", "RULES", "RULES_BY_CODE", "SANDBOX", "SYNTAX", "WARNING", "Rule",
           "Violation", "blocking", "check_kernel"]


def _unwrap_kernel(obj: Any) -> Any:
    """The Python function behind an nki.jit / benchmark / skip_middle_end wrapper object."""
    seen = 0
    while not isinstance(obj, (types.FunctionType, types.ModuleType)) and seen < 8:
        inner = getattr(obj, "func", None) or getattr(obj, "__wrapped__", None)
        if inner is None:
            break
        obj, seen = inner, seen + 1
    while isinstance(obj, types.FunctionType) and getattr(obj, "__wrapped__", None) is not None and seen < 8:
        obj, seen = obj.__wrapped__, seen + 1
    return obj


class _NotUtf8(ValueError):
    """The file is not UTF-8 text (Python would refuse to import it too)."""


def _decode(data: bytes, label: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _NotUtf8(f"{label} is not UTF-8 text: {exc}") from None


def _load(obj: Any, filename: str | None) -> tuple[str, str, tuple[int, int] | None, str | None]:
    """(source, filename, line span to keep or None, kernel name) for any accepted input."""
    # A str is source text, except a lone existing "*.py" path when no filename label is given (so source
    # that happens to look like a path, handed in with its file name as the grader does, stays source).
    if isinstance(obj, os.PathLike) or (
        isinstance(obj, str) and filename is None and "\n" not in obj and obj.endswith(".py") and os.path.isfile(obj)
    ):
        path = Path(obj)
        return _decode(path.read_bytes(), str(path)), filename or str(path), None, None
    if isinstance(obj, bytes):
        return _decode(obj, filename or "<bytes>"), filename or "<bytes>", None, None
    if isinstance(obj, str):
        return obj, filename or "<string>", None, None
    obj = _unwrap_kernel(obj)
    if isinstance(obj, types.ModuleType):
        source_file = inspect.getsourcefile(obj)
        if source_file and os.path.isfile(source_file):
            return Path(source_file).read_text(encoding="utf-8"), filename or source_file, None, None
        return inspect.getsource(obj), filename or obj.__name__, None, None
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        func = obj.__func__ if isinstance(obj, types.MethodType) else obj
        lines, start = inspect.getsourcelines(func)
        span = (start, start + len(lines) - 1)
        source_file = inspect.getsourcefile(func)
        if source_file and os.path.isfile(source_file):
            return Path(source_file).read_text(encoding="utf-8"), filename or source_file, span, func.__name__
        return textwrap.dedent("".join(lines)), filename or "<function>", (1, len(lines)), func.__name__
    raise TypeError(
        f"check_kernel() takes source text, a path, a function, an nki.jit kernel or a module, not {type(obj).__name__}"
    )


def _encoding_violations(source: str) -> list[Violation]:
    rule = RULES_BY_CODE["SANDBOX-ENCODING"]
    for number, line in enumerate(source.splitlines()[:2], 1):
        match = CODING.match(line)
        if match is not None:
            name = match.group(1).lower().replace("_", "-")
            if name not in SAFE_ENCODINGS:
                message = f"encoding declaration '{match.group(1)}': kernel files must be utf-8"
                return [Violation(rule.severity, rule.kind, number, 1, message, None, rule.code)]
            return []
        if line.strip() and not line.lstrip().startswith("#"):
            return []  # the declaration only counts before any code
    return []


def check_kernel(source_or_function_or_path: Any, *, filename: str | None = None) -> list[Violation]:
    """Screen kernel code without running it; returns findings sorted by position.

    Accepts source text, a path (``os.PathLike``, or a ``str`` naming an existing .py file when no
    ``filename`` is given), a module, a function, or an
    ``nki.jit``-style wrapper (unwrapped through ``func`` / ``__wrapped__``).  For a function, the whole file
    is parsed (so imports are known) and only findings inside the function are returned; the function counts
    as a kernel even without an NKI decorator (if its file is gone, lines count from the function's first
    line).  ``filename`` only labels the input.
    """
    try:
        source, _label, span, kernel_name = _load(source_or_function_or_path, filename)
    except _NotUtf8 as exc:
        return [Violation(ERROR, SYNTAX, 1, 1, str(exc), None, "SYNTAX-ERROR")]
    try:
        tree = ast.parse(source, filename=_label)
    except SyntaxError as exc:
        message = f"syntax error: {exc.msg}"
        return [Violation(ERROR, SYNTAX, exc.lineno or 1, exc.offset or 1, message, None, "SYNTAX-ERROR")]
    except ValueError as exc:  # e.g. null bytes
        return [Violation(ERROR, SYNTAX, 1, 1, f"cannot parse: {exc}", None, "SYNTAX-ERROR")]
    except RecursionError:
        return [Violation(ERROR, SYNTAX, 1, 1, "too deeply nested to parse", None, "SYNTAX-ERROR")]
    try:
        facts = ModuleFacts(tree, extra_kernels=(kernel_name,) if kernel_name and span else ())
        checker = Checker(facts)
        checker.visit(tree)
    except RecursionError:  # absurdly nested expressions: refuse rather than let them through unscreened
        return [Violation(ERROR, SYNTAX, 1, 1, "too deeply nested to screen", None, "SYNTAX-ERROR")]
    found = checker.out + _encoding_violations(source)
    if span is not None:
        first, last = span
        found = [v for v in found if first <= v.line <= last]
    unique: dict[tuple[int, int, str], Violation] = {}
    for v in found:  # one report per chain: `a.b.c` yields the outermost attribute's finding only
        unique.setdefault((v.line, v.col, v.code), v)
    return sorted(unique.values(), key=lambda v: (v.line, v.col, v.code))
