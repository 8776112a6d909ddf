"""Every figure the handout states about Part 2 is the staff ladder's on nkisim, within the tolerance the handout
states: a claim that drifts (the handout edited, or the model or a ladder kernel changed) fails here.

Each claim is the handout's exact words (whitespace-normalised) and how to measure them with the staff ladder
(staff/ladder/conv_ladder.py and the staff kernel, through staff/ladder/measure.py: modelled latency, Tensor
Engine busy time and MFU on trn2, timing mode) or from the grader's own constants.  The fast test checks that the
words are in the handout (so editing a figure means editing its claim here); the slow one measures.  Staff only:
the ladder is not released.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LADDER = REPO / "staff" / "ladder"
HANDOUT = REPO / "handouts" / "handout.md"
pytestmark = pytest.mark.skipif(not (LADDER / "measure.py").is_file(), reason="the staff ladder is not released")

ALL = [(h, dt, pool) for h in (224, 32) for dt in ("float16", "float32") for pool in (1, 2)]
BIG = [c for c in ALL if c[0] == 224]
SMALL = [c for c in ALL if c[0] == 32]
FP16_224 = (224, "float16", 1)
FP32_224 = (224, "float32", 1)


def _text(path: Path = HANDOUT) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def stated_tolerance() -> float:
    """The tolerance the handout gives its figures ("they hold within 10%")."""
    m = re.search(r"they hold within (\d+)%", _text())
    assert m, "the handout no longer states the tolerance of its figures ('they hold within N%')"
    return int(m.group(1)) / 100


class Ladder:
    """Modelled figures of the ladder's kernels, each run once per session."""

    def __init__(self) -> None:
        sys.path.insert(0, str(LADDER))
        import measure

        self.m = measure

    @functools.cache  # noqa: B019 - one instance per session
    def run(self, kernel: str, cfg: tuple[int, str, int]) -> tuple[float, object]:
        h, dt, pool = cfg
        return self.m.modelled(self.m.load(kernel), h, dt, pool, "trn2")

    def latency(self, kernel: str, cfg: tuple[int, str, int]) -> float:
        return self.run(kernel, cfg)[0]

    def ratio(self, slow: str, fast: str, cfg: tuple[int, str, int]) -> float:
        return self.latency(slow, cfg) / self.latency(fast, cfg)

    def tensor_busy(self, kernel: str, cfg: tuple[int, str, int]) -> float:
        return 100.0 * self.run(kernel, cfg)[1].engine_util.get("TensorE", 0.0)

    def mfu(self, kernel: str, cfg: tuple[int, str, int]) -> float:
        h, dt, _ = cfg
        return 100.0 * self.m.mfu(self.latency(kernel, cfg), h, dt, "trn2")

    def target(self, cfg: tuple[int, str, int]) -> float:
        from grader.problems.conv2d import conv_thresholds

        h, dt, pool = cfg
        return conv_thresholds(dt, h, pool, "nkisim", "trn2", api="legacy")[1]


@dataclass(frozen=True)
class Claim:
    """``words`` in the handout state ``stated`` (one value: "about X"; two: "lo to hi", and the measured values
    must span that range: the lowest within tolerance of lo, the highest of hi, none outside)."""

    words: str
    stated: tuple[float, ...]
    measure: Callable[[Ladder], list[float]]


