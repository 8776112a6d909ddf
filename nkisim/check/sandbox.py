"""Sandbox rules: what kernel files may not do at all (imports, I/O, introspection, monkey-patching, ...).

Checked over the WHOLE file, always severity ``error``; the grader scores a part 0 on any of them.  The allowed
imports are NumPy, ``math``, ``typing``, ``__future__`` and the NKI namespaces of the front-end registry
(``neuronxcc.nki`` / ``nki`` and their public submodules).  :class:`SandboxRules` is a mixin of the walker
(``nkisim.check.walker.Checker``): its ``visit_*`` methods handle the nodes only sandbox rules look at, its
``sandbox_*`` hooks the nodes the NKI-subset rules share.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import types

from nkisim.check.analysis import (
    FUNCTIONS,
    MUTATING_METHODS,
    finally_exits,
    has_attribute_hop,
    identifiers,
    is_dunder,
    is_super_call,
    namespace_of,
    rebinds,
    root_name,
)
from nkisim.frontends import FRONT_ENDS

_NAMESPACES = frozenset(fe.namespace for fe in FRONT_ENDS)
# Packages that only hold a namespace (`neuronxcc` holds `neuronxcc.nki`): nothing else in them is NKI.
_SHELL_ROOTS = {fe.root: fe for fe in FRONT_ENDS if fe.root != fe.namespace}

_ALLOWED_MODULES = frozenset({"numpy", "math", "typing"})
_FORBIDDEN_BUILTINS = frozenset(
    "open exec eval compile globals locals vars dir getattr setattr delattr breakpoint input memoryview "
    "help exit quit".split()
)
# Attribute names that are modules an import-free kernel could otherwise reach (nl.os, np.lib, ...).
_ESCAPE_ATTRS = frozenset(
    "os sys subprocess importlib builtins ctypes ctypeslib pickle marshal shelve socket shutil pathlib io "
    "inspect gc threading multiprocessing concurrent signal runpy codeop types weakref tempfile glob "
    "fcntl resource posix pty mmap sysconfig site atexit faulthandler traceback linecache pkgutil urllib "
    "http asyncio selectors webbrowser nkisim grader lib f2py distutils extbuild np numpy neuronxcc "
    # modules that read attributes by computed names (operator.attrgetter, string.Formatter), run code or do I/O
    # (codecs.open, logging's file handlers): reachable as attributes of a real module, e.g. typing.operator
    "operator functools copyreg codecs logging warnings contextlib dataclasses dis zipfile tarfile sqlite3 "
    "zipimport".split()
)
# The modules the allowed stdlib modules hold as attributes, read from the modules themselves (a class, not a list of
# names): typing imports collections, contextlib, functools, operator, re (as stdlib_re), sys, types and warnings, so
# `typing.operator.attrgetter("_v")` or `from typing import sys` would reach them (the grader's module views refuse
# them at run time as well: grader/child.py).
_STDLIB_MODULE_ATTRS = {
    m: frozenset(n for n, v in vars(importlib.import_module(m)).items() if isinstance(v, types.ModuleType))
    for m in _ALLOWED_MODULES - {"numpy"}
}
# NumPy internals (only flagged on a NumPy receiver; np.testing stays usable in a __main__ self-test).
_NUMPY_INTERNAL_ATTRS = frozenset({"core", "compat"})
# Receivers that are modules: `np.append(...)` / `nl.add(...)` are functions, not list/set/dict mutation.
_NUMPY_SUBMODULES = "random linalg fft ma char strings polynomial emath rec typing dtypes exceptions".split()
_MODULE_PATHS = frozenset(
    ["numpy", "math", "typing"]
    + [p for fe in FRONT_ENDS for p in (fe.root, fe.namespace, *(f"{fe.namespace}.{m}" for m in fe.submodules))]
    + [f"numpy.{m}" for m in _NUMPY_SUBMODULES]
)
_IO_ATTRS = frozenset(
    "load save savez savez_compressed savetxt loadtxt genfromtxt fromfile fromregex memmap tofile dump "
    "dumps DataSource open_memmap".split()
)
# errstate is seterr for a with-block: nkisim's executor computes instruction values with NumPy inside it, so
# errstate(all="raise") turned a device value (a zero divisor, an overflow) into an exception in the kernel's Python
# and errstate(call=f) into a call of kernel code (issue 31: device values never reach the kernel's Python).
_STATE_ATTRS = frozenset(
    "seterr seterrcall seterrobj errstate setbufsize set_printoptions set_string_function set_numeric_ops seed "
    "set_state".split()
)
# The wall clock (SANDBOX-CLOCK): NumPy's datetime parser reads it for 'now' and 'today'.  A clock in the kernel's
# Python is a side channel: how long the emulator takes to execute instructions depends on device values (a
# data-dependent nl.while_loop) and on whether values are computed at all.  Every name of the datetime API, every
# string spelling a datetime/timedelta dtype and the clock words are refused; the grader's child stops NumPy's clock
# under them (grader/child.py _stop_numpy_clock), for the spellings built at run time.
_CLOCK_ATTRS = frozenset(
    "datetime64 timedelta64 datetime_as_string datetime_data busday_count busday_offset is_busday busdaycalendar "
    "DateTime64DType TimeDelta64DType".split()
)
_CLOCK_STRING = re.compile(r"\s*(now|today|datetime|[<>=|]?([Mm]8?|datetime64|timedelta64)(\[\w*\])?)\s*",
                           re.IGNORECASE)
_INTROSPECTION_ATTRS = frozenset(
    "gi_frame gi_code gi_yieldfrom cr_frame cr_code cr_await cr_origin ag_frame ag_code ag_await f_back "
    "f_globals f_locals f_builtins f_code f_trace tb_frame tb_next co_code co_consts co_names "
    "func_globals func_code func_closure cell_contents mro im_func im_self im_class "
    # an AttributeError's obj (Python 3.10+) is the object whose attribute was missing: raised inside the emulator
    # or a module view, an object kernel code was never handed
    "obj "
    # typing's evaluators run annotation strings through eval().
    "get_type_hints ForwardRef get_annotations".split()
)
_MUTATING_METHODS = MUTATING_METHODS
_FILE_OUTPUT_KWARGS = frozenset({"save_neff_name", "save_trace_name", "artifacts_dir", "working_directory"})
_CATCH_ALL = frozenset({"BaseException", "SystemExit", "KeyboardInterrupt", "GeneratorExit"})
# Dunder methods a helper class may define; others (__eq__, __array__, __getattr__, __del__, ...) could fool
# comparisons or run code behind the grader's back.
_ALLOWED_DUNDER_METHODS = frozenset({"__init__", "__repr__", "__str__"})
_SAFE_BASES = frozenset(
    name for name in dir(builtins) if name == "object" or (name.endswith(("Error", "Exception", "Warning")))
)
_ALLOWED_DUNDER_LOADS = frozenset({"__name__", "__doc__", "__debug__"})
_ALLOWED_DUNDER_STORES = frozenset({"__all__"})
# PEP 263 coding declaration, looked for on the first two lines as Python does.
CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
SAFE_ENCODINGS = frozenset({"utf-8", "utf8", "utf_8", "utf-8-sig", "ascii", "us-ascii"})
_FORMAT_PRIVATE = re.compile(r"\{[^{}]*\.(_|(" + "|".join(sorted(_INTROSPECTION_ATTRS)) + r")\b)")
# str methods that read attributes named inside the string ("{0.attr}")
_FORMAT_METHODS = frozenset({"format", "format_map"})
# node kinds whose names the visitors above already screen (visit_Name, sandbox_function, sandbox_class, imports)
_NAME_VISITED = frozenset({"Name", "FunctionDef", "AsyncFunctionDef", "ClassDef", "arg", "alias", "Global", "Nonlocal"})


def _allowed_import(module: str) -> bool:
    if module in _ALLOWED_MODULES:
        return True
    fe = namespace_of(module)
    if fe is None:
        return False
    if module == fe.namespace:
        return True
    parts = module[len(fe.namespace) + 1:].split(".")
    return parts[0] in fe.submodules and not any(p.startswith("_") for p in parts)


class SandboxRules:
    """Sandbox findings of the walk (a mixin: ``report``, scopes and ``facts`` come from the walker)."""

    # hooks for nodes the walker visits for several rule sets ----------------------------------------------------
    def sandbox_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, in_class_body: bool) -> None:
        if is_dunder(node.name) and not (in_class_body and node.name in _ALLOWED_DUNDER_METHODS):
            where = "in a class" if in_class_body else "outside a class"
            self.report("SANDBOX-DUNDER", node, f"defining '{node.name}' {where} is not allowed")
        a = node.args
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
            if arg is not None and is_dunder(arg.arg):
                self.report("SANDBOX-DUNDER", arg, f"parameter name '{arg.arg}' is not allowed")

    def sandbox_class(self, node: ast.ClassDef) -> None:
        if is_dunder(node.name):
            self.report("SANDBOX-DUNDER", node, f"class name '{node.name}' is not allowed")
        self._check_class_bases(node)

    def sandbox_try(self, node: ast.AST) -> None:
        for stmt in finally_exits(getattr(node, "finalbody", [])):
            kind = type(stmt).__name__.lower()
            self.report("SANDBOX-CATCH-ALL", stmt, f"'{kind}' in a finally block swallows any exception")

    def sandbox_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "type" and len(node.args) + len(node.keywords) >= 3 and self.is_builtin("type"):
                self.report("SANDBOX-TYPE3", node, "three-argument type() creates classes dynamically")
            elif func.id == "type" and self.is_builtin("type") and id(node) not in self.facts.type_uses:
                self.report("SANDBOX-CLASS-ESCAPE", node, "type(x) hands out the class of x: compare it "
                            "(type(x) == T) or print it, or use isinstance(x, T)")
        elif isinstance(func, ast.Attribute) and func.attr in _FORMAT_METHODS and not (
            isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)
        ):
            # "{0.__globals__}".format(f) reads attributes named in the string: only literal format strings,
            # whose fields the screen reads (visit_Constant), may be formatted
            self.report("SANDBOX-PRIVATE", node, f"'.{func.attr}()' of a string built at run time may read any "
                        "attribute (\"{0.attr}\"): format a string literal or use an f-string")
        elif isinstance(func, ast.Attribute) and func.attr in _MUTATING_METHODS:
            # np.append(...) / nl.add(...) are module functions; np.sctypeDict.update(...),
            # type(x).table.clear() and d.update(...) with d = np.sctypeDict mutate shared state.
            receiver = func.value
            path = self.facts.canonical(receiver)
            root = root_name(receiver)
            if self.facts.module_path(receiver) in _MODULE_PATHS or (root is not None and self._is_self(root.id)):
                pass
            elif (isinstance(receiver, ast.Name) and path is not None) or (
                not isinstance(receiver, (ast.Name, ast.Call)) and has_attribute_hop(receiver)
            ):
                self.report(
                    "SANDBOX-MONKEYPATCH",
                    node,
                    f"'{ast.unparse(func)}(...)' may mutate an imported module's state",
                )
        for kw in node.keywords:
            if kw.arg in _FILE_OUTPUT_KWARGS:
                self.report("SANDBOX-FILE-OUTPUT", kw.value, f"'{kw.arg}=' makes a launcher write files")

    # nodes only the sandbox rules look at ---------------------------------------------------------------------
    def _check_class_bases(self, node: ast.ClassDef) -> None:
        for kw in node.keywords:
            self.report("SANDBOX-CLASS-BASE", kw.value, f"class '{node.name}' sets '{kw.arg}='")
        for base in node.bases:
            path = self.facts.canonical(base)
            if isinstance(base, ast.Name) and path is None:
                if base.id in self.facts.classes or (base.id in _SAFE_BASES and self.is_builtin(base.id)):
                    continue
            elif path is not None and path.startswith("typing.") and self.facts.module_path(base) == path:
                continue
            self.report("SANDBOX-CLASS-BASE", base, f"class '{node.name}' derives from '{ast.unparse(base)}'")

    # imports -----------------------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if not _allowed_import(a.name):
                self.report("SANDBOX-IMPORT", node, f"import of '{a.name}' is not allowed in kernel files")
            if a.asname and is_dunder(a.asname):
                self.report("SANDBOX-DUNDER", node, f"alias '{a.asname}' is not allowed")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.report("SANDBOX-IMPORT", node, f"relative import 'from {'.' * node.level}{module}' is not allowed")
            return
        if module == "__future__":
            return
        names = [a.name for a in node.names]
        shell = _SHELL_ROOTS.get(module)  # `from neuronxcc import nki`: the package around a namespace
        if shell is not None:
            tail = shell.namespace.split(".", 1)[1]
            if names != [tail] or any(a.asname and a.asname != tail and is_dunder(a.asname) for a in node.names):
                self.report("SANDBOX-IMPORT", node, f"only 'from {module} import {tail}' is allowed from {module}")
                return
        elif not _allowed_import(module):
            self.report("SANDBOX-IMPORT", node, f"import from '{module}' is not allowed in kernel files")
            return
        for a in node.names:
            if a.name == "*":
                self.report("SANDBOX-IMPORT-STAR", node, f"'from {module} import *' is not allowed")
                continue
            if a.name.startswith("_"):
                self.report("SANDBOX-PRIVATE", node, f"importing private name '{a.name}' from '{module}'")
            if a.asname and is_dunder(a.asname):
                self.report("SANDBOX-DUNDER", node, f"alias '{a.asname}' is not allowed")
            if module == "numpy":
                self._check_numpy_path(["numpy", a.name], node)
            if a.name in _CLOCK_ATTRS:
                self.report("SANDBOX-CLOCK", node, f"importing '{a.name}' (NumPy's datetime API reads the wall clock)")
            if a.name in _INTROSPECTION_ATTRS:
                self.report("SANDBOX-INTROSPECTION", node, f"importing '{a.name}' from '{module}'")
            if (module in _NAMESPACES and a.name in _ESCAPE_ATTRS) or a.name in _STDLIB_MODULE_ATTRS.get(module, ()):
                self.report("SANDBOX-MODULE-ESCAPE", node, f"importing '{a.name}' from '{module}'")

    # names and attributes ----------------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if is_dunder(name):
            allowed = _ALLOWED_DUNDER_LOADS if isinstance(node.ctx, ast.Load) else _ALLOWED_DUNDER_STORES
            if name not in allowed:
                self.report("SANDBOX-DUNDER", node, f"use of '{name}' is not allowed")
        elif isinstance(node.ctx, ast.Load):
            if name in self.facts.risky_classes and id(node) not in self.facts.class_uses:
                self.report("SANDBOX-CLASS-ESCAPE", node, f"class '{name}' may only be called, tested, raised or "
                            f"have a constant read here: {name}.method(obj) would run its method on an object that is "
                            f"not a {name}")
            if name in _FORBIDDEN_BUILTINS and self.is_builtin(name):
                self.report("SANDBOX-BUILTIN", node, f"builtin '{name}' is not allowed in kernel files")
            elif name.startswith("_") and name != "_" and not self._bound_anywhere(name):
                self.report("SANDBOX-PRIVATE", node, f"private name '{name}' is not defined in this file")

    def _bound_anywhere(self, name: str) -> bool:
        cache = self._all_bound
        if cache is None:
            cache = set()
            for n in self.facts.nodes:
                if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                    cache.add(n.id)
                elif isinstance(n, (*FUNCTIONS, ast.ClassDef)):
                    cache.add(n.name)
                elif isinstance(n, ast.arg):
                    cache.add(n.arg)
                elif isinstance(n, (ast.Import, ast.ImportFrom)):
                    cache.update((a.asname or a.name).split(".")[0] for a in n.names)
                elif isinstance(n, ast.ExceptHandler) and n.name:
                    cache.add(n.name)
            self._all_bound = cache
        return name in cache

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr == "__init__" and is_super_call(node.value):
            pass  # super().__init__(...) in a helper class's own __init__
        elif self._check_attribute_name(attr, node, "."):
            self._check_attribute_path(node)
        self.generic_visit(node)

    def _check_attribute_name(self, attr: str, node: ast.AST, shown: str) -> bool:
        """The checks every attribute name gets, wherever the syntax carries it; True if it passed them."""
        if attr.startswith("_"):
            self.report("SANDBOX-PRIVATE", node, f"access to private attribute '{shown}{attr}' is not allowed")
        elif attr in _CLOCK_ATTRS:
            self.report("SANDBOX-CLOCK", node, f"'{shown}{attr}' is NumPy's datetime API, which reads the wall clock: "
                        "kernels may not read the time")
        elif attr in _INTROSPECTION_ATTRS:
            self.report("SANDBOX-INTROSPECTION", node, f"introspection attribute '{shown}{attr}' is not allowed")
        elif attr in _ESCAPE_ATTRS and shown != ".":
            self.report("SANDBOX-MODULE-ESCAPE", node, f"reaching module '{attr}' through '{shown}{attr}' is not "
                        "allowed")
        elif attr in _IO_ATTRS and shown != ".":
            self.report("SANDBOX-NUMPY-IO", node, f"file I/O '{shown}{attr}' is not allowed")
        else:
            return True
        return False

    def sandbox_identifiers(self, node: ast.AST) -> None:
        """Identifiers outside the nodes with visitors of their own: a class pattern's keyword attributes
        (``case object(__globals__=g)`` reads ``subject.__globals__``), capture and handler names, call keywords,
        and any string field the identifier table (analysis.IDENTIFIER_ROLES) does not know, screened as an
        attribute name."""
        kind = type(node).__name__
        for field, ident, role in identifiers(node):
            if role == "attribute" and kind != "Attribute":
                self._check_attribute_name(ident, node, f"{kind} {field} ")
            elif role == "unknown":
                self._check_attribute_name(ident, node, f"{kind}.{field} ")
                if is_dunder(ident):
                    self.report("SANDBOX-DUNDER", node, f"name '{ident}' ({kind}.{field}) is not allowed")
            elif role == "keyword" and ident.startswith("_"):
                code = "SANDBOX-DUNDER" if is_dunder(ident) else "SANDBOX-PRIVATE"
                self.report(code, node, f"keyword argument '{ident}=' is not allowed")
            elif role == "name" and is_dunder(ident) and kind not in _NAME_VISITED:
                self.report("SANDBOX-DUNDER", node, f"name '{ident}' is not allowed")

    def _check_attribute_path(self, node: ast.Attribute) -> None:
        attr = node.attr
        receiver = self.facts.canonical(node.value)
        module = self.facts.module_path(node.value)  # None if the alias is rebound anywhere (nl = arr; nl.tofile)
        nki_receiver = module is not None and namespace_of(module) is not None
        if receiver is not None and receiver.split(".")[0] == "numpy":
            self._check_numpy_path([*receiver.split("."), attr], node)
            return
        shell = _SHELL_ROOTS.get(receiver) if receiver is not None else None
        if shell is not None and f"{receiver}.{attr}" != shell.namespace:
            self.report("SANDBOX-MODULE-ESCAPE", node, f"'{receiver}.{attr}' is outside the NKI API")
            return
        if attr in _ESCAPE_ATTRS or (receiver is not None and attr in _STDLIB_MODULE_ATTRS.get(receiver, ())):
            self.report("SANDBOX-MODULE-ESCAPE", node, f"reaching module '{attr}' through '.{attr}' is not allowed")
        elif not nki_receiver and attr in _IO_ATTRS:
            # Also on receivers that cannot be resolved: `(np,)[0].load(...)`, `arr.tofile(...)`.
            self.report("SANDBOX-NUMPY-IO", node, f"file I/O '.{attr}' is not allowed")

    def _check_numpy_path(self, parts: list[str], node: ast.AST) -> None:
        path = ".".join(parts)
        tail = parts[1:]
        if not tail:
            return
        if any(p in _ESCAPE_ATTRS for p in tail) or tail[0] in _NUMPY_INTERNAL_ATTRS:
            self.report("SANDBOX-MODULE-ESCAPE", node, f"'{path}' reaches NumPy internals or another module")
        elif tail[-1] in _IO_ATTRS:
            self.report("SANDBOX-NUMPY-IO", node, f"'{path}' does file or pickle I/O")
        elif tail[-1] in _STATE_ATTRS:
            self.report("SANDBOX-NUMPY-STATE", node, f"'{path}' changes process-wide NumPy state")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _FORMAT_PRIVATE.search(node.value):
            self.report("SANDBOX-PRIVATE", node, "format string reads a private attribute")
        if isinstance(node.value, (str, bytes)) and len(node.value) <= 40 and _CLOCK_STRING.fullmatch(
                node.value if isinstance(node.value, str) else node.value.decode("latin-1")):
            self.report("SANDBOX-CLOCK", node, f"{node.value!r} reads the wall clock or spells a datetime dtype "
                        "(NumPy's datetime parser reads the clock): kernels may not read the time")

    # statements --------------------------------------------------------------------------------------------
    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        names = {c.id for c in caught if isinstance(c, ast.Name)}
        if node.type is None or names & _CATCH_ALL:
            shown = "bare 'except:'" if node.type is None else f"catching {', '.join(sorted(names & _CATCH_ALL))}"
            self.report("SANDBOX-CATCH-ALL", node, f"{shown} would swallow the grader's timeouts")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.report("SANDBOX-GLOBAL", node, f"'global {', '.join(node.names)}' is not allowed")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.report("SANDBOX-GLOBAL", node, f"'nonlocal {', '.join(node.names)}' is not allowed")

    def _is_self(self, name: str) -> bool:
        """True if ``name`` is the first parameter of the method (function in a class body) that binds it."""
        for i in range(len(self.scopes) - 1, 0, -1):
            scope = self.scopes[i]
            if scope.kind not in ("function", "comprehension") or name not in scope.bound:
                continue
            node = scope.node
            if self.scopes[i - 1].kind != "class" or not isinstance(node, FUNCTIONS):
                return False
            params = [*node.args.posonlyargs, *node.args.args]
            # semantically self: an undecorated method (a staticmethod's or classmethod's first parameter is
            # whatever the caller passes), its first parameter never rebound (self = obj); that the method only
            # runs bound to an instance of its class is SANDBOX-CLASS-ESCAPE's part (no C.method(obj))
            return (bool(params) and params[0].arg == name and not node.decorator_list
                    and not rebinds(node, name))
        return False

    def _check_store_target(self, target: ast.AST, verb: str) -> None:
        """Assignments that could change state shared with nkisim or the grader (monkey-patching).

        Attributes may only be set on ``self`` inside a class's own methods: kernels never need more, and
        any other object (a module, ``nl.tile_size``, a class reached through ``type(x)``) may be shared.
        Items are written into tiles all the time, so a subscript store counts only when the container is
        reached through an attribute (``type(x).table[k] = v``), a module name or alias
        (``np.sctypeDict[k] = v``), or a parameter that was passed a module attribute.
        """
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_store_target(element, verb)
            return
        if isinstance(target, ast.Starred):
            self._check_store_target(target.value, verb)
            return
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        root = root_name(target)
        if root is not None and self._is_self(root.id):
            return
        shown = ast.unparse(target)
        if isinstance(target, ast.Attribute):
            self.report(
                "SANDBOX-MONKEYPATCH",
                target,
                f"{verb} attribute '{shown}': only a class's own methods may set attributes (on self)",
            )
            return
        func = self.current_function()
        through_attribute = has_attribute_hop(target.value)
        param_tainted = root is not None and func is not None and (id(func), root.id) in self.facts.param_taint
        if through_attribute or param_tainted or (root is not None and root.id in self.facts.aliases):
            self.report("SANDBOX-MONKEYPATCH", target, f"{verb} '{shown}' may change an imported module's state")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_store_target(target, "assigning")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store_target(node.target, "updating")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._check_store_target(node.target, "assigning")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_store_target(target, "deleting")
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._check_store_target(node.target, "assigning")
        self.generic_visit(node)
