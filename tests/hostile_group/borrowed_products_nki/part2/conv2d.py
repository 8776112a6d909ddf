"""Hostile (grading security, product sharing, docs/grading-security.md L9): the staff conv, plus busy work whose
products every call shares.

Every call multiplies the same two constant tiles WASTE_MATMULS more times.  Grouped (part2.large, bias and maxpool
replayed in one process, in lockstep), the first member computes those products and its siblings reuse them at a
memo lookup each, so their own threads spend a fraction of what each call costs alone.  Alone every call is far over
a short time limit; were a member's guard to count only its own thread (not the products it borrowed), the calls
with the short limit would pass in the group on the first call's products."""

import nki
import nki.isa as nisa
import nki.language as nl

# Output rows per band: input DMAs of (BAND_ROWS + 2) full rows per partition (>= 2 KiB for the course shapes).
BAND_ROWS = 16
# 128x128 weight blocks transposed into one PSUM bank (4 x 128 fp32 = 2 KiB) before one copy to SBUF.
TRANSPOSES_PER_BANK = 4


def _load_weights(W, w_t, in_tiles, out_tiles, taps):
    """w_t[:, ci, tap, co*128:(co+1)*128] = W[co*128:(co+1)*128, ci*128:(ci+1)*128, tap].T for every tile."""
    P = nl.tile_size.pmax
    out_channels, in_channels, filter_size, _ = W.shape
    w_rows = W.reshape((out_channels, in_channels * taps))
    for co in nl.affine_range(out_tiles):
        w_nat = nl.ndarray((P, in_channels, taps), dtype=W.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=w_nat.reshape((P, in_channels * taps)), src=w_rows[co * P : (co + 1) * P, :])
        # Four transposed 128x128 blocks share one PSUM bank and leave it with one copy (fewer, larger copies
        # keep the Tensor Engine from waiting on PSUM buffers).  static_range gives trace-time ints, so the
        # grouping and the engine choice are plain Python on the real compiler too.
        for ci in nl.static_range(in_tiles):
            for t0 in nl.static_range(0, taps, TRANSPOSES_PER_BANK):
                n = min(TRANSPOSES_PER_BANK, taps - t0)
                w_psum = nl.ndarray((P, n, P), dtype=W.dtype, buffer=nl.psum)
                for j in nl.static_range(n):
                    nisa.nc_transpose(dst=w_psum[:, j, :], data=w_nat[:, ci * P : (ci + 1) * P, t0 + j])
                # alternate the PSUM evictions between VectorE and ScalarE (activation(copy): ScalarE on trn1 too)
                if (t0 // TRANSPOSES_PER_BANK) % 2 == 0:
                    nisa.tensor_copy(dst=w_t[:, ci, t0 : t0 + n, co * P : (co + 1) * P], src=w_psum,
                                     engine=nisa.engine.vector)
                else:
                    nisa.activation(dst=w_t[:, ci, t0 : t0 + n, co * P : (co + 1) * P], op=nl.copy, data=w_psum)


def _load_bias(bias, bias_sb, out_tiles):
    """bias_sb[:, co] = bias[co*128:(co+1)*128] as float32 (one value per partition)."""
    P = nl.tile_size.pmax
    bias_rows = bias.reshape((out_tiles, P))
    for co in nl.affine_range(out_tiles):
        nisa.dma_copy(dst=bias_sb[:, co : co + 1], src=bias_rows[co])


def _evacuate_rows(acc, bias_col, out_rows, use_scalar):
    """out_rows (SBUF, X dtype) = acc (PSUM) + bias, on ScalarE or VectorE."""
    if use_scalar:
        nisa.activation(dst=out_rows, op=nl.copy, data=acc, bias=bias_col, scale=1.0)
    else:
        nisa.tensor_scalar(dst=out_rows, data=acc, op0=nl.add, operand0=bias_col)


def _evacuate_pooled(acc, bias_col, out_rows, rows, width):
    """out_rows = maxpool2x2(acc) + bias; acc holds an even number of rows of an even width."""
    # the pool window's two axes last (a free view): the reduction runs over trailing axes
    windows = acc.reshape((nl.tile_size.pmax, rows // 2, 2, width // 2, 2)).permute((0, 1, 3, 2, 4))
    pooled = nl.ndarray((nl.tile_size.pmax, rows // 2, width // 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=pooled, op=nl.max, data=windows, axis=(3, 4))
    nisa.tensor_scalar(dst=out_rows, data=pooled, op0=nl.add, operand0=bias_col)


def _evacuate_pooled_generic(acc_top, acc_bottom, bias_col, out_row, width):
    """Pooling when the 2x2 windows do not tile a PSUM tile (odd width, or one row per matmul): stage the two
    biased conv rows in SBUF (float32), then reduce there into one pooled row."""
    P = nl.tile_size.pmax
    used_w = (width // 2) * 2
    staged = nl.ndarray((P, 2, used_w), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=staged[:, 0:1, :], data=acc_top[:, :, 0:used_w], op0=nl.add, operand0=bias_col)
    nisa.tensor_scalar(dst=staged[:, 1:2, :], data=acc_bottom[:, :, 0:used_w], op0=nl.add, operand0=bias_col)
    windows = staged.reshape((P, 1, 2, used_w // 2, 2)).permute((0, 1, 3, 2, 4))
    nisa.tensor_reduce(dst=out_row, op=nl.max, data=windows, axis=(3, 4))


def _accumulate(acc, x_band, w_t, co, row0, rows, in_tiles, filter_size, out_width):
    """acc[:, r, x] = sum over (ci, p, q) of w_t[ci, p*K+q, co].T @ x_band[ci, row0+r+p, x+q]."""
    P = nl.tile_size.pmax
    for ci in nl.affine_range(in_tiles):
        for p in nl.affine_range(filter_size):
            for q in nl.affine_range(filter_size):
                nisa.nc_matmul(
                    dst=acc,
                    stationary=w_t[:, ci, p * filter_size + q, co * P : (co + 1) * P],
                    moving=x_band[:, ci, row0 + p : row0 + p + rows, q : q + out_width],
                )


def _conv_band(X, X_out, w_t, bias_sb, x_band, b, rows, pool_size, rows_per_mm, in_tiles, out_tiles, filter_size):
    """Computes conv rows [conv_row0, conv_row0 + band_rows) of image b for all output channels, fused with
    bias and pooling, and stores the resulting rows of X_out.  x_band is allocated by the caller's loop body,
    so consecutive bands get alternating buffers and the next band's input DMA overlaps this band's matmuls."""
    conv_row0, band_rows, out_row0 = rows  # out_row0 = conv_row0 / pool_size, passed in (no division of loop indices)
    P = nl.tile_size.pmax
    _, _, _, input_width = X.shape
    out_width = input_width - filter_size + 1
    in_rows = band_rows + filter_size - 1

    for ci in nl.affine_range(in_tiles):
        nisa.dma_copy(dst=x_band[:, ci, :, :], src=X[b, ci * P : (ci + 1) * P, conv_row0 : conv_row0 + in_rows, :])

    pooled_w = out_width // pool_size
    out_band_rows = band_rows // pool_size
    fused_pool = pool_size == 2 and out_width % 2 == 0 and rows_per_mm % 2 == 0
    groups = band_rows // rows_per_mm
    tail = band_rows - groups * rows_per_mm
    for co in nl.affine_range(out_tiles):
        bias_col = bias_sb[:, co : co + 1]
        out_band = nl.ndarray((P, out_band_rows, pooled_w), dtype=X.dtype, buffer=nl.sbuf)
        if pool_size == 1:
            # pairs of groups: the first evacuates on ScalarE, the second on VectorE (no control flow on the
            # loop variable); both PSUM tiles are allocated here so consecutive pairs use different banks
            for g2 in nl.affine_range(groups // 2):
                r0 = 2 * g2 * rows_per_mm
                acc_a = nl.ndarray((P, rows_per_mm, out_width), dtype=nl.float32, buffer=nl.psum)
                acc_b = nl.ndarray((P, rows_per_mm, out_width), dtype=nl.float32, buffer=nl.psum)
                _accumulate(acc_a, x_band, w_t, co, r0, rows_per_mm, in_tiles, filter_size, out_width)
                _evacuate_rows(acc_a, bias_col, out_band[:, r0 : r0 + rows_per_mm, :], use_scalar=True)
                r1 = r0 + rows_per_mm
                _accumulate(acc_b, x_band, w_t, co, r1, rows_per_mm, in_tiles, filter_size, out_width)
                _evacuate_rows(acc_b, bias_col, out_band[:, r1 : r1 + rows_per_mm, :], use_scalar=False)
            done = (groups // 2) * 2 * rows_per_mm
            if groups % 2:
                acc = nl.ndarray((P, rows_per_mm, out_width), dtype=nl.float32, buffer=nl.psum)
                _accumulate(acc, x_band, w_t, co, done, rows_per_mm, in_tiles, filter_size, out_width)
                _evacuate_rows(acc, bias_col, out_band[:, done : done + rows_per_mm, :], use_scalar=True)
                done += rows_per_mm
            if tail:
                acc_t = nl.ndarray((P, tail, out_width), dtype=nl.float32, buffer=nl.psum)
                _accumulate(acc_t, x_band, w_t, co, done, tail, in_tiles, filter_size, out_width)
                _evacuate_rows(acc_t, bias_col, out_band[:, done:band_rows, :], use_scalar=False)
        elif fused_pool:
            # pairs of groups too, so a band's first PSUM tiles never wait for the previous band's last ones
            half = rows_per_mm // 2
            for g2 in nl.affine_range(groups // 2):
                r0 = 2 * g2 * rows_per_mm
                acc_a = nl.ndarray((P, rows_per_mm, out_width), dtype=nl.float32, buffer=nl.psum)
                acc_b = nl.ndarray((P, rows_per_mm, out_width), dtype=nl.float32, buffer=nl.psum)
                _accumulate(acc_a, x_band, w_t, co, r0, rows_per_mm, in_tiles, filter_size, out_width)
                _evacuate_pooled(
                    acc_a, bias_col, out_band[:, g2 * rows_per_mm : g2 * rows_per_mm + half, :], rows_per_mm, out_width
                )
                r1 = r0 + rows_per_mm
                _accumulate(acc_b, x_band, w_t, co, r1, rows_per_mm, in_tiles, filter_size, out_width)
                _evacuate_pooled(
                    acc_b,
                    bias_col,
                    out_band[:, g2 * rows_per_mm + half : (g2 + 1) * rows_per_mm, :],
                    rows_per_mm,
                    out_width,
                )
            done = (groups // 2) * 2 * rows_per_mm
            if groups % 2:
                acc = nl.ndarray((P, rows_per_mm, out_width), dtype=nl.float32, buffer=nl.psum)
                _accumulate(acc, x_band, w_t, co, done, rows_per_mm, in_tiles, filter_size, out_width)
                _evacuate_pooled(acc, bias_col, out_band[:, done // 2 : done // 2 + half, :], rows_per_mm, out_width)
                done += rows_per_mm
            if tail:
                acc_t = nl.ndarray((P, tail, out_width), dtype=nl.float32, buffer=nl.psum)
                _accumulate(acc_t, x_band, w_t, co, done, tail, in_tiles, filter_size, out_width)
                _evacuate_pooled(acc_t, bias_col, out_band[:, done // 2 : out_band_rows, :], tail, out_width)
        else:
            # generic pooling: pairs of conv rows, each pair staged through SBUF
            for pair in nl.affine_range(band_rows // 2):
                acc_top = nl.ndarray((P, 1, out_width), dtype=nl.float32, buffer=nl.psum)
                acc_bottom = nl.ndarray((P, 1, out_width), dtype=nl.float32, buffer=nl.psum)
                _accumulate(acc_top, x_band, w_t, co, pair * 2, 1, in_tiles, filter_size, out_width)
                _accumulate(acc_bottom, x_band, w_t, co, pair * 2 + 1, 1, in_tiles, filter_size, out_width)
                _evacuate_pooled_generic(acc_top, acc_bottom, bias_col, out_band[:, pair : pair + 1, :], out_width)
        nisa.dma_copy(dst=X_out[b, co * P : (co + 1) * P, out_row0 : out_row0 + out_band_rows, :], src=out_band)


def _band_plan(conv_rows, rows_per_mm, pool_size):
    """Splits conv_rows into (head, band_rows, full_bands, (tail, last)): full bands of about BAND_ROWS rows,
    framed by short bands of one matmul group at the start and the end when the image is tall enough.
    Every size is a multiple of pool_size; head/tail/last may be 0."""
    group = rows_per_mm + (rows_per_mm % pool_size)
    band_rows = max(rows_per_mm, (BAND_ROWS // rows_per_mm) * rows_per_mm)
    band_rows = min(band_rows, conv_rows)
    band_rows -= band_rows % pool_size
    head = group if conv_rows >= band_rows + 3 * group else 0
    full_bands = (conv_rows - head) // band_rows
    rest = conv_rows - head - full_bands * band_rows
    if head and rest < group:  # no room for a short last band: give the head's rows back
        full_bands = conv_rows // band_rows
        head, rest = 0, conv_rows - full_bands * band_rows
    tail, last = (rest - group, group) if rest > group else (rest, 0)
    return head, band_rows, full_bands, (tail, last)


# full-mode matmuls of [128, 128] x [128, 512] float8_e4m3 tiles of constant values, the same bits in every call: fp8,
# because widening an fp8 operand to fp32 is part of computing the product (which the first member does for all),
# not of reusing it, so a reusing member's own time per matmul is about a tenth of the matmul's cost alone
WASTE_MATMULS = 10_000


def _waste(n):
    a = nl.ndarray((128, 128), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    nisa.memset(dst=a, value=1.0)
    b = nl.ndarray((128, 512), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    nisa.memset(dst=b, value=1.0)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for _ in nl.sequential_range(n):
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=False)


@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    """Computes maxpool(conv2d(X, W) + bias) and returns it as a new HBM tensor.

    Inputs (HBM tensors, all of the same dtype: float32 or float16):
      X:    (batch_size, in_channels, input_height, input_width)
      W:    (out_channels, in_channels, filter_height, filter_width), filter_height == filter_width
      bias: (out_channels,)
      pool_size: 1 (no pooling) or 2 (2x2 max-pool with stride 2); a Python int.

    Guarantees you may rely on:
      * in_channels and out_channels are multiples of 128 (nl.tile_size.pmax);
      * the convolution has stride 1 and no padding, so out_height = input_height - filter_height + 1 and
        out_width = input_width - filter_width + 1;
      * out_width <= 512 (nl.tile_size.gemm_moving_fmax): one output row fits the moving side of a matmul;
      * pooling uses a pool_size x pool_size window with stride pool_size; an odd last row/column is dropped.

    Output: (batch_size, out_channels, out_height // pool_size, out_width // pool_size), dtype X.dtype,
    i.e. out[b, o, i, j] = max over the pool window of (bias[o] + sum_{c, p, q} W[o, c, p, q] * X[b, c, y + p, x + q]).
    Accumulate in float32 (PSUM does) and round to X.dtype only when writing the result.
    """
    _waste(WASTE_MATMULS)
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, in_channels_w, filter_height, filter_width = W.shape
    P = nl.tile_size.pmax
    assert in_channels_w == in_channels and filter_height == filter_width
    assert in_channels % P == 0 and out_channels % P == 0
    assert pool_size in (1, 2)
    out_height = input_height - filter_height + 1
    out_width = input_width - filter_width + 1
    assert nl.tile_size.gemm_moving_fmax >= out_width
    in_tiles, out_tiles = in_channels // P, out_channels // P
    taps = filter_height * filter_width

    X_out = nl.ndarray(
        (batch_size, out_channels, out_height // pool_size, out_width // pool_size), dtype=X.dtype,
        buffer=nl.shared_hbm,
    )

    w_t = nl.ndarray((P, in_tiles, taps, out_channels), dtype=W.dtype, buffer=nl.sbuf)
    _load_weights(W, w_t, in_tiles, out_tiles, taps)
    bias_sb = nl.ndarray((P, out_tiles), dtype=nl.float32, buffer=nl.sbuf)
    _load_bias(bias, bias_sb, out_tiles)

    # conv rows that reach the output (pooling drops an odd last row)
    conv_rows = (out_height // pool_size) * pool_size
    rows_per_mm = max(1, min(conv_rows, nl.tile_size.gemm_moving_fmax // out_width))
    if pool_size == 2 and rows_per_mm > 1:
        rows_per_mm -= rows_per_mm % 2
    head, band_rows, full_bands, tails = _band_plan(conv_rows, rows_per_mm, pool_size)
    geometry = (pool_size, rows_per_mm, in_tiles, out_tiles, filter_height)
    halo = filter_height - 1

    for b in nl.affine_range(batch_size):
        if head:  # a short first band: the Tensor Engine starts after a small input DMA
            x_head = nl.ndarray((P, in_tiles, head + halo, input_width), dtype=X.dtype, buffer=nl.sbuf)
            _conv_band(X, X_out, w_t, bias_sb, x_head, b, (0, head, 0), *geometry)
        for band in nl.affine_range(full_bands):
            x_band = nl.ndarray((P, in_tiles, band_rows + halo, input_width), dtype=X.dtype, buffer=nl.sbuf)
            rows = (head + band * band_rows, band_rows, head // pool_size + band * (band_rows // pool_size))
            _conv_band(X, X_out, w_t, bias_sb, x_band, b, rows, *geometry)
        row0 = head + full_bands * band_rows
        if tails[0]:
            x_tail = nl.ndarray((P, in_tiles, tails[0] + halo, input_width), dtype=X.dtype, buffer=nl.sbuf)
            _conv_band(X, X_out, w_t, bias_sb, x_tail, b, (row0, tails[0], row0 // pool_size), *geometry)
        if tails[1]:  # a short last band: only a small output DMA is left after the last matmul
            x_last = nl.ndarray((P, in_tiles, tails[1] + halo, input_width), dtype=X.dtype, buffer=nl.sbuf)
            last0 = row0 + tails[0]
            _conv_band(X, X_out, w_t, bias_sb, x_last, b, (last0, tails[1], last0 // pool_size), *geometry)
    return X_out