CLAIMS = [
    # "The starting point"
    Claim("on nkisim it is 6 to 28 times slower than the full-credit targets", (6, 28),
          lambda L: [L.latency("step0_naive", c) / L.target(c) for c in ALL]),
    Claim("(12.5 times in fp16 at 224x224)", (12.5,),
          lambda L: [L.latency("step0_naive", FP16_224) / L.target(FP16_224)]),
    Claim("today about 4,200 us in fp32 and 1,000 us in fp16", (4200,), lambda L: [L.target(FP32_224)]),
    Claim("and 1,000 us in fp16, with the 90% tier", (1000,), lambda L: [L.target(FP16_224)]),
    Claim("the 224x224 ones are 1.2x the staff kernel's modelled latency", (1.2,),
          lambda L: [L.target(c) / L.latency("staff", c) for c in (FP16_224, FP32_224)]),
    # Step 1
    Claim("Expect a 2.5 to 6x speed-up", (2.5, 6), lambda L: [L.ratio("step0_naive", "step1_weights", c) for c in ALL]),
    Claim("(2.8x in fp16 at 224x224, 5.5x in fp32)", (2.8,),
          lambda L: [L.ratio("step0_naive", "step1_weights", FP16_224)]),
    Claim("at 224x224, 5.5x in fp32)", (5.5,), lambda L: [L.ratio("step0_naive", "step1_weights", FP32_224)]),
    # Step 2
    Claim("In fp16 this is another 5x speed-up", (5,),
          lambda L: [L.ratio("step1_weights", "step2_inputs", c) for c in BIG if c[1] == "float16"]),
    Claim("(1.2 to 1.3x in fp32", (1.2, 1.3),
          lambda L: [L.ratio("step1_weights", "step2_inputs", c) for c in BIG if c[1] == "float32"]),
    Claim("already kept the Tensor Engine 77 to 83% busy", (77, 83),
          lambda L: [L.tensor_busy("step1_weights", c) for c in BIG if c[1] == "float32"]),
    Claim("the Tensor Engine is then busy 98% of the time", (98,),
          lambda L: [L.tensor_busy("step2_inputs", c) for c in BIG]),
    # Step 3
    Claim("On 32x16 images this cuts the latency 1.5 to 3 times", (1.5, 3),
          lambda L: [L.ratio("step2_inputs", "step3_psum", c) for c in SMALL]),
    Claim("(3x in fp16 without pooling)", (3,), lambda L: [L.ratio("step2_inputs", "step3_psum", (32, "float16", 1))]),
    Claim("it changes the latency by less than 1%", (1.0,),  # a bound: checked against 1 +- 1% below
          lambda L: [L.ratio("step2_inputs", "step3_psum", c) for c in (FP16_224, FP32_224)]),
    # Advice kept from the starting point
    Claim("(about 4.5x slower in fp16 at 224x224)", (4.5,),
          lambda L: [L.ratio("step3_sbuf_accumulate", "step3_psum", FP16_224)]),
    Claim("costs the fp16 tests at 224x224 about 4x", (4,),
          lambda L: [L.ratio("step2_fp32_operands", "step2_inputs", c) for c in BIG if c[1] == "float16"]),
    Claim("that costs about 2% when only the input rows' tile is allocated once", (1.02,),
          lambda L: [L.ratio("step3_single_input_buffer", "step3_psum", FP16_224)]),
    Claim("and about 17% when every loop tile is", (1.17,),
          lambda L: [L.ratio("step3_single_buffers", "step3_psum", FP16_224)]),
    # Question 9
    Claim("a kernel running fp32 matmuls back to back shows about 45%", (45,), lambda L: [L.mfu("staff", FP32_224)]),
]
# a bound rather than a value: the measured ratio must be within this of 1
BOUNDS = {"it changes the latency by less than 1%": 0.01}
# Figures the handout used to state that did not reproduce (issue 34): they must not come back.
RETIRED = ["tens of times slower", "Expect more than an order of magnitude", "15% slower in fp16",
           "another several-fold speed-up", "by a large factor", "about 4x slower in fp16"]


def test_every_claim_is_in_the_handout_and_no_retired_figure_is():
    text = _text()
    assert stated_tolerance() == 0.10
    missing = [c.words for c in CLAIMS if " ".join(c.words.split()) not in text]
    assert missing == [], f"handout claims changed: update tests/test_handout_claims.py: {missing}"
    assert [w for w in RETIRED if w in text] == []


def test_published_targets_in_the_handout_are_the_graders():
    """The targets table and the grading section: the course's published trn2 numbers and the rubric's rules."""
    from grader.problems.conv2d import PUBLISHED_TRN2
    from grader.problems.transpose import PUBLISHED_US as PUBLISHED_TRANSPOSE_US
    from grader.rubric import load_rubric

    text = _text()
    for (dtype, h), (relaxed, optimized) in PUBLISHED_TRN2.items():
        label = f"{h}x{224 if h == 224 else 16}, fp{dtype[-2:]}"
        row = f"| {label}" + (" (extra credit)" if h == 32 else "")
        line = next(line for line in HANDOUT.read_text().splitlines() if line.startswith(row))
        assert f"{optimized:,.0f} us" in line, line
        if relaxed != optimized:
            assert f"{relaxed:,.0f} us" in line, line
    rubric = load_rubric()
    assert f"within {rubric.threshold_factor:.0%} of the course's reference kernel's" in text
    assert f"{rubric.partial_credit:.0%} of its points when within the relaxed target" in text
    assert f"within {rubric.borderline_margin:.0%} of a target is marked as such" in text
    assert f"{PUBLISHED_TRANSPOSE_US:.0f} us for the transpose" in text


