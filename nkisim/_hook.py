"""Import fallback: make the NKI namespaces resolve to nkisim when the real packages are absent.

Runs at every interpreter start (``nkisim_fallback.pth``, written by ``python -m nkisim install-fallback``),
so it imports nothing heavy: no NumPy, no nkisim submodule but the front-end registry (``nkisim.frontends``, pure
data) until an NKI import actually happens.

The namespaces come from the registry, one per front end: ``neuronxcc.nki`` (legacy) and, when registered, ``nki``
(the current API).  For each, the namespace module and its public submodules are aliases of nkisim's modules:

* ``neuronxcc.nki``       -> ``nkisim.frontends.legacy.nki``, ``neuronxcc.nki.X`` -> ``nkisim.frontends.legacy.X``
* ``nki``                 -> ``nkisim.frontends.nki``,        ``nki.X``           -> ``nkisim.frontends.nki.X``

An alias *is* the nkisim module object (``neuronxcc.nki.language is nkisim.frontends.legacy.language``).

How it stays out of the way of the real toolchain: :func:`install` *appends* a finder to the end of
``sys.meta_path``.  The import system asks the finders in order, so the normal ``PathFinder`` finds an installed
``neuronxcc`` / ``nki`` first and this finder is never consulted for it.  Only when no real package exists does the
finder answer: with a synthetic ``neuronxcc`` package (marked ``__nkisim_fallback__ = True``) whose ``nki``
submodule is nkisim's, and with nkisim's ``nki`` module itself.

One exception, for ``nki`` only: PyPI's ``nki`` is a placeholder whose ``__init__.py`` is
``raise ImportError("WRONG PACKAGE. Please install the package from Neuron Repository ...")`` (the real package
comes from AWS's own index).  A small guard at the *front* of ``sys.meta_path`` asks the path finder where ``nki``
is; when that is the placeholder (:func:`is_placeholder`: a tiny ``__init__.py`` raising WRONG PACKAGE), nkisim
serves ``nki`` instead, without touching the installed files.  A real ``nki`` is never shadowed.  (A placeholder
``neuronx-cc`` keeps shadowing the fallback; ``python -m nkisim info`` names it and the fix.)

Set ``NKISIM_DISABLE_FALLBACK=1`` to turn the hook off (``install`` then does nothing).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import types

from nkisim.frontends import FRONT_ENDS, LEGACY, FrontEnd

DISABLE_ENV = "NKISIM_DISABLE_FALLBACK"
ROOT = LEGACY.root  # 'neuronxcc': the synthetic package the legacy namespace lives in
NKI = LEGACY.namespace  # 'neuronxcc.nki'
DEFAULT_TARGET = LEGACY.package
# What PyPI's placeholder packages raise on import ("WRONG PACKAGE. Please install the package from Neuron
# Repository - pip.repos.neuron.amazonaws.com", nki 0.0.1 on PyPI).
PLACEHOLDER_MARK = "WRONG PACKAGE"


def disabled() -> bool:
    """True when the user switched the fallback off with ``NKISIM_DISABLE_FALLBACK``."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def is_placeholder(spec: importlib.machinery.ModuleSpec | None) -> bool:
    """Whether ``spec`` is PyPI's placeholder package: a small ``__init__.py`` that raises WRONG PACKAGE."""
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return False
    try:
        if os.path.getsize(origin) > 4096:
            return False
        with open(origin, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return PLACEHOLDER_MARK in text and "raise" in text


# The finder and loaders are plain classes implementing the import protocols: importlib.abc would pull in
# importlib.resources, pathlib and re (~40 ms at every interpreter start).


class _SyntheticRootLoader:
    """Creates the empty package (``neuronxcc``) that stands in for the real one around a namespace."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, "nkisim stand-in (the real toolchain is not installed)")
        module.__nkisim_fallback__ = True  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]  # submodule imports come back to the finder


class _AliasLoader:
    """Returns an existing nkisim module object under an NKI name."""

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
    """Meta-path finder serving the registered NKI namespaces from nkisim (see module docstring)."""

    nkisim_fallback = True  # marker, survives a reload of this module (class identity does not)

    def __init__(self, target_package: str = DEFAULT_TARGET, packages: dict[str, str] | None = None) -> None:
        # target_package: the package serving the legacy namespace (tests pass a fake API package)
        self.target_package = target_package
        self.packages = {fe.key: fe.package for fe in FRONT_ENDS}
        self.packages[LEGACY.key] = target_package
        self.packages.update(packages or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target_package={self.target_package!r})"

    def _served(self, fe: FrontEnd, fullname: str) -> str | None:
        """The module that serves ``fullname`` for ``fe`` under this finder's package for it."""
        name = fe.module_for(fullname)
        package = self.packages.get(fe.key, fe.package)
        if name is None or package == fe.package:
            return name
        return package + name[len(fe.package):]

    def find_spec(
        self,
        fullname: str,
        path: object = None,  # the parent package's __path__ (unused: names decide)
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        for fe in FRONT_ENDS:
            root = fe.root
            if fullname == root and root != fe.namespace:
                return importlib.machinery.ModuleSpec(root, _SyntheticRootLoader(), is_package=True)
            if fullname != root and not fullname.startswith(root + "."):
                continue
            if fullname != root:
                loaded = sys.modules.get(root)
                if loaded is None or not getattr(loaded, "__nkisim_fallback__", False):
                    return None  # a real package is loaded: its missing submodules stay missing
            target_spec = self.target_for(fullname, fe)
            if target_spec is None:
                return None
            # The namespace module must be a package (kernels import its submodules) even when nkisim's module is a
            # plain one: the import system then gives the shared module object an empty ``__path__``.
            is_package = fullname == fe.namespace or target_spec.submodule_search_locations is not None
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target_spec.name), is_package=is_package)
        return None

    def target_for(self, fullname: str, fe: FrontEnd | None = None) -> importlib.machinery.ModuleSpec | None:
        """Spec of the nkisim module that ``fullname`` aliases, or None if there is none."""
        if fe is None:
            fe = next((f for f in FRONT_ENDS if f.owns(fullname)), None)
            if fe is None:
                return None
        candidate = self._served(fe, fullname)
        if candidate is None:
            return None
        import importlib.util  # only once an NKI import is under way

        try:
            found = importlib.util.find_spec(candidate)
        except (ImportError, ValueError):  # a parent is not a package, or a broken parent
            return None
        return found


