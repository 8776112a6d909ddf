"""Latency targets: threshold_factor x the staff reference kernels' latency on the same backend and target.

On nkisim the reference latencies are the performance model's numbers for grader/reference (optimized) and
grader/reference/relaxed (an unoptimised but reasonable kernel), computed once per (backend, target, tool
version) and cached in ``grader/reference_timings.json`` (committed; ``python -m grader calibrate`` rewrites
it) or, when that file has no entry for this tool version, in a per-user cache.  On real hardware the course's
published trn2 targets apply (they already include the 120 %).

Tool version = nkisim.__version__ + a hash of nkisim's sources (cost model and front end): any change to either
invalidates the cached reference timings; so does a change of the staff kernels (their hash is stored in the
entry and checked wherever they are present).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

PACKAGE_CACHE = Path(__file__).with_name("reference_timings.json")
CACHE_FORMAT = 1

# Fall 2025 course harness (part2/test_harness.py, trn2): (dtype, image height) -> (relaxed us, optimized us).
PUBLISHED_TRN2: dict[tuple[str, int], tuple[float, float]] = {
    ("float32", 224): (4964.0, 4596.0),
    ("float16", 224): (1365.0, 1002.0),
    ("float32", 32): (110.0, 110.0),
    ("float16", 32): (84.0, 84.0),
}
# Handout: transpose extra credit, 4096x4096 float32 under 700 us on hardware.
PUBLISHED_TRANSPOSE_US = 700.0
IMAGE_WIDTH = {224: 224, 32: 16}  # the course's image shapes: 224x224 and 32x16 (H x W)
THRESHOLD_FACTOR = 1.2  # the course's "120% of the reference kernel"; the rubric's threshold_factor overrides it


def user_cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "asst4-grader" / "reference_timings.json"


@functools.lru_cache(maxsize=1)
def perf_fingerprint() -> str:
    """Hash of every nkisim source file: the cost model's constants and formulas, and the front end that decides
    which instructions (DMA descriptors, engines, shapes) a kernel's trace holds.

    The calibration corpus (nkisim/calibration/corpus: staff-only kernels, left out of the student release) is
    not part of the model, and hashing it would give the release a different fingerprint from the staff repo."""
    import nkisim

    root = Path(nkisim.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        if "__pycache__" not in f.parts and f.relative_to(root).parts[:2] != ("calibration", "corpus"):
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def reference_fingerprint() -> str | None:
    """Hash of the staff kernels the targets come from (None where they are not shipped, e.g. the release)."""
    from grader.calibrate import reference_dir

    ref = reference_dir()
    files = [
        ref / "part1" / "kernels.py",
        ref / "part2" / "conv2d.py",
        ref / "relaxed" / "part2" / "conv2d.py",
        ref / "relaxed" / "conv2d.py",
    ]
    if not files[1].exists():
        return None
    h = hashlib.sha256()
    for f in files:
        if f.exists():
            h.update(f.relative_to(ref).as_posix().encode() + b"\0")
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def tool_version() -> str:
    import nkisim

    return f"nkisim-{nkisim.__version__}+{perf_fingerprint()}"


def cache_key(backend: str, target: str) -> str:
    return f"{backend}|{target}|{tool_version()}"


def conv_key(dtype: str, image_h: int, image_w: int, pool: int, variant: str) -> str:
    return f"conv2d:{dtype}:{image_h}x{image_w}:pool{pool}:{variant}"


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


def cached_timings(backend: str, target: str) -> dict[str, float] | None:
    """Reference timings for this (backend, target, tool version) from the package or user cache."""
    key = cache_key(backend, target)
    ref = reference_fingerprint()
    for path in (PACKAGE_CACHE, user_cache_file()):
        entry = _read_cache(path).get(key)
        if entry and isinstance(entry.get("timings_us"), dict):
            if ref is not None and entry.get("reference") not in (None, ref):
                continue  # the staff kernels changed since: their latencies must be measured again
            return {k: float(v) for k, v in entry["timings_us"].items()}
    return None


def _stale_timings(backend: str, target: str) -> tuple[str, dict[str, float]] | None:
    """The newest entry for this backend and target under another tool version (last resort)."""
    best = None
    for path in (PACKAGE_CACHE, user_cache_file()):
        for key, entry in _read_cache(path).items():
            if key.startswith(f"{backend}|{target}|") and isinstance(entry.get("timings_us"), dict):
                stamp = str(entry.get("created", ""))
                if best is None or stamp > best[0]:
                    best = (stamp, key, entry["timings_us"])
    return (best[1], {k: float(v) for k, v in best[2].items()}) if best else None


def reference_available() -> bool:
    from grader.calibrate import reference_dir

    return (reference_dir() / "part2" / "conv2d.py").exists()


_COMPUTE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=8)
def reference_timings(backend: str, target: str) -> dict[str, float]:
    """Cached reference timings; computed (and stored in the user cache) when missing and possible."""
    with _COMPUTE_LOCK:  # tests graded in parallel threads must not calibrate twice
        return _reference_timings(backend, target)


def _reference_timings(backend: str, target: str) -> dict[str, float]:
    found = cached_timings(backend, target)
    if found is not None:
        return found
    if reference_available():
        import fcntl

        from grader.calibrate import calibrate

        cache = user_cache_file()
        cache.parent.mkdir(parents=True, exist_ok=True)
        # Batch workers (other processes) may miss the cache at the same moment: one computes, the others wait.
        with open(cache.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = cached_timings(backend, target)
            if found is not None:
                return found
            print(
                f"[grader] no reference timings for {cache_key(backend, target)}; computing them once ...",
                file=sys.stderr,
            )
            return calibrate(backend=backend, target=target, cache_file=cache)
    stale = _stale_timings(backend, target)
    if stale is not None:
        warnings.warn(
            f"reference timings for {cache_key(backend, target)} are not cached and the staff reference is not "
            f"available here; using the entry for {stale[0]}",
            stacklevel=2,
        )
        return stale[1]
    return {}


def conv_thresholds(
    dtype: str,
    image_h: int,
    pool: int,
    backend: str = "nkisim",
    target: str = "trn2",
    *,
    factor: float = THRESHOLD_FACTOR,
) -> tuple[float, float]:
    """(relaxed_us, optimized_us) latency targets for the conv2d performance test of this configuration.

    Full credit at or below ``optimized_us``, partial credit at or below ``relaxed_us``.  The extra-credit
    small-image tests have a single target (relaxed == optimized), as in the course harness.
    """
    dtype = str(dtype)
    if dtype not in ("float32", "float16"):
        raise ValueError(f"conv_thresholds: dtype must be 'float32' or 'float16', got {dtype!r}")
    if image_h not in IMAGE_WIDTH:
        raise ValueError(f"conv_thresholds: image_h must be one of {sorted(IMAGE_WIDTH)}, got {image_h}")
    if pool not in (1, 2):
        raise ValueError(f"conv_thresholds: pool must be 1 or 2, got {pool}")
    if backend == "neuron":
        return PUBLISHED_TRN2[(dtype, image_h)]
    if backend != "nkisim":
        raise ValueError(f"conv_thresholds: backend must be 'nkisim' or 'neuron', got {backend!r}")
    timings = reference_timings(backend, target)
    width = IMAGE_WIDTH[image_h]
    opt = timings.get(conv_key(dtype, image_h, width, pool, "optimized"))
    rel = timings.get(conv_key(dtype, image_h, width, pool, "relaxed"))
    if opt is None and rel is not None:
        # The optimized staff kernel cannot run on this target (e.g. trn1 lacks an instruction it uses): the
        # relaxed kernel's latency is the only same-backend measure left; one tier.
        warnings.warn(
            f"no modelled latency of the optimized reference for conv2d {dtype} {image_h}x{width} pool {pool} on "
            f"{target}; using the relaxed reference's",
            stacklevel=2,
        )
        return factor * rel, factor * rel
    if opt is None:
        warnings.warn(
            f"no modelled reference latency for conv2d {dtype} {image_h}x{width} pool {pool} on {target}; "
            "using the course's published trn2 targets",
            stacklevel=2,
        )
        return PUBLISHED_TRN2[(dtype, image_h)]
    optimized = factor * opt
    if image_h != 224 or rel is None:
        return optimized, optimized
    return max(factor * rel, optimized), optimized


def transpose_threshold(
    key: str, backend: str, target: str, hardware_us: float, *, factor: float = THRESHOLD_FACTOR
) -> float:
    """Single latency target of the transpose extra credit (see the rubric comment for the choice)."""
    if backend == "neuron":
        return float(hardware_us)
    ref = reference_timings(backend, target).get(key)
    if ref is None:
        warnings.warn(f"no modelled reference latency for {key}; using the hardware target", stacklevel=2)
        return float(hardware_us)
    return factor * ref


def describe_entry(timings: dict[str, float]) -> dict[str, Any]:
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reference": reference_fingerprint(),
        "timings_us": timings,
    }
