"""Part 1 kernels: vector addition three ways, and a matrix transpose for you to write.

Every kernel is a plain NKI kernel (``neuronxcc.nki``).  On a Trainium instance it is compiled by neuronx-cc and
runs on a NeuronCore; anywhere else the same file runs on nkisim, the course's emulator.  Run them with
``python part1/run_benchmark.py --kernel {naive,tiled,stream,transpose} -n N``.

``skip_middle_end_transformations`` keeps the compiler from reordering or fusing your loops, so what you write
is what runs (and ``affine_range`` behaves like ``sequential_range``).
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_naive(a_vec, b_vec):
    """Adds two 1-D vectors in a single shot.

    The whole vector becomes one SBUF tile with one element per partition, so this only works while the
    vector fits in the 128 partitions of SBUF (N <= 128).
    """
    out = nl.ndarray(shape=a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)

    # One element per partition: shape (N, 1).
    a_sbuf = nl.ndarray(shape=(a_vec.shape[0], 1), dtype=a_vec.dtype, buffer=nl.sbuf)
    b_sbuf = nl.ndarray(shape=(b_vec.shape[0], 1), dtype=b_vec.dtype, buffer=nl.sbuf)

    # HBM -> SBUF.
    nisa.dma_copy(src=a_vec, dst=a_sbuf)
    nisa.dma_copy(src=b_vec, dst=b_sbuf)

    # a + b, with b used as a per-partition scalar (one value per partition).
    sum_sbuf = nisa.tensor_scalar(a_sbuf, nl.add, b_sbuf)

    # SBUF -> HBM.
    nisa.dma_copy(src=sum_sbuf, dst=out)
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_tiled(a_vec, b_vec):
    """Adds two 1-D vectors ROW_CHUNK elements at a time (one element per partition).

    Step 1 of the handout: try larger values of ROW_CHUNK and watch the execution time (and what happens
    beyond 128).
    """
    ROW_CHUNK = 1

    (N,) = a_vec.shape
    assert N % ROW_CHUNK == 0, f"vector length {N} must be a multiple of ROW_CHUNK={ROW_CHUNK}"
    out = nl.ndarray(shape=a_vec.shape, dtype=a_vec.dtype, buffer=nl.hbm)

    for chunk in nl.affine_range(N // ROW_CHUNK):
        lo = chunk * ROW_CHUNK
        a_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(shape=(ROW_CHUNK, 1), dtype=b_vec.dtype, buffer=nl.sbuf)

        nisa.dma_copy(src=a_vec[lo : lo + ROW_CHUNK], dst=a_tile)
        nisa.dma_copy(src=b_vec[lo : lo + ROW_CHUNK], dst=b_tile)

        sum_tile = nisa.tensor_scalar(a_tile, nl.add, b_tile)

        nisa.dma_copy(src=sum_tile, dst=out[lo : lo + ROW_CHUNK])
    return out


@nki.compiler.skip_middle_end_transformations
@nki.jit
def vector_add_stream(a_vec, b_vec):
    """Adds two 1-D vectors as a stream of (128, FREE_DIM) tiles.

    The vector is viewed as a (128, N/128) matrix so every partition holds a row; each loop iteration moves
    FREE_DIM columns.  Step 2 of the handout: raise FREE_DIM and explain the speed-up (and its limit).
    """
    FREE_DIM = 2

    PARTITIONS = nl.tile_size.pmax  # 128
    (N,) = a_vec.shape
    assert N % PARTITIONS == 0, f"vector length {N} must be a multiple of {PARTITIONS}"
    COLS = N // PARTITIONS
    assert COLS % FREE_DIM == 0, f"N/128 = {COLS} must be a multiple of FREE_DIM={FREE_DIM}"

    a_mat = a_vec.reshape((PARTITIONS, COLS))
    b_mat = b_vec.reshape((PARTITIONS, COLS))
    out = nl.ndarray(shape=(PARTITIONS, COLS), dtype=a_vec.dtype, buffer=nl.hbm)

    for col_tile in nl.affine_range(COLS // FREE_DIM):
        lo = col_tile * FREE_DIM
        a_tile = nl.ndarray(shape=(PARTITIONS, FREE_DIM), dtype=a_vec.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray(shape=(PARTITIONS, FREE_DIM), dtype=b_vec.dtype, buffer=nl.sbuf)

        nisa.dma_copy(src=a_mat[:, lo : lo + FREE_DIM], dst=a_tile)
        nisa.dma_copy(src=b_mat[:, lo : lo + FREE_DIM], dst=b_tile)

        sum_tile = nisa.tensor_tensor(a_tile, b_tile, op=nl.add)

        nisa.dma_copy(src=sum_tile, dst=out[:, lo : lo + FREE_DIM])
    return out.reshape(a_vec.shape)


@nki.compiler.skip_middle_end_transformations
@nki.jit
def matrix_transpose(a_tensor):
    """Returns the transpose of the (M, N) matrix ``a_tensor`` as a new (N, M) HBM tensor.

    Step 3 of the handout.  M and N are multiples of 128.  The only compute instruction you may use is
    ``nisa.nc_transpose`` (no ``nl.transpose``, no ``nisa.dma_transpose``, no DMA tricks that transpose for
    you); move data with ``nisa.dma_copy`` and ``nisa.tensor_copy``.
    """
    M, N = a_tensor.shape
    out = nl.ndarray(shape=(N, M), dtype=a_tensor.dtype, buffer=nl.hbm)

    # YOUR CODE HERE: for every 128x128 block of a_tensor, load it into SBUF, transpose it with
    # nisa.nc_transpose (the result lands in PSUM), copy it to SBUF with nisa.tensor_copy and store it into
    # the mirrored block of `out`.  Then delete the line below.
    raise NotImplementedError(
        "matrix_transpose is not implemented yet: write it in part1/kernels.py (load 128x128 blocks with "
        "nisa.dma_copy, transpose them with nisa.nc_transpose, copy PSUM -> SBUF with nisa.tensor_copy, "
        "store them into out) and remove this raise."
    )

    return out
