"""The front-end registry: one :class:`FrontEnd` per NKI namespace nkisim serves.

A front end is the public API of one NKI generation, as thin adapters over nkisim's one core
(``nkisim/core``: tensors, access patterns, dtype rules, constraint checks, the instruction stream) and its one
performance model (``nkisim/perf``).  This record says everything the rest of nkisim needs to know about it:

* where kernels import it from (``namespace``: ``neuronxcc.nki`` -> :data:`LEGACY`, ``nki`` -> :data:`NKI`) and
  which nkisim package serves it,
  so the import fallback (``nkisim/_hook.py``), the static screen (``nkisim/check``), the grader's import policy
  and ``python -m nkisim info`` / ``apicoverage`` read the names from here, never from literals;
* which rules apply to its kernels (:meth:`FrontEnd.era`, the ``eras`` of ``nkisim/core/rules.py``);
* the tensor class kernels hold and the operator/assignment semantics of that class (``tensor``, ``semantics``:
  dotted ``module:attribute`` paths, imported only when a kernel runs).

This module is imported by the import hook at every interpreter start: it must stay light (no NumPy, no other
nkisim module at import time).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True, eq=False)  # one object per namespace: identity is equality (and the hash)
class FrontEnd:
    """One NKI namespace: how kernels import it, which nkisim modules serve it, which rules and semantics apply."""

    key: str  # short name: 'legacy' | 'nki'
    title: str  # for messages and `python -m nkisim info`
    namespace: str  # what kernels import: 'neuronxcc.nki' | 'nki'
    package: str  # the nkisim package that serves it
    top: str  # the module that *is* the namespace module (`import neuronxcc.nki` / `import nki`)
    submodules: tuple[str, ...]  # public submodules under the namespace ('language', 'isa', ...)
    prefixes: dict[str, str]  # doc prefix -> submodule ('' = the namespace module): 'nl' -> 'language'
    symbols_file: str  # documented symbol list (in the package directory), with its sources
    distributions: tuple[str, ...]  # pip distributions of the real package (`neuronx-cc`, `nki`)
    tensor: str  # 'module:Class' of the tensor type kernels hold
    semantics: str  # 'module:Class' of the operator/assignment semantics (nkisim.core.semantics)
    docs: str  # which documentation release the API follows
    fixed_era: str | None = None  # rule era for every target; None: the legacy toolchain era of the target

    @property
    def root(self) -> str:
        """The top-level package name (``neuronxcc`` / ``nki``)."""
        return self.namespace.split(".", 1)[0]

    @property
    def directory(self) -> str:
        """Directory of the serving package: frames in it are the emulator's, not the kernel's."""
        return os.path.join(os.path.dirname(_HERE), *self.package.split(".")[1:])

    @property
    def symbols_path(self) -> str:
        return os.path.join(self.directory, self.symbols_file)

    def module_for(self, fullname: str) -> str | None:
        """The nkisim module that serves ``fullname`` (``neuronxcc.nki.isa`` -> ``...legacy.isa``), or None when
        ``fullname`` is not a public module of this namespace (private names and misspellings stay missing)."""
        if fullname == self.namespace:
            return self.top
        if not fullname.startswith(self.namespace + "."):
            return None
        rest = fullname[len(self.namespace) + 1:].split(".")
        if rest[0] not in self.submodules or any(part.startswith("_") for part in rest):
            return None
        return ".".join([self.package, *rest])

    def owns(self, dotted: str) -> bool:
        """Whether a dotted name lies in this namespace (``nki.language.add``; not ``nkisim.x``)."""
        return dotted == self.namespace or dotted.startswith(self.namespace + ".")

    def era(self, target: str | None = None) -> str:
        """The rule era of this front end's kernels on ``target`` (``applies(code, era)`` in core/rules.py)."""
        if self.fixed_era is not None:
            return self.fixed_era
        from nkisim.core import config

        return config.toolchain_era(target)

    def load(self, which: str):
        """The class named by ``tensor`` / ``semantics`` (imports the emulator: call only when a kernel runs).

        Only a registered front end loads, and only its own ``tensor`` / ``semantics`` from nkisim: a record built
        elsewhere (``type(fe)(..., tensor="os:system")``) would otherwise import any module by name."""
        if BY_KEY.get(self.key) is not self or which not in ("tensor", "semantics"):
            raise TypeError(f"{self.key!r}: only nkisim's registered front ends load their tensor/semantics classes")
        module, _, attr = getattr(self, which).partition(":")
        if not module.startswith("nkisim."):
            raise TypeError(f"{self.key!r}: {which} must be an nkisim class, not {module!r}")
        return getattr(importlib.import_module(module), attr)


LEGACY = FrontEnd(
    key="legacy",
    title="legacy NKI API (neuronxcc.nki, Neuron SDK 2.20-2.29)",
    namespace="neuronxcc.nki",
    package="nkisim.frontends.legacy",
    top="nkisim.frontends.legacy.nki",
    submodules=("language", "isa", "compiler", "typing"),
    prefixes={"nki": "", "nl": "language", "nisa": "isa", "ncc": "compiler", "nt": "typing"},
    symbols_file="legacy_symbols.txt",
    distributions=("neuronx-cc", "neuronxcc"),
    tensor="nkisim.core.tensor:Tensor",
    semantics="nkisim.frontends.legacy.semantics:LegacySemantics",
    docs="Neuron SDK 2.20-2.26 NKI docs",
)

NKI = FrontEnd(
    key="nki",
    title="current NKI API (nki, NKI 0.6 / Neuron SDK 2.32)",
    namespace="nki",
    package="nkisim.frontends.nki",
    top="nkisim.frontends.nki.nki",
    submodules=("language", "isa", "typing", "collectives", "dtype"),
    prefixes={"nki": "", "nl": "language", "nisa": "isa", "nt": "typing", "ncol": "collectives"},
    symbols_file="symbols.txt",
    distributions=("nki",),
    tensor="nkisim.frontends.nki.tensor:NkiTensor",
    semantics="nkisim.frontends.nki.semantics:NkiSemantics",
    docs="aws-neuron-sdk nki/api stubs, NKI 0.6",
    fixed_era="nki",
)

FRONT_ENDS: tuple[FrontEnd, ...] = (LEGACY, NKI)
BY_KEY = {fe.key: fe for fe in FRONT_ENDS}
BY_NAMESPACE = {fe.namespace: fe for fe in FRONT_ENDS}


def get(key: str) -> FrontEnd:
    try:
        return BY_KEY[key]
    except KeyError:
        raise ValueError(f"unknown NKI front end {key!r}; nkisim serves {', '.join(BY_KEY)}") from None


def of_module(name: str) -> FrontEnd | None:
    """The front end a module name belongs to: its namespace (``nki.isa``) or its serving package."""
    for fe in FRONT_ENDS:
        if fe.owns(name) or name == fe.package or name.startswith(fe.package + "."):
            return fe
    return None
