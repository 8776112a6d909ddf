# STAFF-ONLY: runs the calibration corpus (complete solutions); excluded from the student release.
"""``python tools/grading_agreement.py``: does the grader give on nkisim the credit the hardware gave?

For every hardware-measured kernel of the calibration corpus (nkisim/calibration/corpus) in a configuration the
rubric has a performance test for, prints the hardware latency and the credit it earns against the course's
published targets, next to the modelled latency and the credit the grader gives it on nkisim
(grader/thresholds.py), and the credit staff-relative targets everywhere (``basis="reference"``) would give.
The summary line is the issue-9 target "performance credit equal to the hardware's" measured on the rows we
have (the held-out set is larger).  Options: ``--target trn1|trn2`` (hardware rows of unstated generation are
compared as trn2, as ``python -m nkisim.calibrate`` does), ``--json`` for machine-readable output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from grader import thresholds  # noqa: E402
from grader.problems.conv2d import conv_thresholds  # noqa: E402
from grader.rubric import load_rubric  # noqa: E402
from nkisim.calibration import corpus  # noqa: E402
from nkisim.calibration.corpus.__main__ import measured_us, modelled_us  # noqa: E402


@dataclass(frozen=True)
class Row:
    kernel: str
    config: str
    hw_us: float
    model_us: float
    hw_credit: float
    nkisim_credit: float
    staff_relative_credit: float

    @property
    def agrees(self) -> bool:
        return self.hw_credit == self.nkisim_credit


def tier_credit(latency_us: float, relaxed_us: float, optimized_us: float, partial: float) -> float:
    """Fraction of a test's points the grader's tier rule (``thresholds.credit_tier``) gives this latency."""
    tier = thresholds.credit_tier(latency_us, relaxed_us, optimized_us)
    return {"full": 1.0, "partial": partial, "none": 0.0}[tier]


def graded_conv_configs() -> set[tuple[str, int, int]]:
    """(dtype, height, pool) of the rubric's conv2d performance tests."""
    out = set()
    for t in load_rubric().tests:
        if t.kind == "performance" and t.problem == "conv2d":
            c = t.cases[0]
            out.add((str(c["dtype"]), int(c["height"]), int(c.get("pool", 1))))
    return out


def agreement_rows(target: str = "trn2") -> list[Row]:
    rubric = load_rubric()
    graded = graded_conv_configs()
    tsv = measured_us()
    # the corpus's hardware-measured kernels are legacy-API kernels: the legacy staff kernel's timings
    timings = thresholds.reference_timings("nkisim", target, "legacy")
    rows: list[Row] = []
    for entry in corpus.KERNELS:
        if entry.family != "conv" or not entry.hardware:
            continue
        kernel = entry.load()
        for hw in entry.hardware:
            cfg = hw.config
            if (cfg.dtype, cfg.height, cfg.pool) not in graded:
                continue
            hw_us = tsv.get(hw.row_id, hw.us) if hw.row_id else hw.us
            model = modelled_us(kernel, cfg, entry.kwargs, target)
            hw_t = conv_thresholds(cfg.dtype, cfg.height, cfg.pool, "neuron", target)
            sim_t, rel_t = (
                conv_thresholds(cfg.dtype, cfg.height, cfg.pool, "nkisim", target,
                                factor=rubric.threshold_factor, timings=timings, basis=basis)
                for basis in (None, "reference"))
            p = rubric.partial_credit
            rows.append(Row(entry.id, cfg.key, hw_us, model, tier_credit(hw_us, *hw_t, p),
                            tier_credit(model, *sim_t, p), tier_credit(model, *rel_t, p)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="trn2", choices=("trn2", "trn1"))
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args(argv)
    rows = agreement_rows(args.target)
    if args.json:
        print(json.dumps([asdict(r) | {"agrees": r.agrees} for r in rows], indent=1))
        return 0
    head = ("kernel", "config", "hw_us", "hw_credit", "model_us", "nkisim_credit", "staff_relative_credit", "agree")
    table = [head] + [(r.kernel, r.config, f"{r.hw_us:.0f}", f"{r.hw_credit:.1f}", f"{r.model_us:.0f}",
                       f"{r.nkisim_credit:.1f}", f"{r.staff_relative_credit:.1f}", "yes" if r.agrees else "NO")
                      for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)))
    same = sum(r.agrees for r in rows)
    same_rel = sum(r.hw_credit == r.staff_relative_credit for r in rows)
    print(f"\ncredit equal to the hardware's: {same}/{len(rows)} rows with the grader's targets, "
          f"{same_rel}/{len(rows)} with staff-relative targets everywhere (target {args.target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
