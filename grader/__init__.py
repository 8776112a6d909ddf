"""asst4 autograder: sandboxed, reproducible grading of NKI kernel submissions.

Entry points: ``python -m grader`` / the ``grader`` console script (grader/cli.py), and
:func:`grader.pipeline.grade_submission` for programs.  Student code only ever runs in grader/child.py inside
grader/sandbox.py; this package's other modules run in the trusted parent.
"""

import os
import sys

# No transparent huge pages for this process's large NumPy arrays (NumPy reads the variable when it loads; the
# kernel processes get the same setting from grader/sandbox.py).  On the grading machine (a VM: the host takes back
# free memory, and transparent_hugepage/defrag is "madvise", so an advised fault may stall on compaction) a fresh
# huge page costs far more than the 512 small pages it replaces: the staff grading's float64 reference faulted in
# its 404 MB output and 131 MB column buffer in 1.16-1.32 system CPU s with huge pages against 0.27-0.36 in 4 KiB
# pages, for the same user time (its DGEMM; docs/grading.md, "The grader process's own CPU, round 10").  Values do
# not depend on it.  An explicit setting wins.
if "NUMPY_MADVISE_HUGEPAGE" not in os.environ:
    os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
    if "numpy" in sys.modules:  # loaded before the grader (tests, tools): NumPy's own switch of the same setting
        _switch = getattr(getattr(sys.modules["numpy"], "_core", None), "multiarray", None)
        getattr(_switch, "_set_madvise_hugepage", lambda enabled: enabled)(False)

__all__ = ["__version__"]
__version__ = "1.0.0"
