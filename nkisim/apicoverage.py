"""API coverage report: which NKI symbols named in the API notes resolve in nkisim.

``python -m nkisim.apicoverage [PATH/TO/nki-api.md]`` scans the notes (by default ../shared/nki-api.md beside the
checkout) for backticked ``nki.X`` / ``nl.X`` / ``nisa.X`` / ``ncc.X`` names and prints implemented vs missing.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

_PREFIX = {
    "nki": "nkisim.api.nki",
    "nl": "nkisim.api.language",
    "nisa": "nkisim.api.isa",
    "ncc": "nkisim.api.compiler",
}
_NAME = re.compile(r"`(nki|nl|nisa|ncc)\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
# Names in the notes that are prose placeholders or explicitly other-era / other-module spellings.
_NOT_SYMBOLS = {"nki.device_print", "nki.sbuf.mod_alloc", "nisa.sbuf.mod_alloc", "nl.dma_copy", "nl.affine_rangee",
                "nl.arrange", "nki.language.X", "nki.isa.X", "nki.compiler.X", "nl.X", "nisa.X", "ncc.X"}


def symbols(text: str) -> list[str]:
    found = []
    for prefix, rest in _NAME.findall(text):
        name = f"{prefix}.{rest}"
        if name not in _NOT_SYMBOLS and name not in found:
            found.append(name)
    return found


def resolves(name: str) -> bool:
    prefix, *parts = name.split(".")
    obj = importlib.import_module(_PREFIX[prefix])
    for part in parts:
        if part in ("language", "isa", "compiler") and prefix == "nki":
            obj = importlib.import_module(f"nkisim.api.{part}")
            continue
        try:
            obj = getattr(obj, part)
        except AttributeError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    default = Path(__file__).resolve().parents[2] / "shared" / "nki-api.md"
    parser.add_argument("notes", nargs="?", default=str(default))
    args = parser.parse_args(argv)
    path = Path(args.notes)
    if not path.exists():
        print(f"API notes not found at {path}", file=sys.stderr)
        return 2
    names = symbols(path.read_text(encoding="utf-8"))
    missing = [n for n in names if not resolves(n)]
    for n in names:
        print(f"{'ok     ' if n not in missing else 'MISSING'} {n}")
    print(f"\n{len(names) - len(missing)} of {len(names)} API symbols named in {path.name} resolve in nkisim")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
