// Op glue shared by every backend: argument validation with torch's own error
// messages, output shapes and memory formats. Only .cpp files include this.
#pragma once
#include <ATen/ATen.h>
#include <optional>
#include <tuple>
#include <array>
#include "common/problem.h"

namespace convt2d {

// Validates the arguments exactly as torch.nn.functional.conv_transpose2d
// does (same error type and message) and returns the problem. `input` must be
// 4-D here (the Python layer unsqueezes unbatched input).
Problem make_problem(const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef output_padding,
                     int64_t groups, at::IntArrayRef dilation);

// grad_output must have the forward's output shape, dtype and device.
void check_grad_output(const at::Tensor& grad_output, const at::Tensor& input,
                       const Problem& p);

// The memory format torch gives the output of conv_transpose2d for these
// operands: channels_last when either operand suggests it.
at::MemoryFormat suggest_memory_format(const at::Tensor& input, const at::Tensor& weight);

// Op signatures every backend implements (TORCH_LIBRARY_IMPL in its folder).
using ForwardFn = at::Tensor(const at::Tensor& input, const at::Tensor& weight,
                             const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                             at::IntArrayRef padding, at::IntArrayRef output_padding,
                             int64_t groups, at::IntArrayRef dilation);
using BackwardFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
    int64_t groups, at::IntArrayRef dilation, std::array<bool, 3> output_mask);

// An empty placeholder for a gradient autograd did not ask for.
inline at::Tensor not_requested(const at::Tensor& like) {
  return at::empty({0}, like.options());
}

}  // namespace convt2d
