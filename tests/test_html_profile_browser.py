"""The HTML profile in a real browser: headless system Chromium driven by Playwright, pages opened from file://.

Skipped, with the reason in the test summary, when no Chromium is installed (.ci/run installs Debian's).
The 100k-instruction render time is printed (the target is 10 s on the course's 2-core machine); the assertion
keeps a generous limit because the machine is shared.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nkisim.measure import profile_run
from nkisim.perf.browser import launch, unavailable_reason
from nkisim.perf.html_profile import write_html

REASON = unavailable_reason()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=REASON or ""), pytest.mark.xdist_group("browser"),
              pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "kernels"))

import matmul_tutorial  # noqa: E402
import vector_add_2025  # noqa: E402

RENDER_LIMIT_S = 60.0  # target 10 s (printed); generous because the test machine is shared
READY = "window.nkisim && window.nkisim.profiles.length > 0 && window.nkisim.refreshes > 0"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    rng = np.random.default_rng(0)
    a = rng.random((256, 256), dtype=np.float32).astype(np.float16)
    b = rng.random((256, 1024), dtype=np.float32).astype(np.float16)
    mm = profile_run(matmul_tutorial.matmul_tiled_nisa, (a, b), title="matmul")
    v = np.ones(2048, dtype=np.float32)
    va = profile_run(vector_add_2025.vector_add_stream, (v, v), title="vector add")
    paths = {"single": out / "single.html", "compare": out / "compare.html"}
    write_html([mm], paths["single"])
    write_html([mm, va], paths["compare"])
    return paths, mm


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


class Opened:
    """A page opened from file:// with its console messages and every request it made."""

    def __init__(self, browser, path: Path, width: int = 1400):
        self.url = path.resolve().as_uri()
        self.page = browser.new_page(viewport={"width": width, "height": 1000})
        self.console: list[tuple[str, str]] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        self.page.on("request", lambda r: self.requests.append(r.url))
        t = time.perf_counter()
        self.page.goto(self.url)
        self.page.wait_for_function(READY, timeout=120_000)
        self.page.wait_for_timeout(200)  # let the first refresh draw
        self.load_s = time.perf_counter() - t

    def state(self) -> list[dict]:
        return self.page.evaluate("window.nkisim.state()")

    def errors(self) -> list[tuple[str, str]]:
        return [m for m in self.console if m[0] in ("error", "pageerror")]

    def foreign_requests(self) -> list[str]:
        return [u for u in self.requests if u != self.url and not u.startswith(("data:", "blob:"))]

    def set_range(self, x0: float, x1: float) -> None:
        self.page.evaluate("([a, b]) => { window.nkisim.profiles[0].fig.x_range.setv({start: a, end: b});"
                           " window.nkisim.refreshNow(); }", [x0, x1])
        self.page.wait_for_timeout(300)  # let Bokeh draw the new blocks

    def pos(self, k: int, t_us: float, lane: int) -> tuple[float, float]:
        p = self.page.evaluate("([k, t, l]) => window.nkisim.pagePos(k, t, l)", [k, t_us, lane])
        return p["x"], p["y"]

    def close(self) -> None:
        self.page.close()


@pytest.fixture()
def single(browser, pages):
    o = Opened(browser, pages[0]["single"])
    yield o
    o.close()


def _known_matmul(prof):
    ins = next(i for i in prof.trace.instrs if i.op == "nc_matmul")
    return ins, ins.start_ns / 1e3, ins.end_ns / 1e3


def test_single_page_has_no_console_errors_and_no_network_requests(single):
    assert single.errors() == []
    assert single.foreign_requests() == []
    assert single.requests == [single.url]


