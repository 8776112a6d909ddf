"""Checks and times one part-1 kernel: ``python part1/run_benchmark.py --kernel stream -n 25600``.

Prints the kernel and its input shape, ``Correctness passed? True|False`` (against NumPy), then the p99
execution time in microseconds and which backend produced it: a real NeuronCore ("Trainium (...)") or nkisim's
performance model ("nkisim estimate, trn2").  ``--profile_name NAME`` also writes profile files and says where
they are, with their sizes: on Trainium the NEFF and NTFF (legacy API: a profile run compiled with DGE off, as
the legacy course's were, its latency printed on its own line, labelled, beside the ordinary one; current API:
the timed NEFF itself, profiled by the Neuron profiler, as that API has no DGE switch); on nkisim the .neff
stand-in (the modelled run, with the kernel's source as profiled), the text summary and the HTML page, plus the
Perfetto trace NAME.ntff only with ``--perfetto`` (it is large).

Running and timing go through ``nkibench`` (the repository's timing layer), which picks the backend from the API
that part1/kernels.py imports (``Kernel API:`` line): the same script serves both editions of the course.  The
kernel runs once: the timing is that of the run whose output was checked (``nkibench.launch_once``; on nkisim the
cost model reads that run's trace).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
for _path in (HERE, HERE.parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import kernels  # noqa: E402

import nkibench  # noqa: E402
from nkibench import detect  # noqa: E402
from nkibench.labels import files_line, profiled_line  # noqa: E402

KERNELS = {
    "naive": "vector_add_naive",
    "tiled": "vector_add_tiled",
    "stream": "vector_add_stream",
    "transpose": "matrix_transpose",
}
WARMUP = 1
ITERS = 10


def backend(kernel_fn) -> nkibench.Backend:
    """The backend that runs this kernel here (nkisim, or Trainium with the kernel's API)."""
    return nkibench.backend_for(kernel_fn)


def make_inputs(kernel: str, n: int, m: int | None, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Random float32 inputs as the course uses them: two vectors, or one (m or n, n) matrix."""
    if kernel == "transpose":
        return (rng.random((m or n, n), dtype=np.float32),)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def expected_output(kernel: str, args: tuple[np.ndarray, ...]) -> np.ndarray:
    return args[0].T if kernel == "transpose" else args[0] + args[1]


def describe(kernel: str, args: tuple[np.ndarray, ...]) -> str:
    shapes = " x ".join(str(a.shape) for a in args)
    return f"Running {KERNELS[kernel]} ({kernel}) on {shapes} float32"


def run_kernel_once(kernel_fn, args: tuple[np.ndarray, ...]):
    """One run for its output (a kernel calling sys.exit raises instead of ending the script)."""
    return nkibench.launch(kernel_fn, args)


def check_correctness(kernel_fn, kernel: str, args: tuple[np.ndarray, ...]) -> tuple[bool, str]:
    """(passed, why not): the output against NumPy with np.allclose's default tolerances."""
    return judge(kernel, args, run_kernel_once(kernel_fn, args))


def judge(kernel: str, args: tuple[np.ndarray, ...], out) -> tuple[bool, str]:
    """(passed, why not) for a kernel's output ``out`` on ``args``."""
    expected = expected_output(kernel, args)
    if out is None:
        return False, "the kernel returned no output tensor (return the HBM tensor it writes)"
    out = np.asarray(out)
    if out.shape != expected.shape:
        return False, f"output shape {out.shape}, expected {expected.shape}"
    if out.dtype.kind not in "fiub":
        return False, f"output dtype {out.dtype} is not numeric"
    nan = int(np.count_nonzero(np.isnan(out))) if out.dtype.kind == "f" else 0
    if nan:
        return False, f"the output holds {nan} NaN value(s) (elements never written, or computed from unwritten ones)"
    close = np.isclose(out, expected)
    if close.all():
        return True, ""
    bad = np.argwhere(~close)
    first = tuple(int(i) for i in bad[0])
    return False, (f"{len(bad)} of {out.size} elements differ; first at index {first}: got {out[first].item():.6g}, "
                   f"expected {expected[first].item():.6g}")


def benchmark(run: nkibench.Launch, profile_name: str | None, perfetto: bool = False) -> nkibench.Measurement:
    """The ordinary timing of the checked launch ``run``, plus the profile when one is asked for (legacy API: a
    profile run with DGE off, as the legacy course profiled; current API: the timed program itself).  On nkisim
    it costs the checked run's own trace (no second run: the trace does not depend on the values); on Trainium
    the kernel is timed as it always was.

    On legacy hardware nki.benchmark itself writes the trace; the course saves file.neff and renames it.
    """
    profile = (nkibench.ProfileRequest(profile_name, legacy_style="benchmark", perfetto=perfetto)
               if profile_name else None)
    return run.measure(warmup=WARMUP, iterations=ITERS, profile=profile)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", required=True, choices=sorted(KERNELS), help="kernel to run")
    parser.add_argument("-n", type=int, required=True, help="vector length, or matrix columns for transpose")
    parser.add_argument("-m", type=int, default=None, help="matrix rows for transpose (default: n)")
    parser.add_argument("--profile_name", default=None, help="write profile files NAME.* in the current directory")
    parser.add_argument("--perfetto", action="store_true",
                        help="with --profile_name on nkisim: also write NAME.ntff, the Perfetto JSON trace (large)")
    args = parser.parse_args(argv)
    if args.profile_name is not None and not args.profile_name.strip():
        parser.error("--profile_name needs a name")
    if args.n <= 0 or (args.m is not None and args.m <= 0):
        parser.error("-n and -m must be positive")
    if args.m is not None and args.kernel != "transpose":
        parser.error("-m only applies to --kernel transpose")
    if args.profile_name and not os.path.isdir(os.path.dirname(os.path.abspath(args.profile_name))):
        parser.error(f"--profile_name {args.profile_name}: the directory for the profile files does not exist")
    return args


def print_latency(timing: nkibench.Timing) -> None:
    """The ordinary (unprofiled) p99: the number the course compares."""
    print(f"Execution Time: {timing.p99_us:.2f} \u03bcs (p99 of {timing.iterations} iterations, {timing.label})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kernel_fn = getattr(kernels, KERNELS[args.kernel])
    inputs = make_inputs(args.kernel, args.n, args.m, np.random.default_rng())

    print(describe(args.kernel, inputs))
    try:
        chosen = backend(kernel_fn)
    except nkibench.BenchError as exc:
        print(f"Backend: none\n{exc}")
        return 1
    print(f"Backend: {chosen.describe()}")
    print(detect.api_line(kernel_fn))
    try:
        run = nkibench.launch_once(kernel_fn, inputs)  # one run for the check; timed below if it passes
        passed, why = judge(args.kernel, inputs, run.outputs)
    except nkibench.BenchError as exc:  # the toolchain, not the kernel: say what is missing
        print(f"Correctness not checked: {exc}")
        return 1
    except Exception as exc:  # noqa: BLE001 - show the student what their kernel raised, then stop
        if isinstance(exc, nkibench.KernelError):
            print(exc.traceback_text.rstrip())
        else:
            traceback.print_exc()
        name, message = nkibench.error_text(exc)
        first_line = (message.strip().splitlines() or [""])[0]
        print("Correctness passed? False")
        print(f"The kernel raised {name}: {first_line}")
        return 1
    print(f"Correctness passed? {passed}")
    if not passed:
        print(f"Why: {why}")
        return 1

    profile_failure = ""
    try:
        result = benchmark(run, args.profile_name, args.perfetto)
    except nkibench.ProfileError as exc:  # the timings stand; the missing profile is said loudly below
        if exc.measurement is None:
            print(f"Profile NOT written: {exc}")
            return 1
        result, profile_failure = exc.measurement, str(exc)
    except nkibench.BenchError as exc:
        print(f"Execution Time: not measured: {exc}")
        return 1
    timing = result.timing
    print_latency(timing)
    if not args.profile_name:
        return 0
    line = profiled_line(result)
    if line:
        print(line)
    for note in result.notes:
        print(note)
    if profile_failure:
        print(f"Profile NOT written: {profile_failure}")
        return 1
    print(f"Profile written: {files_line(result.profile_files)}")
    if timing.backend == "nkisim":
        trace = ("the .ntff is Perfetto JSON for https://ui.perfetto.dev" if args.perfetto else
                 "--perfetto also writes the Perfetto trace (.ntff, large)")
        print(f"Open {args.profile_name}.html in a browser (works offline); the .summary.txt has the numbers; "
              f"{trace}.")
    elif timing.backend == "neuron-legacy":
        name = args.profile_name
        print(f"View it with: neuron-profile view -n {name}.neff -s {name}.ntff")
    return 0


if __name__ == "__main__":
    sys.exit(main())
