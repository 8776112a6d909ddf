"""Hostile: os._exit(0) mid-test (no result file is ever written)."""

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
    _os()._exit(0)
