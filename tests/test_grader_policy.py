"""Handout rules on which NKI calls a part may use (grader/policy.py): every import form is recognised, a use is
named in the test's message with file and line, and the score does not change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from grader_helpers import FAST_RUBRIC, GOOD, ROOT

from grader.pipeline import grade_submission
from grader.policy import disallowed_uses
from grader.records import GradeConfig
from grader.rubric import RubricError, load_rubric

FORBIDDEN = ("nki.language.transpose", "nki.isa.dma_transpose", "nki.language.load_transpose2d")


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import neuronxcc.nki.language as nl\nt = nl.transpose(x)\n", [(2, "nki.language.transpose")]),
        ("from neuronxcc.nki import language as L\nL.load_transpose2d(a)\n", [(2, "nki.language.load_transpose2d")]),
        ("from neuronxcc.nki.language import transpose as T\n\n\ny = T(x)\n", [(4, "nki.language.transpose")]),
        ("import neuronxcc.nki as nki\nnki.isa.dma_transpose(src=a)\n", [(2, "nki.isa.dma_transpose")]),
        ("import neuronxcc.nki.isa\nneuronxcc.nki.isa.dma_transpose(a)\n", [(2, "nki.isa.dma_transpose")]),
        # allowed, or not NKI: nothing to report
        ("import neuronxcc.nki.isa as nisa\nnisa.nc_transpose(x)\n", []),
        ("import numpy as np\ndef transpose(a):\n    return np.transpose(a)\ntranspose(x)\n", []),
        ('"""use nl.transpose? no"""\n# nl.transpose\n', []),
        ("def broken(:\n", []),  # the static screen reports syntax errors
    ],
)
def test_disallowed_uses_through_every_import_form(source, expected):
    assert disallowed_uses(source, FORBIDDEN) == expected


def test_rubric_validates_disallowed_apis(tmp_path):
    base = Path(FAST_RUBRIC).read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(base.replace('problem = "transpose"\npoints = 10\n',
                                'problem = "transpose"\npoints = 10\ndisallowed_apis = ["nl.transpose"]\n', 1))
    with pytest.raises(RubricError, match="disallowed_apis must be a list of names under nki."):
        load_rubric(bad)
    course = load_rubric()
    assert set(next(t for t in course.tests if t.id == "part1.transpose").disallowed_apis) == set(FORBIDDEN)


def test_a_forbidden_call_is_named_in_the_message_and_the_score_stands(tmp_path):
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(Path(FAST_RUBRIC).read_text().replace(
        'problem = "transpose"\npoints = 10\n',
        'problem = "transpose"\npoints = 10\ndisallowed_apis = ["nki.language.transpose"]\n', 1))
    sub = tmp_path / "sub"
    shutil.copytree(GOOD, sub)
    kernels = sub / "part1" / "kernels.py"
    kernels.write_text(kernels.read_text() + "\n_spare = nl.transpose  # not even called\n")
    line = len(kernels.read_text().splitlines())
    record = grade_submission(sub, None, GradeConfig(rubric_path=str(rubric), only=("part1.transpose",)))
    (test,) = record.tests
    assert test.status == "passed" and test.score == 10
    assert test.message.splitlines()[0].startswith("all ")
    assert f"handout rule: nki.language.transpose at part1/kernels.py:{line} is not allowed" in test.message


# A DMA-side transpose needs no forbidden name: a DMA through a reordering view of HBM does it.  Both kernels are
# correct transposes (no nc_transpose anywhere); the grader names the DMA's line and leaves the score alone.
VIEW_TRANSPOSE = {
    "nki": '''import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=a_tensor[i * P:(i + 1) * P, j * P:(j + 1) * P].permute((1, 0)))  # LINE
            nisa.dma_copy(dst=out[j * P:(j + 1) * P, i * P:(i + 1) * P], src=tile)
    return out
''',
    "legacy": '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(P)[:, None], nl.arange(P)[None, :]
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.load(a_tensor[i * P + i_f, j * P + i_p])  # LINE
            nl.store(out[j * P + i_p, i * P + i_f], value=tile)
    return out
''',
}


@pytest.mark.slow
@pytest.mark.parametrize("api", sorted(VIEW_TRANSPOSE))
def test_a_dma_side_transpose_through_a_view_is_named_and_the_score_stands(tmp_path, api):
    sub = tmp_path / "sub"
    shutil.copytree(GOOD, sub)
    source = VIEW_TRANSPOSE[api]
    (sub / "part1" / "kernels.py").write_text(source)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "# LINE" in text)
    record = grade_submission(sub, None, GradeConfig(only=("part1.transpose",)))  # the course rubric
    (test,) = record.tests
    assert test.status == "passed" and test.score == 10, test.message
    assert (f"handout rule: the DMA at part1/kernels.py:{line} moves HBM data one element at a time through a "
            "reordering view, a DMA-side transpose") in test.message


@pytest.mark.slow
def test_honest_transposes_have_no_dma_side_transpose(tmp_path):
    """The staff transposes of both editions and the fixture's block-by-block one: rows in, rows out."""
    ref = ROOT / "grader" / "reference"
    for kernels in (ref / "part1" / "kernels.py", ref / "legacy" / "part1" / "kernels.py"):
        sub = tmp_path / kernels.parent.parent.name
        shutil.copytree(GOOD, sub)
        shutil.copy(kernels, sub / "part1" / "kernels.py")
        (test,) = grade_submission(sub, None, GradeConfig(only=("part1.transpose",))).tests
        assert test.status == "passed" and "handout rule" not in test.message, test.message
