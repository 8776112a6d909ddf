"""asst4 autograder: sandboxed, reproducible grading of NKI kernel submissions.

Entry points: ``python -m grader`` / the ``grader`` console script (grader/cli.py), and
:func:`grader.pipeline.grade_submission` for programs.  Student code only ever runs in grader/child.py inside
grader/sandbox.py; this package's other modules run in the trusted parent.
"""

__all__ = ["__version__"]
__version__ = "1.0.0"
