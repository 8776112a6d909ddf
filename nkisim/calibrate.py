"""Predicted vs measured latency for every hardware measurement: ``python -m nkisim.calibrate``.

Runs each row of nkisim/calibration/measurements.tsv (kernels in nkisim/calibration/kernels.py, course reference
solutions from grader/reference when present) in timing mode, costs it with the row's metric (p99 nc_latency or
profiler total_time) and prints a table plus the training statistics: median absolute % error, worst ratio,
rows within 1.5x / 2x, whether every pair of rows of the same kernel keeps its measured order and Kendall's tau;
then the leave-one-out error: each training row predicted with the fitted constants refitted without it.
Reference-threshold rows (course thresholds) are comparisons, not training data.  ``--fit`` refits the
undocumented constants.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import os
import statistics
import sys
import time
from dataclasses import dataclass

from nkisim.calibration.rows import CalRow, load_rows

ORDER_TIE = 0.01  # measured values within 1% of each other (e.g. 19 vs 19 us) impose no order


@dataclass
class Result:
    row: CalRow
    predicted_us: float | None
    seconds: float
    instrs: int
    error: str = ""

    @property
    def ratio(self) -> float | None:
        if self.predicted_us is None:
            return None
        return self.predicted_us / self.row.measured_us


_REF_CACHE: dict[str, object] = {}


def _kernel(row: CalRow):
    if row.kernel.startswith("corpus:"):
        from nkisim.calibration import corpus

        return corpus.get(row.kernel.split(":", 1)[1]).load()
    if row.kernel.startswith("corpusmod:"):  # a function of a corpus module (kernels outside the conv registry)
        from nkisim import _hook

        _hook.install()
        _, mod, func = row.kernel.split(":", 2)
        return getattr(importlib.import_module(f"nkisim.calibration.corpus.{mod}"), func)
    if row.kernel.startswith("pair:"):  # recorded on hardware (nkisim.calibration.feedback)
        from nkisim.calibration.feedback import load_kernel

        path, func = row.kernel[len("pair:"):].rsplit(":", 1)
        return load_kernel(path, func)
    if row.kernel.startswith("ref:"):
        _, path, func = row.kernel.split(":", 2)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found (reference solution not written yet)")
        mod = _REF_CACHE.get(path)
        if mod is None:
            from nkisim import _hook

            _hook.install()
            spec = importlib.util.spec_from_file_location(f"nkisim_ref_{len(_REF_CACHE)}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            _REF_CACHE[path] = mod
        return getattr(mod, func)
    from nkisim.calibration import load_kernels

    return getattr(load_kernels(), row.kernel)


def trace_of(row: CalRow):
    """Timing-mode trace of a row's kernel, with the row's compile options recorded."""
    from nkisim.core.runtime import run_kernel

    run = run_kernel(_kernel(row), row.make_inputs(), dict(row.kwargs), mode="timing", target=row.target)
    if row.dge is not None:
        run.trace.meta["dge"] = row.dge
    return run.trace


def predict(row: CalRow, trace, costs=None) -> float:
    from nkisim.perf import estimate

    rep = estimate(trace, row.target, costs=costs)
    return rep.nc_latency_us if row.metric == "nc_latency" else rep.total_us


def order_violations(results: list[Result], roles=("training",)) -> tuple[int, list[tuple[str, str]]]:
    """(pairs checked, violating pairs) over rows of the same kernel group with one of ``roles``."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        if r.row.role in roles and r.predicted_us is not None:
            groups.setdefault(r.row.group, []).append(r)
    checked, bad = 0, []
    for rs in groups.values():
        for i, a in enumerate(rs):
            for b in rs[i + 1 :]:
                ma, mb = a.row.measured_us, b.row.measured_us
                if abs(ma - mb) <= ORDER_TIE * max(ma, mb):
                    continue
                checked += 1
                if (ma < mb) != (a.predicted_us < b.predicted_us):
                    bad.append((a.row.id, b.row.id))
    return checked, bad