class _PlaceholderGuard:
    """At the front of ``sys.meta_path``: serves a top-level namespace from nkisim when what the path finder would
    import is PyPI's placeholder (see module docstring).  Asks nothing for any other name."""

    nkisim_fallback_guard = True

    def __init__(self, finder: NkisimFallbackFinder) -> None:
        self.finder = finder
        self.names = frozenset(fe.namespace for fe in FRONT_ENDS if fe.root == fe.namespace)

    def find_spec(self, fullname: str, path: object = None, target: types.ModuleType | None = None):
        if fullname not in self.names:
            # A submodule of a namespace nkisim serves (``nki.isa.constants``): the aliased parent is nkisim's real
            # package, whose ``__path__`` would let the path finder load the file a second time under the NKI name
            # (two ``dge_mode`` classes).  Answer first, with the alias of nkisim's own module.
            root = sys.modules.get(fullname.partition(".")[0])
            if root is not None and getattr(root, "__nkisim_fallback__", False) and "." in fullname:
                return self.finder.find_spec(fullname, path, target)
            return None
        found = importlib.machinery.PathFinder.find_spec(fullname)
        if found is None or not is_placeholder(found):
            return None  # absent (the finder at the end serves it) or real (never shadowed)
        return self.finder.find_spec(fullname, path, target)


def installed_finder() -> NkisimFallbackFinder | None:
    """The fallback finder active in this interpreter, if any."""
    for finder in sys.meta_path:
        if getattr(finder, "nkisim_fallback", False):
            return finder  # type: ignore[return-value]
    return None


def install(target_package: str = DEFAULT_TARGET, packages: dict[str, str] | None = None
            ) -> NkisimFallbackFinder | None:
    """Append the fallback finder to ``sys.meta_path`` once (and the placeholder guard at its front); returns the
    finder (None when disabled by the environment variable).

    ``target_package`` / ``packages`` ({front-end key: package}) exist for tests (fake API packages); real use
    keeps the defaults.
    """
    if disabled():
        return None
    existing = installed_finder()
    if existing is not None:
        return existing
    finder = NkisimFallbackFinder(target_package, packages)
    sys.meta_path.append(finder)
    guard = _PlaceholderGuard(finder)
    if guard.names:
        sys.meta_path.insert(0, guard)
    return finder


def uninstall() -> None:
    """Remove the finder and its guard (modules already imported through them stay in ``sys.modules``)."""
    sys.meta_path[:] = [f for f in sys.meta_path
                        if not getattr(f, "nkisim_fallback", False) and not getattr(f, "nkisim_fallback_guard", False)]
