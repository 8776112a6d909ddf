"""Latency targets of the performance tests: the course's published hardware targets, as the model sees them.

A student's kernel should earn on nkisim the credit it would earn on Trainium.  On hardware the course grades
against fixed targets (the Fall 2025 harness: 120% of the course's reference kernel's trn2 latency, a relaxed
tier from an unoptimised reference, the 700 us transpose extra credit; the 2024 trn1 README: 4,300 / 1,300 us).
On nkisim a target is one of two things (``basis``):

* ``"reference"``: threshold_factor x the modelled latency of our staff kernel (grader/reference), the relaxed
  tier at the course's own ratio between its two published tiers.  Used where our staff kernel is, on hardware,
  as fast as the course's reference: conv2d 224x224 on trn2 (the staff kernel models at 0.92x / 1.00x of the
  course reference's 3,830 / 835 us, and seed 004's kernel, measured at 3,832 / ~820 us, models within 1% of
  the staff kernel).  A bias the model has for kernels of this shape then cancels.
* ``"published"``: the published hardware target itself.  Used where our staff kernel is faster than the
  course's reference, so that a multiple of it would be stricter than the hardware: the 32x16 extra credit
  (the course reference takes 92 / 70 us on trn2, the staff kernel models at 54 / 27 us, and seed 003's
  32x16 kernel measured 45 / 38 us and models at 1.26x / 0.79x of that) and the transpose (700 us against a
  staff kernel modelled at ~400 us; seed 004's transpose models at 0.98x of its hardware latency).  This
  relies on the model's absolute calibration (``python -m nkisim.calibrate``), not on the staff kernel.

Where a generation has no published target of its own (trn1: the 32x16 images and the transpose), the course's
trn2 targets stand in, on hardware and on nkisim alike.

Each NKI API has its own staff kernels (grader/staff.py), and a submission is timed against the staff kernel of
its own API: the modelled staff latencies are computed once per (backend, target, API, tool version) and cached in
``grader/reference_timings.json`` (committed; ``python -m grader calibrate`` rewrites it) or, when that file has
no entry for this tool version, in a per-user cache.  Tool version = nkisim.__version__ + a hash of the code of
what decides a staff kernel's modelled latency (:func:`model_fingerprint`: the cost model, and the runtime and
front ends that produce the traces it costs; docstrings and comments left out): a change there invalidates the
cached reference timings, a docstring edit or a change of the static screen does not; so does a change of the
staff kernels (their hash is stored in the entry and checked wherever they are present).  An API
with no entry at all borrows the other API's (the two staff kernels run the same algorithm and model within 2%
of each other), with a warning; with none at all the published targets apply, with a warning.

The published numbers and which configurations use which basis belong to each problem (grader/problems/:
conv2d.py, transpose.py); this module holds the basis rule for a single reference-keyed target
(:func:`reference_threshold`) and the tier rule (:func:`credit_tier`).

Layering: this module only reads and writes the caches (it depends on grader/staff.py and nkisim, nothing else
of the grader); grader/calibrate.py measures the staff kernels and fills them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import os
import tempfile
import time
import tokenize
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grader.staff import APIS, reference_available, reference_fingerprint

__all__ = [
    "CACHE_FORMAT",
    "PACKAGE_CACHE",
    "api_or_default",
    "boundary_distance",
    "cache_key",
    "cached_timings",
    "credit_tier",
    "describe_entry",
    "perf_fingerprint",
    "reference_available",
    "reference_fingerprint",
    "reference_timings",
    "reference_threshold",
    "tool_version",
    "user_cache_file",
    "write_cache_entry",
]

PACKAGE_CACHE = Path(__file__).with_name("reference_timings.json")
CACHE_FORMAT = 1

BASES = ("reference", "published")
THRESHOLD_FACTOR = 1.2  # the course's "120% of the reference kernel"; the rubric's threshold_factor overrides it


def user_cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "asst4-grader" / "reference_timings.json"


# What decides a reference timing: the cost model (nkisim.perf's estimate) and the staff kernels' traces, which the
# runtime, the trace format and the front ends produce.  Package-relative module names; a package stands for every
# module under it when it ends in ".*".
MODEL_ROOTS = ("perf", "core.runtime", "core.traceio", "frontends.*")


def _module_files(root: Path) -> dict[str, Path]:
    out = {}
    for f in root.rglob("*.py"):
        if "__pycache__" in f.parts:
            continue
        parts = f.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _nkisim_imports(tree: ast.AST, name: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The nkisim modules a module imports anywhere (a lazy import counts: it runs when its function does), with
    the packages they sit in (importing a.b runs a's __init__ first)."""
    here = name.split(".") if name else []
    base = here if is_package else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - (node.level - 1)]
                module = ".".join(["nkisim", *parent, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names = [module, *(f"{module}.{a.name}" for a in node.names)]
        else:
            continue
        for full in names:
            if full == "nkisim" or full.startswith("nkisim."):
                parts = full.split(".")[1:]
                found.update(m for m in (".".join(parts[:i]) for i in range(len(parts) + 1)) if m in modules)
    return found


def code_text(source: str) -> str:
    """``source`` without its docstrings, comments and blank lines, each line right-stripped: the text whose change
    can change what the code does (a docstring or comment edit leaves it as it was)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    cuts: list[tuple[int, int, int, int]] = []  # (line, col, end line, end col), 1-based lines, character columns

    def char_col(line: int, byte_col: int) -> int:
        return len(lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            doc = node.body[0]
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                end_line = doc.end_lineno or doc.lineno
                cuts.append((doc.lineno, char_col(doc.lineno, doc.col_offset), end_line,
                             char_col(end_line, doc.end_col_offset or 0)))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            cuts.append((*tok.start, *tok.end))
    for line, col, end_line, end_col in sorted(cuts, reverse=True):
        if line == end_line:
            lines[line - 1] = lines[line - 1][:col] + lines[line - 1][end_col:]
        else:
            lines[line - 1 : end_line] = [lines[line - 1][:col] + lines[end_line - 1][end_col:]]
    return "\n".join(stripped for line in lines if (stripped := line.rstrip()))


def model_modules(root: Path) -> dict[str, Path]:
    """The modules of the nkisim package at ``root`` that decide a reference timing: MODEL_ROOTS and everything they
    import (transitively, lazy imports included)."""
    modules = _module_files(root)
    todo = [m for r in MODEL_ROOTS for m in modules
            if (m == r or (r.endswith(".*") and m.startswith(r[:-1])))]
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = path = modules[name]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        todo.extend(_nkisim_imports(tree, name, path.name == "__init__.py", modules) - set(seen))
    return dict(sorted(seen.items()))


def model_fingerprint(root: Path) -> str:
    """Hash of the code (docstrings and comments left out, :func:`code_text`) of :func:`model_modules`: the cost
    model's constants and formulas, and the runtime and front ends that decide which instructions (DMA
    descriptors, engines, shapes) the staff kernels' traces hold.  Everything else in nkisim -- the static screen,
    the calibration corpus and fit, the CLI tools, any docstring or comment -- can change without invalidating the
    cached reference timings (tests/test_grader_units.py edits a copy of nkisim to check)."""
    h = hashlib.sha256()
    for path in model_modules(root).values():
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(code_text(path.read_text(encoding="utf-8")).encode() + b"\0")
    return h.hexdigest()[:12]


MEMO_ENTRIES = 64  # source states remembered in the user cache's fingerprint memo


@functools.lru_cache(maxsize=1)
def perf_fingerprint() -> str:
    """:func:`model_fingerprint` of the installed nkisim (the second half of :func:`tool_version`).

    Parsing the model's ~14,000 lines costs about a CPU second, so the result is remembered in the user cache under
    the hash of every nkisim source file's bytes (a few milliseconds to compute): a grading pays it once per
    state of the sources, a batch worker or a Gradescope container at most once."""
    import nkisim

    root = Path(nkisim.__file__).parent
    raw = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        if "__pycache__" not in f.parts:
            raw.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    state = raw.hexdigest()
    memo_file = user_cache_file().with_name("model_fingerprints.json")
    try:
        memo = json.loads(memo_file.read_text())
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        memo = {}
    found = memo.get(state)
    if isinstance(found, str) and len(found) == 12:
        return found
    found = model_fingerprint(root)
    memo = {k: v for k, v in list(memo.items())[-(MEMO_ENTRIES - 1):]} | {state: found}
    try:  # a read-only home costs the parse again next time, never a wrong key
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo_file.parent, prefix=".fingerprints-", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(memo, fh)
        os.replace(tmp, memo_file)
    except OSError:
        pass
    return found


def tool_version() -> str:
    import nkisim

    return f"nkisim-{nkisim.__version__}+{perf_fingerprint()}"


def api_or_default(api: str | None) -> str:
    """``api``, or the API of kernels that import no NKI namespace (nkibench.detect.DEFAULT_API)."""
    if api is None:
        from nkibench.detect import DEFAULT_API

        api = DEFAULT_API
    if api not in APIS:
        raise ValueError(f"unknown NKI API {api!r} (expected one of {', '.join(APIS)})")
    return api


def cache_key(backend: str, target: str, api: str | None = None) -> str:
    return f"{backend}|{target}|{api_or_default(api)}|{tool_version()}"


def _key_fields(key: str) -> tuple[str, str, str] | None:
    """(backend, target, api) of a cache key; keys written before the per-API split (format 1,
    ``backend|target|version``) are the legacy API's: the only staff kernels there were then."""
    parts = key.split("|")
    if len(parts) == 3:
        return parts[0], parts[1], "legacy"
    if len(parts) == 4 and parts[2] in APIS:
        return parts[0], parts[1], parts[2]
    return None


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return {}
    return data.get("entries", {}) if isinstance(data.get("entries"), dict) else {}


def write_cache_entry(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Merge one entry into a cache file, atomically (tmp + os.replace)."""
    entries = _read_cache(path)
    entries[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": CACHE_FORMAT, "entries": dict(sorted(entries.items()))}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".timings-", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def cached_timings(backend: str, target: str, api: str | None = None) -> dict[str, float] | None:
    """Reference timings for this (backend, target, API, tool version) from the package or user cache."""
    api = api_or_default(api)
    key = cache_key(backend, target, api)
    ref = reference_fingerprint(api)
    for path in (PACKAGE_CACHE, user_cache_file()):
        entry = _read_cache(path).get(key)
        if entry and isinstance(entry.get("timings_us"), dict):
            if ref is not None and entry.get("reference") not in (None, ref):
                continue  # the staff kernels changed since: their latencies must be measured again
            return {k: float(v) for k, v in entry["timings_us"].items()}
    return None


def _stale_timings(backend: str, target: str, api: str) -> tuple[str, dict[str, float]] | None:
    """The newest entry for this backend, target and API under another tool version (last resort)."""
    best = None
    for path in (PACKAGE_CACHE, user_cache_file()):
        for key, entry in _read_cache(path).items():
            if _key_fields(key) == (backend, target, api) and isinstance(entry.get("timings_us"), dict):
                stamp = str(entry.get("created", ""))
                if best is None or stamp > best[0]:
                    best = (stamp, key, entry["timings_us"])
    return (best[1], {k: float(v) for k, v in best[2].items()}) if best else None


@functools.lru_cache(maxsize=16)
def reference_timings(backend: str, target: str, api: str | None = None) -> dict[str, float]:
    """Reference timings from the caches, else the newest entry of another tool version, else the other API's
    staff kernel's (each with a warning), else {} (the callers then warn and use the published targets).

    Never measures anything: computing missing timings is grader/calibrate.py's job
    (:func:`grader.calibrate.ensure_reference_timings`), which callers that may calibrate use instead.
    """
    api = api_or_default(api)
    found = cached_timings(backend, target, api)
    if found is not None:
        return found
    stale = _stale_timings(backend, target, api)
    if stale is not None:
        warnings.warn(
            f"reference timings for {cache_key(backend, target, api)} are not cached; using the entry for {stale[0]}",
            stacklevel=2,
        )
        return stale[1]
    for other in (a for a in APIS if a != api):
        borrowed = cached_timings(backend, target, other)
        label = cache_key(backend, target, other)
        if borrowed is None and (stale := _stale_timings(backend, target, other)) is not None:
            label, borrowed = stale
        if borrowed is not None:
            warnings.warn(
                f"no reference timings of the {api} API's staff kernels for {backend}/{target}; timing against the "
                f"{other} API's ({label}): run `python -m grader calibrate`",
                stacklevel=2,
            )
            return borrowed
    return {}


def reference_threshold(
    key: str,
    backend: str,
    target: str,
    hardware_us: float,
    *,
    factor: float = THRESHOLD_FACTOR,
    timings: Mapping[str, float] | None = None,
    basis: str = "published",
    api: str | None = None,
) -> float:
    """The single latency target of a test whose rubric thresholds name a reference-timings ``key`` (the transpose
    extra credit): the hardware target itself (``basis="published"``, see the module docstring), else ``factor``
    x the modelled latency of the staff kernel stored under ``key``."""
    if basis not in BASES:
        raise ValueError(f"reference_threshold: basis must be one of {BASES}, got {basis!r}")
    if backend == "neuron" or (basis == "published" and hardware_us > 0):
        return float(hardware_us)
    ref = (reference_timings(backend, target, api) if timings is None else timings).get(key)
    if ref is None:
        warnings.warn(f"no modelled reference latency for {key}; using the hardware target", stacklevel=2)
        return float(hardware_us)
    return factor * ref


def credit_tier(latency_us: float, relaxed_us: float, optimized_us: float, tiers: int = 2) -> str:
    """Which tier a latency earns: "full" at or below the optimized target, "partial" at or below the relaxed
    one (only with two tiers), else "none".  The one place the rubric's tier rule lives (the standalone part-2
    harness keeps its own copy, as it must run without the grader)."""
    if latency_us <= optimized_us:
        return "full"
    if tiers > 1 and latency_us <= relaxed_us:
        return "partial"
    return "none"


def boundary_distance(latency_us: float, relaxed_us: float, optimized_us: float, tiers: int = 2) -> float:
    """Relative distance of a latency from the nearest tier boundary, ``min |latency / target - 1|``: how far off
    a modelled latency would have to be for the credit to change."""
    targets = [t for t in (optimized_us, relaxed_us if tiers > 1 else 0.0) if t > 0]
    return min((abs(latency_us / t - 1.0) for t in targets), default=float("inf"))


def describe_entry(timings: dict[str, float], api: str | None = None) -> dict[str, Any]:
    api = api_or_default(api)
    return {
        "api": api,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reference": reference_fingerprint(api),
        "timings_us": timings,
    }