def test_every_lane_is_drawn(single, pages):
    from PIL import Image

    prof = pages[1]
    (st,) = single.state()
    for lane in ("critical path", "TensorE", "VectorE", "ScalarE", "GpSimdE", *(f"qDMA{q}" for q in range(16))):
        assert lane in st["lanes"]
    png = single.page.screenshot(full_page=True)
    img = Image.open(__import__("io").BytesIO(png)).convert("RGB")
    x_left, _ = single.pos(0, st["x0"], 0)
    x_right, _ = single.pos(0, st["x1"], 0)
    # every lane with intervals has blocks and coloured pixels on its row; the empty ones (GpSimdE here) none
    for k, name in enumerate(st["lanes"]):
        _, y = single.pos(0, 0.0, k)
        row = [img.getpixel((int(x), int(y))) for x in np.linspace(x_left + 1, x_right - 1, 400)]
        coloured = sum(1 for r, g, b in row if max(r, g, b) - min(r, g, b) > 40)
        if st["blocks"][k] > 0:
            assert coloured > 0, f"lane {name} has {st['blocks'][k]} blocks but none is visible"
        else:
            assert coloured == 0, f"lane {name} is empty but coloured pixels were found"
    # at the full view every lane holding intervals has blocks, and the drawn lanes are those
    assert [c > 0 for c in st["blocks"]] == [c > 0 for c in st["lane_intervals"]]
    assert sum(st["lane_intervals"]) == st["intervals"]
    drawn = {n for n, c in zip(st["lanes"], st["blocks"]) if c}
    assert {"critical path", "TensorE", "qDMA0", "Runtime"} <= drawn
    assert any(i.op == "nc_matmul" for i in prof.trace.instrs)


def test_hover_names_the_instruction_and_its_source_line(single, pages):
    ins, s, e = _known_matmul(pages[1])
    single.set_range(s - (e - s), e + (e - s))
    lane = single.state()[0]["lanes"].index("TensorE")
    x, y = single.pos(0, (s + e) / 2, lane)
    single.page.mouse.move(x - 3, y)
    single.page.mouse.move(x, y)
    tip = single.page.locator(".nk-tip").first
    tip.wait_for(state="visible", timeout=10_000)
    text = tip.inner_text()
    assert "nc_matmul" in text and "TensorE" in text
    assert f"kernel line: {ins.where}" in text
    assert ins.where.startswith("matmul_tutorial.py:")
    assert "in: sbuf float16[128,128]" in text and f"#{ins.seq}" in text
    line = int(ins.where.rsplit(":", 1)[1])
    assert "nc_matmul" in (REPO / "tests" / "kernels" / "matmul_tutorial.py").read_text().splitlines()[line - 1]
    # clicking it highlights that line in the source pane
    single.page.mouse.click(x, y)
    hl = single.page.locator(".nk-src .ln.hl")
    hl.wait_for(timeout=10_000)
    assert hl.count() == 1 and hl.get_attribute("id") == f"L:0:{ins.where}"
    assert "nc_matmul" in hl.inner_text()
    assert ins.where in single.page.locator("#nk-selected").inner_text()


def _until(page, gesture, condition: str, attempts: int = 3) -> None:
    """Perform ``gesture`` until the page meets ``condition``: on a loaded machine the browser can drop an input
    event that arrives while it is busy (one full-suite run timed out waiting for a wheel zoom that alone works)."""
    for attempt in range(attempts):
        gesture()
        try:
            page.wait_for_function(condition, timeout=20_000)
            return
        except Exception:  # noqa: BLE001 - playwright's TimeoutError; the last attempt re-raises it
            if attempt == attempts - 1:
                raise


def test_wheel_zoom_and_drag_pan_change_the_visible_range(single):
    (st,) = single.state()
    lane = st["lanes"].index("TensorE")
    x, y = single.pos(0, (st["x0"] + st["x1"]) / 2, lane)
    span0 = st["x1"] - st["x0"]
    xr = "window.nkisim.profiles[0].fig.x_range"

    def wheel() -> None:
        single.page.mouse.move(x, y)
        single.page.mouse.wheel(0, -400)

    _until(single.page, wheel, f"{xr}.end - {xr}.start < {0.9 * span0}")
    single.page.wait_for_timeout(300)
    (z,) = single.state()
    assert z["x1"] - z["x0"] < 0.9 * (st["x1"] - st["x0"])
    assert st["x0"] <= z["x0"] and z["x1"] <= st["x1"]
    def drag() -> None:
        single.page.mouse.move(x, y)
        single.page.mouse.down()
        single.page.mouse.move(x - 200, y, steps=5)
        single.page.mouse.up()

    _until(single.page, drag, f"{xr}.start > {z['x0']}")
    single.page.wait_for_timeout(300)
    (p,) = single.state()
    assert p["x0"] > z["x0"] and abs((p["x1"] - p["x0"]) - (z["x1"] - z["x0"])) < 1e-6 * (z["x1"] - z["x0"]) + 1e-9
    assert sum(p["blocks"]) > 0


