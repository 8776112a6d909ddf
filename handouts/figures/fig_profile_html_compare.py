"""Figure: the HTML profile's compare view, float32 (A, before) against float16 (B, after) of the part-2 reference.

``python -m nkisim.profile html conv_float32.neff conv_float16.neff -o diff.html`` makes the same page from the
profile files; both timelines share one time axis and the summaries stand side by side.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fig_profile_html import conv_profile, screenshot


def draw(path) -> None:
    from nkisim.perf.html_profile import write_html

    before = conv_profile("float32", "conv2d 224x224 float32")
    after = conv_profile("float16", "conv2d 224x224 float16")
    with tempfile.TemporaryDirectory() as d:
        page = Path(d) / "compare.html"
        write_html([before, after], page)
        screenshot(page, Path(path), hover_lane=None, height=1500)
