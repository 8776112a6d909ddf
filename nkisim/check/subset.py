"""NKI-subset rules: Python inside kernels (and the module-level helpers they call) that the NKI compiler may
reject or rewrite -- nested functions, classes, try/with, generators, recursion, Python ``range``, NKI calls at
module level.  nkisim runs such code anyway; these findings never change a score (kind ``nki-subset``).

Sources: the NKI Language Guide ("not all Python constructs and libraries are supported within a NKI function"),
the ``nki.language.sequential_range`` notes ("any use of Python range(...) will be replaced with
sequential_range(...)"), the NKI error catalogue (err_nki_api_outside_of_nki_kernel,
err_dynamic_control_flow_not_supported) and the Fall 2025 course README tip to define kernels and helpers at
module level.  The legacy (neuronxcc.nki) front end traces Python, so these are warnings, not errors.

:class:`SubsetRules` is a mixin of the walker (``nkisim.check.walker.Checker``): ``visit_*`` for the nodes only
these rules look at, ``subset_*`` hooks for shared ones.
"""

from __future__ import annotations

import ast

from nkisim.check.analysis import namespace_of

_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod", "property"})
# Names the current API removed, with the replacement (NKI migration guide; nkisim's nki modules say the same when
# a kernel reaches them at run time)
REMOVED = {
    "language.arange": "index with slices, nl.ds(start, size) or an access pattern t.ap([[stride, count], ...])",
    "language.mgrid": "index with slices, nl.ds(start, size) or an access pattern t.ap([[stride, count], ...])",
    "language.par_dim": "the partition dimension is always the first one (block dimensions were removed)",
    "language.loop_reduce": "nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=...)",
    "language.atomic_rmw": "nisa.dma_compute(dst, [src, dst], reduce_op=nl.add)",
    "benchmark": "profile with neuron-profile on Trainium (nkisim: nkisim.estimate)",
    "baremetal": "call the @nki.jit kernel with NumPy arrays",
    "simulate_kernel": "nki.simulate(kernel)(*arrays)",
    "compiler": "the nki API has no compiler directives module (allocation: nl.ndarray(..., address=...))",
    "mask=": "the mask parameter was removed in NKI 0.2: slice the operands instead",
}


