"""Build autograder.zip for Gradescope (``make gradescope`` / ``python -m grader gradescope``).

The zip holds setup.sh and run_autograder at its root (Gradescope's required layout) and the project sources
needed to install nkisim and the grader, including the staff reference (setup.sh makes it root-only).  With a
class seed file (``--seed-file``) the zip also carries it as ``secret-seed`` (root-only too): every submission is
then graded on the class's secret inputs and its results.json carries Gradescope's leaderboard items (ranked runs,
grader/ranking.py); without one, each submission gets inputs of its own and no leaderboard items.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

# nkibench: the timing layer the sandboxed child runs kernels through on Trainium (grader/child.py)
INCLUDE = ("pyproject.toml", "README.md", "LICENSE", "nkisim", "nkibench", "grader")
EXCLUDE_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    for name in INCLUDE:
        p = root / name
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += [
                f
                for f in sorted(p.rglob("*"))
                if f.is_file() and not EXCLUDE_PARTS & set(f.parts) and not f.name.endswith((".pyc", ".pyo"))
            ]
    return out


SEED_ENTRY = "secret-seed"  # /autograder/source/secret-seed (run_autograder passes it to the grader)


def build_autograder_zip(out: Path, root: Path, seed_file: Path | None = None) -> Path:
    """Write the zip atomically; returns its path."""
    root = root.resolve()
    for required in ("pyproject.toml", "nkisim", "grader"):
        if not (root / required).exists():
            raise FileNotFoundError(f"{root} does not look like the project root (no {required})")
    here = Path(__file__).parent / "gradescope"
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for script in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(script)
            info.external_attr = (stat.S_IFREG | 0o755) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, (here / script).read_bytes())
        for f in _files(root):
            zf.write(f, f.relative_to(root).as_posix())  # Gradescope unpacks the zip into /autograder/source
        if seed_file is not None:
            from grader.seeds import read_seed

            zf.writestr(SEED_ENTRY, f"{read_seed(seed_file)}\n")
    os.replace(tmp, out)
    return out
