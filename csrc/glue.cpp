#include "glue.h"
#include <c10/util/Exception.h>
#include <string>

namespace convt2d {

static void check_len(at::IntArrayRef v, const char* name) {
  TORCH_CHECK(v.size() == 2 || v.size() == 1, "expected ", name,
              " to be a single integer value or a list of 2 values to match the "
              "convolution dimensions, but got ", name, "=", v);
}
static int64_t at0(at::IntArrayRef v) { return v[0]; }
static int64_t at1(at::IntArrayRef v) { return v.size() == 2 ? v[1] : v[0]; }

Problem make_problem(const at::Tensor& input, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef output_padding,
                     int64_t groups, at::IntArrayRef dilation) {
  TORCH_CHECK(input.dim() == 4,
              "Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got "
              "input of size: ", input.sizes());
  TORCH_CHECK(weight.dim() == 4,
              "Expected 4-dimensional weight for conv_transpose2d (in_channels, "
              "out_channels/groups, kH, kW), but got weight of size ", weight.sizes());
  check_len(stride, "stride");
  check_len(padding, "padding");
  check_len(output_padding, "output_padding");
  check_len(dilation, "dilation");
  // Mixed devices or dtypes: torch's message depends on the backend path it
  // would take (oneDNN where the CPU supports the dtype, its slow path, cuDNN)
  // and on its version, so let torch itself raise it: its conv_transpose2d
  // checks devices and dtypes before computing anything.
  auto torch_raises = [&] {
    at::conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation);
  };
  auto raise_like_torch = [&](const char* what, const at::Tensor& other) {
    torch_raises();
    TORCH_CHECK(false, "convt2d: input and ", what, " must have the same device and dtype, got ",
                input.device(), "/", input.scalar_type(), " and ", other.device(), "/",
                other.scalar_type());
  };
  if (input.device() != weight.device()) raise_like_torch("weight", weight);
  auto check_same_type = [&](const at::Tensor& other, const char* what) {
    if (other.scalar_type() != input.scalar_type()) raise_like_torch(what, other);
  };
  check_same_type(weight, "weight");
  // Non-floating dtypes: torch's error differs by device and version
  // (NotImplementedError on CPU, a cuDNN RuntimeError on CUDA): let it raise.
  // (Complex dtypes: torch would compute them, so raise ours without calling it.)
  if (!at::isFloatingType(input.scalar_type()) && !at::isComplexType(input.scalar_type()))
    torch_raises();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()),
              "\"conv_transpose2d\" not implemented for '", c10::toString(input.scalar_type()),
              "' (convt2d supports float64, float32, float16 and bfloat16)");
  if (bias.has_value() && bias->defined()) {
    if (bias->device() != input.device()) raise_like_torch("bias", *bias);
    check_same_type(*bias, "bias");
  }

  Problem p;
  p.sh = at0(stride); p.sw = at1(stride);
  p.ph = at0(padding); p.pw = at1(padding);
  p.oph = at0(output_padding); p.opw = at1(output_padding);
  p.dh = at0(dilation); p.dw = at1(dilation);
  p.groups = groups;
  TORCH_CHECK(p.sh > 0 && p.sw > 0, "non-positive stride is not supported");
  TORCH_CHECK(p.ph >= 0 && p.pw >= 0, "negative padding is not supported");
  TORCH_CHECK(p.oph >= 0 && p.opw >= 0, "negative output_padding is not supported");
  TORCH_CHECK(p.dh > 0 && p.dw > 0, "dilation should be greater than zero, but got dilation=",
              dilation);
  TORCH_CHECK(groups > 0, "non-positive groups is not supported");
  TORCH_CHECK((p.oph < p.sh || p.oph < p.dh) && (p.opw < p.sw || p.opw < p.dw),
              "output padding must be smaller than either stride or dilation, but got "
              "output_padding_height: ", p.oph, " output_padding_width: ", p.opw,
              " stride_height: ", p.sh, " stride_width: ", p.sw,
              " dilation_height: ", p.dh, " dilation_width: ", p.dw);

  TORCH_CHECK(weight.size(0) >= groups, "Given groups=", groups,
              ", expected weight to be at least ", groups,
              " at dimension 0, but got weight of size ", weight.sizes(), " instead");
  TORCH_CHECK(weight.size(0) % groups == 0, "Given groups=", groups,
              ", expected weight to be divisible by ", groups,
              " at dimension 0, but got weight of size [", weight.sizes(), "] instead");
  TORCH_CHECK(input.size(1) == weight.size(0), "Given transposed=1, weight of size ",
              weight.sizes(), ", expected input", input.sizes(), " to have ", weight.size(0),
              " channels, but got ", input.size(1), " channels instead");
  TORCH_CHECK(weight.size(1) > 0 && weight.size(2) > 0 && weight.size(3) > 0,
              "convt2d: expected weight with positive out_channels/groups and kernel size, "
              "but got weight of size ", weight.sizes());
  p.N = input.size(0); p.Cin = input.size(1); p.H = input.size(2); p.W = input.size(3);
  p.kh = weight.size(2); p.kw = weight.size(3);
  p.Cout = weight.size(1) * groups;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == p.Cout, "Given transposed=1, weight of size ",
                weight.sizes(), ", expected bias to be 1-dimensional with ", p.Cout,
                " elements, but got bias of size ", bias->sizes(), " instead");
  }
  TORCH_CHECK((p.H > 0 && p.W > 0) || p.N == 0 || p.Cin == 0,
              "Only zero batch or zero channel inputs are supported, but got input shape: ",
              input.sizes());
  p.Ho = (p.H - 1) * p.sh - 2 * p.ph + p.dh * (p.kh - 1) + p.oph + 1;
  p.Wo = (p.W - 1) * p.sw - 2 * p.pw + p.dw * (p.kw - 1) + p.opw + 1;
  TORCH_CHECK(p.Ho > 0 && p.Wo > 0, "Given input size per channel: (", p.H, " x ", p.W,
              "). Calculated output size per channel: (", p.Ho, " x ", p.Wo,
              "). Output size is too small");
  // A kernel extent of 1 makes its dilation irrelevant (every tap offset ky*dh is 0): set
  // it to 1 after the checks that still read it, so kernels that take only dilation 1 take
  // the layer.
  if (p.kh == 1) p.dh = 1;
  if (p.kw == 1) p.dw = 1;
  return p;
}

