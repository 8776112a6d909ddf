"""Handout rules on which NKI calls a part may use (grader/policy.py): every import form is recognised, a use is
named in the test's message with file and line, and the score does not change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from grader_helpers import FAST_RUBRIC, GOOD

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