def test_zoomed_in_block_is_the_single_instruction(single, pages):
    ins, s, e = _known_matmul(pages[1])
    single.set_range(s - (e - s), e + (e - s))
    d = single.page.evaluate("(() => { const d = window.nkisim.profiles[0].vis.data;"
                             " return {label: Array.from(d.label), seq: Array.from(d.seq), n: Array.from(d.n)}; })()")
    k = d["seq"].index(f"#{ins.seq}")
    assert d["label"][k] == "nc_matmul" and d["n"][k] == 1


def test_compare_view_shows_both_profiles_on_one_time_scale(browser, pages):
    o = Opened(browser, pages[0]["compare"])
    try:
        assert o.errors() == [] and o.foreign_requests() == []
        a, b = o.state()
        assert a["title"].startswith("A (before): matmul") and b["title"].startswith("B (after): vector add")
        assert (a["x0"], a["x1"]) == (b["x0"], b["x1"])
        assert sum(a["blocks"]) > 0 and sum(b["blocks"]) > 0
        # one range: zooming the first timeline zooms the second
        o.set_range(a["x0"], (a["x0"] + a["x1"]) / 4)
        a2, b2 = o.state()
        assert (a2["x0"], a2["x1"]) == (b2["x0"], b2["x1"]) and a2["x1"] < a["x1"]
        assert o.page.locator("canvas").count() >= 2
        head = o.page.locator(".nk-metrics tr").first.inner_text()
        assert "A (before): matmul" in head and "B (after): vector add" in head and "B / A" in head
        # both timelines sit one above the other
        ya = o.pos(0, 0.0, 0)[1]
        yb = o.pos(1, 0.0, 0)[1]
        assert yb > ya + 100
    finally:
        o.close()


@pytest.mark.slow
def test_100k_instruction_vector_add_renders_and_pans(browser, tmp_path):
    n = 25600  # vector_add_tiled with row_chunk=1: 2 loads, 1 add, 1 store per element
    v = np.ones(n, dtype=np.float32)
    prof = profile_run(vector_add_2025.vector_add_tiled, (v, v), {"row_chunk": 1}, title="vector add ROW_CHUNK=1",
                       dge=False)
    assert len(prof.trace.instrs) == 4 * n == 102_400
    path = tmp_path / "va100k.html"
    write_html([prof], path)
    size_mb = path.stat().st_size / 2**20
    assert size_mb < 15, f"{size_mb:.1f} MB"
    o = Opened(browser, path)
    try:
        print(f"\n100k-instruction page: {size_mb:.1f} MB, rendered in {o.load_s:.2f} s (target 10 s)")
        assert o.load_s < RENDER_LIMIT_S
        assert o.errors() == [] and o.foreign_requests() == []
        (st,) = o.state()
        assert st["intervals"] > 102_400 and 0 < sum(st["blocks"]) < 50_000
        labels = o.page.evaluate("Array.from(window.nkisim.profiles[0].vis.data.label)")
        assert any(lab.split(" ", 1)[1].startswith("instructions: ") for lab in labels if " " in lab)
        # pan across the run at 1% zoom: every step draws, in bounded time
        span = (st["x1"] - st["x0"]) / 100
        frame = o.page.evaluate("""async (span) => {
            const xr = window.nkisim.profiles[0].fig.x_range; const t0 = performance.now();
            for (let k = 0; k < 40; k++) {
              xr.setv({start: 200 * k, end: 200 * k + span});
              await new Promise((r) => requestAnimationFrame(r)); }
            await new Promise((r) => requestAnimationFrame(r));
            return (performance.now() - t0) / 40; }""", span)
        print(f"mean frame while panning at 1% zoom: {frame:.0f} ms")
        assert frame < 2000
        (p,) = o.state()
        assert sum(p["blocks"]) > 0
    finally:
        o.close()


@pytest.mark.slow
@pytest.mark.skipif(not (REPO / "grader" / "reference" / "part2" / "conv2d.py").exists(),
                    reason="needs the staff reference kernel (not in the student release)")
def test_handout_screenshot_of_the_reference_profile_regenerates(tmp_path):
    """make handouts draws the HTML-profile screenshot of the reference kernel; the handouts link both."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(REPO / "handouts" / "figures" / "make_figures.py"), "profile_html", "--out",
         str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    png = tmp_path / "profile_html.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    assert Image.open(png).size == (1400, 1150)
    assert "figures/profile_html.png" in (REPO / "handouts" / "handout.md").read_text()
    assert "figures/profile_html_compare.png" in (REPO / "handouts" / "setup-nkisim.md").read_text()
