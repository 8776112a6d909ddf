"""How points are written wherever a score is printed: the grader's reports and the part-2 harness say it alike.

No imports beyond the standard library: the part-2 harness uses this without the rest of the grader.
"""

from __future__ import annotations

__all__ = ["points", "points_total"]


def points(x: float) -> str:
    """17.5 -> '17.5', 10.0 -> '10', 15.750000000000002 -> '15.75'."""
    return f"{x:g}"


def points_total(score: float, out_of: float, extra_credit: float = 0.0) -> str:
    """'76 points (out of 70, plus up to 6 extra credit)': ``out_of`` is what the regular tests are worth,
    ``extra_credit`` what the extra-credit tests can add on top (a score above ``out_of`` is not an error);
    '5 points (out of up to 5 extra credit)' when only extra-credit tests count (not "out of 0")."""
    if out_of == 0 and extra_credit > 0:  # only extra-credit tests ran (make grade --only 'part2.ec_*')
        return f"{points(score)} points (out of up to {points(extra_credit)} extra credit)"
    text = f"{points(score)} points (out of {points(out_of)}"
    if extra_credit > 0:
        text += f", plus up to {points(extra_credit)} extra credit"
    return text + ")"