def statistics_of(results: list[Result]) -> dict:
    tr = [r for r in results if r.row.role == "training" and r.ratio is not None]
    if not tr:
        return {}
    errs = [abs(r.ratio - 1.0) * 100.0 for r in tr]
    worst = max(tr, key=lambda r: max(r.ratio, 1.0 / r.ratio))
    checked, bad = order_violations(results)
    return {
        "training_rows": len(tr),
        "median_abs_pct_error": statistics.median(errs),
        "mean_abs_pct_error": statistics.fmean(errs),
        "worst_ratio": worst.ratio,
        "worst_row": worst.row.id,
        "within_2x": sum(1 for r in tr if 0.5 <= r.ratio <= 2.0),
        "within_1_5x": sum(1 for r in tr if 1 / 1.5 <= r.ratio <= 1.5),
        "pairs_checked": checked,
        "order_violations": bad,
    }


def _select(rows: list[CalRow], patterns: list[str] | None, target: str | None, reference: bool) -> list[CalRow]:
    out = []
    for r in rows:
        if target and r.target != target:
            continue
        if not reference and r.role != "training":
            continue
        if patterns and not any(fnmatch.fnmatch(r.id, p) for p in patterns):
            continue
        out.append(r)
    return out


def run_rows(rows: list[CalRow], log=None) -> tuple[list[Result], dict[str, object]]:
    results, traces = [], {}
    for row in rows:
        t0 = time.time()
        try:
            tr = trace_of(row)
            traces[row.id] = tr
            pred = predict(row, tr)
            results.append(Result(row, pred, time.time() - t0, len(tr)))
        except Exception as e:  # a missing reference solution or a front-end gap: report, keep going
            results.append(Result(row, None, time.time() - t0, 0, f"{type(e).__name__}: {e}"))
        if log is not None:
            r = results[-1]
            what = f"{r.predicted_us:.1f} us" if r.predicted_us is not None else r.error
            log(f"  {row.id}: {what} ({r.seconds:.1f}s)")
    return results, traces


def format_table(results: list[Result]) -> str:
    from tabulate import tabulate

    body = []
    for r in results:
        row = r.row
        body.append([
            row.id, row.target, row.kernel.split(":")[-1], row.knobs, row.metric + ("" if row.dge is None else
                                                                                   " (no DGE)"),
            row.measured_us, "-" if r.predicted_us is None else round(r.predicted_us, 2),
            "-" if r.ratio is None else f"{r.ratio:.2f}", row.role, r.instrs or (r.error[:60] if r.error else ""),
        ])
    return tabulate(body, headers=["id", "target", "kernel", "knobs", "metric", "measured us", "predicted us",
                                   "ratio", "role", "instrs / error"], floatfmt=".2f")


def format_stats(st: dict) -> str:
    if not st:
        return "no training rows ran"
    viol = st["order_violations"]
    lines = [
        f"training rows: {st['training_rows']}",
        f"median absolute error: {st['median_abs_pct_error']:.1f}%   (mean {st['mean_abs_pct_error']:.1f}%)",
        f"worst ratio: {st['worst_ratio']:.2f} ({st['worst_row']})",
        f"rows within 1.5x: {st['within_1_5x']}/{st['training_rows']}; within 2x: "
        f"{st['within_2x']}/{st['training_rows']}",
        f"same-kernel order: {st['pairs_checked'] - len(viol)}/{st['pairs_checked']} pairs in order"
        + ("" if not viol else "  violations: " + ", ".join(f"{a} vs {b}" for a, b in viol)),
    ]
    return "\n".join(lines)


def _fit_rows(results: list[Result], traces: dict, target: str) -> list:
    from nkisim.calibration.fit import FitRow

    return [FitRow(r.row.id, traces[r.row.id], r.row.measured_us, r.row.metric, r.row.dge)
            for r in results if r.row.role == "training" and r.row.target == target and r.row.id in traces]


def leave_one_out(results: list[Result], traces: dict, log) -> dict[str, float]:
    """Row id -> predicted/measured ratio with the fitted constants refitted without that row."""
    from nkisim.calibration.fit import FIT_PARAMS, loo_ratios
    from nkisim.perf.costs import costs_for

    out: dict[str, float] = {}
    for target, params in FIT_PARAMS.items():
        rows = _fit_rows(results, traces, target)
        if len(rows) < 2:
            continue
        log(f"leave-one-out over {len(rows)} {target} rows ({len(params)} fitted constants)")
        for row, ratio in zip(rows, loo_ratios(rows, costs_for(target), params)):
            out[row.name] = ratio
    return out


