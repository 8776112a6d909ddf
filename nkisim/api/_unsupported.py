"""Documented legacy NKI names that nkisim does not implement yet.

The public API modules end with a module ``__getattr__`` that lands here for any name they do not define.  A name
the legacy API documents (``legacy_symbols.txt``) resolves to a placeholder whose use raises
``NotImplementedError("nkisim does not support nl.X yet ...")``, so a kernel fails at the first use with the
symbol named; any other name raises the real module's AttributeError (a misspelling stays a misspelling).
"""

from __future__ import annotations

import functools
from pathlib import Path

SYMBOLS_FILE = Path(__file__).with_name("legacy_symbols.txt")
# prefix used in legacy_symbols.txt -> module that implements it
MODULES = {
    "nki": "nkisim.api.nki",
    "nl": "nkisim.api.language",
    "nisa": "nkisim.api.isa",
    "ncc": "nkisim.api.compiler",
    "nt": "nkisim.api.typing",
}


class NkisimUnsupportedError(NotImplementedError):
    """A documented NKI API symbol that nkisim does not implement yet."""


@functools.cache
def documented() -> frozenset[str]:
    """Every symbol of the legacy API list, as 'nl.load', 'ncc.sbuf.mod_alloc', ..."""
    out = set()
    for line in SYMBOLS_FILE.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(line)
    return frozenset(out)


class Unsupported:
    """Stands in for a documented symbol nkisim lacks: calling it or reading an attribute raises."""

    __slots__ = ("nki_symbol",)

    def __init__(self, symbol: str) -> None:
        self.nki_symbol = symbol

    def _raise(self):
        raise NkisimUnsupportedError(
            f"nkisim does not support {self.nki_symbol} yet (it is part of the legacy NKI API; see docs/nkisim.md "
            "'Unsupported API' for what is missing and `python -m nkisim.apicoverage` for the full list)")

    def __call__(self, *args, **kwargs):
        self._raise()

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        self._raise()

    def __getitem__(self, item):
        self._raise()

    def __repr__(self) -> str:
        return f"<unsupported {self.nki_symbol}>"


def missing(module: str, prefix: str, name: str):
    """Module ``__getattr__`` body: a placeholder for documented names, AttributeError for the rest."""
    symbol = f"{prefix}.{name}"
    if not name.startswith("_") and symbol in documented():
        return Unsupported(symbol)
    raise AttributeError(f"module '{module}' has no attribute '{name}'")
