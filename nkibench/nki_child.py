"""Compiles and runs one ``nki.jit`` kernel with NumPy inputs, in its own process: ``python nki_child.py JOB``.

Runs in the NKI environment (the interpreter of the scripts).  It is a separate process for two documented
reasons: ``NKI_ARTIFACTS_DIR`` is read when ``nki`` is imported ("must be set before importing nki",
aws-neuron-sdk neuron-runtime/nrtpy/nrtpy-troubleshooting.rst, "NEFF file not found after compilation"), so a
fresh process per compile gives each kernel its own artifacts directory and its own ``kernel.neff``; and "once a
NeuronCore is reserved for a process, it cannot be used by another process at all, until the process reserving
that NeuronCore is terminated" (neuron-runtime/guides/configuration-guide.rst, "NeuronCore allocation"), so the
runtime that executes the kernel here must be gone before nrtpy times the NEFF.

Calling an ``nki.jit`` kernel with ``np.ndarray`` arguments "compiles and executes standalone kernel, without a
framework" (nki.jit, nki/api/nki/__init__.py); the NEFF lands in ``$NKI_ARTIFACTS_DIR`` (the nrtpy tutorial
"Test and debug a NKI kernel end-to-end", Step 2).  Only the standard library, NumPy and ``nki`` are imported.

JOB (JSON): kernel_file, kernel_name, artifacts_dir, args / kwargs (each value {"npy": path} or {"value": x}),
simulate (run ``nki.simulate(kernel)`` on the CPU instead), outputs_dir, result (where to write the answer).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback


def _write(path: str, doc: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def _value(spec: dict, np):
    return np.load(spec["npy"], allow_pickle=False) if "npy" in spec else spec["value"]


def main(job_path: str) -> int:
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    result_path = job["result"]
    stage = "importing nki"
    try:
        os.environ["NKI_ARTIFACTS_DIR"] = job["artifacts_dir"]  # before `import nki`: read at import time
        import nki
        import numpy as np

        if getattr(nki, "__nkisim_fallback__", False) or "nkisim" in (getattr(nki, "__file__", "") or ""):
            raise ImportError("`import nki` resolved to nkisim here, not AWS's nki package")
        stage = "importing the kernel file"
        path = job["kernel_file"]
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        spec = importlib.util.spec_from_file_location(f"_nkibench_kernel_{os.getpid()}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        kernel = getattr(module, job["kernel_name"], None)
        if not callable(kernel):
            raise LookupError(f"{path} defines no top-level kernel {job['kernel_name']!r}")
        args = [_value(a, np) for a in job["args"]]
        kwargs = {k: _value(v, np) for k, v in job["kwargs"].items()}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it loudly
        _write(result_path, {"ok": False, "kind": "setup", "stage": stage, "type": type(exc).__name__,
                             "message": str(exc), "traceback": traceback.format_exc()})
        return 1
    try:
        out = nki.simulate(kernel)(*args, **kwargs) if job.get("simulate") else kernel(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the kernel's own error (compile or run): the student's to fix
        kind = "exit" if isinstance(exc, SystemExit) else "kernel"
        _write(result_path, {"ok": False, "kind": kind, "stage": "running the kernel", "type": type(exc).__name__,
                             "message": str(exc) if kind == "kernel" else repr(exc.code),
                             "traceback": traceback.format_exc()})
        return 1
    outs = [] if out is None else list(out) if isinstance(out, (tuple, list)) else [out]
    saved = []
    for i, o in enumerate(outs):
        p = os.path.join(job["outputs_dir"], f"out{i}.npy")
        np.save(p, np.asarray(o), allow_pickle=False)
        saved.append(p)
    _write(result_path, {"ok": True, "outputs": saved, "tuple": isinstance(out, (tuple, list)),
                         "nki_version": str(getattr(nki, "__version__", ""))})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
