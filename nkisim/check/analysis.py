"""What the screen knows about a file before it walks it: AST helpers and :class:`ModuleFacts` (import aliases,
module-derived names, which functions are kernels and which helpers they call, the call graph).

The NKI namespaces come from the front-end registry (``nkisim.frontends``): a name like ``nl.add`` resolves to
``neuronxcc.nki.language.add`` or ``nki.language.add`` through the file's imports, and :func:`namespace_of` says
which front end it belongs to.

(Over 600 lines on purpose: :class:`ModuleFacts` is one analysis whose passes share one walk of the tree and feed
each other (aliases -> taint -> kernels -> call graph); the AST helpers are shared by those passes and the
screen's checks (sandbox, walker).)
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from nkisim.frontends import FRONT_ENDS, FrontEnd

# Launchers and decorators that make a function a kernel (under any NKI namespace); legacy ``ncc.*`` directives too.
KERNEL_DECORATORS = frozenset({"jit", "baremetal", "benchmark", "profile", "simulate_kernel"})


def namespace_of(path: str) -> FrontEnd | None:
    """The front end whose namespace a canonical dotted path lies in (``nki.isa.dma_copy`` -> the nki front end)."""
    for fe in FRONT_ENDS:
        if fe.owns(path):
            return fe
    return None


def namespaces_imported(tree: ast.Module) -> dict[FrontEnd, int]:
    """Front ends whose namespace the file imports, with the line of the first such import."""
    found: dict[FrontEnd, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            fe = namespace_of(name)
            if fe is not None and (fe not in found or node.lineno < found[fe]):
                found[fe] = node.lineno
    return found


COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

# Every AST field that holds an identifier, by what the identifier is.  "attribute": a name looked up on an object
# (``x.attr``; a class pattern's keyword ``case C(attr=p)`` reads ``subject.attr``); "name": a variable, function,
# class, parameter or capture name; "keyword": a call's keyword (a parameter, or an attribute of what a
# constructor builds); "module": an import path.  Fields holding strings that are not identifiers are in
# NOT_IDENTIFIERS.  The screen checks every string-valued field of every node by this table; a field it does not
# know (a node kind of a newer Python) is screened as an attribute name, the strictest role, and
# tests/test_check_kernel.py fails until it is classified here.
IDENTIFIER_ROLES: dict[tuple[str, str], str] = {
    ("Attribute", "attr"): "attribute",
    ("MatchClass", "kwd_attrs"): "attribute",
    ("Name", "id"): "name",
    ("FunctionDef", "name"): "name",
    ("AsyncFunctionDef", "name"): "name",
    ("ClassDef", "name"): "name",
    ("arg", "arg"): "name",
    ("ExceptHandler", "name"): "name",
    ("Global", "names"): "name",
    ("Nonlocal", "names"): "name",
    ("MatchAs", "name"): "name",
    ("MatchStar", "name"): "name",
    ("MatchMapping", "rest"): "name",
    ("alias", "name"): "module",
    ("alias", "asname"): "name",
    ("ImportFrom", "module"): "module",
    ("keyword", "arg"): "keyword",
    # Python 3.12+: type parameters
    ("TypeVar", "name"): "name",
    ("ParamSpec", "name"): "name",
    ("TypeVarTuple", "name"): "name",
}
NOT_IDENTIFIERS: frozenset[tuple[str, str]] = frozenset(
    {("Constant", "value"), ("Constant", "kind"), ("TypeIgnore", "tag")}
    | {(cls, "type_comment") for cls in ("FunctionDef", "AsyncFunctionDef", "Assign", "For", "AsyncFor", "With",
                                          "AsyncWith", "arg")}
)


def identifiers(node: ast.AST) -> Iterator[tuple[str, str, str]]:
    """(field, identifier, role) for every identifier a node holds directly (role "unknown" for unclassified
    string fields)."""
    kind = type(node).__name__
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, str):
            names = [value]
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            names = value
        else:
            continue
        if (kind, field) in NOT_IDENTIFIERS:
            continue
        role = IDENTIFIER_ROLES.get((kind, field), "unknown")
        for name in names:
            yield field, name, role


# list/set/dict methods that change their receiver
MUTATING_METHODS = frozenset("append extend insert remove pop popitem clear update setdefault add discard".split())


def writes_through(fdef: ast.AST, name: str) -> bool:
    """True if function ``fdef`` writes through ``name`` in its own body: an attribute or item store or delete
    rooted at it (``name.x = v``, ``name.a[k] += v``, ``del name.x``) or a mutating call on something it reaches
    (``name.items.append(v)``)."""
    stack: list[ast.AST] = list(fdef.body)  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        if isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Lambda, *COMPREHENSIONS)):
            continue  # another scope
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATING_METHODS):
            targets = [ast.Subscript(value=node.func.value, slice=ast.Constant(0), ctx=ast.Store())]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, (ast.Attribute, ast.Subscript)):
                    root = root_name(t)
                    if root is not None and root.id == name:
                        return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _is_type_call(node: ast.AST | None) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"
            and len(node.args) == 1 and not node.keywords)


def rebinds(fdef: ast.AST, name: str) -> bool:
    """True if function ``fdef`` binds ``name`` anywhere in its own body other than as a parameter (``self = x``,
    ``for self in ...``, ``except E as self``, a walrus, an import, a match capture, ``del self``)."""
    stack: list[ast.AST] = list(fdef.body)  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            if node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
                return True
            continue
        if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
            if node.name == name:
                return True
            stack.extend(node.decorator_list)
            continue  # its body is another scope
        if isinstance(node, (ast.Lambda, *COMPREHENSIONS)):
            continue
        if any(ident == name and role == "name" for _, ident, role in identifiers(node)):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name).split(".")[0] == name:
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def name_chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """``a.b.c`` -> ("a", ["b", "c"]); None if the expression is not a pure name/attribute chain."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, attrs[::-1]
    return None


