"""The walk over a kernel file: scopes, kernels and their helpers, and where each finding is reported.

:class:`Checker` composes the rule sets (:class:`~nkisim.check.sandbox.SandboxRules`,
:class:`~nkisim.check.subset.SubsetRules`) over :class:`Walker`, which keeps the scope stack and the kernel being
walked.  Nodes several rule sets look at (functions, classes, ``try``, calls, ``async for``) are visited here and
handed to each set's hook.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from nkisim.check.analysis import ModuleFacts, bound_names
from nkisim.check.rules import RULES_BY_CODE, Violation
from nkisim.check.sandbox import SandboxRules
from nkisim.check.subset import SubsetRules


@dataclass
class _Scope:
    node: ast.AST
    kind: str  # module | function | class | comprehension
    name: str | None
    bound: set[str]


class Walker(ast.NodeVisitor):
    """Scopes, the kernel stack and reporting (rule-free)."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.out: list[Violation] = []
        self.scopes: list[_Scope] = [_Scope(facts.tree, "module", None, set())]
        self.kernel_stack: list[tuple[ast.AST, str]] = []  # (outermost kernel/helper def, role)
        self._all_bound: set[str] | None = None

    def visit(self, node: ast.AST):
        """Every node's identifiers are screened by what they are (analysis.IDENTIFIER_ROLES), then its visitor
        runs."""
        self.sandbox_identifiers(node)  # type: ignore[attr-defined]
        return super().visit(node)

    # reporting ---------------------------------------------------------------------------------------------
    def report(self, code: str, node: ast.AST, message: str) -> None:
        rule = RULES_BY_CODE[code]
        if self.facts.api not in rule.apis:  # a rule of the other NKI API
            return
        names = [s.name for s in self.scopes if s.name]
        self.out.append(
            Violation(
                severity=rule.severity,
                kind=rule.kind,
                line=getattr(node, "lineno", 1),
                col=getattr(node, "col_offset", 0) + 1,
                message=message,
                function=".".join(names) if names else None,
                code=code,
            )
        )

    def report_kernel(self, code: str, node: ast.AST, message: str) -> None:
        """Report an NKI-subset finding, only inside kernels and the helpers they call."""
        if self.kernel_stack:
            kernel, role = self.kernel_stack[0]
            suffix = f" (in '{kernel.name}', a helper that a kernel calls)" if role != "kernel" else ""  # type: ignore
            self.report(code, node, message + suffix)

    # scope helpers -----------------------------------------------------------------------------------------
    def is_builtin(self, name: str) -> bool:
        """True if ``name`` here refers to the builtin (not shadowed by a function-local binding)."""
        for i, scope in enumerate(reversed(self.scopes)):
            if scope.kind == "class" and i > 0:
                continue
            if scope.kind in ("function", "comprehension") and name in scope.bound:
                return False
        return True

    def current_function(self) -> ast.AST | None:
        for scope in reversed(self.scopes):
            if scope.kind == "function":
                return scope.node
        return None

    def in_function(self) -> bool:
        return any(s.kind in ("function", "comprehension") for s in self.scopes)

    def _visit_scope(self, node: ast.AST, kind: str, name: str | None) -> None:
        self.scopes.append(_Scope(node, kind, name, bound_names(node)))
        try:
            self.generic_visit(node)
        finally:
            self.scopes.pop()


class Checker(SandboxRules, SubsetRules, Walker):
    """The screen's walk: every rule set over one file."""

    # definitions -------------------------------------------------------------------------------------------
    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        in_class_body = self.scopes[-1].kind == "class"
        self.sandbox_function(node, in_class_body)
        for deco in node.decorator_list:
            self._check_decorator(deco)
        role = self.facts.kernel_code.get(id(node))
        nested = bool(self.kernel_stack)
        self.subset_function(node, nested, role)
        self.subset_arguments(node, role)
        if nested or role is None:
            self._visit_scope(node, "function", node.name)
            return
        self.kernel_stack.append((node, role))
        try:
            self._visit_scope(node, "function", node.name)
        finally:
            self.kernel_stack.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_scope(node, "function", None)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.sandbox_class(node)
        for deco in node.decorator_list:
            self._check_decorator(deco)
        self.subset_class(node)
        self._visit_scope(node, "class", node.name)

    # statements and calls ----------------------------------------------------------------------------------
    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self.subset_async_for(node)
        self._check_store_target(node.target, "assigning")
        self.generic_visit(node)

    def _visit_try(self, node: ast.AST) -> None:
        self.subset_try(node)
        self.sandbox_try(node)
        self.generic_visit(node)

    visit_Try = _visit_try
    visit_TryStar = _visit_try

    def visit_Call(self, node: ast.Call) -> None:
        self.sandbox_call(node)
        self.subset_call(node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.subset_attribute(node)
        super().visit_Attribute(node)

    def visit_Module(self, node: ast.Module) -> None:
        self.subset_module(node)
        self.generic_visit(node)
