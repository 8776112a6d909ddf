"""Twin of ``no_reorder_block`` without the directive: the scheduler may overlap the blocks."""

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

IN_ORDER = False


def _blocks(tiles, out, P):
    # the blocks are transposed last-loaded first: reordered, VectorE starts on block 0 as soon as it lands; in
    # program order it waits for the last load before anything
    for i, j, tile in reversed(tiles):
        back = nisa.tensor_copy(nisa.nc_transpose(tile))
        nisa.dma_copy(src=back, dst=out[j * P : (j + 1) * P, i * P : (i + 1) * P])


@nki.jit
def matrix_transpose(a_tensor):
    M, N = a_tensor.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.hbm)
    tiles = []
    for i in range(M // P):
        for j in range(N // P):
            tile = nl.ndarray((P, P), dtype=a_tensor.dtype, buffer=nl.sbuf)
            nisa.dma_copy(src=a_tensor[i * P : (i + 1) * P, j * P : (j + 1) * P], dst=tile)
            tiles.append((i, j, tile))
    if IN_ORDER:
        with ncc.no_reorder():
            _blocks(tiles, out, P)
    else:
        _blocks(tiles, out, P)
    return out