@pytest.fixture(scope="module")
def ladder() -> Ladder:
    return Ladder()


@pytest.mark.slow
@pytest.mark.parametrize("claim", CLAIMS, ids=[c.words[:40] for c in CLAIMS])
def test_claim_matches_the_staff_ladder_on_nkisim(claim, ladder):
    tol = stated_tolerance()
    values = claim.measure(ladder)
    assert values, claim.words
    if claim.words in BOUNDS:
        assert all(abs(v - 1.0) < BOUNDS[claim.words] for v in values), values
        return
    if len(claim.stated) == 1:
        (x,) = claim.stated
        assert all(abs(v / x - 1.0) <= tol for v in values), (claim.words, values)
    else:
        lo, hi = claim.stated
        assert abs(min(values) / lo - 1.0) <= tol and abs(max(values) / hi - 1.0) <= tol, (claim.words, values)


def _model_facts() -> list[tuple[str, float, float]]:
    """(handout words, the value they state, nkisim's) for the hardware figures of sections 1 and 4: the model's
    constants (nkisim/core/config.py limits, nkisim/perf/costs.py trn2 costs) and the sizes they imply."""
    from nkisim.core.config import TARGETS
    from nkisim.perf.costs import TRN2

    trn1, trn2 = TARGETS["trn1"], TARGETS["trn2"]
    kib, mib = 1024, 1024 * 1024
    return [
        ("24 MiB on trn1, 28 MiB on trn2: 128 partitions x 224 KiB", 24, 128 * trn1.sbuf_bytes_per_partition / mib),
        ("24 MiB on trn1, 28 MiB on trn2: 128 partitions x 224 KiB", 28, 128 * trn2.sbuf_bytes_per_partition / mib),
        ("2 MiB: 128 partitions x 16 KiB, in 8 banks of 2 KiB", 8, trn2.psum_banks),
        ("2 MiB: 128 partitions x 16 KiB, in 8 banks of 2 KiB", 2, trn2.psum_bank_bytes / kib),
        ("Peak on trn2: 79 TFLOPS for fp16/bf16 inputs", 79, TRN2.tensor_peak_flops / 1e12),
        ("done by 16 DMA engines per core", 16, TRN2.dma_engines),
        ("moves roughly 23 bytes/ns per engine", 23, TRN2.dma_bw_bytes_per_ns),
        ("takes roughly `max(64, N)` engine cycles", 64, TRN2.min_ii_cycles),
        ("about 208 KiB per partition that a kernel may use on trn2 (176 KiB on trn1)", 208,
         trn2.sbuf_usable_bytes / kib),
        ("about 208 KiB per partition that a kernel may use on trn2 (176 KiB on trn1)", 176,
         trn1.sbuf_usable_bytes / kib),
        # the course's shapes: 256 channels, 3x3 filter, fp16 (2 bytes)
        ("per partition (9 KiB in fp16)", 9, 256 // 128 * 9 * 256 * 2 / kib),
        ("each holding 128 x 9 x 256 elements: 589,824 bytes per partition in fp16", 589824, 128 * 9 * 256 * 2),
        ("(all 30 rows of a 32x16 image; 2 rows of 222 on 224x224 images)", 30,
         min(32 - 2, trn2.psum_bank_bytes // 4 // (16 - 2))),
        ("(all 30 rows of a 32x16 image; 2 rows of 222 on 224x224 images)", 2, trn2.psum_bank_bytes // 4 // 222),
    ]


def test_hardware_figures_are_the_models():
    """Sections 1 and 4 quote the hardware's sizes and rates: they are nkisim's constants (to the rounding the
    handout uses), so the text and the model cannot drift apart unnoticed."""
    text, tol = _text(), stated_tolerance()
    for words, stated, modelled in _model_facts():
        assert " ".join(words.split()) in text, words
        assert abs(modelled / stated - 1.0) <= (tol if words.startswith(("Peak", "about")) else 0.0), (words, modelled)
