"""Trainium with the legacy toolchain (``neuronxcc.nki``, Neuron SDK <= 2.29): nki.baremetal and nki.benchmark.

The calls are the ones part1/run_benchmark.py and part2/test_harness.py always made (the course's own): an
ordinary run is ``nki.benchmark(kernel, warmup=W, iters=N)``; a profile run adds ``save_neff_name``,
``additional_compile_opt="--disable-dge"`` and either ``save_trace_name`` (nki.benchmark writes the NTFF: part 1,
which saves ``file.neff`` and renames it as the course did) or a ``neuron-profile capture`` of the saved NEFF
(part 2).  nki.benchmark "invokes neuron-bench to collect execution latency statistics"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.benchmark.html) and reports
``benchmark_result.nc_latency.get_latency_percentile(p)`` in microseconds.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import Any

from nkibench import envcheck
from nkibench.backends.base import Backend, ProfileRequest, call_kernel, check_counts, positive
from nkibench.detect import _dist_version, which
from nkibench.errors import HardwareError, ProfileError
from nkibench.labels import DGE_OFF_WHY
from nkibench.result import Measurement, Timing

DISABLE_DGE = "--disable-dge"


def _nki():
    import neuronxcc.nki as nki

    return nki


class LegacyNeuronBackend(Backend):
    name = "neuron-legacy"

    def versions(self) -> dict[str, str]:
        return {"neuronx-cc": _dist_version("neuronx-cc", "neuronxcc")}

    def target(self) -> str:
        return envcheck.target_from_env(default="instance")

    def label(self) -> str:
        return f"Trainium (neuronx-cc {self.versions()['neuronx-cc']})"

    def launch(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, simulate: bool = False):
        nki = _nki()
        kw = dict(kwargs or {})
        if simulate:
            return call_kernel(lambda: nki.simulate_kernel(kernel, *args, **kw))
        envcheck.check_runtime_env(api="legacy")
        return call_kernel(lambda: nki.baremetal(kernel)(*args, **kw))

    def measure(self, kernel, args: tuple, kwargs: Mapping[str, Any] | None = None, *, warmup: int,
                iterations: int, profile: ProfileRequest | None = None) -> Measurement:
        warmup, iterations = check_counts(warmup, iterations)
        envcheck.check_runtime_env(api="legacy")
        nki = _nki()
        if not callable(getattr(nki, "benchmark", None)):
            raise HardwareError(
                "this neuronxcc.nki has no nki.benchmark (Neuron SDK 2.30+ removed it with the legacy API)",
                step="timing", hint="use the current-API edition of the assignment (`import nki`), or a Neuron SDK "
                                    "<= 2.29 environment for the legacy one")
        timing = self._timing(self._benchmark(nki, kernel, args, kwargs, warmup, iterations, {}), warmup,
                              iterations, dge_disabled=False, files=())
        if profile is None:
            return Measurement(timing)
        try:
            return self._profile(nki, kernel, args, kwargs, warmup, iterations, profile, timing)
        except ProfileError as exc:
            if exc.measurement is None:
                exc.measurement = Measurement(timing)
            raise

    def _profile(self, nki, kernel, args, kwargs, warmup: int, iterations: int, profile: ProfileRequest,
                 timing: Timing) -> Measurement:
        stem = profile.stem
        dge_off = profile.dge_off if profile.dge_off is not None else True
        opts: dict[str, Any] = {"additional_compile_opt": DISABLE_DGE} if dge_off else {}
        if profile.legacy_style == "benchmark":
            # The course saves file.neff and renames it afterwards.
            opts = {"save_neff_name": "file.neff", "save_trace_name": f"{stem}.ntff", **opts}
        else:
            opts = {"save_neff_name": f"{stem}.neff", **opts}
        stats = self._benchmark(nki, kernel, args, kwargs, warmup, iterations, opts)
        notes = (DGE_OFF_WHY,) if dge_off else ()
        try:
            if profile.legacy_style == "benchmark" and os.path.exists("file.neff"):
                os.replace("file.neff", f"{stem}.neff")
            if not os.path.isfile(f"{stem}.neff"):
                raise ProfileError(f"nki.benchmark(save_neff_name=...) wrote no NEFF for {stem}", step="profiling")
            if profile.legacy_style == "capture":
                self._capture(stem)
            if not os.path.isfile(f"{stem}.ntff") or os.path.getsize(f"{stem}.ntff") == 0:
                raise ProfileError(f"no profile trace {stem}.ntff was written (or it is empty)", step="profiling",
                                   hint="check that aws-neuronx-tools is installed and no other process holds the "
                                        "NeuronCore")
        except ProfileError as exc:  # the profile run was timed: its latency is reported, labelled, all the same
            exc.measurement = Measurement(timing, self._timing(stats, warmup, iterations, dge_disabled=dge_off,
                                                               files=(), profiled=True), (), notes)
            raise
        files = tuple(os.path.abspath(f"{stem}.{ext}") for ext in ("neff", "ntff"))
        profiled = self._timing(stats, warmup, iterations, dge_disabled=dge_off, files=files, profiled=True)
        return Measurement(timing, profiled, files, notes)

    @staticmethod
    def _benchmark(nki, kernel, args, kwargs, warmup: int, iterations: int, opts: dict) -> tuple[float, float]:
        bench = nki.benchmark(kernel, warmup=warmup, iters=iterations, **opts)
        call_kernel(lambda: bench(*args, **dict(kwargs or {})))
        result = getattr(bench, "benchmark_result", None)
        latency = getattr(result, "nc_latency", None)
        if latency is None:
            raise HardwareError("nki.benchmark returned no benchmark_result.nc_latency", step="timing",
                                hint="check the neuron-bench output above; aws-neuronx-tools must be installed")
        p50, p99 = latency.get_latency_percentile(50), latency.get_latency_percentile(99)
        if not (positive(p50) and positive(p99)):
            raise HardwareError(f"nki.benchmark reported p50={p50!r}, p99={p99!r} us: nothing was timed",
                                step="timing")
        return float(p50), float(p99)

    @staticmethod
    def _capture(stem: str) -> None:
        tool = which("neuron-profile")
        if tool is None:
            raise ProfileError(f"neuron-profile is not installed; only {stem}.neff was saved", step="profiling",
                               hint="install aws-neuronx-tools (sudo apt-get install aws-neuronx-tools)")
        try:
            subprocess.run([tool, "capture", "-n", f"{stem}.neff", "-s", f"{stem}.ntff"], check=True)
        except subprocess.CalledProcessError as exc:
            raise ProfileError(f"neuron-profile capture exited with status {exc.returncode}",
                               step="profiling") from None

    def _timing(self, stats: tuple[float, float], warmup: int, iterations: int, *, dge_disabled: bool,
                files: tuple[str, ...], profiled: bool = False) -> Timing:
        return Timing(
            p50_us=stats[0], p99_us=stats[1], warmup=warmup, iterations=iterations, backend=self.name,
            label=self.label(), target=self.target(), api=self.api, versions=self.versions(),
            dge_disabled=dge_disabled, profiled=profiled, measured=True, profile_files=files,
        )
