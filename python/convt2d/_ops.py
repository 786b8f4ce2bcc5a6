"""Fake (meta) registrations for the compiled ops (autograd: csrc/autograd/autograd.cpp)."""
from typing import Sequence

import torch
from torch._prims_common import suggest_memory_format


def _out_format(input: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    # Mirrors convt2d::suggest_memory_format in csrc/glue.cpp.
    if input.device.type == "cuda" and input.dtype == torch.float64:
        return torch.contiguous_format
    if (suggest_memory_format(input) == torch.channels_last
            or suggest_memory_format(weight) == torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def _pair(v: Sequence[int]):
    return (v[0], v[1]) if len(v) == 2 else (v[0], v[0])


def _out_size(input, weight, stride, padding, output_padding, dilation):
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
    (oph, opw), (dh, dw) = _pair(output_padding), _pair(dilation)
    kh, kw = weight.shape[2], weight.shape[3]
    ho = (input.shape[2] - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (input.shape[3] - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    return ho, wo


@torch.library.register_fake("convt2d::forward")
def _forward_fake(input, weight, bias, stride, padding, output_padding, groups, dilation):
    torch._check(input.dim() == 4, lambda: "convt2d: expected a 4-D input")
    torch._check(weight.dim() == 4, lambda: "convt2d: expected a 4-D weight")
    ho, wo = _out_size(input, weight, stride, padding, output_padding, dilation)
    shape = (input.shape[0], weight.shape[1] * groups, ho, wo)
    return input.new_empty(shape).contiguous(memory_format=_out_format(input, weight))


@torch.library.register_fake("convt2d::backward")
def _backward_fake(grad_output, input, weight, stride, padding, output_padding, groups,
                   dilation, output_mask):
    def empty():  # one placeholder per output: outputs must not alias
        return input.new_empty((0,))

    gi = (input.new_empty(input.shape).contiguous(memory_format=_out_format(input, weight))
          if output_mask[0] else empty())
    gw = (weight.new_empty(weight.shape).contiguous(
        memory_format=suggest_memory_format(weight)) if output_mask[1] else empty())
    gb = input.new_empty((weight.shape[1] * groups,)) if output_mask[2] else empty()
    return gi, gw, gb


# Autograd of convt2d::forward is registered in C++ (csrc/autograd/autograd.cpp).

