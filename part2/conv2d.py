"""Part 2: a fused 2-D convolution + bias + max-pool kernel for one NeuronCore.

Current NKI API (``import nki``: NKI 0.4+, Neuron SDK 2.30+): ISA calls write a destination you allocate
(``nisa.nc_matmul(dst=psum_tile, stationary=..., moving=...)``), and ``nl.ndarray`` tiles start uninitialised.
Check and time it with ``python part2/test_harness.py`` (add ``--test_maxpool`` once pooling works).
"""

import nki
import nki.isa as nisa  # noqa: F401 - you will need it
import nki.language as nl


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
    batch_size, in_channels, input_height, input_width = X.shape
    out_channels, in_channels_w, filter_height, filter_width = W.shape
    assert in_channels_w == in_channels, "X and W disagree on in_channels"
    assert filter_height == filter_width, "only square filters are tested"
    assert bias.shape == (out_channels,), "bias must have shape (out_channels,)"
    assert pool_size in (1, 2), "pool_size must be 1 or 2"
    assert in_channels % nl.tile_size.pmax == 0 and out_channels % nl.tile_size.pmax == 0

    out_height = input_height - filter_height + 1
    out_width = input_width - filter_width + 1
    assert nl.tile_size.gemm_moving_fmax >= out_width

    out_pool_height = out_height // pool_size
    out_pool_width = out_width // pool_size

    X_out = nl.ndarray(shape=(batch_size, out_channels, out_pool_height, out_pool_width), dtype=X.dtype,
                       buffer=nl.shared_hbm)

    # YOUR CODE HERE.  The mapping (handout, part 2): for each filter tap (p, q), the conv is a matmul that contracts
    # over input channels, so the 128 input channels of a channel tile lie on the partitions of both operands:
    #   stationary = W[co tile, ci tile, p, q] transposed to [128 ci, 128 co] (W is stored out-channels first);
    #   moving     = X[b, ci tile, y + p, q : q + out_width]: [128 ci, out_width], output row y shifted by the tap;
    #   all filter_height * filter_width * (in_channels / 128) products of one output tile accumulate in one
    #   fp32 PSUM tile ([128 co, out_width], at most 512 fp32 per partition): nisa.nc_matmul(dst=acc, ...)
    #   overwrites acc on its first write and adds to it afterwards; acc leaves PSUM once: + bias, max-pool,
    #   cast to X.dtype, store.
    # Start with the handout's starting point (for each image, output row, out-channel tile, in-channel tile and
    # tap: load the weight block, transpose it, load the input window, matmul into the row's PSUM tile); get it
    # correct, then make it fast one step at a time ("Making it fast"), comparing profiles as you go.
    # Then delete the line below.
    raise NotImplementedError(
        "fused_conv2d_maxpool is not implemented yet: write it in part2/conv2d.py (conv as shifted matmuls "
        "accumulated in PSUM, then bias and max-pool) and remove this raise."
    )

    return X_out
