"""Figure: a screenshot of the offline HTML profile of the part-2 reference kernel (224x224 float16, trn2).

The staff kernel's source is kept out of the page (the handout is public to students).

The page is what ``part2/test_harness.py --profile NAME`` writes as ``NAME_float16.html`` on nkisim; the
screenshot is taken by headless Chromium (the system package, driven by Playwright) after hovering and clicking
a matmul, so the tooltip and the highlighted kernel line show.  Needs Chromium (``make browser``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VIEWPORT = {"width": 1400, "height": 1000}


def conv_profile(dtype: str = "float16", title: str | None = None):
    """ProfileData of the part-2 reference kernel (the student's part2/conv2d.py when the staff copy is absent)."""
    from nkisim.measure import profile_run

    sys.path.insert(0, str(REPO / "part2"))
    import test_harness as harness

    path = REPO / "grader" / "reference" / "part2" / "conv2d.py"
    kernel = harness.load_kernel(path if path.exists() else REPO / "part2" / "conv2d.py")
    case = harness.ConvCase(1, 256, 256, 224, 224, dtype=dtype)
    X, W, bias = harness.InputBank(42).inputs(case)
    # the harness benchmarks with --disable-dge, as the course does
    prof = profile_run(kernel, (X, W, bias), {"pool_size": 1}, title=title or f"conv2d 224x224 {dtype}", dge=False)
    # The handout goes to students: never show the staff kernel's code (the source pane shows your own kernel).
    prof.sources = {}
    prof.source_note = "(In the handout's figure the staff kernel's source is left out; your page shows your conv2d.py "
    prof.source_note += "here, with the clicked line highlighted.)"
    return prof


def screenshot(page_path: Path, out: Path, *, hover_lane: str | None = "TensorE", height: int = 1000) -> None:
    """PNG of the top ``height`` pixels of the page (after a click and hover on ``hover_lane`` when given)."""
    from playwright.sync_api import sync_playwright

    from nkisim.perf.browser import launch, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise RuntimeError(f"cannot take the HTML-profile screenshot: {reason}")
    with sync_playwright() as pw:
        browser = launch(pw)
        # the viewport is the picture: a full-page screenshot would resize it and drop the hover tooltip
        page = browser.new_page(viewport={"width": VIEWPORT["width"], "height": height})
        page.goto(page_path.resolve().as_uri())
        page.wait_for_function("window.nkisim && window.nkisim.refreshes > 0", timeout=120_000)
        page.wait_for_timeout(500)
        if hover_lane:
            st = page.evaluate("window.nkisim.state()")[0]
            lane = st["lanes"].index(hover_lane)
            t = st["x0"] + 0.3 * (st["x1"] - st["x0"])
            pos = page.evaluate("([t, l]) => window.nkisim.pagePos(0, t, l)", [t, lane])
            page.mouse.click(pos["x"], pos["y"])
            page.wait_for_timeout(500)  # let the click's redraw settle, then hover for the tooltip
            for dx in (2, 1, 3):
                page.mouse.move(pos["x"] + dx, pos["y"])
                page.wait_for_timeout(300)
                if page.locator(".nk-tip").first.is_visible():
                    break
            page.locator(".nk-tip").first.wait_for(state="visible", timeout=10_000)
        page.screenshot(path=str(out))
        browser.close()


def draw(path) -> None:
    from nkisim.perf.html_profile import write_html

    prof = conv_profile("float16")
    with tempfile.TemporaryDirectory() as d:
        page = Path(d) / "conv_float16.html"
        write_html([prof], page)
        screenshot(page, Path(path), height=1150)
