"""Trainium with the current SDK (``import nki``, NKI 0.4+, Neuron SDK 2.30+): compile through nki.jit keeping the
NEFF, time it with the Neuron runtime's Python API (nrtpy), profile it with Neuron Explorer.

The current ``nki`` has no nki.benchmark / nki.profile (NKI release notes, 2.27: "nki.benchmark and nki.profile
are not available"; 2.32: they raise a message naming the unsupported API).  The documented route, step by step:

1. compile: call the ``nki.jit`` kernel with NumPy arrays, with ``NKI_ARTIFACTS_DIR`` set before ``nki`` is
   imported; the NEFF is ``$NKI_ARTIFACTS_DIR/kernel.neff`` (nrtpy tutorial "Test and debug a NKI kernel
   end-to-end", Step 2; nrtpy troubleshooting "NEFF file not found after compilation").  Done in a child process
   per compile (nkibench/nki_child.py says why), which also gives the kernel's outputs for correctness checks.
2. time: ``NrtpyModel.benchmark(..., mode="device")`` in the nrtpy environment (nkibench/nrt_child.py), which
   cannot be the NKI environment ("cannot be installed in the same Python environment", nrtpy index,
   Prerequisites): its interpreter comes from ``NRTPY_PYTHON``, or is this one if nrtpy imports here.
3. profile: ``neuron-explorer capture`` (nkibench/capture.py).

Each step runs after the previous process has ended: a NeuronCore reserved by one process cannot be used by
another until it exits (neuron-runtime/guides/configuration-guide.rst, "NeuronCore allocation").  Anything
missing fails with HardwareError / ProfileError naming the step; no latency is ever made up.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nkibench import envcheck
from nkibench.backends.base import Backend, ProfileRequest, call_kernel, check_counts
from nkibench.capture import capture
from nkibench.detect import NRTPY_PYTHON_ENV, _dist_version, kernel_function
from nkibench.errors import HardwareError, KernelError, ProfileError
from nkibench.labels import NO_DGE_SWITCH
from nkibench.result import Measurement, Timing, nearest_rank

HERE = Path(__file__).resolve().parent.parent
COMPILE_TIMEOUT_S = 3600
TIMING_TIMEOUT_S = 1800


def _jsonable_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


class NrtBackend(Backend):
    name = "neuron-nki"

    def __init__(self, api: str = "nki") -> None:
        super().__init__(api)
        self._work = Path(tempfile.mkdtemp(prefix="nkibench-"))
        atexit.register(shutil.rmtree, self._work, True)
        self._neffs: dict[str, str] = {}  # compile key -> kept NEFF
        self._nrtpy_version = ""
        self._count = 0

    # -- labels ------------------------------------------------------------------------------------------------
    def versions(self) -> dict[str, str]:
        out = {"nki": _dist_version("nki")}
        if self._nrtpy_version:
            out["nrtpy"] = self._nrtpy_version
        return out

    def target(self) -> str:
        return envcheck.target_from_env(default="instance")

    def label(self) -> str:
        return f"Trainium (nki {_dist_version('nki')})"

    # -- launch ------------------------------------------------------------------------------------------------
    def launch(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, simulate: bool = False):
        if simulate:  # nki.simulate runs on the CPU: no device, no NEFF (nki/api/nki/__init__.py, simulate)
            import nki

            return call_kernel(lambda: nki.simulate(kernel)(*args, **dict(kwargs or {})))
        envcheck.check_runtime_env(api="nki")
        outputs, _neff, _inputs = self._compile(kernel, tuple(args), dict(kwargs or {}))
        return outputs

    # -- measure -----------------------------------------------------------------------------------------------
    def measure(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, warmup: int,
                iterations: int, profile: ProfileRequest | None = None) -> Measurement:
        warmup, iterations = check_counts(warmup, iterations)
        if profile is not None and profile.dge_off:
            raise HardwareError("a DGE-off profile was asked for, but the current NKI API has no compiler switch "
                                "for it (nki.jit's compile_config has none; dge_mode is set per dma_copy)",
                                step="profiling", hint="profile without dge_off (the default)")
        envcheck.check_runtime_env(api="nki")
        args, kw = tuple(args), dict(kwargs or {})
        neff = self._neffs.get(self._key(kernel, args, kw))
        if neff is None:  # not compiled for these shapes yet (a launch before usually has)
            _outputs, neff, inputs = self._compile(kernel, args, kw)
        else:  # this call's values, saved beside the kept NEFF, for the runtime and the profiler
            inputs = self._encode(self._job_dir("inputs"), kernel, args, kw)[1]
        durations = self._time(neff, inputs, warmup, iterations)
        samples = tuple(d * 1000.0 for d in durations)
        timing = Timing(
            p50_us=nearest_rank(samples, 50), p99_us=nearest_rank(samples, 99), warmup=warmup, iterations=iterations,
            backend=self.name, label=self.label(), target=self.target(), api=self.api, versions=self.versions(),
            dge_disabled=False, profiled=False, measured=True, samples_us=samples,
        )
        if profile is None:
            return Measurement(timing)
        shutil.copyfile(neff, f"{profile.stem}.neff")
        try:
            ntff, note = capture(f"{profile.stem}.neff", profile.stem, inputs)
        except ProfileError as exc:
            exc.measurement = Measurement(timing)
            raise
        files = (os.path.abspath(f"{profile.stem}.neff"), ntff)
        notes = [NO_DGE_SWITCH, f"View it with: neuron-explorer view -n {profile.stem}.neff -s "
                 f"{profile.stem}.ntff (or upload both files in the Neuron Explorer UI)"]
        return Measurement(timing, None, files, tuple(([note] if note else []) + notes))

    # -- steps -------------------------------------------------------------------------------------------------
    def _key(self, kernel, args: tuple, kwargs: dict) -> str:
        """What a NEFF depends on: the kernel's file and name, argument shapes and dtypes, constant values."""
        fn = kernel_function(kernel)
        path = getattr(getattr(fn, "__code__", None), "co_filename", "")
        h = hashlib.sha256()
        h.update(f"{path}\0{os.stat(path).st_mtime_ns if os.path.isfile(path) else 0}\0"
                 f"{getattr(fn, '__qualname__', '')}".encode())
        for item in (*map(_shape_of, args), *((k, _shape_of(v)) for k, v in sorted(kwargs.items()))):
            h.update(repr(item).encode())
        return h.hexdigest()

    def _job_dir(self, kind: str) -> Path:
        self._count += 1
        path = self._work / f"{kind}{self._count}"
        path.mkdir(parents=True)
        return path

    def _reference(self, kernel) -> tuple[str, str, inspect.Signature]:
        fn = kernel_function(kernel)
        if fn is None:
            raise HardwareError(f"{kernel!r} is not a Python function or an nki.jit kernel of one", step="compiling")
        name, path = fn.__qualname__, fn.__code__.co_filename
        if "." in name or not os.path.isfile(path):
            raise HardwareError(
                f"{name} is not a top-level function of a file", step="compiling",
                hint="on Trainium kernels compile in a separate process, which imports them from their file by name")
        return path, name, inspect.signature(fn)

    def _encode(self, job_dir: Path, kernel, args: tuple, kwargs: dict) -> tuple[dict, dict[str, str]]:
        """The call as the child processes take it: arrays saved as .npy (named after the kernel's parameters,
        which name the NEFF's inputs), other arguments as JSON constants.  Returns (call, {param: npy path})."""
        import numpy as np

        _path, name, sig = self._reference(kernel)
        try:
            names = list(sig.bind(*args, **kwargs).arguments)
        except TypeError as exc:
            raise KernelError("TypeError", f"{name}() {exc}") from None
        inputs: dict[str, str] = {}

        def encode(pname: str, value: Any) -> dict:
            if hasattr(value, "__array__") and hasattr(value, "dtype"):
                inputs[pname] = str(job_dir / f"in_{pname}.npy")
                np.save(inputs[pname], np.asarray(value), allow_pickle=False)
                return {"npy": inputs[pname]}
            if _jsonable_scalar(value):
                return {"value": value}
            raise HardwareError(f"argument {pname}={value!r} is neither an array nor a number/string",
                                step="compiling", hint="NEFF inputs are arrays; other arguments must be constants")

        call = {"args": [encode(names[i], v) for i, v in enumerate(args)],
                "kwargs": {k: encode(k, v) for k, v in kwargs.items()}}
        return call, inputs

    def _compile(self, kernel, args: tuple, kwargs: dict) -> tuple[Any, str, dict[str, str]]:
        path, name, _sig = self._reference(kernel)
        job_dir = self._job_dir("compile")
        (job_dir / "outputs").mkdir()
        artifacts = job_dir / "artifacts"
        artifacts.mkdir()
        call, inputs = self._encode(job_dir, kernel, args, kwargs)
        job = {"kernel_file": path, "kernel_name": name, "artifacts_dir": str(artifacts), **call, "simulate": False,
               "outputs_dir": str(job_dir / "outputs"), "result": str(job_dir / "result.json")}
        result = self._run_child("compiling", [sys.executable, str(HERE / "nki_child.py")], job, job_dir,
                                 COMPILE_TIMEOUT_S, cwd=job_dir)
        if not result.get("ok"):
            self._raise_child_error("compiling", result)
        neff = _find_neff(artifacts)
        if neff is None:
            raise HardwareError(
                f"the kernel ran but no NEFF was written under NKI_ARTIFACTS_DIR={artifacts}",
                step="compiling", hint="is the kernel decorated with @nki.jit (from `import nki`)? Only nki.jit "
                                       "kernels called with NumPy arrays compile to kernel.neff")
        kept = str(job_dir / "kernel.neff")
        shutil.copyfile(neff, kept)
        self._neffs[self._key(kernel, args, kwargs)] = kept
        import numpy as np

        outs = [np.load(p, allow_pickle=False) for p in result.get("outputs", [])]
        outputs = tuple(outs) if result.get("tuple") else (outs[0] if outs else None)
        return outputs, kept, inputs

    def _nrtpy_python(self) -> str:
        configured = os.environ.get(NRTPY_PYTHON_ENV, "").strip()
        if configured:
            exe = shutil.which(configured) or configured
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                raise HardwareError(f"{NRTPY_PYTHON_ENV}={configured} is not an executable interpreter",
                                    step="timing", hint="point it at the nrtpy environment's python, e.g. "
                                                        "~/nrtpy_venv/bin/python")
            return exe
        if importlib.util.find_spec("nrtpy") is not None:
            return sys.executable
        raise HardwareError(
            "the Neuron runtime's Python API (nrtpy) is not importable here and NRTPY_PYTHON is not set",
            step="timing",
            hint="nrtpy and nki cannot share one environment (nrtpy docs, Prerequisites): create the nrtpy venv "
                 "(python3 -m venv ~/nrtpy_venv; ~/nrtpy_venv/bin/pip install numpy nrtpy "
                 "--extra-index-url=https://pip.repos.neuron.amazonaws.com) and export "
                 f"{NRTPY_PYTHON_ENV}=~/nrtpy_venv/bin/python (handouts/setup-trainium.md)")

    def _time(self, neff: str, inputs: dict[str, str], warmup: int, iterations: int) -> list[float]:
        python = self._nrtpy_python()
        job_dir = self._job_dir("time")
        job = {"neff": neff, "inputs": inputs, "warmup": warmup, "iterations": iterations,
               "result": str(job_dir / "result.json")}
        result = self._run_child("timing", [python, str(HERE / "nrt_child.py")], job, job_dir, TIMING_TIMEOUT_S)
        if not result.get("ok"):
            self._raise_child_error("timing", result)
        self._nrtpy_version = str(result.get("nrtpy_version") or "unknown version")
        durations = result.get("durations_ms")
        if not isinstance(durations, list) or len(durations) < iterations:
            raise HardwareError(f"the runtime reported {len(durations or [])} timings for {iterations} iterations",
                                step="timing", hint="nothing is reported without a full set of device timings")
        if len(durations) > iterations:
            raise HardwareError(
                f"the runtime reported {len(durations)} device executions for {iterations} iterations: the NEFF "
                "runs as several subgraphs (nrtpy troubleshooting, 'Device benchmark shows more iterations')",
                step="timing", hint="a single nki.jit kernel should run as one execution; report this NEFF")
        bad = [d for d in durations if not (isinstance(d, (int, float)) and d > 0 and d == d and d != float("inf"))]
        if bad:
            raise HardwareError(f"the runtime reported non-positive or invalid durations {bad[:3]} (ms)",
                                step="timing")
        return [float(d) for d in durations]

    @staticmethod
    def _run_child(step: str, cmd: list[str], job: dict, job_dir: Path, timeout: int, cwd: Path | None = None) -> dict:
        job_path = job_dir / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        try:
            proc = subprocess.run([*cmd, str(job_path)], cwd=cwd, timeout=timeout)
        except FileNotFoundError as exc:
            raise HardwareError(f"cannot start {cmd[0]}: {exc.strerror}", step=step) from None
        except subprocess.TimeoutExpired:
            raise HardwareError(f"gave up after {timeout} s", step=step,
                                hint="a kernel that hangs on the device is stopped by NEURON_RT_EXEC_TIMEOUT "
                                     "(30 s by default)") from None
        result_path = Path(job["result"])
        if not result_path.is_file():
            raise HardwareError(f"the {step} process ({' '.join(cmd)}) exited with status {proc.returncode} "
                                "without a result", step=step, hint="its own output above says why")
        return json.loads(result_path.read_text(encoding="utf-8"))

    @staticmethod
    def _raise_child_error(step: str, result: dict) -> None:
        kind = result.get("kind")
        if kind == "kernel":
            raise KernelError(result.get("type", "Error"), result.get("message", ""), result.get("traceback", ""))
        if kind == "exit":
            raise RuntimeError(f"the kernel called sys.exit({result.get('message')}) instead of returning its output")
        where = f" ({result['stage']})" if result.get("stage") else ""
        message = f"{result.get('type') or kind}: {result.get('message', '')}".strip(": ")
        raise HardwareError(f"{message}{where}", step=step, hint=result.get("hint", ""))


def _shape_of(v: Any) -> Any:
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return ("array", tuple(v.shape), str(v.dtype))
    return ("value", v)


def _find_neff(artifacts: Path) -> str | None:
    """kernel.neff at the top of the artifacts directory (nrtpy troubleshooting), else the newest NEFF below it."""
    top = artifacts / "kernel.neff"
    if top.is_file():
        return str(top)
    found = sorted(artifacts.rglob("*.neff"), key=lambda p: p.stat().st_mtime_ns)
    return str(found[-1]) if found else None
