# STAFF-ONLY: excluded from the student release (tools/release.py checks for this marker).
"""The staff reference matrix_transpose (grader/reference/part1/kernels.py) written in the current NKI API.

Statement for statement the legacy kernel with destination-first calls and the output in ``nl.shared_hbm``;
tests/test_reference_nki_twins.py checks both compute the same bits at the same modelled latency.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matrix_transpose(a_tensor):
    """Returns the transpose of the (M, N) matrix ``a_tensor`` as a new (N, M) HBM tensor (M, N multiples of 128).

    Only ``nisa.nc_transpose`` computes.  Rows are processed in bands of up to 8 blocks of 128 rows, columns in
    chunks of COL_CHUNK; each band chunk arrives with one DMA per row block.  For every 128-column block, the
    transposed 128x128 blocks of the band are gathered side by side in PSUM (4 per 2 KiB bank), copied to one
    SBUF tile (VectorE and ScalarE take one bank each) and leave with a single DMA whose per-partition runs are
    ``band * 128`` elements long (4 KiB for fp32 with band = 8), the size at which DMAs reach full bandwidth.
    """
    P = nl.tile_size.pmax
    COL_CHUNK = 1024
    BLOCKS_PER_BANK = 4  # 4 x 128 fp32 = 512 values per partition = one 2 KiB PSUM bank
    M, N = a_tensor.shape
    assert M % P == 0 and N % P == 0, f"matrix_transpose needs multiples of {P}, got {a_tensor.shape}"
    out = nl.ndarray((N, M), dtype=a_tensor.dtype, buffer=nl.shared_hbm)

    row_blocks = M // P
    band = next(b for b in (8, 4, 2, 1) if row_blocks % b == 0)
    banks = max(1, band // BLOCKS_PER_BANK)
    per_bank = band // banks
    cols = min(N, COL_CHUNK)
    while N % cols:
        cols -= P
    col_blocks = cols // P

    for band_idx in nl.affine_range(row_blocks // band):
        row0 = band_idx * band * P
        for chunk in nl.affine_range(N // cols):
            col0 = chunk * cols
            in_tile = nl.ndarray((P, band, cols), dtype=a_tensor.dtype, buffer=nl.sbuf)
            for r in nl.affine_range(band):
                nisa.dma_copy(dst=in_tile[:, r, :], src=a_tensor[row0 + r * P : row0 + (r + 1) * P, col0 : col0 + cols])
            for cb in nl.affine_range(col_blocks):
                t_sbuf = nl.ndarray((P, band * P), dtype=a_tensor.dtype, buffer=nl.sbuf)
                for bank in nl.static_range(banks):  # trace-time int: picks the copy engine
                    t_psum = nl.ndarray((P, per_bank * P), dtype=a_tensor.dtype, buffer=nl.psum)
                    for r in nl.affine_range(per_bank):
                        block = in_tile[:, bank * per_bank + r, cb * P : (cb + 1) * P]
                        nisa.nc_transpose(dst=t_psum[:, r * P : (r + 1) * P], data=block)
                    lo = bank * per_bank * P
                    # alternate the PSUM evictions between VectorE and ScalarE (activation(copy) runs on
                    # ScalarE on trn1 too, where ScalarE has no tensor_copy)
                    if bank % 2 == 0:
                        nisa.tensor_copy(dst=t_sbuf[:, lo : lo + per_bank * P], src=t_psum, engine=nisa.engine.vector)
                    else:
                        nisa.activation(dst=t_sbuf[:, lo : lo + per_bank * P], op=nl.copy, data=t_psum)
                out_row0 = col0 + cb * P
                nisa.dma_copy(dst=out[out_row0 : out_row0 + P, row0 : row0 + band * P], src=t_sbuf)
    return out
