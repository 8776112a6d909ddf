# STAFF-ONLY: measures the Part 2 optimisation ladder on nkisim; excluded from the student release.
"""``python staff/ladder/measure.py``: the Part 2 ladder's modelled latency, MFU and credit per configuration.

For every kernel of ``staff/ladder/conv_ladder.py`` (plus the staff kernel and the relaxed staff kernel of
``grader/reference/``) and every performance configuration of the course (224x224 and 32x16 images, float32 and
float16, pool 1 and 2; batch 1, 256 -> 256 channels, 3x3 filter) it prints the modelled p99 latency (``nki.
benchmark`` on nkisim, timing mode), the course's MFU, the engine that was busiest, the points the part-2 rubric
gives that latency against the grader's targets, and the speed-up over the previous kernel of the list.

Options: ``--kernels a,b`` (default: the ladder, in order), ``--configs 224-fp16-1,32-fp32-2`` (default: all
eight), ``--target trn2|trn1``, ``--check`` (first run the harness's correctness tests on each kernel: slow for the
naive kernels), ``--markdown`` (a Markdown table for docs/staff-notes.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (REPO, REPO / "part2"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from nkisim import _hook  # noqa: E402

_hook.install()

LADDER = ["step0_naive", "step1_weights", "step2_inputs", "step3_psum", "staff"]
ABLATIONS = [
    "inputs_first",
    "step2_fp32_operands",
    "step3_one_row",
    "step3_single_buffers",
    "step3_single_input_buffer",
    "step3_sbuf_accumulate",
    "staff_vector_only",
    "staff_no_bands",
    "relaxed",
]
CONFIGS = [(h, dt, pool) for h in (224, 32) for dt in ("float16", "float32") for pool in (1, 2)]
WIDTH = {224: 224, 32: 16}
# part-2 rubric points per performance test (grader/rubric.toml): 224x224 17.5 without pooling, 7.5 with; the
# 32x16 extra-credit tests 1.25 each
POINTS = {(224, 1): 17.5, (224, 2): 7.5, (32, 1): 1.25, (32, 2): 1.25}


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def load(name: str):
    if name == "staff":
        return _load_module(REPO / "grader/reference/part2/conv2d.py", "_ladder_staff").fused_conv2d_maxpool
    if name == "relaxed":
        # the legacy edition's relaxed kernel, as the ladder (its current-API twin models identically)
        path = REPO / "grader/reference/legacy/relaxed/part2/conv2d.py"
        return _load_module(path, "_ladder_relaxed").fused_conv2d_maxpool
    if name in ("staff_vector_only", "staff_no_bands"):
        # the staff kernel with one piece of its advice undone: its helpers are module globals the kernel looks
        # up when it is traced, so a private copy of the module is patched instead of copying the kernel
        module = _load_module(REPO / "grader/reference/part2/conv2d.py", f"_ladder_{name}")
        if name == "staff_vector_only":
            evacuate = module._evacuate_rows
            module._evacuate_rows = lambda acc, bias_col, out_rows, use_scalar: evacuate(acc, bias_col, out_rows, False)
        else:
            module.BAND_ROWS = 1  # bands of one PSUM tile's rows: one input DMA per tile
        return module.fused_conv2d_maxpool
    return getattr(_load_module(HERE / "conv_ladder.py", "_ladder"), name)


def modelled(kernel, height: int, dtype: str, pool: int, target: str, dge_off: bool = False) -> tuple[float, object]:
    """Modelled p99 and the report; ``dge_off`` compiles as profiled runs do (``--disable-dge``)."""
    import neuronxcc.nki as nki

    dt = np.dtype(dtype)
    X = np.zeros((1, 256, height, WIDTH[height]), dt)
    W = np.zeros((256, 256, 3, 3), dt)
    bias = np.zeros(256, dt)
    opts = {"additional_compile_opt": "--disable-dge"} if dge_off else {}
    bench = nki.benchmark(kernel, warmup=1, iters=10, target=target, **opts)
    bench(X, W, bias, pool_size=pool)
    result = bench.benchmark_result
    return float(result.nc_latency.get_latency_percentile(99)), result.report


def credit(latency: float, height: int, dtype: str, pool: int, target: str) -> tuple[float, str, float, float]:
    from grader.problems.conv2d import conv_thresholds
    from grader.thresholds import credit_tier

    # the ladder kernels are legacy NKI: the legacy staff kernels set their targets
    relaxed, optimized = conv_thresholds(dtype, height, pool, "nkisim", target, api="legacy")
    tier = credit_tier(latency, relaxed, optimized)
    points = POINTS[(height, pool)]
    got = {"full": points, "partial": 0.9 * points, "none": 0.0}[tier]
    return got, tier, optimized, relaxed


def mfu(latency: float, height: int, dtype: str, target: str) -> float:
    from nkisim.perf.costs import course_mfu

    out_h, out_w = height - 2, WIDTH[height] - 2
    flops = 2.0 * 256 * 256 * 9 * out_h * out_w
    return course_mfu(flops, latency, dtype == "float32", target)


def check(name: str, kernel) -> str:
    """The part-2 harness's correctness tests (all of them, with pooling) on this kernel."""
    import test_harness as th

    bank = th.InputBank(42)
    results = th.run_correctness(kernel, th.correctness_tests(), bank, log=lambda s: None, verbose_errors=False)
    bad = [f"{r.name}: {r.detail}" for r in results if not r.passed]
    return "correct" if not bad else "WRONG: " + "; ".join(bad)


