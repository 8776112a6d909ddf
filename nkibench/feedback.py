"""The hardware feedback loop: every kernel timed on Trainium is also estimated by nkisim, and the pair is kept.

Where a course has Trainium, the grader and the student scripts time kernels on it (``nkibench.measure``, the
grader's hardware child).  Each such timing appends one record to ``pairs.jsonl`` in :func:`pairs_dir`: the kernel
(a copy of its source file, content-addressed under ``sources/``, and the function name), its inputs' shapes and
dtypes, the target, the measured p99 (``nc_latency``) and whether the run was compiled with DGE off, the toolchain
versions, and nkisim's estimate of the same kernel made right then in a separate process (the hardware backends
never import nkisim: ``python -m nkisim.calibration.feedback estimate``).  ``python -m nkisim.calibration.feedback
export`` turns the records into calibration rows for ``python -m nkisim.calibrate --pairs`` and prints the
agreement report (docs/grading.md, "Hardware feedback").

Recording never changes or fails a timing: any problem is one line on stderr.  ``NKIBENCH_RECORD=0`` turns it off;
``NKIBENCH_PAIRS_DIR`` moves the directory (default ``~/.cache/nkibench/pairs``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RECORD_ENV = "NKIBENCH_RECORD"
DIR_ENV = "NKIBENCH_PAIRS_DIR"
TIMEOUT_ENV = "NKIBENCH_ESTIMATE_TIMEOUT"
PAIRS_FILE = "pairs.jsonl"


def enabled() -> bool:
    return os.environ.get(RECORD_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def pairs_dir() -> Path:
    d = os.environ.get(DIR_ENV)
    return Path(d) if d else Path.home() / ".cache" / "nkibench" / "pairs"


# The instance type names the NeuronCore generation when NEURON_PLATFORM_TARGET_OVERRIDE does not (the hardware
# backends then report "instance"): trn1.* and inf2.* are NeuronCore-v2, trn2.* NeuronCore-v3.
_DMI = "/sys/devices/virtual/dmi/id/product_name"


def instance_target(reported: str) -> str:
    if reported in ("trn1", "trn2", "trn3"):
        return reported
    try:
        product = Path(_DMI).read_text(encoding="utf-8").strip().lower()
    except OSError:
        return reported
    for prefix, target in (("trn1", "trn1"), ("inf2", "trn1"), ("trn2", "trn2"), ("trn3", "trn3")):
        if product.startswith(prefix):
            return target
    return reported


def _unwrap(kernel: Any) -> Any:
    """The Python function behind a kernel object (nki.jit wrappers of either toolchain keep it somewhere)."""
    fn = kernel
    for _ in range(8):
        nxt = None
        for attr in ("__wrapped__", "func", "fn", "_func", "kernel"):
            cand = getattr(fn, attr, None)
            if cand is not None and cand is not fn and callable(cand):
                nxt = cand
                break
        if nxt is None:
            break
        fn = nxt
    return fn


def _spec(value: Any) -> dict | None:
    """An input as the estimate needs it: an array's shape and dtype, or a JSON value."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return {"shape": [int(n) for n in shape], "dtype": str(dtype)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    return None


def describe(kernel: Any, args: tuple, kwargs: Mapping[str, Any] | None) -> dict | None:
    """The kernel and inputs of a timing, self-contained (the source is copied), or None if it cannot be."""
    fn = _unwrap(kernel)
    name = getattr(fn, "__name__", None)
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    if not name or not path or not os.path.isfile(path):
        return None
    return describe_source(Path(path).read_bytes(), os.path.abspath(path), name, args, kwargs)


def describe_source(source: bytes, filename: str, function: str, args, kwargs: Mapping[str, Any] | None
                    ) -> dict | None:
    """As :func:`describe`, from the kernel file's bytes (the grader has the student's file, not a function)."""
    specs = [_spec(a) for a in args]
    kw = {k: _spec(v) for k, v in (kwargs or {}).items()}
    if any(s is None for s in specs) or any(s is None for s in kw.values()):
        return None
    digest = hashlib.sha256(source).hexdigest()[:16]
    src_dir = pairs_dir() / "sources"
    src_dir.mkdir(parents=True, exist_ok=True)
    copy = src_dir / f"{digest}_{os.path.basename(filename)}"
    if not copy.exists():
        tmp = copy.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(source)
        os.replace(tmp, copy)
    return {"file": filename, "source": str(copy), "sha256": digest, "function": function, "args": specs,
            "kwargs": kw}


def estimate(rec: dict) -> dict:
    """nkisim's estimate of the recorded kernel, in a separate process: {"estimate_us": .., "nkisim": ..} or
    {"estimate_error": ..}."""
    timeout = float(os.environ.get(TIMEOUT_ENV, "900"))
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parents[1])  # nkisim lives beside nkibench in the course repository
    env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        proc = subprocess.run([sys.executable, "-m", "nkisim.calibration.feedback", "estimate"],
                              input=json.dumps(rec), capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"estimate_error": f"{type(exc).__name__}: {exc}"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"estimate_error": f"exit {proc.returncode}: {tail}"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"estimate_error": f"unreadable estimate: {lines[-1][:200]}"}


def record(kernel: Any, args: tuple, kwargs: Mapping[str, Any] | None, timing: Any, *, source: str) -> dict | None:
    """Append the pair (hardware timing, nkisim estimate) of one hardware timing (an nkibench ``Timing``); returns
    the record, or None when nothing was recorded (turned off, not hardware, a kernel without a source file).
    Never raises."""
    if not enabled() or not getattr(timing, "measured", False) or getattr(timing, "backend", "") == "nkisim":
        return None
    try:
        desc = describe(kernel, args, kwargs)
        if desc is None:
            return None
        return record_pair(desc, target=timing.target, api=timing.api, backend=timing.backend,
                           versions=dict(timing.versions), p99_us=float(timing.p99_us), p50_us=float(timing.p50_us),
                           dge_disabled=bool(timing.dge_disabled), iterations=int(timing.iterations), by=source)
    except Exception as exc:  # noqa: BLE001 - recording must never break a timing
        print(f"nkibench: hardware/nkisim pair not recorded: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def record_pair(desc: dict, *, target: str, api: str | None, backend: str, versions: Mapping[str, str],
                p99_us: float, p50_us: float | None = None, dge_disabled: bool = False, iterations: int | None = None,
                by: str) -> dict | None:
    """Append one pair for a kernel described by :func:`describe` / :func:`describe_source`.  Never raises."""
    if not enabled():
        return None
    try:
        rec = dict(desc)
        rec.update({
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "by": by,
            "target": instance_target(target),
            "api": api, "backend": backend, "versions": dict(versions), "metric": "nc_latency",
            "measured_us": float(p99_us), "p50_us": p50_us, "dge_disabled": bool(dge_disabled),
            "iterations": iterations,
        })
        rec.update(estimate(rec))
        path = pairs_dir() / PAIRS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:  # one write per line: concurrent appenders do not interleave
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        return rec
    except Exception as exc:  # noqa: BLE001 - recording must never break a timing
        print(f"nkibench: hardware/nkisim pair not recorded: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
