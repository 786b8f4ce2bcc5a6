// CUDA op glue: validation, device guard, allocation, weight packing and the
// choice of kernel. Kernels (in *.cu) only see the plain structs of kernels.h.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "cuda/kernels.h"
#include "glue.h"

namespace convt2d {
namespace {

using cuda::DType;
using cuda::MathMode;

DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kFloat;
    case at::kDouble: return DType::kDouble;
    case at::kHalf: return DType::kHalf;
    case at::kBFloat16: return DType::kBFloat16;
    default: TORCH_CHECK(false, "convt2d: unsupported dtype ", t);
  }
}

// fp32 follows torch.backends.cudnn.allow_tf32, exactly as nn.ConvTranspose2d.
MathMode math_mode(at::ScalarType t) {
  if (t != at::kFloat) return MathMode::kDefault;
  return at::globalContext().allowTF32CuDNN() ? MathMode::kTF32 : MathMode::kIEEE;
}

cuda::TensorRef ref(const at::Tensor& t) {
  cuda::TensorRef r;
  r.ptr = const_cast<void*>(t.data_ptr());
  r.sn = t.stride(0); r.sc = t.stride(1); r.sh = t.stride(2); r.sw = t.stride(3);
  return r;
}

void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "convt2d: expected ", name, " on a CUDA device, got ", t.device());
}

void check_launch(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "convt2d: ", what, " launch failed: ", cudaGetErrorString(e));
}

bool use_tensor_cores(DType dt, MathMode m) {
  if (dt == DType::kDouble || m == MathMode::kIEEE) return false;
  auto* prop = at::cuda::getCurrentDeviceProperties();
  return prop->major >= 8;
}

// Weight [G*Kin, Kout, kh, kw] permuted to [G][kh][kw][a][b] (contiguous):
// forward takes (a, b) = (Cig, Cog), grad_input (Cog, Cig).
at::Tensor pack_weight(const at::Tensor& w, const Problem& p, bool dgrad) {
  auto v = w.view({p.groups, p.cin_g(), p.cout_g(), p.kh, p.kw});
  return dgrad ? v.permute({0, 3, 4, 2, 1}).contiguous() : v.permute({0, 3, 4, 1, 2}).contiguous();
}

