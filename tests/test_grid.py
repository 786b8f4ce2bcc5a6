"""A parametrised grid over the convolution hyper-parameters, forward + all gradients.

Axes: kernel sizes (1x1, 1x3, 3x1, 2x2, 3x5, 4x4, 7x3) x strides (1, 2, 3, (1,2), (3,2)) x
dilations (1, 2, (2,1)); padding, output_padding (every legal value up to max(stride,
dilation) - 1 appears), groups (1, 2, 4), bias and odd / tiny spatial sizes cycle
deterministically along the grid, so every value of every axis is combined with many others.
Plus hand-written edge cases (1x1 input, padding eating most of the output, kernel larger
than the input, ...).
"""
import itertools

import pytest
import torch

from conftest import Cfg, check_cfg, dtype_id

KERNELS = [(1, 1), (1, 3), (3, 1), (2, 2), (3, 5), (4, 4), (7, 3)]
STRIDES = [(1, 1), (2, 2), (3, 3), (1, 2), (3, 2)]
DILATIONS = [(1, 1), (2, 2), (2, 1)]
GROUPS = [1, 2, 4]
SIZES = [(5, 7), (1, 1), (6, 6), (3, 8), (9, 4), (2, 5), (7, 3), (4, 1)]
CHANNELS = [(4, 4), (8, 4), (4, 8), (8, 12)]  # (Cin, Cout): divisible by every group count


def _legal(vals, cap):
    return [v for v in vals if v <= cap]


def grid():
    cfgs = []
    for i, (k, s, d) in enumerate(itertools.product(KERNELS, STRIDES, DILATIONS)):
        g = GROUPS[i % 3]
        cin, cout = CHANNELS[(i // 3) % 4]
        H, W = SIZES[i % len(SIZES)]
        # output_padding: cycle through every legal value per dimension
        op = tuple((i // 2) % max(si, di) for si, di in zip(s, d))
        # padding: 0, 1 or "half the dilated kernel", clipped to keep the output non-empty
        pad = []
        for dim, (kk, dd, ss, n, o) in enumerate(zip(k, d, s, (H, W), op)):
            choice = [0, 1, (dd * (kk - 1)) // 2, dd * (kk - 1)][(i + dim) % 4]
            max_p = ((n - 1) * ss + dd * (kk - 1) + o) // 2  # keeps out size >= 1
            pad.append(min(choice, max_p))
        c = Cfg(N=1 + i % 3, Cin=cin, Cout=cout, H=H, W=W, k=k, stride=s, padding=tuple(pad),
                output_padding=op, dilation=d, groups=g, bias=(i % 2 == 0))
        assert c.valid(), c
        cfgs.append(c)
    return cfgs


EDGE = [
    Cfg(2, 3, 5, 1, 1, k=3),                                            # 1x1 input
    Cfg(2, 4, 4, 1, 1, k=(1, 1)),                                       # 1x1 input, 1x1 kernel
    Cfg(1, 4, 6, 1, 1, k=(4, 4), stride=3, padding=1, output_padding=2, groups=2),
    Cfg(2, 3, 2, 1, 7, k=(1, 3), stride=(4, 1), output_padding=(3, 0)),
    Cfg(2, 2, 3, 3, 3, k=(7, 7), padding=4),                          # padding eats all but 1
    Cfg(1, 2, 2, 2, 2, k=(3, 3), stride=5, padding=5, dilation=3),      # out 1x1 from the middle
    Cfg(2, 4, 4, 3, 2, k=(5, 6), stride=1),                             # kernel > input
    Cfg(3, 6, 9, 5, 5, k=3, stride=2, groups=3),                        # odd channel groups
    Cfg(1, 8, 8, 4, 4, k=3, stride=1, groups=8),                        # depthwise
    Cfg(1, 1, 1, 13, 11, k=(2, 3), stride=(3, 2), padding=(1, 0), dilation=(3, 2)),
    Cfg(2, 3, 4, 7, 9, k=(3, 5), stride=(2, 3), padding=(1, 2), output_padding=(1, 2),
        dilation=(2, 1)),
    Cfg(1, 2, 3, 6, 5, k=2, stride=4, dilation=2, output_padding=(3, 1)),  # taps skip phases
    Cfg(1, 2, 3, 5, 6, k=3, stride=2, dilation=4, output_padding=3),    # op < dilation only
    Cfg(1, 16, 16, 3, 3, k=1, stride=2, bias=True),                     # k1 s2: holes in out
]

GRID = grid()
for _c in EDGE:
    assert _c.valid(), _c


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=dtype_id)
@pytest.mark.parametrize("cfg", GRID, ids=[c.id() for c in GRID])
def test_grid_cpu(cfg, dtype):
    check_cfg(cfg, dtype, "cpu")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16],
                         ids=dtype_id)
@pytest.mark.parametrize("cfg", EDGE, ids=[c.id() for c in EDGE])
def test_edge_cases_cpu(cfg, dtype):
    check_cfg(cfg, dtype, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16,
                                   torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("cfg", GRID + EDGE, ids=[c.id() for c in GRID + EDGE])
def test_grid_cuda(cfg, dtype):
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        check_cfg(cfg, dtype, "cuda")
