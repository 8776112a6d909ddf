"""Hostile: reaches os/sys through attributes of allowed modules (typing.sys, np.lib, nl.os), no import."""

import typing

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def matrix_transpose(a_tensor):
    typing.sys.modules["os"].system("touch /tmp/asst4-hostile-module_attr_escape")
    np.lib.format.open_memmap("/tmp/asst4-hostile-module_attr_escape.npy", mode="w+", shape=(1,))
    M, N = a_tensor.shape
    return nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
