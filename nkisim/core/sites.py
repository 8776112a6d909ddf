"""Allocation sites: where a tile was allocated (``(code object, line)``) and how many physical buffers a site
rotates through.  Below memory.py, blocks.py and spill.py, which all speak of sites, so none of them imports
another for it (tests/test_nkisim_layers.py: no import cycle, lazy ones included).
"""

from __future__ import annotations

# A site owns ROTATION_DEPTH + 1 physical buffers before it reuses one (see memory.MemoryTracker.phys_for): a
# loop-local tile rotates through that many, however long Python keeps each one alive.  The copy count is
# undocumented; 4 fits the hardware rows best (nkisim/perf/MODEL.md, "Issue 9, rotation depth").
ROTATION_DEPTH = 4


def site_str(site) -> str:
    """``file.py:line`` of an allocation site, ``?`` when unknown."""
    if not site:
        return "?"
    code, line = site
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{line}"
