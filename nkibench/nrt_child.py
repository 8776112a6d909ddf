"""Times one NEFF on a NeuronCore with the Neuron runtime's Python API: ``python nrt_child.py JOB``.

Runs in the nrtpy environment: "the standalone nrtpy wheel and the nki wheel cannot be installed in the same
Python environment ... Use your NKI environment to compile kernels to NEFFs, and a separate nrtpy environment to
load and execute them" (aws-neuron-sdk neuron-runtime/nrtpy/index.rst, Prerequisites).  So this file imports
only the standard library, NumPy and nrtpy, and is run by path by that environment's interpreter.

It follows the nrtpy tutorial "Validate, benchmark, and trace a kernel" (neuron-runtime/nrtpy/
tutorial-validate-benchmark.rst, Steps 1 and 3) and the model API (neuron-runtime/nrtpy/model.rst):
``NrtpyModel.load_from_neff(path)``; inputs as ``NrtpyTensor.from_numpy(array, name=...)`` keyed by the NEFF's
input names (``model.input_tensors_info``); ``model.benchmark(inputs=..., warmup_iter=W, benchmark_iter=N,
mode="device")`` ("NeuronCore execution time via device-side tracing. Most accurate for kernel timing"), whose
``BenchmarkResult`` holds ``durations_ms`` (per iteration), ``iterations`` and ``warmup_iterations``.

JOB (JSON): neff, inputs {name: npy path}, warmup, iterations, result (where to write the answer).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

LIBNRT_HINT = (
    "nrtpy needs libnrt: export LD_LIBRARY_PATH=/opt/aws/neuron/lib:$LD_LIBRARY_PATH, and install "
    "aws-neuronx-runtime-lib if /opt/aws/neuron/lib/libnrt.so* is missing (nrtpy troubleshooting, "
    "'import nrtpy fails with libnrt.so.1')"
)


def _write(path: str, doc: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _fail(path: str, kind: str, exc: BaseException | None, message: str = "", hint: str = "") -> int:
    _write(path, {"ok": False, "kind": kind, "type": type(exc).__name__ if exc else "", "hint": hint,
                  "message": message or str(exc), "traceback": traceback.format_exc() if exc else ""})
    return 1


def main(job_path: str) -> int:
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    out = job["result"]
    try:
        import nrtpy
        import numpy as np
    except ImportError as exc:
        hint = LIBNRT_HINT if "libnrt" in str(exc) else (
            "install NumPy and nrtpy in the nrtpy environment: pip install numpy nrtpy "
            "--extra-index-url=https://pip.repos.neuron.amazonaws.com (nrtpy getting started)")
        return _fail(out, "runtime-missing", exc, hint=hint)
    except OSError as exc:
        return _fail(out, "runtime-missing", exc, hint=LIBNRT_HINT)
    version = str(getattr(nrtpy, "__version__", "") or _dist_version())
    try:
        model = nrtpy.NrtpyModel.load_from_neff(job["neff"])
    except Exception as exc:  # noqa: BLE001 - NrtError and friends: reported with the runtime's own text
        return _fail(out, "load", exc, hint=(
            "NRT_FAILURE(6) on load means the NEFF was compiled for another target (set "
            "NEURON_PLATFORM_TARGET_OVERRIDE to this instance's, e.g. trn2); a NeuronCore held by another process "
            "also fails here (nrtpy troubleshooting, 'Model loading issues')"))
    expected = dict(model.input_tensors_info)
    given = dict(job["inputs"])
    if set(expected) != set(given):
        return _fail(out, "inputs", None, message=(
            f"the NEFF's inputs are {sorted(expected)} but the kernel's array arguments are {sorted(given)}"),
            hint="the NEFF names its inputs after the kernel's parameters; pass every tensor as an argument")
    tensors = {}
    for name, npy in given.items():
        array = np.load(npy, allow_pickle=False)
        info = expected[name]
        shape = tuple(int(d) for d in getattr(info, "shape", ()) or ())
        if shape and shape != tuple(array.shape):
            return _fail(out, "inputs", None, message=f"input {name}: the NEFF expects shape {shape}, got "
                                                      f"{tuple(array.shape)}")
        tensors[name] = nrtpy.NrtpyTensor.from_numpy(array, name=name)
    try:
        stats = model.benchmark(inputs=tensors, warmup_iter=int(job["warmup"]), benchmark_iter=int(job["iterations"]),
                                mode="device")
    except Exception as exc:  # noqa: BLE001
        return _fail(out, "benchmark", exc, hint=(
            "device-mode benchmarking needs a NeuronCore with system tracing: Neuron SDK 2.32 or later, and no "
            "other process holding the NeuronCore (nrtpy troubleshooting, 'Benchmark raises RuntimeError in "
            "device mode')"))
    _write(out, {"ok": True, "durations_ms": [float(d) for d in stats.durations_ms],
                 "iterations": int(stats.iterations), "warmup_iterations": int(stats.warmup_iterations),
                 "mean_ms": float(stats.mean_ms), "nrtpy_version": version})
    return 0


def _dist_version() -> str:
    try:
        from importlib.metadata import version

        return version("nrtpy")
    except Exception:  # noqa: BLE001
        return "unknown version"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
