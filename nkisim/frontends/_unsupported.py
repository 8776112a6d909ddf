"""Documented NKI names that nkisim does not implement yet, for every front end.

Each public API module ends with a module ``__getattr__`` that lands here for any name it does not define.  A name
its front end's documentation lists (the front end's ``symbols_file``, e.g. ``legacy/legacy_symbols.txt``)
resolves to a placeholder whose use raises ``NotImplementedError("nkisim does not support nl.X yet ...")``, so a
kernel fails at the first use with the symbol named; any other name raises the real module's AttributeError (a
misspelling stays a misspelling).
"""

from __future__ import annotations

import functools

from nkisim.core.sealed import Sealed
from nkisim.frontends import FrontEnd


class NkisimUnsupportedError(NotImplementedError, metaclass=Sealed):
    """A documented NKI API symbol that nkisim does not implement yet."""


@functools.cache
def documented(frontend: FrontEnd) -> tuple[str, ...]:
    """Every symbol of the front end's documented API, in file order ('nl.load', 'ncc.sbuf.mod_alloc', ...)."""
    out: dict[str, None] = {}
    with open(frontend.symbols_path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                out[line] = None
    return tuple(out)


@functools.cache
def _documented_set(frontend: FrontEnd) -> frozenset[str]:
    return frozenset(documented(frontend))


class Unsupported(metaclass=Sealed):
    """Stands in for a documented symbol nkisim lacks: calling it or reading an attribute raises."""

    __slots__ = ("nki_symbol", "nki_api", "why")

    def __init__(self, symbol: str, api: str, why: str = "") -> None:
        self.nki_symbol = symbol
        self.nki_api = api
        self.why = why

    def _raise(self):
        raise NkisimUnsupportedError(
            f"nkisim does not support {self.nki_symbol} yet ({self.why + '; ' if self.why else ''}it is part of "
            f"the {self.nki_api}; see docs/nkisim.md "
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


def missing(frontend: FrontEnd, prefix: str, name: str, removed: dict[str, str] | None = None,
            why: dict[str, str] | None = None):
    """Module ``__getattr__`` body of the module ``prefix`` of ``frontend`` (``nl``, ``nisa``, ...): a placeholder
    for documented names (``why`` maps some of them to the reason nkisim lacks them), AttributeError for the rest;
    ``removed`` maps names another API version had to what replaced them (the error says so)."""
    symbol = f"{prefix}.{name}"
    if not name.startswith("_") and symbol in _documented_set(frontend):
        return Unsupported(symbol, frontend.title, (why or {}).get(name, ""))
    sub = frontend.prefixes.get(prefix, "")
    module = frontend.namespace + (f".{sub}" if sub else "")
    if removed and name in removed:
        raise AttributeError(f"module '{module}' has no attribute '{name}' (it belongs to the legacy neuronxcc.nki "
                             f"API): {removed[name]}")
    raise AttributeError(f"module '{module}' has no attribute '{name}'")
