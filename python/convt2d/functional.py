"""Functional API: the signature and semantics of torch.nn.functional.conv_transpose2d."""
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _info

_size_2_t = Union[int, Tuple[int, int], Sequence[int]]


def _as_list(v: _size_2_t) -> List[int]:
    if isinstance(v, int):
        return [v, v]
    return [int(e) for e in v]


def forward(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride: _size_2_t = 1,
    padding: _size_2_t = 0,
    output_padding: _size_2_t = 0,
    groups: int = 1,
    dilation: _size_2_t = 1,
) -> Tensor:
    """Transposed 2-D convolution, identical to ``torch.nn.functional.conv_transpose2d``.

    Args:
        input: ``(N, C_in, H, W)`` or unbatched ``(C_in, H, W)``; any strides.
        weight: ``(C_in, C_out / groups, kH, kW)``.
        bias: optional ``(C_out,)``.
        stride, padding, output_padding, dilation: an int or a pair ``(h, w)``.
        groups: number of blocked connections from input to output channels.

    Returns:
        ``(N, C_out, H_out, W_out)`` (or ``(C_out, H_out, W_out)`` for unbatched input), with
        ``H_out = (H - 1)*stride[0] - 2*padding[0] + dilation[0]*(kH - 1) + output_padding[0] + 1``,
        in the memory format torch would return (channels_last if input or weight is).

    Differentiable w.r.t. input, weight and bias (first order). Under ``torch.autocast`` the
    operands are cast to the autocast dtype, as ``nn.ConvTranspose2d`` does.
    """
    if input.dim() not in (3, 4):
        raise RuntimeError(
            "Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got "
            f"input of size: {list(input.shape)}")
    dev = input.device.type
    if dev == "cuda" and not _info._warned[0] and not torch.compiler.is_compiling():
        _info.warn_if_slow_build(input.device)
    if torch.is_autocast_enabled(dev):
        # like autocast's cached_cast: only floating tensors that are not float64 are cast
        dt = torch.get_autocast_dtype(dev)

        def cast(t):
            return t.to(dt) if t is not None and t.is_floating_point() and \
                t.dtype != torch.float64 else t

        input, weight, bias = cast(input), cast(weight), cast(bias)
    unbatched = input.dim() == 3
    if unbatched:
        input = input.unsqueeze(0)
    out = torch.ops.convt2d.forward(input, weight, bias, _as_list(stride), _as_list(padding),
                                    _as_list(output_padding), groups, _as_list(dilation))
    return out.squeeze(0) if unbatched else out


conv_transpose2d = forward
