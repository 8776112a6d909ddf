"""API coverage: which documented symbols of each NKI namespace nkisim implements.

``python -m nkisim.apicoverage`` measures every front end (``nkisim/frontends``) against the symbol list of its
documentation (the front end's ``symbols_file``, which names its sources: ``legacy/legacy_symbols.txt`` for
``neuronxcc.nki``, Neuron SDK 2.20-2.26), prints each symbol's status, the missing ones and the coverage figure.
``--frontend KEY`` limits the report to one namespace.  ``--notes PATH`` also reports the backticked ``nki.X`` /
``nl.X`` / ``nisa.X`` / ``ncc.X`` names of an API notes file (e.g. ../shared/nki-api.md) against the legacy API.

A symbol is *missing* when it resolves to nkisim's "does not support X yet" placeholder (or a function marked
``nkisim_unsupported``); every missing symbol raises that error naming itself when used.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

from nkisim.frontends import FRONT_ENDS, LEGACY, FrontEnd, _unsupported

_NAME = re.compile(r"`(nki|nl|nisa|ncc)\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
# Names in the notes that are prose placeholders or explicitly other-era / other-module spellings.
_NOT_SYMBOLS = {"nki.device_print", "nki.sbuf.mod_alloc", "nisa.sbuf.mod_alloc", "nl.dma_copy", "nl.affine_rangee",
                "nl.arrange", "nki.language.X", "nki.isa.X", "nki.compiler.X", "nl.X", "nisa.X", "ncc.X"}


def documented(fe: FrontEnd = LEGACY) -> list[str]:
    """The documented API of a front end, in file order."""
    return list(_unsupported.documented(fe))


def legacy_symbols() -> list[str]:
    """The documented legacy API, in file order."""
    return documented(LEGACY)


def symbols(text: str) -> list[str]:
    """Backticked API names in a notes file."""
    found = []
    for prefix, rest in _NAME.findall(text):
        name = f"{prefix}.{rest}"
        if name not in _NOT_SYMBOLS and name not in found:
            found.append(name)
    return found


def module_of(fe: FrontEnd, prefix: str) -> str:
    """The nkisim module serving a doc prefix of a front end ('nl' -> '...language')."""
    sub = fe.prefixes[prefix]
    return fe.top if not sub else f"{fe.package}.{sub}"


def resolve(name: str, fe: FrontEnd = LEGACY):
    """The object a documented name resolves to (placeholders included); AttributeError when it does not."""
    prefix, *parts = name.split(".")
    subs = {sub: p for p, sub in fe.prefixes.items() if sub}
    if prefix == "nki" and parts and parts[0] in subs:
        prefix, parts = subs[parts[0]], parts[1:]
    obj = importlib.import_module(module_of(fe, prefix))
    for part in parts:
        obj = getattr(obj, part)
    return obj


def status(name: str, fe: FrontEnd = LEGACY) -> str:
    """'ok', 'missing' (placeholder raising "nkisim does not support X yet") or 'absent' (AttributeError)."""
    try:
        obj = resolve(name, fe)
    except AttributeError:
        return "absent"
    except NotImplementedError:  # an attribute of a placeholder
        return "missing"
    if isinstance(obj, _unsupported.Unsupported) or getattr(obj, "nkisim_unsupported", False):
        return "missing"
    return "ok"


def resolves(name: str, fe: FrontEnd = LEGACY) -> bool:
    return status(name, fe) == "ok"


def report(names: list[str], title: str, fe: FrontEnd = LEGACY) -> tuple[int, list[str]]:
    rows = [(n, status(n, fe)) for n in names]
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
    parser.add_argument("--frontend", choices=[fe.key for fe in FRONT_ENDS], help="report one namespace only")
    parser.add_argument("--notes", help="also check the API names backticked in this notes file (legacy API)")
    args = parser.parse_args(argv)
    status_code = 0
    for fe in FRONT_ENDS:
        if args.frontend and fe.key != args.frontend:
            continue
        rel = Path(fe.symbols_path).relative_to(Path(__file__).resolve().parents[1])
        _ok, missing = report(documented(fe), f"{fe.title} ({fe.docs}, {rel})", fe)
        absent = [n for n in missing if status(n, fe) == "absent"]
        if absent:  # a documented symbol without the placeholder: a bug in nkisim's module __getattr__
            print(f"error: {len(absent)} documented symbol(s) of {fe.namespace} raise AttributeError: "
                  f"{', '.join(absent)}", file=sys.stderr)
            status_code = 1
        print()
    if args.notes:
        path = Path(args.notes)
        if not path.exists():
            print(f"API notes not found at {path}", file=sys.stderr)
            return 2
        report(symbols(path.read_text(encoding="utf-8")), f"API names in {path.name}")
    return status_code


if __name__ == "__main__":
    raise SystemExit(main())
