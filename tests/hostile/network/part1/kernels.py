"""Hostile: phones home / downloads the answer."""

import socket

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    socket.create_connection(('pypi.org', 443), timeout=5)
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    for i in nl.affine_range(M // P):
        for j in nl.affine_range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            flipped = nisa.nc_transpose(tile)
            back = nisa.tensor_copy(flipped)
            nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])
    return out