void check_grad_output(const at::Tensor& grad_output, const at::Tensor& input,
                       const Problem& p) {
  TORCH_CHECK(grad_output.dim() == 4 && grad_output.size(0) == p.N &&
                  grad_output.size(1) == p.Cout && grad_output.size(2) == p.Ho &&
                  grad_output.size(3) == p.Wo,
              "convt2d: expected grad_output of size [", p.N, ", ", p.Cout, ", ", p.Ho, ", ",
              p.Wo, "], but got ", grad_output.sizes());
  TORCH_CHECK(grad_output.device() == input.device(),
              "Expected all tensors to be on the same device, but found at least two "
              "devices, ", input.device(), " and ", grad_output.device(), "!");
  TORCH_CHECK(grad_output.scalar_type() == input.scalar_type(), "convt2d: grad_output type (",
              grad_output.toString(), ") and input type (", input.toString(),
              ") should be the same");
}

at::MemoryFormat suggest_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  auto cl = at::MemoryFormat::ChannelsLast;
  // Like torch's cudnn_conv_suggest_memory_format: no channels_last for float64 on CUDA.
  if (input.is_cuda() && input.scalar_type() == at::kDouble) return at::MemoryFormat::Contiguous;
  if (input.suggest_memory_format() == cl || weight.suggest_memory_format() == cl) return cl;
  return at::MemoryFormat::Contiguous;
}

}  // namespace convt2d
