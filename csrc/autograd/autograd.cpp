// Autograd for convt2d::forward, in C++ (as torchvision's csrc/ops/autograd): one
// torch::autograd::Function whose backward calls convt2d::backward with the mask of the
// gradients autograd asks for. It replaced a Python torch.library.register_autograd
// registration whose per-call host cost, through the Python custom-op machinery, was about
// 0.27 ms more than torch's own forward + backward (H100 host, bf16, a k=4 stride-2 layer,
// 256 -> 128 channels, 16x16 input): on small layers that cost more than the GPU saved.
// Fake (meta) kernels stay in Python (python/convt2d/_ops.py).
#include <ATen/FuncTorchTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace convt2d {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor forward_op(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b,
                      c10::IntArrayRef stride, c10::IntArrayRef padding,
                      c10::IntArrayRef output_padding, int64_t groups, c10::IntArrayRef dilation) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("convt2d::forward", "")
                       .typed<decltype(forward_op)>();
  return op.call(x, w, b, stride, padding, output_padding, groups, dilation);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(
    const at::Tensor& go, const at::Tensor& x, const at::Tensor& w, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef output_padding, int64_t groups,
    c10::IntArrayRef dilation, std::array<bool, 3> mask) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("convt2d::backward", "")
                       .typed<decltype(backward_op)>();
  return op.call(go, x, w, stride, padding, output_padding, groups, dilation, mask);
}

class ConvT2dFunction : public torch::autograd::Function<ConvT2dFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b, c10::IntArrayRef stride,
                            c10::IntArrayRef padding, c10::IntArrayRef output_padding,
                            int64_t groups, c10::IntArrayRef dilation) {
    at::AutoDispatchBelowADInplaceOrView guard;
    at::Tensor out = forward_op(x, w, b, stride, padding, output_padding, groups, dilation);
    ctx->save_for_backward({x, w});
    ctx->saved_data["stride"] = stride.vec();
    ctx->saved_data["padding"] = padding.vec();
    ctx->saved_data["output_padding"] = output_padding.vec();
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["dilation"] = dilation.vec();
    ctx->saved_data["has_bias"] = b.has_value() && b->defined();
    return out;
  }

  // One gradient per forward argument (x, w, bias, then the five non-tensor ones).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    // Edges are the tensor inputs only: x = 0, w = 1, and bias = 2 when it was given.
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                      has_bias && ctx->needs_input_grad(2)};
    at::Tensor gi, gw, gb;
    if (mask[0] || mask[1] || mask[2]) {
      const auto stride = ctx->saved_data["stride"].toIntVector();
      const auto padding = ctx->saved_data["padding"].toIntVector();
      const auto output_padding = ctx->saved_data["output_padding"].toIntVector();
      const auto dilation = ctx->saved_data["dilation"].toIntVector();
      std::tie(gi, gw, gb) = backward_op(grads[0], saved[0], saved[1], stride, padding,
                                         output_padding, ctx->saved_data["groups"].toInt(),
                                         dilation, mask);
    }
    return {mask[0] ? gi : at::Tensor(), mask[1] ? gw : at::Tensor(),
            mask[2] ? gb : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

at::Tensor forward_autograd(const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b, c10::IntArrayRef stride,
                            c10::IntArrayRef padding, c10::IntArrayRef output_padding,
                            int64_t groups, c10::IntArrayRef dilation) {
  // No gradient wanted (no_grad, or no input that requires grad) and no forward-mode
  // gradient or functorch transform in play: the kernel straight away, without the autograd
  // Function's context and saved arguments (about 1.5 us of host time per call). Forward AD
  // (a dual input) and functorch transforms (torch.func.jvp, jacfwd) go through the Function,
  // which raises that it has no jvp, rather than dropping the tangent.
  const bool has_b = b.has_value() && b->defined();
  const bool bias_grad = has_b && b->requires_grad();
  const bool forward_ad = at::functorch::functorchTLSAccessor() != nullptr ||
                          x._fw_grad(0).defined() || w._fw_grad(0).defined() ||
                          (has_b && b->_fw_grad(0).defined());
  if (!forward_ad &&
      (!at::GradMode::is_enabled() || !(x.requires_grad() || w.requires_grad() || bias_grad))) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return forward_op(x, w, b, stride, padding, output_padding, groups, dilation);
  }
  return ConvT2dFunction::apply(x, w, b, stride, padding, output_padding, groups, dilation);
}

}  // namespace

// First order only: differentiating convt2d::backward (double backward) raises "derivative
// for convt2d::backward is not implemented" instead of passing through silently.
TORCH_LIBRARY_IMPL(convt2d, Autograd, m) {
  m.impl("forward", &forward_autograd);
  m.impl("backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace convt2d
