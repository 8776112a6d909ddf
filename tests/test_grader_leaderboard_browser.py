"""The leaderboard page in a real browser: headless system Chromium (Playwright), opened from file:// as a TA or a
student would open the file, offline.  Skipped, with the reason in the summary, when no Chromium is installed."""

from __future__ import annotations

import pytest
from leaderboard_helpers import sample_class, write_batch

from grader import leaderboard
from nkisim.perf.browser import launch, unavailable_reason

REASON = unavailable_reason()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=REASON or ""), pytest.mark.xdist_group("browser"),
              pytest.mark.slow]


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    out = write_batch(tmp_path_factory.mktemp("lb") / "out", sample_class())
    path, rows, _ = leaderboard.write_leaderboard(out, names=True)
    return path, rows


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = launch(pw)
        yield b
        b.close()


@pytest.fixture()
def opened(browser, page_file):
    path, _ = page_file
    ctx = browser.new_context(offline=True)  # no network at all: the page must not need one
    page = ctx.new_page()
    seen = {"console": [], "requests": []}
    page.on("console", lambda m: seen["console"].append((m.type, m.text)))
    page.on("pageerror", lambda e: seen["console"].append(("pageerror", str(e))))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_function("window.leaderboard && window.leaderboard.ready", timeout=60_000)
    yield page, seen, path
    ctx.close()


def _index(page, header: str) -> int:
    """The column whose header reads ``header`` (the sort arrow a header shows is not part of it)."""
    idx = page.evaluate(
        "(h) => Array.from(document.querySelectorAll('#leaderboard thead th')).findIndex(t => t.textContent.trim()"
        ".replace(/[\\u25B2\\u25BC]/g, '').trim() === h)", header)
    assert idx >= 0, header
    return idx


def _column(page, header: str) -> list[str]:
    return page.evaluate("(i) => Array.from(document.querySelectorAll('#leaderboard tbody tr'))"
                         ".map(r => r.cells[i].textContent.trim())", _index(page, header))


def _click(page, header: str) -> None:
    """A user's click on the header's button (Playwright scrolls it into view and checks it can be clicked)."""
    page.locator("#leaderboard thead th").nth(_index(page, header)).get_by_role("button").click()


def test_opens_offline_without_errors_or_requests(opened):
    page, seen, path = opened
    assert [m for m in seen["console"] if m[0] in ("error", "pageerror")] == []
    assert seen["requests"] == [path.resolve().as_uri()]
    assert page.title().startswith("Leaderboard:")
    assert len(_column(page, "#")) == 6  # 5 ranked + 1 whose scored test did not count


def test_starts_ranked_and_sorts_by_any_column(opened):
    page, _, _ = opened
    assert _column(page, "#") == ["1", "2", "3", "4", "5", ""]
    assert _column(page, "student")[:2] == ["bob@uni.edu", "alice@uni.edu"]
    _click(page, "score (us)")  # ascending first: the same order, the unscored row last
    scores = [float(s) for s in _column(page, "score (us)")[:5]]
    assert scores == sorted(scores) and _column(page, "score (us)")[-1] == "–"
    _click(page, "score (us)")  # descending; blanks stay last
    scores = [float(s) for s in _column(page, "score (us)")[:5]]
    assert scores == sorted(scores, reverse=True) and _column(page, "student")[-1] == "erin@uni.edu"
    assert page.evaluate("document.querySelector('th[aria-sort]').textContent").startswith("score")
    _click(page, "perf_fp16")
    fp16 = [float(v.rstrip("◆")) for v in _column(page, "perf_fp16")]
    assert fp16 == sorted(fp16)
    _click(page, "student")
    names = _column(page, "student")
    assert names == sorted(names, key=str.lower)
    _click(page, "points")  # points sort high to low first
    points = [float(p) for p in _column(page, "points")]
    assert points == sorted(points, reverse=True)


def test_near_boundary_mark_and_escaping(opened):
    page, _, _ = opened
    marks = page.evaluate("Array.from(document.querySelectorAll('td .near')).map(e => e.closest('tr').cells[1]"
                          ".textContent)")
    assert marks == ["bob@uni.edu"]
    title = page.evaluate("document.querySelector('td .near').parentElement.title")
    assert "may differ on Trainium" in title
    # a student id holding markup is shown as text, never run
    assert "<script>alert(1)</script>" in _column(page, "student")
    assert page.evaluate("document.querySelectorAll('tbody script').length") == 0
