"""Functional API: the signature and semantics of torch.nn.functional.conv_transpose2d."""
import operator
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _C  # noqa: F401  (registers the ops)
from . import _info

_op = torch.ops.convt2d.forward.default
# One check for autocast on any device (torch's own dispatch uses it), then the device's own.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)

_size_2_t = Union[int, Tuple[int, int], Sequence[int]]


def _as_arg(v: _size_2_t, name: str):
    """An int or a pair as the op's int[2] takes it: an int and a pair of ints pass as they
    are; an int-like scalar (numpy, a 0-d integer tensor) becomes a pair, a tuple, list or
    torch.Size of int-likes a list (the op's schema checks its length). A float, a bool, a
    string or another sequence type raises TypeError, as torch does."""
    t = type(v)
    if t is int or ((t is tuple or t is list) and len(v) == 2 and type(v[0]) is int
                    and type(v[1]) is int):
        return v
    try:
        if hasattr(v, "__index__"):
            i = _int(v)
            return [i, i]
        if not isinstance(v, (tuple, list, torch.Size)):
            raise TypeError
        return [_int(e) for e in v]
    except TypeError:
        raise TypeError(f"conv_transpose2d(): argument '{name}' must be an int or a tuple of "
                        f"ints, but got {v!r}") from None


def _int(e) -> int:
    """An int-like as an int; TypeError for a bool or a non-integer, as torch."""
    if isinstance(e, bool):
        raise TypeError
    return operator.index(e)


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
    ndim = input.dim()
    if ndim != 4 and ndim != 3:
        raise RuntimeError(
            "Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got "
            f"input of size: {list(input.shape)}")
    # The per-call host path is kept short (docs/design.md, "Per-call host cost"): the device
    # type only when the once-per-process build check or autocast needs it, then the op.
    if not _info._warned[0] and input.is_cuda and not torch.compiler.is_compiling():
        _info.warn_if_slow_build(input.device)
    if _any_autocast() and torch.is_autocast_enabled(input.device.type):
        # like autocast's cached_cast: only floating tensors that are not float64 are cast
        dt = torch.get_autocast_dtype(input.device.type)

        def cast(t):
            return t.to(dt) if t is not None and t.is_floating_point() and \
                t.dtype != torch.float64 else t

        input, weight, bias = cast(input), cast(weight), cast(bias)
    if type(groups) is not int:
        try:
            groups = _int(groups)
        except TypeError:
            raise TypeError("conv_transpose2d(): argument 'groups' must be an int, but got "
                            f"{groups!r}") from None
    out = _op(input.unsqueeze(0) if ndim == 3 else input, weight, bias,
              _as_arg(stride, "stride"), _as_arg(padding, "padding"),
              _as_arg(output_padding, "output_padding"), groups, _as_arg(dilation, "dilation"))
    return out.squeeze(0) if ndim == 3 else out


conv_transpose2d = forward
