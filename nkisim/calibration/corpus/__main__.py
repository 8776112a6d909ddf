# STAFF-ONLY: runs the calibration corpus (complete solutions); excluded from the student release.
"""``python -m nkisim.calibration.corpus``: the corpus kernels' modelled latencies next to the hardware's.

Runs every corpus kernel through ``nki.benchmark`` on nkisim (timing-only: the model never needs values) and
prints, per kernel x configuration: modelled p99 latency, the hardware latency where a measurement row exists,
their ratio, the staff reference's modelled latency in the same configuration and the ratio to it, and the
registry's hardware-plausible bound on that ratio with whether today's model keeps it.

Options: ``--all`` runs all eight conv configurations (default: the four pool-1 ones plus every configuration
with a hardware row), ``--id ID`` (repeatable) selects kernels, ``--target trn1|trn2``.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: the emulator issues many small products

import numpy as np  # noqa: E402

from nkisim.calibration import corpus  # noqa: E402
from nkisim.calibration.corpus import CorpusKernel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
MEASUREMENTS = os.path.join(os.path.dirname(HERE), "measurements.tsv")
# the legacy edition's staff kernels: the corpus and its hardware rows are of the neuronxcc.nki era
REFERENCE = os.path.join(REPO, "grader", "reference", "legacy")


def measured_us() -> dict[str, float]:
    """row id -> measured us from nkisim/calibration/measurements.tsv (rows whose value is a plain number)."""
    out: dict[str, float] = {}
    if not os.path.isfile(MEASUREMENTS):
        return out
    with open(MEASUREMENTS, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            try:
                out[row["id"].strip()] = float(row["measured_us"].replace("about", "").strip())
            except (KeyError, ValueError):
                continue
    return out


def _load(path: str, name: str, attr: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return getattr(module, attr)


def reference_kernel(family: str):
    """The staff reference for a family, or None when grader/reference is absent (student release)."""
    path = os.path.join(REFERENCE, "part2", "conv2d.py") if family == "conv" else os.path.join(
        REFERENCE, "part1", "kernels.py")
    if not os.path.isfile(path):
        return None
    attr = "fused_conv2d_maxpool" if family == "conv" else "matrix_transpose"
    return _load(path, f"_corpus_reference_{family}", attr)


def modelled_us(kernel, config, kwargs: dict, target: str | None) -> float:
    import neuronxcc.nki as nki

    args, kw = corpus.timing_inputs(config)
    bench = nki.benchmark(kernel, warmup=1, iters=10, target=target)
    bench(*args, **kw, **kwargs)
    return bench.benchmark_result.nc_latency.get_latency_percentile(99)


def selected_configs(entry: CorpusKernel, all_configs: bool) -> list:
    if all_configs or entry.family == "transpose":
        return list(entry.configs)
    hw = {h.config for h in entry.hardware}
    return [c for c in entry.configs if c.pool == 1 or c in hw]


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nkisim.calibration.corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="all eight conv configurations (default: pool 1 + hardware)")
    ap.add_argument("--id", action="append", default=[], help="only this kernel id (repeatable)")
    ap.add_argument("--target", default=None, help="trn2 (default) or trn1")
    args = ap.parse_args(argv)

    entries = [corpus.get(i) for i in args.id] if args.id else list(corpus.KERNELS)
    tsv = measured_us()
    refs: dict[str, object] = {}
    ref_us: dict[tuple, float | None] = {}
    header = ("id", "config", "model_us", "hw_us", "model/hw", "ref_model_us", "model/ref", "bound", "ok")
    rows: list[tuple] = []
    start = time.time()
    for entry in entries:
        kernel = entry.load()
        for config in selected_configs(entry, args.all):
            us = modelled_us(kernel, config, entry.kwargs, args.target)
            hw = entry.hardware_for(config)
            hw_us = None if hw is None else tsv.get(hw.row_id, hw.us) if hw.row_id else hw.us
            if entry.family not in refs:
                refs[entry.family] = reference_kernel(entry.family)
            key = (entry.family, config)
            if key not in ref_us:
                ref = refs[entry.family]
                ref_us[key] = None if ref is None else modelled_us(ref, config, {}, args.target)
            r_us = ref_us[key]
            ratio_ref = None if r_us is None else us / r_us
            bounds, ok = [], []
            for e in entry.expectations:
                if e.applies(config) and e.target == (args.target or "trn2"):
                    bounds.append(f"[{_fmt(e.min_ratio, '.2f')},{_fmt(e.max_ratio, '.2f')}]")
                    if ratio_ref is not None:
                        ok.append((e.min_ratio is None or ratio_ref >= e.min_ratio)
                                  and (e.max_ratio is None or ratio_ref <= e.max_ratio))
            rows.append((
                entry.id, config.key, _fmt(us), _fmt(hw_us, ".0f"),
                _fmt(None if hw_us is None else us / hw_us, ".2f"),
                _fmt(r_us), _fmt(ratio_ref, ".2f"), " ".join(bounds) or "-",
                "-" if not ok else ("yes" if all(ok) else "NO"),
            ))
            print("  ".join(rows[-1]), file=sys.stderr, flush=True)  # progress (runs take seconds each)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    with_hw = [r for r in rows if r[4] != "-"]
    if with_hw:
        errs = sorted(abs(float(r[4]) - 1.0) for r in with_hw)
        print(f"\nhardware rows: {len(with_hw)}, median |model/hw - 1| = {errs[len(errs) // 2]:.1%}, "
              f"worst model/hw = {max((float(r[4]) for r in with_hw), key=lambda x: abs(np.log(x))):.2f}")
    broken = [r for r in rows if r[8] == "NO"]
    print(f"bounds violated: {len(broken)} of {sum(r[8] != '-' for r in rows)} checked "
          f"({time.time() - start:.0f} s, target {args.target or 'trn2'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
