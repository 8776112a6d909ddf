"""Which NKI backend this interpreter uses: the real neuronx-cc, nkisim (import fallback), or none.

Used by ``python -m nkisim info``, ``part1/run_benchmark.py`` and the grader to label figures ("Trainium
(neuronx-cc)" vs "nkisim estimate, trn2").  The decision mirrors what ``import neuronxcc.nki`` would do,
without importing nkisim's emulator (no NumPy).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

from nkisim import __version__ as NKISIM_VERSION
from nkisim import _hook
from nkisim.frontends import FRONT_ENDS, LEGACY, FrontEnd

PTH_NAME = "nkisim_fallback.pth"
DEFAULT_TARGET = "trn2"
TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
PRECISE_FP_ENV = "NKI_PRECISE_FP"
# One .pth "import" line, run by site.py at every start.  Guarded so that a leftover .pth of an uninstalled
# nkisim stays silent; written without importlib.util (~13 ms) to keep interpreter start-up fast.
PTH_LINE = (
    'import sys; exec("try:\\n    import nkisim._hook\\nexcept ImportError:\\n    pass\\n'
    'else:\\n    nkisim._hook.install()")\n'
)


def pth_path(site_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where ``install-fallback`` puts the .pth file: the environment's purelib unless told otherwise."""
    return Path(site_dir if site_dir is not None else sysconfig.get_paths()["purelib"]) / PTH_NAME


def current_target() -> str:
    """Target from nkisim.core.config when the lead's module exists, else from the environment."""
    try:
        config = importlib.import_module("nkisim.core.config")
    except ImportError:
        config = None
    getter = getattr(config, "current_target", None)
    if getter is not None:
        try:
            return str(getter())
        except Exception as exc:  # a bad NEURON_PLATFORM_TARGET_OVERRIDE: show it, don't crash `info`
            return f"invalid ({exc})"
    return os.environ.get(TARGET_ENV, "").strip() or DEFAULT_TARGET


def precise_fp_text() -> str:
    """NKI_PRECISE_FP as the emulator reads it (nkisim.core.config.precise_fp when available)."""
    raw = os.environ.get(PRECISE_FP_ENV)
    try:
        value = bool(importlib.import_module("nkisim.core.config").precise_fp())
    except Exception:  # config missing or broken: show the raw variable
        return raw if raw is not None else "unset"
    meaning = "bf16/fp8 kept in their own precision" if value else "bf16/fp8 stored as float32"
    return f"{int(value)} ({meaning}{', default' if raw is None else ''})"


def _is_fallback_spec(spec: importlib.machinery.ModuleSpec) -> bool:
    module = sys.modules.get(spec.name)
    if module is not None and getattr(module, "__nkisim_fallback__", False):
        return True
    return type(spec.loader).__module__ == _hook.__name__


def _real_version(fe: FrontEnd) -> str:
    for dist in fe.distributions:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    module = sys.modules.get(fe.root)
    return str(getattr(module, "__version__", "unknown version"))


def namespace_info(fe: FrontEnd) -> dict[str, Any]:
    """Which backend serves one NKI namespace (``neuronxcc.nki`` or ``nki``) in this interpreter, and why.

    Keys: ``namespace``, ``backend`` ('neuron' | 'nkisim' | 'none'), ``reason`` (one sentence), ``version`` (of the
    backend), ``location`` (where the real package is, else None).  Mirrors what importing it would do, without
    importing nkisim's emulator."""
    info: dict[str, Any] = {"namespace": fe.namespace, "backend": "none", "reason": "", "version": None,
                            "location": None}
    root = fe.root
    try:
        spec = importlib.util.find_spec(root)
    except (ImportError, ValueError) as exc:
        info["reason"] = f"{root} could not be looked up: {exc}"
        return info
    on_path = importlib.machinery.PathFinder.find_spec(root) if spec is not None else None
    placeholder = on_path is not None and _hook.is_placeholder(on_path)

    if spec is not None and not _is_fallback_spec(spec):
        location = spec.origin or ", ".join(spec.submodule_search_locations or [])
        info["location"] = location
        try:
            importlib.import_module(root)
            ns_spec = importlib.util.find_spec(fe.namespace)
        except Exception as exc:  # PyPI's placeholder neuronx-cc raises on import
            info["reason"] = (
                f"a {root} package at {location} fails to import ({type(exc).__name__}: {exc}); it is "
                "probably PyPI's placeholder, which shadows the nkisim fallback: "
                f"run `pip uninstall {fe.distributions[0]}`"
            )
            return info
        if ns_spec is None:
            info["reason"] = (
                f"the {root} package at {location} has no {fe.namespace} module ({fe.title}); it "
                f"shadows the nkisim fallback: install a toolchain that has it or `pip uninstall {fe.distributions[0]}`"
            )
            return info
        info.update(backend="neuron", version=_real_version(fe), reason=f"real toolchain at {location}")
        return info

    if spec is not None:  # served by our finder
        finder = _hook.installed_finder()
        if finder is not None and finder.target_for(fe.namespace, fe) is None:
            info["reason"] = f"fallback active but the module serving {fe.namespace} is missing: nkisim is incomplete"
            return info
        why = (f"fallback: PyPI's placeholder {fe.distributions[0]} ({_hook.PLACEHOLDER_MARK}) at {on_path.origin} "
               "is bypassed" if placeholder else f"fallback: {root} not installed")
        info.update(backend="nkisim", version=NKISIM_VERSION, reason=why)
        return info

    if _hook.disabled():
        info["reason"] = f"{root} not installed and the nkisim fallback is disabled by {_hook.DISABLE_ENV}"
    else:
        info["reason"] = f"{root} not installed and the fallback hook is not installed: run `make setup`"
    return info


