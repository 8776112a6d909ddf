"""Which path a kernel takes on this machine, decided without importing nkisim or running anything heavy.

Two questions:

* Which NKI API does a kernel use?  Its file's own imports say it: ``import nki`` / ``from nki...`` is the
  current API (NKI 0.4+, Neuron SDK 2.30+), ``neuronxcc.nki`` the legacy one (SDK <= 2.29).  A file importing
  both is an error (a kernel compiles under one toolchain or the other).
* Which toolchain serves that API here?  The real package when it is installed (it always wins over nkisim's
  import fallback, which only answers when no real package exists), else nkisim, else none.

The answer for the whole machine is what ``python -m nkisim info`` prints under "timing paths".
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import os
import shutil
import sys
from dataclasses import dataclass

# A kernel whose file imports neither namespace (a helper defined in a test, a file that imports NKI through
# another module) is taken to use this API: the edition's own.  `make release API=legacy` rewrites this line, so
# each release takes such a file as the API its handout and starters use; the scripts' "Kernel API:" line says
# when the API was taken rather than read (api_line), and the grader reports "no NKI import" (grader/apis.py).
# Decided in issue 34 (the legacy API was the fallback before the current-API edition became the default).
DEFAULT_API = "nki"
# What each API is and which SDK compiles it (the scripts' "Kernel API:" line, the release's README).
API_NAMES = {
    "nki": "current NKI (`import nki`; NKI 0.4+, Neuron SDK 2.30+)",
    "legacy": "legacy NKI (`import neuronxcc.nki`; Neuron SDK 2.29 or older)",
}
NRTPY_PYTHON_ENV = "NRTPY_PYTHON"


class MixedAPIError(ValueError):
    """A kernel file imports both ``nki`` and ``neuronxcc.nki``."""


def _api_of_module_name(name: str) -> str | None:
    if name == "nki" or name.startswith("nki."):
        return "nki"
    if name == "neuronxcc.nki" or name.startswith("neuronxcc.nki."):
        return "legacy"
    return None


@functools.lru_cache(maxsize=64)
def api_of_source(source: str, filename: str = "<kernel>") -> str | None:
    """'nki', 'legacy' or None (no NKI import) from a file's import statements, wherever they are.

    Remembered by source text (a MixedAPIError is raised anew each time): the Part 2 harness asks for its kernel's
    API about ten times a run, in its own process and in every timed run, and parsing and walking the staff
    conv's file costs 0.07 CPU s each time (0.7 of a --test_maxpool run's 19 CPU s)."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "neuronxcc":  # from neuronxcc import nki
                names += [f"neuronxcc.{a.name}" for a in node.names]
        for name in names:
            api = _api_of_module_name(name)
            if api is not None:
                found.setdefault(api, node.lineno)
    if len(found) > 1:
        raise MixedAPIError(
            f"{filename} imports both the current NKI API (`import nki`, line {found['nki']}) and the legacy one "
            f"(`neuronxcc.nki`, line {found['legacy']}): a kernel file must use one of them"
        )
    return next(iter(found), None)


def api_line(kernel) -> str:
    """``Kernel API: ...``, the line the course's scripts print before running a kernel; it says when the API
    was not read from the file's imports but taken from the edition (DEFAULT_API)."""
    api = api_of_kernel(kernel)
    path = kernel_file(kernel)
    if path is not None and api == DEFAULT_API:
        with open(path, encoding="utf-8", errors="replace") as f:
            if api_of_source(f.read(), path) is None:
                return (f"Kernel API: {API_NAMES[api]}, taken as this edition's: {os.path.basename(path)} imports "
                        "neither `nki` nor `neuronxcc.nki`")
    return f"Kernel API: {API_NAMES[api]}"


def kernel_function(kernel):
    """The Python function behind a kernel object (nki.jit / nki.baremetal wrappers, functools.wraps chains)."""
    seen = set()
    obj = kernel
    while id(obj) not in seen:
        seen.add(id(obj))
        if inspect.isfunction(obj):
            return obj
        nxt = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None) or getattr(obj, "fn", None)
        if nxt is None:
            break
        obj = nxt
    return obj if inspect.isfunction(obj) else None


def kernel_file(kernel) -> str | None:
    fn = kernel_function(kernel)
    path = getattr(getattr(fn, "__code__", None), "co_filename", None)
    return path if path and os.path.isfile(path) else None


def api_of_kernel(kernel) -> str:
    """The API a kernel uses: its file's imports, else the package its decorator object comes from."""
    path = kernel_file(kernel)
    if path is not None:
        with open(path, encoding="utf-8", errors="replace") as f:
            api = api_of_source(f.read(), path)
        if api is not None:
            return api
    return _api_of_module_name(type(kernel).__module__ or "") or DEFAULT_API


# ---------------------------------------------------------------------------------------------------------------
# Toolchains
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Toolchain:
    """Who serves one API here: 'neuron' (the real package), 'nkisim' (the import fallback) or 'none'."""

    api: str
    kind: str
    version: str = ""
    detail: str = ""


def _nkisim_dirs() -> list[str]:
    spec = importlib.util.find_spec("nkisim")
    return [os.path.realpath(p) for p in (spec.submodule_search_locations or [])] if spec else []


