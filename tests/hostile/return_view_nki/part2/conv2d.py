"""Part 2 not attempted (this hostile submission targets part 1)."""

import nki


@nki.jit
def fused_conv2d_maxpool(X, W, bias, pool_size=1):
    raise NotImplementedError("part 2 not attempted")