def format_loo(results: list[Result], loo: dict[str, float]) -> str:
    tr = [r for r in results if r.row.id in loo and r.ratio is not None]
    if not tr:
        return "leave-one-out: no rows"
    errs = [abs(loo[r.row.id] - 1.0) * 100.0 for r in tr]
    worst = max(tr, key=lambda r: max(loo[r.row.id], 1.0 / loo[r.row.id]))
    w = loo[worst.row.id]
    lines = [
        "leave-one-out (each training row predicted with the fitted constants refitted without it):",
        "  " + ", ".join(f"{r.row.id} {loo[r.row.id]:.2f}x" for r in tr),
        f"  median absolute error: {statistics.median(errs):.1f}%   (mean {statistics.fmean(errs):.1f}%)",
        f"  worst ratio: {w:.2f} ({worst.row.id}); within 1.5x: "
        f"{sum(1 for r in tr if 1 / 1.5 <= loo[r.row.id] <= 1.5)}/{len(tr)}; within 2x: "
        f"{sum(1 for r in tr if 0.5 <= loo[r.row.id] <= 2.0)}/{len(tr)}",
    ]
    return "\n".join(lines)


def rank_agreement(results: list[Result]) -> str:
    from nkisim.calibration.fit import kendall_tau

    def tau(rs):
        rs = [r for r in rs if r.predicted_us is not None]
        return kendall_tau([r.row.measured_us for r in rs], [r.predicted_us for r in rs]), len(rs)

    t_tr, n_tr = tau([r for r in results if r.row.role == "training"])
    t_all, n_all = tau(results)
    return f"Kendall tau (measured vs predicted): training rows {t_tr:.3f} (n={n_tr}); all rows {t_all:.3f} (n={n_all})"


def _fit(results: list[Result], traces: dict, log) -> None:
    from nkisim.calibration.fit import FIT_PARAMS, fit
    from nkisim.perf.costs import costs_for

    for target, params in FIT_PARAMS.items():
        rows = _fit_rows(results, traces, target)
        if not rows:
            continue
        log(f"fitting {target} on {len(rows)} rows: {', '.join(params)}")
        tc, loss = fit(rows, costs_for(target), params, rounds=4, log=lambda s: log("  " + s))
        log(f"{target} fitted (loss {loss:.5f}): " + ", ".join(f"{p}={getattr(tc, p):.4g}" for p in params))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nkisim.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("trn1", "trn2"), default=None, help="only rows of this generation")
    ap.add_argument("--rows", default=None, help="comma-separated row ids or glob patterns (e.g. 't2-*')")
    ap.add_argument("--no-reference", action="store_true", help="skip the course reference-threshold rows")
    ap.add_argument("--fit", action="store_true", help="refit the undocumented constants on the training rows")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-out validation")
    ap.add_argument("--pairs", default=None, metavar="ROWS.jsonl",
                    help="also the hardware/nkisim pairs exported by `python -m nkisim.calibration.feedback export` "
                         "(or a raw pairs.jsonl); select them alone with --rows 'hw-*'")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    patterns = [p.strip() for p in args.rows.split(",")] if args.rows else None
    table = load_rows()
    if args.pairs:
        from nkisim.calibration.feedback import load_pair_rows

        table += load_pair_rows(args.pairs)
    rows = _select(table, patterns, args.target, not args.no_reference)
    if not rows:
        print("no rows selected", file=sys.stderr)
        return 2
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    log(f"running {len(rows)} rows in timing mode")
    results, traces = run_rows(rows, log)
    print(format_table(results))
    print()
    print("training error (constants as fitted on all training rows):")
    print(format_stats(statistics_of(results)))
    print(rank_agreement(results))
    if not args.no_loo:
        print()
        print(format_loo(results, leave_one_out(results, traces, log)))
    val = [r for r in results if r.row.role == "validation" and r.ratio is not None]
    if val:
        checked, bad = order_violations(results, ("training", "validation"))
        print("validation rows (not fitted): " + ", ".join(f"{r.row.id} {r.ratio:.2f}x" for r in val)
              + f"; order incl. validation: {checked - len(bad)}/{checked} pairs")
    ref = [r for r in results if r.row.role == "reference threshold" and r.ratio is not None]
    if ref:
        print("reference thresholds (comparison only): " + ", ".join(f"{r.row.id} {r.ratio:.2f}x" for r in ref))
    if args.fit:
        _fit(results, traces, log)
    failed = [r for r in results if r.row.role == "training" and r.predicted_us is None]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