at::Tensor forward_cuda(const at::Tensor& input, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef output_padding,
                        int64_t groups, at::IntArrayRef dilation) {
  const Problem p = make_problem(input, weight, bias, stride, padding, output_padding, groups,
                                 dilation);
  check_cuda(input, "input");
  c10::cuda::CUDAGuard guard(input.device());
  auto out = at::empty({p.N, p.Cout, p.Ho, p.Wo},
                       input.options().memory_format(suggest_memory_format(input, weight)));
  if (out.numel() == 0) return out;
  const DType dt = to_dtype(input.scalar_type());
  const MathMode math = math_mode(input.scalar_type());
  at::Tensor b;
  if (bias.has_value() && bias->defined()) b = bias->contiguous();
  cudaStream_t st = at::cuda::getCurrentCUDAStream();

  const bool tc = use_tensor_cores(dt, math);
  // Memory-bound shapes (few reduced channels per output, or few outputs per
  // group) go to the direct kernel; the rest are implicit GEMMs.
  const double k_per_output = double(p.cin_g() * p.kh * p.kw) / double(p.sh * p.sw);
  const bool memory_bound = p.cout_g() < 32 || k_per_output < 64 || !tc;
  if (memory_bound && cuda::direct_forward_fits(p, dt) && dt != DType::kDouble) {
    auto w = weight.contiguous();
    cuda::DirectParams prm;
    prm.p = p;
    prm.x = ref(input);
    prm.out = ref(out);
    prm.w = w.data_ptr();
    prm.bias = b.defined() ? b.data_ptr() : nullptr;
    check_launch(cuda::launch_direct_forward(prm, dt, st), "direct forward");
    return out;
  }
  TORCH_CHECK(tc || dt == DType::kDouble || math == MathMode::kIEEE,
              "convt2d: tensor-core kernels need compute capability 8.0 or newer");
  auto wpk = pack_weight(weight, p, /*dgrad=*/false);
  cuda::IgemmParams prm;
  prm.p = p;
  prm.mode = cuda::IgemmMode::kForward;
  prm.src = ref(input);
  prm.dst = ref(out);
  prm.wpk = wpk.data_ptr();
  prm.bias = b.defined() ? b.data_ptr() : nullptr;
  prm.Hs = p.H; prm.Ws = p.W; prm.Hd = p.Ho; prm.Wd = p.Wo;
  prm.Kc = p.cin_g(); prm.Nc = p.cout_g();
  prm.phases_y = p.sh; prm.phases_x = p.sw;
  int64_t mq_y = 0, mq_x = 0;
  for (int64_t r = 0; r < p.sh; ++r)
    mq_y = std::max(mq_y, make_phase_dim(r, p.sh, p.ph, p.dh, p.kh, p.Ho).nq);
  for (int64_t r = 0; r < p.sw; ++r)
    mq_x = std::max(mq_x, make_phase_dim(r, p.sw, p.pw, p.dw, p.kw, p.Wo).nq);
  prm.max_m = p.N * mq_y * mq_x;
  check_launch(cuda::launch_igemm(prm, dt, math, st), "implicit-GEMM forward");
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cuda(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
    int64_t groups, at::IntArrayRef dilation, std::array<bool, 3> output_mask) {
  const Problem p = make_problem(input, weight, std::nullopt, stride, padding, output_padding,
                                 groups, dilation);
  check_grad_output(grad_output, input, p);
  check_cuda(input, "input");
  c10::cuda::CUDAGuard guard(input.device());
  const DType dt = to_dtype(input.scalar_type());
  const MathMode math = math_mode(input.scalar_type());
  cudaStream_t st = at::cuda::getCurrentCUDAStream();
  at::Tensor gi = not_requested(input), gw = not_requested(input), gb = not_requested(input);

  if (output_mask[0]) {
    gi = at::empty(input.sizes(),
                   input.options().memory_format(suggest_memory_format(input, weight)));
    if (gi.numel() > 0) {
      auto wpk = pack_weight(weight, p, /*dgrad=*/true);
      cuda::IgemmParams prm;
      prm.p = p;
      prm.mode = cuda::IgemmMode::kDgrad;
      prm.src = ref(grad_output);
      prm.dst = ref(gi);
      prm.wpk = wpk.data_ptr();
      prm.Hs = p.Ho; prm.Ws = p.Wo; prm.Hd = p.H; prm.Wd = p.W;
      prm.Kc = p.cout_g(); prm.Nc = p.cin_g();
      prm.phases_y = 1; prm.phases_x = 1;
      prm.max_m = p.N * p.H * p.W;
      check_launch(cuda::launch_igemm(prm, dt, math, st), "grad_input");
    }
  }
  if (output_mask[1]) {
    if (p.N == 0) {
      gw = at::zeros(weight.sizes(), weight.options());
    } else {
      gw = at::empty(weight.sizes(), weight.options().memory_format(at::MemoryFormat::Contiguous));
      const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
      cuda::WgradParams prm;
      prm.p = p;
      prm.x = ref(input);
      prm.gout = ref(grad_output);
      prm.gw = gw.data_ptr();
      const int64_t bk = cuda::wgrad_tile_k(dt, math);
      const int64_t ktiles = (p.N * p.H * p.W + bk - 1) / bk;
      int64_t splits = cuda::wgrad_split_count(p, dt, math, sms);
      const int64_t per = (ktiles + splits - 1) / splits;
      prm.k_per_split = per * bk;
      prm.splits = (ktiles + per - 1) / per;
      auto acc_t = dt == DType::kDouble ? at::kDouble : at::kFloat;
      auto ws = at::empty({prm.splits * p.groups * p.kh * p.kw * p.cin_g() * p.cout_g()},
                          input.options().dtype(acc_t));
      prm.workspace = ws.data_ptr();
      check_launch(cuda::launch_wgrad(prm, dt, math, st), "grad_weight");
    }
    gw = gw.contiguous(weight.suggest_memory_format());
  }
  if (output_mask[2]) {
    gb = grad_output.sum({0, 2, 3});  // one bandwidth-bound pass, fp32 accumulation
  }
  return {gi, gw, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(convt2d, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
}

}  // namespace convt2d