def root_name(node: ast.AST) -> ast.Name | None:
    """Name at the base of an attribute/subscript chain (``a`` in ``a.b[0].c``); None through calls."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def is_super_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
        and not node.args
        and not node.keywords
    )


def has_attribute_hop(node: ast.AST) -> bool:
    """True if an attribute/subscript chain goes through an attribute or starts at a call (``a.b[0]``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            return True
        node = node.value
    return not isinstance(node, ast.Name)


def finally_exits(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """return/break/continue statements that leave a finally block (and so discard a pending exception)."""
    stack: list[tuple[ast.AST, bool]] = [(stmt, False) for stmt in body]  # (node, inside a loop of the block)
    while stack:
        node, in_loop = stack.pop()
        if isinstance(node, ast.Return) or (isinstance(node, (ast.Break, ast.Continue)) and not in_loop):
            yield node  # type: ignore[misc]
        if isinstance(node, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            continue
        loop = in_loop or isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        stack.extend((child, loop) for child in ast.iter_child_nodes(node))


def bound_names(scope: ast.AST) -> set[str]:
    """Names local to a function/lambda/comprehension scope (parameters and bindings in its own body)."""
    names: set[str] = set()
    declared_global: set[str] = set()
    if isinstance(scope, (*FUNCTIONS, ast.Lambda)):
        a = scope.args
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
            if arg is not None:
                names.add(arg.arg)
        body: list[ast.AST] = list(scope.body) if isinstance(scope, FUNCTIONS) else [scope.body]
    elif isinstance(scope, COMPREHENSIONS):
        body = [gen.target for gen in scope.generators]
    else:
        return names
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (*FUNCTIONS, ast.ClassDef)):
            names.add(node.name)
            continue  # its body is another scope
        elif isinstance(node, (ast.Lambda, *COMPREHENSIONS)):
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared_global.update(node.names)
        elif hasattr(ast, "MatchAs") and isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        stack.extend(ast.iter_child_nodes(node))
    return names - declared_global


class ModuleFacts:
    """Import aliases, module-derived ("tainted") names, kernels and their helpers, the call graph."""

    def __init__(self, tree: ast.Module, extra_kernels: Iterable[str] = ()) -> None:
        self.tree = tree
        self.nodes: list[ast.AST] = list(ast.walk(tree))  # every pass below reuses this one walk
        self.aliases: dict[str, str] = {}  # local name -> canonical dotted path ("nl" -> "neuronxcc.nki.language")
        self._collect_imports()
        self.rebound: set[str] = self._collect_rebound()
        self.tainted: set[str] = set(self.aliases)  # names that may hold a module or a module attribute
        self.param_taint: set[tuple[int, str]] = set()  # (id(function node), parameter) receiving module objects
        self.classes = {n.name for n in self.nodes if isinstance(n, ast.ClassDef)}
        # the methods of this file's classes that write through their first parameter (``self.x = ...``,
        # ``self.items.append(...)``): run unbound, ``C.method(obj)`` writes into ``obj``; the classes holding one
        # (or inheriting one from a class of the file) must not escape (SANDBOX-CLASS-ESCAPE)
        self.methods, self.risky_classes = self._privileged_methods()
        self.class_uses, self.type_uses = self._sanctioned_uses()
        self.functions: dict[str, list[ast.AST]] = {}  # module-level def name -> defs
        for node in tree.body:
            if isinstance(node, FUNCTIONS):
                self.functions.setdefault(node.name, []).append(node)
        self._propagate_taint()
        self.kernels: set[int] = set()
        for node in self.nodes:
            if isinstance(node, FUNCTIONS) and (
                node.name in extra_kernels or any(self.is_kernel_decorator(d) for d in node.decorator_list)
            ):
                self.kernels.add(id(node))
        self.calls = self._call_graph()
        self.kernel_code: dict[int, str] = self._kernel_closure()  # id(def) -> "kernel" | "kernel helper"
        # which NKI API the file is written against: the front end of the one namespace it imports (legacy when
        # it imports none, or both: that is a finding of its own)
        self.namespaces = namespaces_imported(tree)
        self.api = next(iter(self.namespaces)).key if len(self.namespaces) == 1 else "legacy"

    def is_kernel(self, name: str) -> bool:
        """Whether a module-level function of that name is decorated as a kernel (``@nki.jit``)."""
        return any(id(fdef) in self.kernels for fdef in self.functions.get(name, ()))

    # imports and aliases -----------------------------------------------------------------------------------
    def _collect_imports(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        # Local names bound to a pure chain of an alias (`d = np.sctypeDict`, `add = nl.add`), to a fixpoint;
        # only names never bound any other way (`buf = nl.sbuf` here and `buf = nl.ndarray(...)` there is a
        # tile name, not an alias).
        chains = [
            node
            for node in self.nodes
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and name_chain(node.value) is not None
        ]
        chain_ids = {id(node.targets[0]) for node in chains}
        other: set[str] = set()
        for n in self.nodes:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and id(n) not in chain_ids:
                other.add(n.id)
            elif isinstance(n, ast.arg):
                other.add(n.arg)
            elif isinstance(n, (*FUNCTIONS, ast.ClassDef)):
                other.add(n.name)
        changed = True
        while changed:
            changed = False
            for node in chains:
                name = node.targets[0].id
                path = self.canonical(node.value)
                if path is not None and name not in self.aliases and name not in other:
                    self.aliases[name] = path
                    changed = True

    def _privileged_methods(self) -> tuple[set[str], set[str]]:
        methods: set[str] = set()
        risky: set[str] = set()
        bases: dict[str, set[str]] = {}
        for cls in (n for n in self.nodes if isinstance(n, ast.ClassDef)):
            bases.setdefault(cls.name, set()).update(b.id for b in cls.bases if isinstance(b, ast.Name))
            for stmt in cls.body:
                if not isinstance(stmt, FUNCTIONS) or stmt.decorator_list:
                    continue  # a decorated method's first parameter is not self (sandbox _is_self)
                params = [*stmt.args.posonlyargs, *stmt.args.args]
                if params and writes_through(stmt, params[0].arg):
                    methods.add(stmt.name)
                    risky.add(cls.name)
        changed = True
        while changed:  # a subclass of a risky class of the file inherits its methods
            changed = False
            for name, parents in bases.items():
                if name not in risky and parents & risky:
                    risky.add(name)
                    changed = True
        return methods, risky

    def _sanctioned_uses(self) -> tuple[set[int], set[int]]:
        """ids of the Name nodes where a class of this file may appear, and of the one-argument ``type(x)`` calls
        that hand out nothing: a class is called (``C(...)``), tested (``isinstance(x, C)``, ``except C``,
        ``type(x) is C``), raised, used as a base, or has a non-method attribute read (``C.SIZE``); ``type(x)`` is
        compared or printed.  Anywhere else the class object escapes, and ``C.method(obj)`` -- reached through any
        alias -- would run a method on an object that is not a ``C``."""
        classes: set[int] = set()
        types: set[int] = set()

        def mark(node: ast.AST | None) -> None:
            for n in node.elts if isinstance(node, ast.Tuple) else [node]:
                if isinstance(n, ast.Name):
                    classes.add(id(n))
                elif _is_type_call(n):
                    types.add(id(n))

        for node in self.nodes:
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Name):  # C(...); not type(x)(...): a new object of x's class (a forgery)
                    classes.add(id(node.func))
                callee = node.func.id if isinstance(node.func, ast.Name) else None
                if callee in ("isinstance", "issubclass") and len(node.args) == 2:
                    mark(node.args[1])
                elif callee in ("print", "str", "repr", "format"):
                    for arg in node.args:
                        if _is_type_call(arg):
                            mark(arg)
            elif isinstance(node, ast.ClassDef):
                for base in node.bases:
                    mark(base)
            elif isinstance(node, ast.ExceptHandler):
                mark(node.type)
            elif isinstance(node, ast.Raise):
                mark(node.exc)
            elif isinstance(node, ast.Compare):
                for operand in (node.left, *node.comparators):
                    if isinstance(operand, ast.Name) or _is_type_call(operand):
                        mark(operand)
            elif isinstance(node, ast.FormattedValue) and _is_type_call(node.value):
                mark(node.value)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr not in self.methods:
                classes.add(id(node.value))
            # annotations name classes without handing them to anything (``__annotations__`` is out of reach)
            annotation = (node.annotation if isinstance(node, (ast.arg, ast.AnnAssign))
                          else node.returns if isinstance(node, FUNCTIONS) else None)
            if annotation is not None:
                classes.update(id(n) for n in ast.walk(annotation) if isinstance(n, ast.Name))
        return classes, types

    def _collect_rebound(self) -> set[str]:
        """Import aliases that may hold something else somewhere in the file: bound otherwise (``nl = obj``, a
        parameter, a loop target, a def, a capture ...) or imported from two different paths."""
        imported: dict[str, set[str]] = {}
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    top = a.name.split(".")[0]
                    imported.setdefault(a.asname or top, set()).add(a.name if a.asname else top)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    imported.setdefault(a.asname or a.name, set()).add(f"{node.module}.{a.name}")
        rebound = {name for name, paths in imported.items() if len(paths) > 1}
        for node in self.nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.alias)):
                continue
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, (ast.Store, ast.Del)):
                    rebound.add(node.id)
            elif isinstance(node, (*FUNCTIONS, ast.ClassDef)):
                rebound.add(node.name)
            else:
                rebound.update(ident for _, ident, role in identifiers(node) if role == "name")
        return rebound & set(self.aliases)

    def module_path(self, node: ast.AST) -> str | None:
        """Like :meth:`canonical`, but only for a name that holds the module everywhere (None for an alias rebound
        anywhere in the file, ``import nki.language as nl; nl = obj``): the screen's lenient checks (a module's
        function is not a list's ``append``, nki's ``load`` is not NumPy's) read this; its strict checks read
        :meth:`canonical`, which also counts a rebound alias as the module."""
        chain = name_chain(node.func if isinstance(node, ast.Call) else node)
        if chain is None or chain[0] in self.rebound:
            return None
        return self.canonical(node)

    def canonical(self, node: ast.AST) -> str | None:
        """Dotted path of an expression via import aliases (``nl.add``: neuronxcc.nki.language.add)."""
        if isinstance(node, ast.Call):
            return self.canonical(node.func)
        chain = name_chain(node)
        if chain is None or chain[0] not in self.aliases:
            return None
        return ".".join([self.aliases[chain[0]], *chain[1]])

    def is_kernel_decorator(self, node: ast.AST) -> bool:
        path = self.canonical(node)
        if path is not None:
            fe = namespace_of(path)
            if fe is None or path == fe.namespace:
                return False
            if path.startswith(fe.namespace + ".compiler."):
                return True
            return path.split(".")[-1] in KERNEL_DECORATORS
        target = node.func if isinstance(node, ast.Call) else node
        chain = name_chain(target)  # unresolvable (e.g. a function checked without its imports): go by the name
        return chain is not None and (chain[1] or [chain[0]])[-1] in (
            KERNEL_DECORATORS | {"skip_middle_end_transformations"}
        )

    # taint -------------------------------------------------------------------------------------------------
    def expr_tainted(self, node: ast.AST | None, func: ast.AST | None = None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.tainted or (func is not None and (id(func), node.id) in self.param_taint)
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            return self.expr_tainted(node.value, func)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(self.expr_tainted(e, func) for e in node.elts)
        if isinstance(node, ast.Dict):
            return any(self.expr_tainted(v, func) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.expr_tainted(node.body, func) or self.expr_tainted(node.orelse, func)
        if isinstance(node, ast.BoolOp):
            return any(self.expr_tainted(v, func) for v in node.values)
        if isinstance(node, ast.NamedExpr):
            return self.expr_tainted(node.value, func)
        return False

    def _propagate_taint(self) -> None:
        owner = owner_functions(self.tree)
        kinds = (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension, ast.withitem)
        relevant = [
            n for n in self.nodes if isinstance(n, kinds) or (isinstance(n, ast.Call) and isinstance(n.func, ast.Name))
        ]
        changed = True
        while changed:
            changed = False
            for node in relevant:
                func = owner.get(id(node))
                targets: list[ast.AST] = []
                if isinstance(node, ast.Assign) and self.expr_tainted(node.value, func):
                    targets = list(node.targets)
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and self.expr_tainted(node.value, func):
                    targets = [node.target]
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and self.expr_tainted(
                    node.iter, func
                ):
                    targets = [node.target]
                elif (
                    isinstance(node, ast.withitem)
                    and node.optional_vars is not None
                    and self.expr_tainted(node.context_expr, func)
                ):
                    targets = [node.optional_vars]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name) and name.id not in self.tainted:
                            self.tainted.add(name.id)
                            changed = True
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    for fdef in self.functions.get(node.func.id, ()):
                        for param in self._tainted_params(fdef, node, func):
                            if (id(fdef), param) not in self.param_taint:
                                self.param_taint.add((id(fdef), param))
                                changed = True

    def _tainted_params(self, fdef: ast.AST, call: ast.Call, caller: ast.AST | None) -> Iterator[str]:
        a = fdef.args  # type: ignore[attr-defined]
        positional = [p.arg for p in (*a.posonlyargs, *a.args)]
        every = [*positional, *(p.arg for p in a.kwonlyargs)]
        every += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
        for i, arg in enumerate(call.args):
            if not self.expr_tainted(arg, caller):
                continue
            if isinstance(arg, ast.Starred):
                yield from every
            elif i < len(positional):
                yield positional[i]
            elif a.vararg is not None:
                yield a.vararg.arg
        for kw in call.keywords:
            if self.expr_tainted(kw.value, caller):
                if kw.arg is None:
                    yield from every
                elif kw.arg in every:
                    yield kw.arg
                elif a.kwarg is not None:
                    yield a.kwarg.arg

    # kernels, helpers, call graph --------------------------------------------------------------------------
    def _call_graph(self) -> dict[int, set[str]]:
        """id(def) -> names of the module-level functions it calls (calls in nested defs included)."""
        graph: dict[int, set[str]] = {}
        roots = [n for n in self.nodes if isinstance(n, FUNCTIONS)]
        for fdef in roots:
            called = graph.setdefault(id(fdef), set())
            for node in ast.walk(fdef):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions:
                    called.add(node.func.id)
        return graph

    def _kernel_closure(self) -> dict[int, str]:
        roles = {k: "kernel" for k in self.kernels}
        todo = list(self.kernels)
        while todo:
            fid = todo.pop()
            for name in self.calls.get(fid, ()):
                for fdef in self.functions.get(name, ()):
                    if id(fdef) not in roles:
                        roles[id(fdef)] = "kernel helper"
                        todo.append(id(fdef))
        return roles

    def reaches(self, start: str, goal: ast.AST) -> bool:
        """True if module-level function ``start`` can call (transitively) the function ``goal``."""
        seen: set[int] = set()
        todo = [f for f in self.functions.get(start, ())]
        while todo:
            fdef = todo.pop()
            if fdef is goal:
                return True
            if id(fdef) in seen:
                continue
            seen.add(id(fdef))
            for name in self.calls.get(id(fdef), ()):
                todo.extend(self.functions.get(name, ()))
        return False


def owner_functions(tree: ast.AST) -> dict[int, ast.AST]:
    """id(node) -> innermost enclosing function/lambda node."""
    owner: dict[int, ast.AST] = {}

    def visit(node: ast.AST, current: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if current is not None:
                owner[id(child)] = current
            visit(child, child if isinstance(child, (*FUNCTIONS, ast.Lambda)) else current)

    visit(tree, None)
    return owner
