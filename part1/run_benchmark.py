"""Checks and times one part-1 kernel: ``python part1/run_benchmark.py --kernel stream -n 25600``.

Prints the kernel and its input shape, ``Correctness passed? True|False`` (against NumPy), then the p99
execution time in microseconds and which backend produced it: the real NeuronCore ("Trainium (neuronx-cc)")
or nkisim's performance model ("nkisim estimate, trn2").  ``--profile_name NAME`` also writes profile files
(NEFF + NTFF on Trainium; nkisim's trace and summary otherwise) and says where they are.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import kernels  # noqa: E402
import neuronxcc.nki as nki  # noqa: E402

KERNELS = {
    "naive": "vector_add_naive",
    "tiled": "vector_add_tiled",
    "stream": "vector_add_stream",
    "transpose": "matrix_transpose",
}
WARMUP = 1
ITERS = 10


def on_nkisim() -> bool:
    """True when ``neuronxcc.nki`` is nkisim's emulation rather than the real toolchain."""
    origin = getattr(nki, "__file__", None) or ""
    return "nkisim" in origin or type(nki).__module__.startswith("nkisim") or nki.__name__.startswith("nkisim")


def target_name() -> str:
    """The NeuronCore generation being modelled (nkisim honours NEURON_PLATFORM_TARGET_OVERRIDE)."""
    try:
        from nkisim.core.config import current_target  # type: ignore[import-not-found]

        return str(current_target())
    except Exception:  # noqa: BLE001 - older nkisim or real toolchain: fall back to the documented variable
        return os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def backend_label() -> str:
    return f"nkisim estimate, {target_name()}" if on_nkisim() else "Trainium (neuronx-cc)"


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
    try:
        return nki.baremetal(kernel_fn)(*args)
    except SystemExit as exc:  # would end this script silently with the kernel's exit status
        raise RuntimeError(f"the kernel called sys.exit({exc.code!r}) instead of returning its output") from None


def check_correctness(kernel_fn, kernel: str, args: tuple[np.ndarray, ...]) -> tuple[bool, str]:
    """(passed, why not): the output against NumPy with np.allclose's default tolerances."""
    out = run_kernel_once(kernel_fn, args)
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


def benchmark(kernel_fn, args: tuple[np.ndarray, ...], profile_name: str | None):
    """Runs ``nki.benchmark`` (hardware run, or nkisim's model) and returns its result object."""
    if profile_name:
        # The course saves file.neff and renames it afterwards; nkisim can write the final name directly.
        neff = f"{profile_name}.neff" if on_nkisim() else "file.neff"
        bench = nki.benchmark(
            kernel_fn,
            warmup=WARMUP,
            iters=ITERS,
            save_neff_name=neff,
            save_trace_name=f"{profile_name}.ntff",
            additional_compile_opt="--disable-dge",
        )
    else:
        bench = nki.benchmark(kernel_fn, warmup=WARMUP, iters=ITERS)
    bench(*args)
    return bench.benchmark_result


def write_profile_html(result, path: str, kernel_fn) -> None:
    """nkisim only: the offline HTML profile (timeline, summary, kernel source) beside the other profile files."""
    from nkisim.perf.html_profile import write_run_html

    try:
        write_run_html(result.trace, result.report, path, kernel=kernel_fn)
    except ImportError as exc:  # bokeh missing: an older environment; the other profile files are still written
        print(f"HTML profile not written ({exc}); run `make setup` (or pip install -e .) to install bokeh")
        return
    result.files["html"] = path


def collect_profile(profile_name: str, result) -> list[str]:
    """Renames the NEFF like the course does and lists the profile files that exist."""
    if os.path.exists("file.neff"):
        os.replace("file.neff", f"{profile_name}.neff")
    files = list(getattr(result, "files", {}).values()) or [f"{profile_name}.neff", f"{profile_name}.ntff"]
    return [os.path.abspath(p) for p in files if os.path.exists(p)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", required=True, choices=sorted(KERNELS), help="kernel to run")
    parser.add_argument("-n", type=int, required=True, help="vector length, or matrix columns for transpose")
    parser.add_argument("-m", type=int, default=None, help="matrix rows for transpose (default: n)")
    parser.add_argument("--profile_name", default=None, help="write profile files NAME.* in the current directory")
    args = parser.parse_args(argv)
    if args.n <= 0 or (args.m is not None and args.m <= 0):
        parser.error("-n and -m must be positive")
    if args.m is not None and args.kernel != "transpose":
        parser.error("-m only applies to --kernel transpose")
    if args.profile_name and not os.path.isdir(os.path.dirname(os.path.abspath(args.profile_name))):
        parser.error(f"--profile_name {args.profile_name}: the directory for the profile files does not exist")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kernel_fn = getattr(kernels, KERNELS[args.kernel])
    inputs = make_inputs(args.kernel, args.n, args.m, np.random.default_rng())

    print(describe(args.kernel, inputs))
    print(f"Backend: {backend_label()}")
    try:
        passed, why = check_correctness(kernel_fn, args.kernel, inputs)
    except Exception as exc:  # noqa: BLE001 - show the student what their kernel raised, then stop
        traceback.print_exc()
        first_line = (str(exc).strip().splitlines() or [""])[0]
        print("Correctness passed? False")
        print(f"The kernel raised {type(exc).__name__}: {first_line}")
        return 1
    print(f"Correctness passed? {passed}")
    if not passed:
        print(f"Why: {why}")
        return 1

    result = benchmark(kernel_fn, inputs, args.profile_name)
    p99 = float(result.nc_latency.get_latency_percentile(99))
    print(f"Execution Time: {p99:.2f} \u03bcs (p99 of {ITERS} iterations, {backend_label()})")
    if args.profile_name:
        if on_nkisim():
            write_profile_html(result, f"{args.profile_name}.html", kernel_fn)
        files = collect_profile(args.profile_name, result)
        print(f"Profile written: {', '.join(files) if files else '(no profile files were produced)'}")
        if on_nkisim():
            print(f"Open {args.profile_name}.html in a browser (works offline); the .ntff is Perfetto JSON for "
                  "https://ui.perfetto.dev; the .summary.txt has the numbers.")
        else:
            name = args.profile_name
            print(f"View it with: neuron-profile view -n {name}.neff -s {name}.ntff")
    return 0


if __name__ == "__main__":
    sys.exit(main())