def busiest(report) -> str:
    engines = {k: v for k, v in report.engine_busy_us.items() if v > 0}
    if report.dma_queue_busy_us:
        engines["DMA queue"] = max(report.dma_queue_busy_us)
    name = max(engines, key=engines.get)
    return f"{name} {engines[name] / report.total_us:.0%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=",".join(LADDER), help=f"comma-separated; ablations: {','.join(ABLATIONS)}")
    ap.add_argument("--configs", default="", help="e.g. 224-fp16-1,32-fp32-2 (default: all eight)")
    ap.add_argument("--target", default="trn2", choices=("trn2", "trn1"))
    ap.add_argument("--check", action="store_true", help="run the harness's correctness tests on each kernel first")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--dge-off", action="store_true", help="compile as profiled runs do (--disable-dge)")
    args = ap.parse_args(argv)
    configs = CONFIGS
    if args.configs:
        configs = []
        for c in args.configs.split(","):
            h, dt, pool = c.split("-")
            configs.append((int(h), {"fp16": "float16", "fp32": "float32"}[dt], int(pool)))
    names = [n for n in args.kernels.split(",") if n]
    kernels = {n: load(n) for n in names}
    if args.check:
        for n, k in kernels.items():
            t0 = time.perf_counter()
            print(f"{n}: {check(n, k)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    head = [
        "config",
        "kernel",
        "latency us",
        "x prev",
        "MFU",
        "TensorE busy",
        "busiest",
        "DMAs",
        "credit",
        "points",
        "targets us",
    ]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print("  ".join(head))
    for h, dt, pool in configs:
        prev = None
        for n, k in kernels.items():
            lat, report = modelled(k, h, dt, pool, args.target, args.dge_off)
            got, tier, opt, rel = credit(lat, h, dt, pool, args.target)
            speedup = f"{prev / lat:.2f}x" if prev else ""
            prev = lat
            cfg = f"{h}x{WIDTH[h]} {'fp16' if dt == 'float16' else 'fp32'} pool{pool}"
            targets = f"{opt:.0f}" if opt == rel else f"{opt:.0f} / {rel:.0f}"
            row = [
                cfg,
                n,
                f"{lat:.1f}",
                speedup,
                f"{mfu(lat, h, dt, args.target):.1%}",
                f"{report.engine_util.get('TensorE', 0.0):.0%}",
                busiest(report),
                str(report.dma_count),
                tier,
                f"{got:g}/{POINTS[(h, pool)]:g}",
                targets,
            ]
            print(("| " + " | ".join(row) + " |") if args.markdown else "  ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
