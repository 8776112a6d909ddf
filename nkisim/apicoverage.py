"""API coverage: which symbols of the legacy NKI API (Neuron SDK 2.20-2.26 docs) nkisim implements.

``python -m nkisim.apicoverage`` measures against ``nkisim/api/legacy_symbols.txt`` (every public symbol of
``nki``, ``nki.language``, ``nki.isa``, ``nki.compiler`` and ``nki.typing`` the 2.2x docs list; the file names its
sources) and prints each symbol's status, the missing ones and the coverage figure.  ``--notes PATH`` also reports
the backticked ``nki.X`` / ``nl.X`` / ``nisa.X`` / ``ncc.X`` names of an API notes file (e.g. ../shared/nki-api.md).

A symbol is *missing* when it resolves to nkisim's "does not support X yet" placeholder (or a function marked
``nkisim_unsupported``); every missing symbol raises that error naming itself when used.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

from nkisim.api import _unsupported

_NAME = re.compile(r"`(nki|nl|nisa|ncc)\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
# Names in the notes that are prose placeholders or explicitly other-era / other-module spellings.
_NOT_SYMBOLS = {"nki.device_print", "nki.sbuf.mod_alloc", "nisa.sbuf.mod_alloc", "nl.dma_copy", "nl.affine_rangee",
                "nl.arrange", "nki.language.X", "nki.isa.X", "nki.compiler.X", "nl.X", "nisa.X", "ncc.X"}
_SUBMODULES = {"language": "nl", "isa": "nisa", "compiler": "ncc", "typing": "nt"}


def legacy_symbols() -> list[str]:
    """The documented legacy API, in file order."""
    seen: list[str] = []
    for line in _unsupported.SYMBOLS_FILE.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and line not in seen:
            seen.append(line)
    return seen


def symbols(text: str) -> list[str]:
    """Backticked API names in a notes file."""
    found = []
    for prefix, rest in _NAME.findall(text):
        name = f"{prefix}.{rest}"
        if name not in _NOT_SYMBOLS and name not in found:
            found.append(name)
    return found


def status(name: str) -> str:
    """'ok', 'missing' (placeholder raising "nkisim does not support X yet") or 'absent' (AttributeError)."""
    prefix, *parts = name.split(".")
    if prefix == "nki" and parts and parts[0] in _SUBMODULES:
        prefix, parts = _SUBMODULES[parts[0]], parts[1:]
    obj = importlib.import_module(_unsupported.MODULES[prefix])
    for part in parts:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return "absent"
        except NotImplementedError:  # an attribute of a placeholder
            return "missing"
    if isinstance(obj, _unsupported.Unsupported) or getattr(obj, "nkisim_unsupported", False):
        return "missing"
    return "ok"


def resolves(name: str) -> bool:
    return status(name) == "ok"


def report(names: list[str], title: str) -> tuple[int, list[str]]:
    rows = [(n, status(n)) for n in names]
    for n, st in rows:
        print(f"{'ok     ' if st == 'ok' else st.upper():8s}{n}")
    missing = [n for n, st in rows if st != "ok"]
    ok = len(names) - len(missing)
    pct = 100.0 * ok / len(names) if names else 100.0
    print(f"\n{title}: {ok} of {len(names)} implemented ({pct:.1f}%)")
    if missing:
        print("missing: " + ", ".join(missing))
    return ok, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", help="also check the API names backticked in this notes file")
    args = parser.parse_args(argv)
    _ok, missing = report(legacy_symbols(), "legacy NKI API (Neuron SDK 2.2x docs, nkisim/api/legacy_symbols.txt)")
    absent = [n for n in missing if status(n) == "absent"]
    if absent:  # a documented symbol without the placeholder: a bug in nkisim's module __getattr__
        print(f"error: {len(absent)} documented symbol(s) raise AttributeError: {', '.join(absent)}", file=sys.stderr)
        return 1
    if args.notes:
        path = Path(args.notes)
        if not path.exists():
            print(f"API notes not found at {path}", file=sys.stderr)
            return 2
        print()
        report(symbols(path.read_text(encoding="utf-8")), f"API names in {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