def _served_by_nkisim(name: str, spec) -> bool:
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__nkisim_fallback__", False):
        return True
    if type(spec.loader).__module__.startswith("nkisim"):
        return True
    origin = os.path.realpath(spec.origin) if spec.origin and os.path.isabs(spec.origin) else ""
    return bool(origin) and any(origin.startswith(d + os.sep) for d in _nkisim_dirs())


def _dist_version(*names: str) -> str:
    # imported here, not with the module: importlib.metadata brings email, zipfile and csv (15-30 ms of every grader
    # start, docs/grading.md "Outside the timeline's spans, round 11"), and only a real toolchain's version needs it
    import importlib.metadata

    for dist in names:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown version"


def _find(name: str):
    try:
        return importlib.util.find_spec(name), ""
    except Exception as exc:  # a parent package that fails to import (PyPI's placeholder neuronx-cc raises)
        return None, f"{type(exc).__name__}: {exc}"


def legacy_toolchain() -> Toolchain:
    spec, err = _find("neuronxcc")
    if spec is None:
        return Toolchain("legacy", "none", detail=err or "neuronxcc is not installed and nkisim's fallback is off")
    if _served_by_nkisim("neuronxcc", spec):
        return Toolchain("legacy", "nkisim", _nkisim_version(), "nkisim's import fallback (no real neuronx-cc)")
    nki_spec, err = _find("neuronxcc.nki")
    where = spec.origin or ", ".join(spec.submodule_search_locations or [])
    if nki_spec is None:
        return Toolchain("legacy", "none", _dist_version("neuronx-cc", "neuronxcc"),
                         f"the neuronx-cc at {where} has no neuronxcc.nki ({err or 'SDK 2.30+ dropped it'})")
    return Toolchain("legacy", "neuron", _dist_version("neuronx-cc", "neuronxcc"), f"neuronx-cc at {where}")


def nki_toolchain() -> Toolchain:
    spec, err = _find("nki")
    if spec is None:
        return Toolchain("nki", "none", detail=err or "no `nki` package (neither AWS's nor nkisim's front end)")
    if _served_by_nkisim("nki", spec):
        return Toolchain("nki", "nkisim", _nkisim_version(), "nkisim's `nki` front end (no real nki package)")
    return Toolchain("nki", "neuron", _dist_version("nki"), f"nki at {spec.origin or spec.submodule_search_locations}")


def toolchain(api: str) -> Toolchain:
    if api == "legacy":
        return legacy_toolchain()
    if api == "nki":
        return nki_toolchain()
    raise ValueError(f"unknown NKI API {api!r} (expected 'nki' or 'legacy')")


def _nkisim_version() -> str:
    import nkisim  # its __init__ is light (no NumPy): only reached when nkisim is the toolchain

    return str(nkisim.__version__)


BACKEND_OF = {("legacy", "neuron"): "neuron-legacy", ("nki", "neuron"): "neuron-nki"}


def backend_name(api: str) -> str:
    """'nkisim', 'neuron-legacy' or 'neuron-nki' for kernels of ``api`` here; NoBackendError if none."""
    from nkibench.errors import NoBackendError

    tc = toolchain(api)
    if tc.kind == "none":
        spelled = "`import nki`" if api == "nki" else "`neuronxcc.nki`"
        raise NoBackendError(
            f"no toolchain runs {spelled} kernels on this machine: {tc.detail}",
            step="choosing a backend",
            hint="run `make setup` for nkisim (or, on Trainium, activate the Neuron environment); "
                 "`python -m nkisim info` says what this machine has",
        )
    return BACKEND_OF.get((api, tc.kind), "nkisim")


def describe_paths() -> list[str]:
    """One line per API: which path its kernels take here and why (``python -m nkisim info``)."""
    lines = []
    for api, spelled in (("legacy", "neuronxcc.nki kernels"), ("nki", "`import nki` kernels")):
        tc = toolchain(api)
        if tc.kind == "nkisim":
            path = "nkisim's performance model (estimates, not measurements)"
        elif tc.kind == "neuron" and api == "legacy":
            path = f"Trainium via nki.benchmark (neuronx-cc {tc.version})"
        elif tc.kind == "neuron":
            path = f"Trainium via the Neuron runtime (nki {tc.version}; {_nrtpy_status()}; {_profiler_status()})"
        else:
            path = f"none ({tc.detail})"
        lines.append(f"{spelled}: {path}")
    return lines


def _nrtpy_status() -> str:
    configured = os.environ.get(NRTPY_PYTHON_ENV, "").strip()
    if configured:
        return f"timed by nrtpy under {NRTPY_PYTHON_ENV}={configured}"
    if importlib.util.find_spec("nrtpy") is not None:
        return "timed by nrtpy (importable here)"
    return f"nrtpy NOT found: set {NRTPY_PYTHON_ENV} to the nrtpy environment's python"


def _profiler_status() -> str:
    from nkibench.capture import find_profiler

    found = find_profiler()
    return f"profiles by {os.path.basename(found)}" if found else "no neuron-explorer for profiles"


def which(name: str) -> str | None:
    """A Neuron tool on PATH or in the SDK's bin directory."""
    return shutil.which(name) or shutil.which(name, path="/opt/aws/neuron/bin")
