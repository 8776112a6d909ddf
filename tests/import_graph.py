"""The import graph of a package as the layer tests see it (tests/test_grader_layers.py, test_nkisim_layers.py).

Every import counts, at module level or inside a function (a lazy import is still a dependency: it runs when the
function does), except those under ``if TYPE_CHECKING:`` (never executed).  Relative imports are resolved.
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted names (relative to ``package``; a subpackage by its own name) -> files, for every module under
    ``root`` (the package's directory)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts) if parts else ""] = path
    return out


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(tree: ast.AST, top_level_only: bool):
    """The nodes of ``tree``, without the bodies of ``if TYPE_CHECKING:`` (their ``else`` is kept)."""
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _type_checking_only(node):
            todo.extend(node.orelse)
            continue
        if top_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(node))


def imports(path: Path, package: str, name: str, *, top_level_only: bool = False) -> set[str]:
    """Fully dotted names of what the module ``package.name`` (file ``path``) imports: ``from a import b`` gives
    ``a.b`` when ``b`` may be a module and ``a`` otherwise (callers intersect with the modules that exist)."""
    is_pkg = path.name == "__init__.py"
    here = f"{package}.{name}" if name else package
    base_parts = here.split(".") if is_pkg else here.split(".")[:-1]
    found: set[str] = set()
    for node in _walk(ast.parse(path.read_text(), filename=str(path)), top_level_only):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base_parts[: len(base_parts) - (node.level - 1)]
                module = ".".join(parts + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return found


def graph(root: Path, package: str, *, top_level_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (names relative to ``package``; "" is the package itself).
    Importing ``a.b`` imports the package ``a`` first: that edge is there too."""
    mods = module_names(root, package)
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for full in imports(path, package, name, top_level_only=top_level_only):
            if full != package and not full.startswith(package + "."):
                continue
            rel = full[len(package) + 1:] if full != package else ""
            parts = rel.split(".") if rel else []
            # the module itself and every enclosing package are imported
            for i in range(len(parts), -1, -1):
                cand = ".".join(parts[:i])
                if cand in mods:
                    deps.add(cand)
        own_packages = {".".join(name.split(".")[:i]) for i in range(len(name.split(".")))} if name else set()
        out[name] = deps - {name} - own_packages
    return out


def cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``g`` (a list whose first and last items are the same module), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (found := visit(n)):
            return found
    return None
