"""Input seeds: per submission (a student's own runs) or one secret seed shared by a whole class (ranked runs).

Per-submission seeds (the default of ``python -m grader grade``) derive from the rubric's salt and the
submission's content hash (grader/problems/base.py: submission_seed): a regrade of the same files is reproducible and
a changed file gets new inputs.

A class seed is one secret number for a whole batch (per assignment release; the TA can rotate it).  Every
submission then gets the same inputs, so the NumPy references are computed once per (case, seed) and shared
through grader/refcache.py, and the leaderboard compares kernels on identical inputs.  The secret lives in a
file only the grader's user may read (``OUT/.grader/secret-seed`` by default, mode 0600 in a 0700 directory that
the sandbox also hides from student code); reports meant for students name it by a fingerprint only.

No bottom-layer dependencies: this module imports nothing of the grader.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

PRIVATE_DIR = ".grader"  # under a batch's --out: the secret seed, the reference cache, the pseudonym key
SEED_FILE = "secret-seed"
FINGERPRINT_FILE = "seed-fingerprint"  # the fingerprint of the seed the batch was last graded with (not secret)
SEED_BITS = 63


class SeedError(ValueError):
    """The secret seed file is unreadable or malformed (a usage error: the message names the file)."""


def private_dir(out_root: str | Path) -> Path:
    return Path(out_root) / PRIVATE_DIR


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents), make it 0700 (neither the sandbox user nor other users may list it) and
    register it, so that every sandboxed run on this machine hides it (see registered_private_dirs)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    register_private_dir(path)
    return path


def _registry() -> Path:
    state = os.environ.get("GRADER_STATE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "asst4-grader")
    return Path(state) / "private-dirs"


def registered_private_dirs() -> list[str]:
    """Every private directory the grader created for this user that still exists.  The sandbox hides them all from
    student code, not only the current batch's: where the kernel runs with the grader's own uid (no dedicated
    sandbox user), file permissions alone would not keep another batch's seed or cache from it."""
    try:
        lines = _registry().read_text().splitlines()
    except OSError:
        return []
    return sorted({line for line in lines if line and os.path.isdir(line)})


def register_private_dir(path: Path) -> None:
    import fcntl

    registry = _registry()
    entry = str(path.resolve())
    try:
        registry.parent.mkdir(parents=True, exist_ok=True)
        with open(registry.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            known = registered_private_dirs()
            if entry in known:
                return
            tmp = registry.with_name(f".{registry.name}.{secrets.token_hex(4)}.tmp")
            tmp.write_text("".join(f"{d}\n" for d in [*known, entry]))  # vanished directories are dropped
            os.replace(tmp, registry)
    except OSError:
        pass  # an unwritable home: the current batch's directory is still hidden (GradeConfig.hidden_dirs)


def fingerprint(seed: int) -> str:
    """A short public name of a secret seed (reports, leaderboards): says which seed without revealing it."""
    return hashlib.sha256(f"asst4-seed|{int(seed)}".encode()).hexdigest()[:10]


def derived_key(seed: int, purpose: str) -> bytes:
    """A secret key for ``purpose`` (reference-cache MACs, pseudonyms) derived from the secret seed."""
    return hmac.new(str(int(seed)).encode(), f"asst4|{purpose}".encode(), hashlib.sha256).digest()


def _parse(text: str, path: Path) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SeedError(f"{path}: expected one non-negative integer (the secret seed), got {text[:40]!r}") from None
    if not 0 <= value < 2**SEED_BITS:
        raise SeedError(f"{path}: the secret seed must be in [0, 2^{SEED_BITS}), got {value}")
    return value


def read_seed(path: str | Path) -> int:
    path = Path(path)
    try:
        return _parse(path.read_text(encoding="utf-8"), path)
    except OSError as exc:
        raise SeedError(f"cannot read the secret seed file {path}: {exc.strerror or exc}") from exc


def write_seed(path: str | Path, seed: int) -> None:
    """Write the seed atomically, readable by the grader's user only."""
    path = Path(path)
    if path.parent.name == PRIVATE_DIR:
        ensure_private_dir(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{int(seed)}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def class_seed(path: str | Path, *, rotate: bool = False) -> tuple[int, bool]:
    """The secret seed stored at ``path``, created (or, with ``rotate``, replaced) with a fresh random one;
    returns (seed, whether it is new)."""
    path = Path(path)
    if path.exists() and not rotate:
        return read_seed(path), False
    seed = secrets.randbits(SEED_BITS)
    write_seed(path, seed)
    return seed, True


def write_fingerprint(private: Path, seed: int) -> None:
    """Record which seed the batch is graded with (by fingerprint), for the leaderboard: it ranks those runs."""
    tmp = private / f".{FINGERPRINT_FILE}.{secrets.token_hex(4)}.tmp"
    tmp.write_text(fingerprint(seed) + "\n")
    os.replace(tmp, private / FINGERPRINT_FILE)


def current_fingerprint(private: Path) -> str | None:
    try:
        text = (private / FINGERPRINT_FILE).read_text().strip()
    except OSError:
        return None
    return text or None
