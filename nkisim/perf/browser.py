"""Headless Chromium for the HTML-profile tests and handout figures: the system browser driven by Playwright.

No browser is downloaded (no ``playwright install``): Playwright is pointed at Debian's ``chromium``
(``apt-get install chromium``; ``.ci/run`` installs it), or at ``NKISIM_CHROMIUM`` when that is set.
"""

from __future__ import annotations

import os
import shutil

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str | None:
    env = os.environ.get("NKISIM_CHROMIUM")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    for name in CANDIDATES:
        p = shutil.which(name)
        if p:
            return p
    return None


def unavailable_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "BROWSER TESTS NOT RUN: the playwright package is missing (make setup installs the dev extra)"
    if chromium_path() is None:
        return ("BROWSER TESTS NOT RUN: no Chromium found (apt-get install chromium, or set NKISIM_CHROMIUM to a "
                "Chromium/Chrome executable)")
    return None


def launch(pw):
    """A headless Chromium (``--no-sandbox``: CI and containers run as root, where the sandbox cannot start)."""
    return pw.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
