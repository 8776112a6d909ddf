"""The screen's rule table: every finding it can report, with its stable code, kind and severity.

``python -m nkisim check --list-rules`` prints it.  Kinds: ``sandbox`` (the grader scores a part 0 on any of them),
``syntax`` (likewise), ``nki-subset`` (Python the NKI compiler may reject or rewrite: warnings, never change a score),
``api`` (NKI API misuse the compiler rejects: errors, but never blocking, as the kernel also fails when it runs).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

SANDBOX = "sandbox"
NKI_SUBSET = "nki-subset"
API = "api"  # API misuse the NKI compiler rejects (an error; the kernel fails when it runs too, so never blocking)
SYNTAX = "syntax"
ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Rule:
    """One check: stable ``code``, ``kind`` (sandbox | nki-subset | syntax), ``severity``, what it catches, and the
    APIs (front-end keys, ``nkisim.frontends``) whose kernel files it applies to."""

    code: str
    kind: str
    severity: str
    description: str
    apis: tuple[str, ...] = ("legacy", "nki")


RULES: tuple[Rule, ...] = (
    Rule("SYNTAX-ERROR", SYNTAX, ERROR, "the file does not parse as Python"),
    Rule(
        "SANDBOX-IMPORT",
        SANDBOX,
        ERROR,
        "import of a module other than numpy, math, typing, __future__ and neuronxcc.nki[.language|.isa|"
        ".compiler|.typing] (relative imports included)",
    ),
    Rule(
        "SANDBOX-ENCODING",
        SANDBOX,
        ERROR,
        "source-encoding declaration other than utf-8/ascii (Python would decode the file differently from "
        "the screen, e.g. utf-7 hides code)",
    ),
    Rule("SANDBOX-IMPORT-STAR", SANDBOX, ERROR, "`from module import *`"),
    Rule(
        "SANDBOX-BUILTIN",
        SANDBOX,
        ERROR,
        "use of a builtin that reaches outside the kernel: open, exec, eval, compile, globals, locals, vars, "
        "dir, getattr, setattr, delattr, breakpoint, input, memoryview, help, exit, quit",
    ),
    Rule("SANDBOX-TYPE3", SANDBOX, ERROR, "three-argument type(...) (creates classes dynamically)"),
    Rule(
        "SANDBOX-PRIVATE",
        SANDBOX,
        ERROR,
        "attribute or imported name starting with an underscore (x._impl, x.__class__), or a format string "
        "that reads one",
    ),
    Rule(
        "SANDBOX-DUNDER",
        SANDBOX,
        ERROR,
        "name of the form __name__ (e.g. __builtins__, __import__, __file__), except reading __name__ and "
        "defining __init__/__repr__/__str__ in a class",
    ),
    Rule(
        "SANDBOX-INTROSPECTION",
        SANDBOX,
        ERROR,
        "frame/code introspection (gi_frame, f_back, f_globals, tb_frame, co_code, mro, ...) and typing's "
        "annotation evaluators (get_type_hints, ForwardRef)",
    ),
    Rule("SANDBOX-GLOBAL", SANDBOX, ERROR, "`global` or `nonlocal` statement"),
    Rule(
        "SANDBOX-MONKEYPATCH",
        SANDBOX,
        ERROR,
        "assignment, deletion or in-place mutation of an imported module's attributes or items "
        "(np.add = ..., nl.tile_size.pmax = ..., del nki.benchmark)",
    ),
    Rule(
        "SANDBOX-MODULE-ESCAPE",
        SANDBOX,
        ERROR,
        "reaching another module through an attribute (nl.os, np.lib, np.ctypeslib, np.f2py, np.core, "
        "neuronxcc.<not nki>, ...)",
    ),
    Rule(
        "SANDBOX-NUMPY-IO",
        SANDBOX,
        ERROR,
        "file or pickle I/O: np.load/save/savez/loadtxt/savetxt/genfromtxt/fromfile/fromregex/memmap, "
        ".tofile(), .dump()",
    ),
    Rule(
        "SANDBOX-NUMPY-STATE",
        SANDBOX,
        ERROR,
        "changing NumPy's process-wide state: np.seterr, np.seterrcall, np.setbufsize, np.set_printoptions, "
        "np.random.seed, np.random.set_state",
    ),
    Rule(
        "SANDBOX-CLOCK",
        SANDBOX,
        ERROR,
        "reading the wall clock: NumPy's datetime API (np.datetime64, np.timedelta64, np.busday_*, "
        "np.datetime_as_string, np.dtypes.DateTime64DType, ...), a datetime dtype spelt as a string ('M8[s]', "
        "'datetime64') or the clock words 'now' / 'today' (the emulator's speed depends on device values)",
    ),
    Rule(
        "SANDBOX-FILE-OUTPUT",
        SANDBOX,
        ERROR,
        "launcher keyword that writes files (save_neff_name=, save_trace_name=, artifacts_dir=, working_directory=)",
    ),
    Rule(
        "SANDBOX-CATCH-ALL",
        SANDBOX,
        ERROR,
        "bare `except:`, catching BaseException / SystemExit / KeyboardInterrupt / GeneratorExit, or "
        "return/break/continue in `finally` (would swallow the grader's timeouts)",
    ),
    Rule(
        "SANDBOX-CLASS-BASE",
        SANDBOX,
        ERROR,
        "class deriving from anything but object, exceptions, typing helpers or classes of the same file, "
        "or with a metaclass (e.g. an ndarray subclass that fools comparisons)",
    ),
    Rule(
        "SANDBOX-CLASS-ESCAPE",
        SANDBOX,
        ERROR,
        "a class of the file whose methods write through self used other than by calling it, reading a constant "
        "of it, testing or raising it (C.method(obj) runs the method on an object that is not a C: 'self.x = ...' "
        "plants attributes on it), or type(x) used other than in a comparison or a printout",
    ),
    Rule(
        "NKI-NESTED-FUNCTION",
        NKI_SUBSET,
        WARNING,
        "function defined inside a kernel (define kernels and helpers at module level)",
        apis=("legacy",),
    ),
    Rule("NKI-CLASS", NKI_SUBSET, WARNING, "class defined inside a kernel", apis=("legacy",)),
    Rule("NKI-TRY", NKI_SUBSET, WARNING, "try/except/finally inside a kernel"),
    Rule("NKI-WITH", NKI_SUBSET, WARNING, "with-statement inside a kernel"),
    Rule("NKI-GENERATOR", NKI_SUBSET, WARNING, "yield inside a kernel (kernels cannot be generators)"),
    Rule("NKI-ASYNC", NKI_SUBSET, WARNING, "async def/for/with or await in a kernel"),
    Rule("NKI-RECURSION", NKI_SUBSET, WARNING, "kernel or kernel helper that calls itself (directly or not)"),
    Rule(
        "NKI-DECORATOR",
        NKI_SUBSET,
        WARNING,
        "decorator other than nki.jit / nki.baremetal / nki.benchmark / nki.profile / nki.compiler.*",
    ),
    Rule(
        "NKI-API-OUTSIDE-KERNEL",
        NKI_SUBSET,
        WARNING,
        "nl.* / nisa.* call at module level (err_nki_api_outside_of_nki_kernel)",
    ),
    Rule(
        "NKI-RANGE",
        NKI_SUBSET,
        INFO,
        "Python range() in a kernel: the compiler rewrites it to nl.sequential_range",
        apis=("legacy",),
    ),
    Rule(
        "NKI-WHILE",
        NKI_SUBSET,
        INFO,
        "while-loop in a kernel: its condition must be a trace-time value, not tensor data",
    ),
    Rule("NKI-COMPREHENSION", NKI_SUBSET, INFO, "comprehension or generator expression in a kernel"),
    Rule(
        "NKI-MIXED-NAMESPACES",
        API,
        ERROR,
        "the file imports both neuronxcc.nki and nki: a kernel file uses one NKI API (NKI 0.4+: neuronxcc.nki inside "
        "nki kernels is a compilation error)",
    ),
    Rule(
        "NKI-REMOVED-API",
        API,
        ERROR,
        "a name the nki API removed (nl.arange, nl.mgrid, nl.par_dim, nl.loop_reduce, mask=, nki.benchmark, ...): the "
        "message names the replacement (NKI migration guide)",
        apis=("nki",),
    ),
    Rule(
        "NKI-KWONLY-PARAM",
        API,
        ERROR,
        "keyword-only separator (*) in a kernel signature: the NKI 0.3+ compiler does not support it",
        apis=("nki",),
    ),
    Rule(
        "NKI-IS-COMPARISON",
        API,
        ERROR,
        "`is` / `is not` in kernel code: the NKI 0.3+ compiler does not support them (use == / !=)",
        apis=("nki",),
    ),
    Rule(
        "NKI-SUBKERNEL-JIT",
        API,
        ERROR,
        "a kernel calls another @nki.jit function: NKI 0.2+ compiles the top-level kernel only; remove the decorator "
        "from sub-kernels",
        apis=("nki",),
    ),
)
RULES_BY_CODE: dict[str, Rule] = {rule.code: rule for rule in RULES}


@dataclass(frozen=True)
class Violation:
    """One finding.  ``line`` and ``col`` are 1-based positions in the checked file."""

    severity: str
    kind: str
    line: int
    col: int
    message: str
    function: str | None
    code: str

    @property
    def blocking(self) -> bool:
        """True for findings that make the grader score the part 0 (sandbox and syntax)."""
        return self.kind in (SANDBOX, SYNTAX)

    def format(self) -> str:
        """``line:col: CODE message`` (linter style; the file name is prepended by the caller)."""
        tag = "" if self.severity == ERROR else f" ({self.severity})"
        where = f" [in {self.function}]" if self.function else ""
        return f"{self.line}:{self.col}: {self.code} {self.message}{tag}{where}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def blocking(violations: Iterable[Violation]) -> list[Violation]:
    """The findings that zero a part in the grader."""
    return [v for v in violations if v.blocking]