class SubsetRules:
    """NKI-subset findings of the walk (a mixin: ``report``, ``report_kernel``, scopes come from the walker)."""

    # hooks for nodes the walker visits for several rule sets ----------------------------------------------------
    def subset_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, nested: bool, role: str | None) -> None:
        if nested:
            if isinstance(node, ast.AsyncFunctionDef):
                self.report_kernel("NKI-ASYNC", node, f"async function '{node.name}'")
            self.report_kernel(
                "NKI-NESTED-FUNCTION", node, f"nested function '{node.name}': define helpers at module level"
            )
        elif role is not None and isinstance(node, ast.AsyncFunctionDef):
            self.report("NKI-ASYNC", node, f"{role} '{node.name}' is declared async")

    def subset_class(self, node: ast.ClassDef) -> None:
        self.report_kernel("NKI-CLASS", node, f"class '{node.name}' defined in kernel code")

    def subset_try(self, node: ast.AST) -> None:
        self.report_kernel("NKI-TRY", node, "try/except/finally: the NKI compiler may reject it")

    def subset_async_for(self, node: ast.AsyncFor) -> None:
        self.report_kernel("NKI-ASYNC", node, "async for")

    def subset_call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "range" and self.is_builtin("range"):
                self.report_kernel("NKI-RANGE", node, "Python range() is rewritten to nl.sequential_range")
            if self.kernel_stack and func.id in self.facts.functions:
                current = self.current_function()
                if current is not None and self.facts.reaches(func.id, current):
                    self.report_kernel("NKI-RECURSION", node, f"recursive call to '{func.id}'")
                elif self.facts.is_kernel(func.id):
                    self.report_kernel("NKI-SUBKERNEL-JIT", node, f"'{func.id}' is an @nki.jit kernel called from a "
                                       "kernel: remove its decorator (NKI migration guide, 'Remove nki.jit decorator "
                                       "on sub-kernels')")
        if self.facts.api == "nki" and any(kw.arg == "mask" for kw in node.keywords):
            path = self.facts.canonical(func)
            if path is not None and path.startswith(("nki.isa.", "nki.language.")):
                self.report_kernel("NKI-REMOVED-API", node, f"'{ast.unparse(func)}(mask=...)': {REMOVED['mask=']}")
        if not self.in_function():
            path = self.facts.canonical(func)
            fe = namespace_of(path) if path is not None else None
            if fe is not None and path.startswith((fe.namespace + ".language.", fe.namespace + ".isa.")):
                self.report(
                    "NKI-API-OUTSIDE-KERNEL",
                    node,
                    f"'{ast.unparse(func)}' called at module level: Calling NKI API outside of NKI "
                    "kernels is not supported.",
                )

    def subset_module(self, node: ast.Module) -> None:
        spaces = self.facts.namespaces
        if len(spaces) > 1:
            (first, l1), (second, l2) = sorted(spaces.items(), key=lambda kv: kv[1])[:2]
            where = ast.Module(body=[], type_ignores=[])
            where.lineno, where.col_offset = l2, 0
            self.report("NKI-MIXED-NAMESPACES", where, f"this file imports {first.namespace} (line {l1}) and "
                        f"{second.namespace} (line {l2}): a kernel file is written against one NKI API; "
                        f"{first.namespace} inside {second.namespace} kernels is a compilation error (NKI 0.4+), so "
                        "use one namespace for every import")

    def subset_attribute(self, node: ast.Attribute) -> None:
        """A removed name of the current API, through any import alias (``nl.arange``, ``nki.benchmark``)."""
        if self.facts.api != "nki":
            return
        path = self.facts.canonical(node)
        if path is None:
            return
        why = REMOVED.get(path.removeprefix("nki."))
        if why is not None:
            self.report("NKI-REMOVED-API", node, f"'{ast.unparse(node)}' was removed from the nki API: {why}")

    def subset_arguments(self, node: ast.FunctionDef | ast.AsyncFunctionDef, role: str | None) -> None:
        if role == "kernel" and node.args.kwonlyargs:
            self.report("NKI-KWONLY-PARAM", node, f"kernel '{node.name}' has keyword-only parameters (after *): "
                        "move parameters with defaults to the end of a plain signature (NKI 0.3 migration guide)")

    # nodes only the NKI-subset rules look at ------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            self.report_kernel("NKI-IS-COMPARISON", node, "'is' / 'is not' is not supported by the NKI compiler: "
                               "use == / != (NKI 0.3 migration guide)")
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self.report_kernel("NKI-WHILE", node, "while-loop: its condition must not depend on tensor values")
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        self.report_kernel("NKI-WITH", node, "with-statement: the NKI compiler may reject it")
        self.generic_visit(node)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self.report_kernel("NKI-ASYNC", node, "async with")
        self.generic_visit(node)

    def visit_Yield(self, node: ast.Yield) -> None:
        self.report_kernel("NKI-GENERATOR", node, "yield: kernel code cannot be a generator")
        self.generic_visit(node)

    def visit_YieldFrom(self, node: ast.YieldFrom) -> None:
        self.report_kernel("NKI-GENERATOR", node, "yield from: kernel code cannot be a generator")
        self.generic_visit(node)

    def visit_Await(self, node: ast.Await) -> None:
        self.report_kernel("NKI-ASYNC", node, "await")
        self.generic_visit(node)

    def _check_decorator(self, deco: ast.AST) -> None:
        if self.facts.is_kernel_decorator(deco):
            return
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Name) and target.id in _PLAIN_DECORATORS and self.is_builtin(target.id):
            return
        path = self.facts.canonical(target)
        if path is not None and path.startswith("typing."):
            return
        shown = ast.unparse(target)
        self.report("NKI-DECORATOR", deco, f"decorator '{shown}' is not an NKI decorator")

    def _visit_comprehension(self, node: ast.AST) -> None:
        self.report_kernel("NKI-COMPREHENSION", node, f"{type(node).__name__} in kernel code: unrolled at trace time")
        self._visit_scope(node, "comprehension", None)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension
