"""Import fallback: make ``import neuronxcc.nki...`` resolve to nkisim when the real neuronx-cc is absent.

Runs at every interpreter start (``nkisim_fallback.pth``, written by ``python -m nkisim install-fallback``),
so it imports nothing heavy: no NumPy, no nkisim submodule until a ``neuronxcc`` import actually happens.

How it stays out of the way of the real toolchain: :func:`install` *appends* a finder to the end of
``sys.meta_path``.  The import system asks the finders in order, so the normal ``PathFinder`` finds an
installed ``neuronxcc`` first and this finder is never consulted for it.  Only when no real ``neuronxcc``
exists does the finder answer, with a synthetic ``neuronxcc`` package (marked ``__nkisim_fallback__ =
True``) whose submodules are aliases of nkisim's API modules:

* ``neuronxcc.nki``       -> ``nkisim.api.nki``
* ``neuronxcc.nki.X[.Y]`` -> ``nkisim.api.X[.Y]`` for every public module that exists under ``nkisim.api``

An alias *is* the nkisim module object (``neuronxcc.nki.language is nkisim.api.language``).

Set ``NKISIM_DISABLE_FALLBACK=1`` to turn the hook off (``install`` then does nothing).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import types

DISABLE_ENV = "NKISIM_DISABLE_FALLBACK"
ROOT = "neuronxcc"
NKI = "neuronxcc.nki"
DEFAULT_TARGET = "nkisim.api"
# Names under neuronxcc.nki that are not aliases of nkisim.api.<name> (``neuronxcc.nki.nki`` does not exist).
_NOT_SUBMODULES = frozenset({"nki"})


def disabled() -> bool:
    """True when the user switched the fallback off with ``NKISIM_DISABLE_FALLBACK``."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


# The finder and loaders are plain classes implementing the import protocols: importlib.abc would pull in
# importlib.resources, pathlib and re (~40 ms at every interpreter start).


class _SyntheticRootLoader:
    """Creates the empty ``neuronxcc`` package that stands in for the real one."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, "nkisim stand-in for neuronx-cc (the real toolchain is not installed)")
        module.__nkisim_fallback__ = True  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]  # submodule imports come back to the finder


class _AliasLoader:
    """Returns an existing nkisim module object under a ``neuronxcc...`` name."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._original_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self.target)
        self._original_spec = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import machinery stamped our alias spec on the shared module object; put nkisim's own spec back
        # so the module keeps its identity (relative imports, reload, pickling by name).
        if self._original_spec is not None:
            module.__spec__ = self._original_spec


class NkisimFallbackFinder:
    """Meta-path finder serving ``neuronxcc`` and ``neuronxcc.nki...`` from nkisim (see module docstring)."""

    nkisim_fallback = True  # marker, survives a reload of this module (class identity does not)

    def __init__(self, target_package: str = DEFAULT_TARGET) -> None:
        self.target_package = target_package

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target_package={self.target_package!r})"

    def find_spec(
        self,
        fullname: str,
        path: object = None,  # the parent package's __path__ (unused: names decide)
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == ROOT:
            return importlib.machinery.ModuleSpec(ROOT, _SyntheticRootLoader(), is_package=True)
        if not fullname.startswith(ROOT + "."):
            return None
        root = sys.modules.get(ROOT)
        if root is None or not getattr(root, "__nkisim_fallback__", False):
            return None  # a real neuronxcc is loaded: its missing submodules stay missing
        target_spec = self.target_for(fullname)
        if target_spec is None:
            return None
        # ``neuronxcc.nki`` must be a package (kernels import its submodules) even if nkisim.api.nki is a
        # plain module: the import system then gives the shared module object an empty ``__path__``.
        is_package = fullname == NKI or target_spec.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_spec.name), is_package=is_package)

    def target_for(self, fullname: str) -> importlib.machinery.ModuleSpec | None:
        """Spec of the nkisim module that ``fullname`` aliases, or None if there is none."""
        if fullname == NKI:
            candidate = self.target_package + ".nki"
        elif fullname.startswith(NKI + "."):
            rest = fullname[len(NKI) + 1 :].split(".")
            if rest[0] in _NOT_SUBMODULES or any(part.startswith("_") for part in rest):
                return None
            candidate = ".".join([self.target_package, *rest])
        else:
            return None
        import importlib.util  # only once a neuronxcc import is under way

        try:
            found = importlib.util.find_spec(candidate)
        except (ImportError, ValueError):  # a parent is not a package, or a broken parent
            return None
        return found


def installed_finder() -> NkisimFallbackFinder | None:
    """The fallback finder active in this interpreter, if any."""
    for finder in sys.meta_path:
        if getattr(finder, "nkisim_fallback", False):
            return finder  # type: ignore[return-value]
    return None


def install(target_package: str = DEFAULT_TARGET) -> NkisimFallbackFinder | None:
    """Append the fallback finder to ``sys.meta_path`` once; returns it (None when disabled by env var).

    ``target_package`` exists for tests (a fake API package); real use keeps the default.
    """
    if disabled():
        return None
    existing = installed_finder()
    if existing is not None:
        return existing
    finder = NkisimFallbackFinder(target_package)
    sys.meta_path.append(finder)
    return finder


def uninstall() -> None:
    """Remove the finder (modules already imported through it stay in ``sys.modules``)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "nkisim_fallback", False)]
