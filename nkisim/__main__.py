"""Command line: ``python -m nkisim {info,install-fallback,check}``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def _cmd_info(args: argparse.Namespace) -> int:
    from nkisim import fallback

    info = fallback.backend_info()
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        print(fallback.describe(info))
    return 0


def _cmd_install_fallback(args: argparse.Namespace) -> int:
    from nkisim import fallback

    if args.uninstall:
        removed = fallback.uninstall_pth(args.site_dir)
        print(f"removed {removed}" if removed else f"nothing to remove ({fallback.pth_path(args.site_dir)})")
        return 0
    path = fallback.install_pth(args.site_dir)
    print(f"wrote {path}: `import neuronxcc.nki` falls back to nkisim when neuronx-cc is not installed")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from nkisim import check

    if args.list_rules:
        for rule in check.RULES:
            print(f"{rule.code:28} {rule.kind:10} {rule.severity:8} {rule.description}")
        return 0
    if not args.files:
        print("nkisim check: no files given", file=sys.stderr)
        return 2
    errors = warnings = 0
    records = []
    for name in args.files:
        try:
            violations = check.check_kernel(Path(name))
        except OSError as exc:
            print(f"{name}: cannot read: {exc.strerror or exc}", file=sys.stderr)
            return 2
        for v in violations:
            if v.severity == "error":
                errors += 1
            elif v.severity == "warning":
                warnings += 1
            if args.errors_only and v.severity != "error":
                continue
            if args.json:
                records.append({"file": name, **v.as_dict()})
            else:
                print(f"{name}:{v.format()}")
    if args.json:
        print(json.dumps(records, indent=2))
    else:
        print(f"{errors} error(s), {warnings} warning(s) in {len(args.files)} file(s)", file=sys.stderr)
    return 1 if errors else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nkisim", description="nkisim: NumPy emulator of the NKI API.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser("info", help="show which NKI backend is active (real neuronx-cc or nkisim) and why")
    info.add_argument("--json", action="store_true", help="print the backend_info() dictionary as JSON")
    info.set_defaults(func=_cmd_info)

    inst = sub.add_parser(
        "install-fallback",
        help="install the .pth hook that maps `import neuronxcc.nki` to nkisim when neuronx-cc is absent",
        description="Writes nkisim_fallback.pth into the environment's site-packages (purelib).  The hook "
        "never shadows a real neuronx-cc; set NKISIM_DISABLE_FALLBACK=1 to switch it off without "
        "uninstalling.",
    )
    inst.add_argument("--uninstall", action="store_true", help="remove the .pth file instead")
    inst.add_argument("--site-dir", default=None, help="directory to write to (default: this environment's purelib)")
    inst.set_defaults(func=_cmd_install_fallback)

    chk = sub.add_parser(
        "check",
        help="screen kernel files for sandbox violations and Python the NKI compiler rejects",
        description="Prints FILE:LINE:COL: CODE message for each finding; exits 1 if any is an error.",
    )
    chk.add_argument("files", nargs="*", metavar="FILE")
    chk.add_argument("--errors-only", action="store_true", help="do not print warnings and notes")
    chk.add_argument("--json", action="store_true", help="print findings as JSON")
    chk.add_argument("--list-rules", action="store_true", help="print the rule table and exit")
    chk.set_defaults(func=_cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `python -m nkisim check ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
