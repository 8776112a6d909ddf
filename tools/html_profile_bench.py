"""Figures of the HTML profile at scale: ``python tools/html_profile_bench.py [--n 25600] [--keep DIR]``.

Profiles the ROW_CHUNK=1 vector add (4 instructions per element: 102,400 for n=25600), writes its page and
prints the file size (target < 15 MB), the time to make it, the time headless Chromium takes to open it until the
timeline is drawn (target < 10 s on the course's 2-core machine), and frame times while panning at a few zoom
levels.  The machine is shared: run it more than once and read the figures as a range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PAN_JS = """async (frac) => {
  const xr = window.nkisim.profiles[0].fig.x_range;
  const lo = xr.bounds[0], hi = xr.bounds[1], span = (hi - lo) * frac;
  xr.setv({start: lo, end: lo + span});
  await new Promise((r) => setTimeout(r, 300));
  const frames = []; let last = performance.now();
  for (let k = 0; k < 60; k++) {
    const s = Math.min(hi - span, xr.start + span * 0.05);
    xr.setv({start: s, end: s + span});
    await new Promise((r) => requestAnimationFrame(r));
    const now = performance.now(); frames.push(now - last); last = now;
  }
  return frames;
}"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=25600, help="vector length (4 instructions per element)")
    ap.add_argument("--keep", default=None, help="write the page into this directory and keep it")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests" / "kernels"))
    import numpy as np
    import vector_add_2025

    from nkisim.measure import profile_run
    from nkisim.perf.browser import launch, unavailable_reason
    from nkisim.perf.html_profile import write_html

    v = np.ones(args.n, dtype=np.float32)
    t = time.perf_counter()
    prof = profile_run(vector_add_2025.vector_add_tiled, (v, v), {"row_chunk": 1}, title="vector add ROW_CHUNK=1",
                       dge=False)
    t_run = time.perf_counter() - t
    out_dir = args.keep or tempfile.mkdtemp(prefix="nkisim-html-")
    os.makedirs(out_dir, exist_ok=True)
    path = Path(out_dir) / "vector_add_rowchunk1.html"
    t = time.perf_counter()
    write_html([prof], path)
    t_html = time.perf_counter() - t
    size = path.stat().st_size
    print(f"instructions:            {len(prof.trace.instrs)}")
    print(f"kernel run + model:      {t_run:.1f} s")
    print(f"page written in:         {t_html:.1f} s")
    print(f"page size:               {size / 2**20:.2f} MB (target < 15 MB)  {path}")
    reason = unavailable_reason()
    if reason:
        print(reason)
        return 1
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t = time.perf_counter()
        page.goto(path.resolve().as_uri())
        page.wait_for_function("window.nkisim && window.nkisim.refreshes > 0", timeout=300_000)
        page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
        t_open = time.perf_counter() - t
        st = page.evaluate("window.nkisim.state()")[0]
        print(f"opened and drawn in:     {t_open:.2f} s (target < 10 s)")
        print(f"intervals in the page:   {st['intervals']}; blocks drawn at full view: {sum(st['blocks'])}")
        for frac in (1.0, 0.1, 0.01, 0.001):
            frames = page.evaluate(PAN_JS, frac)
            q = sorted(frames)
            print(f"pan at {frac * 100:g}% of the run: frame median {statistics.median(q):.0f} ms, "
                  f"p90 {q[int(0.9 * len(q))]:.0f} ms, max {q[-1]:.0f} ms")
        browser.close()
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2-core machine, shared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
