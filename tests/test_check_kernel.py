"""nkisim.check_kernel: every rule fires where it should, and real course kernels come out clean."""

from __future__ import annotations

import importlib.util
import keyword
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim.check import RULES, RULES_BY_CODE, Violation, blocking, check_kernel

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "check"
# realistic course-style kernels that must pass the screen cleanly (the 2025 vector adds are the emulator tests' own)
LEGIT = sorted(FIXTURES.glob("legit_*.py")) + [Path(__file__).resolve().parent / "kernels" / "vector_add_2025.py"]

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""


NKI_HEADER = """#!raw
import nki
import nki.isa as nisa
import nki.language as nl


"""


def _case(body: str) -> str:
    if body.startswith("#!raw\n"):  # no import header (e.g. a coding declaration must come first)
        return body.removeprefix("#!raw\n")
    return HEADER + textwrap.dedent(body)


# (id, source, expected code).  The expected line is the one marked with "# <-".
CASES: list[tuple[str, str, str]] = [
    # --- imports
    ("import-os", "import os  # <-\n", "SANDBOX-IMPORT"),
    ("import-nkisim", "import nkisim  # <-\n", "SANDBOX-IMPORT"),
    ("from-grader", "from grader import x  # <-\n", "SANDBOX-IMPORT"),
    ("import-sys-exit", "import sys  # <-\nsys.exit(0)\n", "SANDBOX-IMPORT"),
    ("import-ctypes", "import ctypes  # <-\n", "SANDBOX-IMPORT"),
    ("import-logging", "import logging  # <-\n", "SANDBOX-IMPORT"),
    (
        "import-in-kernel",
        "@nki.jit\ndef k(a):\n    import subprocess  # <-\n    return a\n",
        "SANDBOX-IMPORT",
    ),
    ("relative-import", "from . import helpers  # <-\n", "SANDBOX-IMPORT"),
    ("numpy-submodule", "import numpy.lib.format  # <-\n", "SANDBOX-IMPORT"),
    ("neuronxcc-internals", "from neuronxcc import starfish  # <-\n", "SANDBOX-IMPORT"),
    ("nki-internal-module", "import neuronxcc.nki.compile  # <-\n", "SANDBOX-IMPORT"),
    ("star-import", "from numpy import *  # <-\n", "SANDBOX-IMPORT-STAR"),
    # --- builtins
    ("dunder-import", "m = __import__('os')  # <-\n", "SANDBOX-DUNDER"),
    ("open", "@nki.jit\ndef k(a):\n    f = open('/etc/passwd')  # <-\n    return a\n", "SANDBOX-BUILTIN"),
    ("exec", "exec('import os')  # <-\n", "SANDBOX-BUILTIN"),
    ("eval", "x = eval('1 + 1')  # <-\n", "SANDBOX-BUILTIN"),
    ("compile", "c = compile('1', 'f', 'eval')  # <-\n", "SANDBOX-BUILTIN"),
    ("globals", "g = globals()  # <-\n", "SANDBOX-BUILTIN"),
    ("locals-in-kernel", "@nki.jit\ndef k(a):\n    v = locals()  # <-\n    return a\n", "SANDBOX-BUILTIN"),
    ("getattr", "b = getattr(nki, 'benchmark')  # <-\n", "SANDBOX-BUILTIN"),
    ("setattr", "setattr(nl, 'add', print)  # <-\n", "SANDBOX-BUILTIN"),
    ("vars", "d = vars(nl)  # <-\n", "SANDBOX-BUILTIN"),
    ("builtin-as-value", "reader = open  # <-\n", "SANDBOX-BUILTIN"),
    ("breakpoint", "breakpoint()  # <-\n", "SANDBOX-BUILTIN"),
    ("exit", "exit(0)  # <-\n", "SANDBOX-BUILTIN"),
    ("type3", "T = type('T', (), {})  # <-\n", "SANDBOX-TYPE3"),
    # --- private / dunder / introspection
    ("dunder-dict", "d = nl.__dict__  # <-\n", "SANDBOX-PRIVATE"),
    ("private-attr", "impl = nl._impl  # <-\n", "SANDBOX-PRIVATE"),
    ("class-bases", "bases = ().__class__.__bases__  # <-\n", "SANDBOX-PRIVATE"),
    ("private-import", "from numpy import _core  # <-\n", "SANDBOX-PRIVATE"),
    ("format-string", "s = '{0.__class__}'.format(1)  # <-\n", "SANDBOX-PRIVATE"),
    ("unbound-private-name", "x = _grader_state  # <-\n", "SANDBOX-PRIVATE"),
    ("builtins-name", "b = __builtins__  # <-\n", "SANDBOX-DUNDER"),
    ("file-name", "here = __file__  # <-\n", "SANDBOX-DUNDER"),
    ("module-getattr", "def __getattr__(name):  # <-\n    return None\n", "SANDBOX-DUNDER"),
    ("gi-frame", "g = (i for i in [1])\nf = g.gi_frame.f_back  # <-\n", "SANDBOX-INTROSPECTION"),
    ("f-globals", "def h(frame):\n    return frame.f_globals  # <-\n", "SANDBOX-INTROSPECTION"),
    ("mro", "classes = type(1).mro()  # <-\n", "SANDBOX-INTROSPECTION"),
    # --- monkey-patching
    ("global", "COUNT = 0\ndef bump():\n    global COUNT  # <-\n    COUNT += 1\n", "SANDBOX-GLOBAL"),
    ("nonlocal", "def outer():\n    n = 0\n    def inner():\n        nonlocal n  # <-\n", "SANDBOX-GLOBAL"),
    ("np-add", "np.add = lambda a, b: a  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("nl-add", "def f(a, b):\n    return a\nnl.add = f  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("nki-benchmark", "nki.benchmark = None  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("tile-size", "nl.tile_size.pmax = 256  # <-\n", "SANDBOX-MONKEYPATCH"),
    (
        "augassign",
        "@nki.jit\ndef k(a):\n    nl.tile_size.pmax += 128  # <-\n    return a\n",
        "SANDBOX-MONKEYPATCH",
    ),
    ("del-attr", "del nki.benchmark  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("builtins-print", "import builtins\nbuiltins.print = None  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("alias", "m = np\nm.add = None  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("loop-alias", "for mod in (np, nl):\n    mod.add = None  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("via-param", "def patch(mod):\n    mod.add = None  # <-\npatch(np)\n", "SANDBOX-MONKEYPATCH"),
    ("module-item", "np.sctypeDict['float32'] = None  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("module-dict-update", "np.sctypeDict.update({})  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("type-of-object", "t = np.zeros(1)\ntype(t).reshape = None  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("shared-class-item", "t = np.zeros(1)\ntype(t).table[0] = None  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("shared-class-clear", "t = np.zeros(1)\ntype(t).registry.clear()  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("item-via-param", "def put(d):\n    d['x'] = None  # <-\nput(np.sctypeDict)\n", "SANDBOX-MONKEYPATCH"),
    ("attr-on-function", "def k(a):\n    return a\nk.cache = {}  # <-\n", "SANDBOX-MONKEYPATCH"),
    (
        "dunder-method",
        "class Fake:\n    def __eq__(self, other):  # <-\n        return True\n",
        "SANDBOX-DUNDER",
    ),
    ("class-dunder-attr", "class Fake:\n    __array_priority__ = 1000  # <-\n", "SANDBOX-DUNDER"),
    # --- reaching other modules, I/O, NumPy state
    ("nl-os", "nl.os.system('ls')  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    ("np-lib", "f = np.lib.format.open_memmap  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    ("np-ctypeslib", "p = np.ctypeslib.as_ctypes  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    ("np-core", "m = np.core.multiarray  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    ("neuronxcc-attr", "import neuronxcc.nki\nx = neuronxcc.starfish  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    # typing's own module attributes (operator, functools, sys, ...), as an attribute or imported by name
    ("typing-operator", "import typing\nget = typing.operator.attrgetter('_v')  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    ("from-typing-sys", "from typing import sys as s  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    # NumPy's error state around an instruction: the executor's floating-point errors raised in the kernel
    ("np-errstate", "with np.errstate(divide='raise'):  # <-\n    pass\n", "SANDBOX-NUMPY-STATE"),
    ("np-load", "w = np.load('weights.npy')  # <-\n", "SANDBOX-NUMPY-IO"),
    ("np-save", "np.save('/tmp/x.npy', np.zeros(3))  # <-\n", "SANDBOX-NUMPY-IO"),
    ("np-fromfile", "w = np.fromfile('/etc/passwd')  # <-\n", "SANDBOX-NUMPY-IO"),
    ("np-memmap", "w = np.memmap('x.bin')  # <-\n", "SANDBOX-NUMPY-IO"),
    ("tofile", "a = np.zeros(3)\na.tofile('/tmp/a')  # <-\n", "SANDBOX-NUMPY-IO"),
    ("from-numpy-load", "from numpy import load  # <-\n", "SANDBOX-NUMPY-IO"),
    ("hidden-receiver", "x = (np,)[0].load('x.npy')  # <-\n", "SANDBOX-NUMPY-IO"),
    (
        "bench-neff",
        "@nki.jit\ndef k(a):\n    return a\nb = nki.benchmark(k, save_neff_name='/tmp/r.json')  # <-\n",
        "SANDBOX-FILE-OUTPUT",
    ),
    (
        "profile-dir",
        "@nki.profile(working_directory='/tmp')  # <-\ndef k(a):\n    return a\n",
        "SANDBOX-FILE-OUTPUT",
    ),
    ("bare-except", "try:\n    pass\nexcept:  # <-\n    pass\n", "SANDBOX-CATCH-ALL"),
    (
        "base-exception",
        "try:\n    pass\nexcept (ValueError, BaseException):  # <-\n    pass\n",
        "SANDBOX-CATCH-ALL",
    ),
    (
        "finally-return",
        "def f():\n    try:\n        pass\n    finally:\n        return 1  # <-\n",
        "SANDBOX-CATCH-ALL",
    ),
    (
        "ndarray-subclass",
        "class Always(np.ndarray):  # <-\n    def all(self):\n        return True\n",
        "SANDBOX-CLASS-BASE",
    ),
    ("metaclass", "class M:\n    pass\nclass C(metaclass=M):  # <-\n    pass\n", "SANDBOX-CLASS-BASE"),
    ("type-hints", "from typing import get_type_hints  # <-\n", "SANDBOX-INTROSPECTION"),
    ("np-extbuild", "b = np.testing.extbuild  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    ("np-seed", "np.random.seed(0)  # <-\n", "SANDBOX-NUMPY-STATE"),
    ("np-seterr", "np.seterr(all='ignore')  # <-\n", "SANDBOX-NUMPY-STATE"),
    # the wall clock: NumPy's datetime API by name, a datetime dtype or clock word as a string (S8)
    ("np-datetime64", "t = np.datetime64  # <-\n", "SANDBOX-CLOCK"),
    ("clock-word", "t = np.array(['now'])  # <-\n", "SANDBOX-CLOCK"),
    ("clock-today", "t = np.array([' Today '])  # <-\n", "SANDBOX-CLOCK"),
    ("datetime-dtype", "t = np.zeros(1, dtype='<M8[s]')  # <-\n", "SANDBOX-CLOCK"),
    ("timedelta-dtype", "t = np.zeros(1).astype('timedelta64')  # <-\n", "SANDBOX-CLOCK"),
    ("from-numpy-busday", "from numpy import busday_count  # <-\n", "SANDBOX-CLOCK"),
    ("dtypes-datetime", "t = np.dtypes.DateTime64DType  # <-\n", "SANDBOX-CLOCK"),
    # --- NKI subset (kernels and the helpers they call)
    (
        "nested-def",
        "@nki.jit\ndef k(a):\n    def inner(x):  # <-\n        return x\n    return inner(a)\n",
        "NKI-NESTED-FUNCTION",
    ),
    ("class-in-kernel", "@nki.jit\ndef k(a):\n    class C:  # <-\n        pass\n    return a\n", "NKI-CLASS"),
    (
        "try",
        "@nki.jit\ndef k(a):\n    try:  # <-\n        pass\n    except ValueError:\n        pass\n",
        "NKI-TRY",
    ),
    ("with", "@nki.jit\ndef k(a, ctx):\n    with ctx:  # <-\n        pass\n    return a\n", "NKI-WITH"),
    ("yield", "@nki.jit\ndef k(a):\n    yield a  # <-\n", "NKI-GENERATOR"),
    ("async", "@nki.jit\nasync def k(a):  # <-\n    return a\n", "NKI-ASYNC"),
    (
        "recursion",
        "def h(n):\n    return h(n - 1) if n else 0  # <-\n@nki.jit\ndef k(a):\n    h(3)\n    return a\n",
        "NKI-RECURSION",
    ),
    ("decorator", "def deco(f):\n    return f\n@deco  # <-\ndef k(a):\n    return a\n", "NKI-DECORATOR"),
    (
        "api-outside",
        "t = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)  # <-\n",
        "NKI-API-OUTSIDE-KERNEL",
    ),
    ("range", "@nki.jit\ndef k(a):\n    for i in range(4):  # <-\n        pass\n    return a\n", "NKI-RANGE"),
    (
        "while",
        "@nki.jit\ndef k(a):\n    i = 0\n    while i < 4:  # <-\n        i += 1\n    return a\n",
        "NKI-WHILE",
    ),
    (
        "comprehension",
        "@nki.jit\ndef k(a):\n    xs = [i for i in nl.affine_range(2)]  # <-\n",
        "NKI-COMPREHENSION",
    ),
    (
        "helper-try",
        "def h(a):\n    try:  # <-\n        return a\n    finally:\n        pass\n"
        "@nki.jit\ndef k(a):\n    return h(a)\n",
        "NKI-TRY",
    ),
    ("utf7-cookie", "#!raw\n# -*- coding: utf-7 -*-  # <-\nx = 1\n", "SANDBOX-ENCODING"),
    # --- the current nki API's compiler (files that import nki)
    ("mixed-namespaces", "import nki.isa as nisa2  # <-\n", "NKI-MIXED-NAMESPACES"),
    ("nki-arange", NKI_HEADER + "@nki.jit\ndef k(a):\n    i = nl.arange(128)  # <-\n    return a\n",
     "NKI-REMOVED-API"),
    ("nki-mask", NKI_HEADER + "@nki.jit\ndef k(a, t):\n    nisa.memset(t, 0, mask=None)  # <-\n    return a\n",
     "NKI-REMOVED-API"),
    ("nki-kwonly", NKI_HEADER + "@nki.jit\ndef k(a, *, flag=True):  # <-\n    return a\n", "NKI-KWONLY-PARAM"),
    ("nki-is", NKI_HEADER + "@nki.jit\ndef k(a, f=None):\n    if f is None:  # <-\n        pass\n    return a\n",
     "NKI-IS-COMPARISON"),
    ("nki-subkernel",
     NKI_HEADER + "@nki.jit\ndef s(a):\n    return a\n\n\n@nki.jit\ndef k(a):\n    return s(a)  # <-\n",
     "NKI-SUBKERNEL-JIT"),
    # --- syntax
    ("syntax", "def k(a:  # <-\n", "SYNTAX-ERROR"),
    # --- issue 31: every node kind that carries an attribute name, the semantic "self", rebound aliases
    ("match-class-dunder", "def f(x):\n    match x:\n        case object(__globals__=g):  # <-\n            return g\n",
     "SANDBOX-PRIVATE"),
    ("match-class-private", "def f(t):\n    match t:\n        case object(_v=v):  # <-\n            return v\n",
     "SANDBOX-PRIVATE"),
    ("match-class-frame", "def f(g):\n    match g:\n        case object(gi_frame=fr):  # <-\n            return fr\n",
     "SANDBOX-INTROSPECTION"),
    ("match-class-ctypes", "def f(a):\n    match a:\n        case np.ndarray(ctypes=c):  # <-\n            return c\n",
     "SANDBOX-MODULE-ESCAPE"),
    ("match-class-tofile", "def f(a):\n    match a:\n        case np.ndarray(tofile=w):  # <-\n            return w\n",
     "SANDBOX-NUMPY-IO"),
    ("match-capture-dunder", "def f(x):\n    match x:\n        case __builtins__:  # <-\n            pass\n",
     "SANDBOX-DUNDER"),
    ("except-as-dunder", "try:\n    pass\nexcept ValueError as __builtins__:  # <-\n    pass\n", "SANDBOX-DUNDER"),
    ("keyword-dunder", "def f(**kw):\n    return kw\nf(__globals__=1)  # <-\n", "SANDBOX-DUNDER"),
    ("format-dynamic", "def f(k):\n    return ('{0.' + '_' + '_globals__}').format(k)  # <-\n", "SANDBOX-PRIVATE"),
    ("format-frame", "def f(g):\n    return '{0.gi_frame}'.format(g)  # <-\n", "SANDBOX-PRIVATE"),
    ("unbound-method",
     "class Plant:\n    def put(self, v):\n        self.kind = v\nPlant.put(nl.sbuf, 'psum')  # <-\n",
     "SANDBOX-CLASS-ESCAPE"),
    ("class-alias",
     "class Plant:\n    def put(self, v):\n        self.kind = v\nP = Plant  # <-\nP.put(nl.sbuf, 'psum')\n",
     "SANDBOX-CLASS-ESCAPE"),
    ("subclass-alias",
     "class Plant:\n    def put(self, v):\n        self.items.append(v)\nclass Sub(Plant):\n    pass\n"
     "S = Sub  # <-\n",
     "SANDBOX-CLASS-ESCAPE"),
    ("class-as-argument",
     "class Plant:\n    def put(self, v):\n        self.kind = v\n"
     "def run(c):\n    c.put(nl.sbuf, 0)\nrun(Plant)  # <-\n",
     "SANDBOX-CLASS-ESCAPE"),
    ("type-of-instance",
     "class Plant:\n    def put(self, v):\n        self.kind = v\ntype(Plant()).put(nl.sbuf, 'psum')  # <-\n",
     "SANDBOX-CLASS-ESCAPE"),
    ("staticmethod-self",
     "class Plant:\n    @staticmethod\n    def put(self, v):\n        self.kind = v  # <-\nPlant().put(nl.sbuf, 1)\n",
     "SANDBOX-MONKEYPATCH"),
    ("self-rebound",
     "class Plant:\n    def put(self, v):\n        self = nl.sbuf\n        self.kind = v  # <-\n",
     "SANDBOX-MONKEYPATCH"),
    ("attribute-error-obj",
     "def f(m):\n    try:\n        return m.nothing\n    except AttributeError as err:\n        return err.obj  # <-\n",
     "SANDBOX-INTROSPECTION"),
    ("operator-module", "import typing\ng = typing.operator.attrgetter  # <-\n", "SANDBOX-MODULE-ESCAPE"),
    ("alias-rebound-mutation", "import numpy\nnp = numpy.sctypeDict\nnp.clear()  # <-\n", "SANDBOX-MONKEYPATCH"),
    ("alias-rebound-io", "def f(a):\n    nl = a\n    nl.tofile('/tmp/x')  # <-\n", "SANDBOX-NUMPY-IO"),
]


def _marked_line(source: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if "# <-" in line)


@pytest.mark.parametrize("name, body, code", CASES, ids=[c[0] for c in CASES])
def test_rule_fires_on_marked_line(name: str, body: str, code: str) -> None:
    source = _case(body)
    found = check_kernel(source)
    hits = [v for v in found if v.code == code]
    assert hits, f"{code} not reported for {name}: {found}"
    assert _marked_line(source) in {v.line for v in hits}, found
    rule = RULES_BY_CODE[code]
    assert all(v.kind == rule.kind and v.severity == rule.severity for v in hits)


def test_every_rule_has_a_triggering_case() -> None:
    assert {code for _, _, code in CASES} == set(RULES_BY_CODE)


def test_rule_table_is_consistent() -> None:
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes))
    for rule in RULES:
        assert rule.kind in ("sandbox", "nki-subset", "syntax", "api")
        assert rule.severity in ("error", "warning", "info")
        # The grader zeroes on sandbox/syntax findings; NKI-subset findings never block a score; API misuse is an
        # error the compiler reports (and the kernel hits when it runs), never blocking either.
        assert (rule.kind in ("sandbox", "syntax", "api")) == (rule.severity == "error")
        assert Violation(rule.severity, rule.kind, 1, 1, "", None, rule.code).blocking == (
            rule.kind in ("sandbox", "syntax"))
        assert rule.description


@pytest.mark.parametrize("path", LEGIT, ids=[p.stem for p in LEGIT])
def test_course_style_kernels_are_clean(path: Path) -> None:
    found = check_kernel(path)
    assert blocking(found) == [], found
    assert [v for v in found if v.severity == "warning"] == [], found


COURSE_KERNEL_FILES = [
    "part1/kernels.py",
    "part2/conv2d.py",
    "grader/reference/part1/kernels.py",
    "grader/reference/part2/conv2d.py",
    "editions/legacy/part1/kernels.py",
    "editions/legacy/part2/conv2d.py",
    "grader/reference/legacy/part1/kernels.py",
    "grader/reference/legacy/part2/conv2d.py",
]


@pytest.mark.parametrize("relpath", COURSE_KERNEL_FILES)
def test_starter_and_reference_kernels_pass_the_screen(relpath: str) -> None:
    """The grader screens submissions with check_kernel: the starters and staff solutions must pass it."""
    path = REPO / relpath
    if not path.exists():
        pytest.skip(f"{relpath} does not exist yet")
    assert blocking(check_kernel(path)) == []


def test_non_kernel_functions_are_not_held_to_the_nki_subset() -> None:
    source = _case(
        """
        def reference(x):
            try:
                return [v for v in range(3)]
            finally:
                pass
        """
    )
    assert check_kernel(source) == []


LEGIT_SNIPPETS = {
    "param-named-like-builtin": "@nki.jit\ndef k(input, type):\n    return input if type else input\n",
    "underscore-loop-variable": "@nki.jit\ndef k(a):\n    for _ in nl.affine_range(4):\n        pass\n",
    "main-guard": "if __name__ == '__main__':\n    print('run me')\n",
    "dunder-all": "__all__ = ['k']\n",
    "own-private-helper": "def _helper(x):\n    return x\ny = _helper(3)\n",
    "numpy-functions-named-like-methods": "a = np.append(np.zeros(2), 1)\nb = np.insert(a, 0, 5)\n",
    "tile-writes-in-helper-given-an-op": (
        "def apply(dst, src, op):\n    dst[...] = op(src, src)\n    dst[0:1, :] = src\n"
        "@nki.jit\ndef k(a):\n    t = nl.ndarray((128, 4), dtype=a.dtype, buffer=nl.sbuf)\n"
        "    apply(t, t, nl.add)\n    return a\n"
    ),
    "list-of-ops": "OPS = [nl.add, nl.multiply]\nOPS.append(nl.maximum)\nOPS[0] = nl.subtract\n",
    "helper-class": (
        "class Tiling:\n    def __init__(self, rows):\n        self.rows = rows\n        self.tiles = []\n"
        "        self.tiles.append(rows)\n        self.grid = {}\n        self.grid[0] = rows\n"
        "    def __repr__(self):\n        return 'Tiling'\n"
    ),
    "class-bases": (
        "from typing import NamedTuple\nclass Shape(NamedTuple):\n    rows: int\n"
        "class KernelError(ValueError):\n    pass\nclass Base:\n    pass\n"
        "class Derived(Base, object):\n    pass\n"
    ),
    "loop-in-finally": "try:\n    pass\nfinally:\n    for i in range(2):\n        break\n",
    "super-init": (
        "class Base:\n    def __init__(self, n):\n        self.n = n\n"
        "class Tiles(Base):\n    def __init__(self, n):\n        super().__init__(n)\n"
    ),
    "except-exception": "try:\n    x = 1\nexcept (ValueError, Exception):\n    x = 0\n",
    "local-containers": "d = {}\nd['a'] = 1\nd.update(b=2)\ns = set()\ns.add(1)\nts = []\nts.append(d)\n",
    "numpy-random-data": "x = np.random.rand(4).astype(np.float32)\ny = np.testing.assert_allclose\n",
    "nki-decorators": (
        "from neuronxcc.nki import jit, benchmark\nimport neuronxcc.nki.compiler as ncc\n"
        "@ncc.skip_middle_end_transformations\n@jit(mode='simulation')\ndef k(a):\n    return a\n"
        "@nki.compiler.skip_middle_end_transformations\n@nki.jit\ndef k2(a):\n    return k(a)\n"
        "@benchmark(warmup=1, iters=2)\ndef k3(a):\n    return a\n"
    ),
    "typing-and-math": "import math\nfrom typing import Tuple\nX: Tuple = (math.pi,)\n",
    "shape-print": "@nki.jit\ndef k(a):\n    print(a.shape, a.dtype)\n    return a\n",
}


@pytest.mark.parametrize("body", LEGIT_SNIPPETS.values(), ids=list(LEGIT_SNIPPETS))
def test_legitimate_code_is_not_blocked(body: str) -> None:
    found = check_kernel(_case(body))
    assert blocking(found) == [], found


def test_module_level_rebinding_of_a_builtin_does_not_hide_it() -> None:
    # Module-level bindings are order dependent (the builtin may be read before), so they never shadow.
    found = check_kernel("open = print\nopen('/etc/passwd')\n")
    assert [v.code for v in found] == ["SANDBOX-BUILTIN"]


def test_undecodable_file_is_a_syntax_finding(tmp_path: Path) -> None:
    target = tmp_path / "kernels.py"
    target.write_bytes(b"x = '\xff\xfe'\n")
    (v,) = check_kernel(target)
    assert v.code == "SYNTAX-ERROR" and "not UTF-8" in v.message
    assert check_kernel(b"import os\n")[0].code == "SANDBOX-IMPORT"


@pytest.mark.parametrize("depth", [2000, 50000])
def test_absurd_nesting_is_refused_not_crashed(depth: int) -> None:
    (v,) = check_kernel("x = " + "1 + " * depth + "1\n")
    assert v.code == "SYNTAX-ERROR" and v.blocking and "nested" in v.message
    assert check_kernel("x = " + "1 + " * 200 + "1\n") == []


def test_syntax_error_reports_position() -> None:
    (v,) = check_kernel("x = 1\ny = (\n")
    assert v.code == "SYNTAX-ERROR" and v.kind == "syntax" and v.blocking
    assert v.line == 2


def test_violation_fields_and_format() -> None:
    source = _case("@nki.jit\ndef k(a):\n    import os\n    return a\n")
    (v,) = check_kernel(source)
    assert isinstance(v, Violation)
    assert (v.code, v.line, v.col, v.function, v.severity, v.kind) == (
        "SANDBOX-IMPORT",
        7,
        5,
        "k",
        "error",
        "sandbox",
    )
    assert v.format().startswith("7:5: SANDBOX-IMPORT ")
    assert v.as_dict()["code"] == "SANDBOX-IMPORT"
    with pytest.raises(AttributeError):
        v.line = 3  # type: ignore[misc]  # frozen


def test_findings_are_sorted_and_unique() -> None:
    source = _case("import os\nimport sys\nx = ().__class__.__bases__.__subclasses__()\n")
    found = check_kernel(source)
    keys = [(v.line, v.col, v.code) for v in found]
    assert keys == sorted(keys) and len(keys) == len(set(keys))
    assert [v.code for v in found] == ["SANDBOX-IMPORT", "SANDBOX-IMPORT", "SANDBOX-PRIVATE"]


# --- input forms --------------------------------------------------------------------------------------------


def _load_fixture_module():
    spec = importlib.util.spec_from_file_location("funcs_for_check", FIXTURES / "funcs_for_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accepts_paths_as_str_and_pathlike(tmp_path: Path) -> None:
    target = tmp_path / "kernels.py"
    target.write_text(_case("import os\n"))
    for arg in (target, str(target)):
        assert [v.code for v in check_kernel(arg)] == ["SANDBOX-IMPORT"]


def test_source_that_looks_like_a_path_stays_source_when_labelled(tmp_path: Path) -> None:
    clean = tmp_path / "clean.py"
    clean.write_text("x = 1\n")
    # A submission whose whole text is the name of a clean file must not be screened as that file.
    assert [v.code for v in check_kernel(str(clean), filename="kernels.py")] == ["SYNTAX-ERROR"]
    assert check_kernel("open('x.py')", filename="kernels.py")[0].code == "SANDBOX-BUILTIN"


def test_accepts_functions_wrappers_and_modules() -> None:
    module = _load_fixture_module()
    (v,) = check_kernel(module.kernel_reads_file)
    assert (v.code, v.line, v.function) == ("SANDBOX-BUILTIN", 17, "kernel_reads_file")
    assert check_kernel(module.wrapped_kernel) == [v]  # unwrapped through .func
    (note,) = check_kernel(module.kernel_clean)  # a function handed in is treated as a kernel
    assert (note.code, note.line, note.severity) == ("NKI-RANGE", 26, "info")
    assert [x.code for x in check_kernel(module)] == ["SANDBOX-BUILTIN"]  # module: whole file, no kernels


def test_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="check_kernel"):
        check_kernel(42)


def test_exported_from_package() -> None:
    import nkisim

    assert nkisim.check_kernel is check_kernel


# --- properties ---------------------------------------------------------------------------------------------

_identifier = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,12}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(name=_identifier, receiver=st.sampled_from(["nl", "np", "tile", "nki.isa", "a_tensor"]))
def test_any_underscore_attribute_is_flagged(name: str, receiver: str) -> None:
    for attr in (f"_{name}", f"__{name}__"):
        source = _case(f"@nki.jit\ndef k(a_tensor, tile):\n    return {receiver}.{attr}\n")
        codes = {v.code for v in check_kernel(source)}
        assert "SANDBOX-PRIVATE" in codes, (attr, codes)


_SPECIAL = {"os", "sys", "lib", "np", "numpy", "io", "types", "mro", "load", "save", "dump", "seed"}


@settings(max_examples=60, deadline=None)
@given(name=_identifier.filter(lambda s: s.lower() not in _SPECIAL and not s.startswith(("f_", "gi_", "co_"))))
def test_plain_attribute_reads_on_tiles_are_not_blocked(name: str) -> None:
    from nkisim.check import sandbox

    if name in sandbox._ESCAPE_ATTRS | sandbox._IO_ATTRS | sandbox._STATE_ATTRS | sandbox._INTROSPECTION_ATTRS:
        return
    source = _case(
        f"@nki.jit\ndef k(a_tensor):\n    t = nl.ndarray((128, 1), dtype=a_tensor.dtype)\n    x = t.{name}\n"
    )
    assert blocking(check_kernel(source)) == []


# --- command line -------------------------------------------------------------------------------------------


def _run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "nkisim", "check", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_linter_lines_and_exits_1_on_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(_case("import os\n@nki.jit\ndef k(a):\n    for i in range(2):\n        pass\n    return a\n"))
    result = _run_cli(str(bad), str(LEGIT[0]), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert f"{bad}:5:1: SANDBOX-IMPORT import of 'os' is not allowed in kernel files" in lines
    assert any(re.match(rf"{re.escape(str(bad))}:8:\d+: NKI-RANGE .*\(info\)", line) for line in lines)
    assert "1 error(s)" in result.stderr


def test_cli_exit_0_for_clean_files_and_lists_rules(tmp_path: Path) -> None:
    result = _run_cli(*map(str, LEGIT), cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
    listed = _run_cli("--list-rules", cwd=tmp_path)
    assert listed.returncode == 0
    assert {line.split()[0] for line in listed.stdout.splitlines()} == set(RULES_BY_CODE)


def test_cli_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = _run_cli(str(tmp_path / "nope.py"), cwd=tmp_path)
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_alias_names_rebound_as_tiles_are_tiles() -> None:
    source = _case(
        """
        def setup():
            buf = nl.sbuf
            return buf

        @nki.jit
        def k(a):
            buf = nl.ndarray((128, 4), dtype=a.dtype, buffer=nl.sbuf)
            buf[...] = 0
            return a
        """
    )
    assert blocking(check_kernel(source)) == []
    # ...while a name only ever bound to a module attribute stays an alias of it.
    assert [v.code for v in check_kernel(_case("d = np.sctypeDict\nd['x'] = None\n"))] == ["SANDBOX-MONKEYPATCH"]



# ---- issue 31: the screen knows every identifier-carrying field of the running Python's AST ----------------------
def test_every_string_field_of_every_node_kind_is_classified():
    """A node kind of a newer Python that carries an identifier (an attribute name, a capture name) fails here until
    nkisim/check/analysis.py's IDENTIFIER_ROLES says what it is; until then the screen treats it as an attribute
    name (its strictest role).  Fields are found by parsing a program using every construct the running Python has
    and collecting the string-valued ones."""
    import ast

    from nkisim.check.analysis import IDENTIFIER_ROLES, NOT_IDENTIFIERS

    program = textwrap.dedent("""\
        import a.b as c
        from d import e as f
        def g(h: int, *i, j=1, **k) -> None:  # type: ignore
            global l
            x = m.n
            try:
                pass
            except E as o:
                pass
            match x:
                case P(r, q=r2):
                    pass
                case {"k": v, **s}:
                    pass
                case [*t]:
                    pass
                case u if u:
                    pass
            f"{x!r:>{h}}"
            return w(y=1)
        async def z():
            nonlocal aa
        class Q:
            pass
    """)
    fields = set()
    for node in ast.walk(ast.parse(program, type_comments=True)):
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, str) or (isinstance(value, list) and value and isinstance(value[0], str)):
                fields.add((type(node).__name__, field))
    known = set(IDENTIFIER_ROLES) | NOT_IDENTIFIERS
    assert fields - known == set()
    assert {("MatchClass", "kwd_attrs"), ("MatchAs", "name"), ("keyword", "arg"), ("ExceptHandler", "name")} <= fields


def test_an_unclassified_identifier_field_is_screened_as_an_attribute_name(monkeypatch):
    import ast

    from nkisim.check import analysis

    monkeypatch.delitem(analysis.IDENTIFIER_ROLES, ("MatchClass", "kwd_attrs"))
    found = check_kernel("def f(x):\n    match x:\n        case object(_v=v):\n            return v\n")
    assert any(v.code == "SANDBOX-PRIVATE" and "MatchClass.kwd_attrs" in v.message for v in found), found
    assert ast  # the module is used above


def test_classes_of_the_file_stay_usable_the_honest_ways():
    source = HEADER + textwrap.dedent("""\
        class Cfg:
            SIZE = 128

            def __init__(self, n):
                self.n = n

            def grow(self, k):
                self.n = self.n + k
                return self

        class Oops(ValueError):
            pass

        class Helpers:
            @staticmethod
            def double(x):
                return 2 * x

            def area(self):
                return self.n * self.n

        H = Helpers

        def helper(c: Cfg) -> Cfg:
            if not isinstance(c, Cfg) or type(c) != Cfg:
                raise Oops(f"bad {type(c)}")
            return c.grow(Cfg.SIZE + Helpers.double(1) + H.area(c))

        @nki.jit
        def k(a):
            try:
                helper(Cfg(1))
            except Oops:
                pass
            return a
    """)
    assert not blocking(check_kernel(source)), check_kernel(source)
