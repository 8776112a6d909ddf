"""Draws every figure of the handout: ``python handouts/figures/make_figures.py`` (``make handouts``).

Each figure has its own module with a ``draw(path)`` function; this script runs them all (or the names given
on the command line) and writes PNGs next to itself.  The profile timeline runs a real kernel on nkisim.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIGURES = {
    "memory_hierarchy": "fig_memory_hierarchy",
    "vector_add_tiling": "fig_vector_add_tiling",
    "conv_as_matmul": "fig_conv_as_matmul",
    "profile_timeline": "fig_profile_timeline",
    "profile_html": "fig_profile_html",  # screenshots by headless Chromium (make browser)
    "profile_html_compare": "fig_profile_html_compare",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"figures to draw (default: all of {', '.join(FIGURES)})")
    parser.add_argument("--out", default=str(HERE), help="output directory (default: handouts/figures)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    for path in (HERE, REPO):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    import matplotlib

    matplotlib.use("Agg")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or FIGURES:
        module = importlib.import_module(FIGURES[name])
        target = out / f"{name}.png"
        module.draw(target)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