def backend_info() -> dict[str, Any]:
    """Describe the active backend of the legacy namespace (what the course code imports), plus every namespace.

    Keys: ``backend`` ('neuron' | 'nkisim' | 'none'), ``reason`` (one sentence), ``version`` (of the backend),
    ``target`` (trn2/trn1), ``hook_installed`` (fallback finder active in this interpreter), ``location``
    (where the real package is, else None), ``pth_file`` (path of the .pth file, None if not installed),
    ``namespaces`` ({namespace: :func:`namespace_info`} for every front end).
    """
    pth = pth_path()
    namespaces = {fe.namespace: namespace_info(fe) for fe in FRONT_ENDS}
    legacy = namespaces[LEGACY.namespace]
    info: dict[str, Any] = {
        "backend": legacy["backend"],
        "reason": legacy["reason"],
        "version": legacy["version"],
        "target": current_target(),
        "toolchain_era": _era_text(),
        "hook_installed": _hook.installed_finder() is not None,
        "location": legacy["location"],
        "pth_file": str(pth) if pth.is_file() else None,
        "namespaces": namespaces,
    }
    return info


def backend_label(info: dict[str, Any] | None = None) -> str:
    """Short label for printed figures: 'Trainium (neuronx-cc X)' or 'nkisim estimate, trn2'."""
    info = backend_info() if info is None else info
    if info["backend"] == "neuron":
        return f"Trainium (neuronx-cc {info['version']})"
    if info["backend"] == "nkisim":
        return f"nkisim estimate, {info['target']}"
    return "no NKI backend"


def _era_text() -> str:
    """Which course toolchain's rules nkisim applies, and why (``python -m nkisim info``)."""
    from nkisim.core import config

    try:
        era = config.toolchain_era()
    except ValueError as exc:
        return f"invalid ({exc})"
    why = f"set by {config.ERA_ENV}" if os.environ.get(config.ERA_ENV, "").strip() else \
        f"from the target; override with {config.ERA_ENV}=2024|2025"
    return f"{era}: {config.ERAS[era]} ({why})"


def describe(info: dict[str, Any] | None = None) -> str:
    """Multi-line report printed by ``python -m nkisim info``."""
    info = backend_info() if info is None else info
    if info["backend"] == "neuron":
        backend = f"neuronx-cc {info['version']} ({info['reason']})"
    elif info["backend"] == "nkisim":
        backend = f"nkisim {info['version']} ({info['reason']})"
    else:
        backend = f"none ({info['reason']})"
    try:
        import numpy

        numpy_version = numpy.__version__
    except ImportError:
        numpy_version = "not installed"
    lines = [f"backend:        {backend}", "namespaces:"]
    for ns, sub in (info.get("namespaces") or {}).items():
        who = {"neuron": f"real {sub['version']}", "nkisim": f"nkisim {sub['version']}"}.get(sub["backend"], "none")
        lines.append(f"  {ns:16s}{who} ({sub['reason']})")
    legacy_era = info.get("toolchain_era", _era_text())
    if _edition_api() == "nki":  # the current-API edition: its kernels' rules first, the legacy era second
        from nkisim.core import config

        eras = [f"toolchain era:  nki: {config.ERAS['nki']}",
                f"                 (legacy neuronxcc.nki kernels: {legacy_era})"]
    else:
        eras = [f"toolchain era:  {legacy_era}",
                "                 (neuronxcc.nki kernels; nki kernels always follow the 'nki' rules: NKI 0.6)"]
    lines += [
        f"target:         {info['target']}",
        *eras,
        f"{PRECISE_FP_ENV}:  {precise_fp_text()}",
        f"fallback hook:  {'active' if info['hook_installed'] else 'not active'}"
        + (f" (disabled by {_hook.DISABLE_ENV})" if _hook.disabled() else ""),
        f"fallback .pth:  {info['pth_file'] or 'not installed (run `make setup`)'}",
        f"python:         {sys.version.split()[0]} ({sys.executable})",
        f"numpy:          {numpy_version}",
        *_timing_paths(),
    ]
    return "\n".join(lines)


def _edition_api() -> str:
    """The course edition's API (nkibench.detect.DEFAULT_API: 'nki' in the default edition, 'legacy' in the
    legacy one), which decides what ``info`` reports first; 'legacy' where nkibench is absent."""
    try:
        from nkibench.detect import DEFAULT_API
    except ImportError:
        return "legacy"
    return str(DEFAULT_API)


def _timing_paths() -> list[str]:
    """Where each API's kernels are run and timed here (nkibench, the scripts' timing layer, decides)."""
    try:
        from nkibench.detect import describe_paths
    except ImportError:
        return ["timing paths:   unknown (the nkibench package is not importable: run `make setup`)"]
    return ["timing paths:", *(f"  {line}" for line in describe_paths())]


def install_pth(site_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write the .pth file atomically; returns its path."""
    target = pth_path(site_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(PTH_LINE, encoding="utf-8")
    os.replace(tmp, target)
    return target


def uninstall_pth(site_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Remove the .pth file; returns its path, or None if there was none."""
    target = pth_path(site_dir)
    try:
        target.unlink()
    except FileNotFoundError:
        return None
    return target
