// The cuBLAS algorithms (cublas_gemm.h): a pass that is exactly one dense GEMM, as torch's
// mm / bmm. A 1x1 kernel at stride 1: M = N*H*W pixels (all operands channels-last: one
// GEMM; else one per image, either layout, the weight shared with batch stride 0). A 1x1
// input: M = N images, each image's Cout*kh*kw outputs one GEMM row (taps-major where the
// result or grad_output is channels-last: the weight is then permuted to match).
#include "cuda/cublas_gemm.h"

#include <ATen/cuda/CUDAContext.h>
#include <torch/version.h>

#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {
namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define CONVT2D_MM_OUT_DTYPE 1
#else
#define CONVT2D_MM_OUT_DTYPE 0
#endif

// t's memory as a row-major r x c matrix (the planner's layout conditions make it dense in
// that order).
at::Tensor rows(const at::Tensor& t, int64_t r, int64_t c) {
  return t.as_strided({r, c}, {c, 1});
}

bool one_pixel(const Problem& p) { return p.H == 1 && p.W == 1; }

// A 1x1 input's weight as [Cin][GEMM columns]: [Cin][Cout][kh][kw] as it is, or permuted to
// taps-major [Cin][kh][kw][Cout] (taps_major).
at::Tensor pixel_weight(const at::Tensor& w, const Problem& p, bool taps_major) {
  const int64_t kk = p.kh * p.kw;
  return taps_major ? w.permute({0, 2, 3, 1}).reshape({p.Cin, kk * p.Cout})
                    : w.reshape({p.Cin, p.Cout * kk});
}

bool sixteen_bit(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// out = a @ b, batched for 3-d operands; accumulated and stored in fp32 where fp32_out (torch
// 2.8+'s out_dtype; the caller checks it is available).
void gemm_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool fp32_out) {
  const bool batched = a.dim() == 3;
#if CONVT2D_MM_OUT_DTYPE
  if (fp32_out) {
    if (batched) at::bmm_out(out, a, b, at::kFloat);
    else at::mm_out(out, a, b, at::kFloat);
    return;
  }
#endif
  if (batched) at::bmm_out(out, a, b);
  else at::mm_out(out, a, b);
}

}  // namespace

bool cublas_fp32_out() { return CONVT2D_MM_OUT_DTYPE != 0; }

// A 1x1 kernel's tensors as batched [N][C][H*W] matrices: a view for NCHW and for
// channels-last alike (then each image's matrix is transposed, which cuBLAS reads as it is).
at::Tensor images(const at::Tensor& t, int64_t c, int64_t hw) {
  return t.view({t.size(0), c, hw});
}
bool cl(const at::Tensor& t) { return t.is_contiguous(at::MemoryFormat::ChannelsLast); }

void cublas_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                    const at::Tensor& out, const Problem& p, DType dt) {
  const int64_t kk = p.kh * p.kw, hw = p.H * p.W;
  if (one_pixel(p)) {
    const bool tm = kk > 1 && !out.is_contiguous();
    at::Tensor o = rows(out, p.N, p.Cout * kk);
    at::mm_out(o, rows(x, p.N, p.Cin), pixel_weight(w, p, tm));
  } else if (cl(x) && cl(out)) {  // one GEMM over all pixels
    at::Tensor o = rows(out, p.N * hw, p.Cout);
    at::mm_out(o, rows(x, p.N * hw, p.Cin), w.reshape({p.Cin, p.Cout}));
  } else {  // one per image, the weight shared (batch stride 0)
    const at::Tensor wm = w.reshape({p.Cin, p.Cout});
    at::Tensor o = images(out, p.Cout, hw);
    at::bmm_out(o, wm.t().unsqueeze(0).expand({p.N, p.Cout, p.Cin}), images(x, p.Cin, hw));
  }
  if (!b.defined()) return;
  // the bias in one pass over the output in its memory order: H*W (a 1x1 input's: its taps)
  // per channel for NCHW, channels fastest for channels-last (a 1x1 input's taps-major rows)
  const int64_t inner = out.is_contiguous() ? (one_pixel(p) ? kk : hw) : 1;
  const cudaError_t e = launch_add_bias(out.data_ptr(), b.data_ptr(), out.numel(), p.Cout, inner,
                                        dt, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(e == cudaSuccess, "convt2d: cuBLAS forward bias: ", cudaGetErrorString(e));
}

void cublas_taps_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
                      const Problem& p, bool fp32_out) {
  const int64_t n = x.size(0), hw = p.H * p.W, ck = p.Cout * p.kh * p.kw;
  const at::Tensor wm = w.reshape({p.Cin, ck});
#if !CONVT2D_MM_OUT_DTYPE
  TORCH_CHECK(!fp32_out, "convt2d: GEMM + col2im: an fp32 result needs torch 2.8+");
#endif
  if (cl(x)) {  // y [pixel][co][tap]: one GEMM over the pixels
    at::Tensor ym = y.view({n * hw, ck});
    gemm_out(ym, rows(x, n * hw, p.Cin), wm, fp32_out);
    return;
  }
  // y [image][co][tap][pixel]: one GEMM per image, the weight shared (batch stride 0)
  at::Tensor yb = y.view({n, ck, hw});
  gemm_out(yb, wm.t().unsqueeze(0).expand({n, ck, p.Cin}), images(x, p.Cin, hw), fp32_out);
}

void cublas_grad_input(const at::Tensor& go, const at::Tensor& w, const at::Tensor& gi,
                       const Problem& p) {
  const int64_t kk = p.kh * p.kw, hw = p.H * p.W;
  if (one_pixel(p)) {
    const bool tm = kk > 1 && !go.is_contiguous();
    at::Tensor g = rows(gi, p.N, p.Cin);
    at::mm_out(g, rows(go, p.N, p.Cout * kk), pixel_weight(w, p, tm).t());
    return;
  }
  const at::Tensor wm = w.reshape({p.Cin, p.Cout});
  if (cl(go)) {  // one GEMM over all pixels (an NCHW grad_input: into a copy, then permuted)
    if (cl(gi)) {
      at::Tensor g = rows(gi, p.N * hw, p.Cin);
      at::mm_out(g, rows(go, p.N * hw, p.Cout), wm.t());
    } else {
      const at::Tensor g = at::mm(rows(go, p.N * hw, p.Cout), wm.t());
      gi.copy_(g.view({p.N, p.H, p.W, p.Cin}).permute({0, 3, 1, 2}));
    }
    return;
  }
  at::Tensor g = images(gi, p.Cin, hw);
  at::bmm_out(g, wm.unsqueeze(0).expand({p.N, p.Cin, p.Cout}), images(go, p.Cout, hw));
}

void cublas_grad_weight(const at::Tensor& x, const at::Tensor& go, const at::Tensor& gw,
                        const Problem& p) {
  // 16-bit: cuBLAS accumulates in fp32 and rounds once (its split-K reductions follow
  // torch's matmul settings, as torch.mm does); per-image products are summed in fp32.
  const int64_t kk = p.kh * p.kw, hw = p.H * p.W;
  at::Tensor g = gw.view({p.Cin, p.Cout * kk});
  if (one_pixel(p)) {
    const at::Tensor xt = rows(x, p.N, p.Cin).t(), gom = rows(go, p.N, p.Cout * kk);
    if (kk == 1 || go.is_contiguous()) {
      at::mm_out(g, xt, gom);
      return;
    }
    // taps-major grad_output: the product taps-major, then permuted into gw
    const at::Tensor t = at::mm(xt, gom);
    gw.copy_(t.view({p.Cin, p.kh, p.kw, p.Cout}).permute({0, 3, 1, 2}));
    return;
  }
  if (cl(go)) {  // one GEMM over all pixels (an NCHW x copied channels-last first)
    const at::Tensor xc = cl(x) ? x : x.contiguous(at::MemoryFormat::ChannelsLast);
    at::mm_out(g, rows(xc, p.N * hw, p.Cin).t(), rows(go, p.N * hw, p.Cout));
    return;
  }
  const at::Tensor xm = images(x, p.Cin, hw), gm = images(go, p.Cout, hw);
  if (p.N == 1) {
    at::mm_out(g, xm[0], gm[0].t());
    return;
  }
  // per-image products (fp32 for 16-bit), summed in order
#if CONVT2D_MM_OUT_DTYPE
  const at::Tensor prod = sixteen_bit(x) ? at::bmm(xm, gm.transpose(1, 2), at::kFloat)
                                         : at::bmm(xm, gm.transpose(1, 2));
#else
  TORCH_CHECK(!sixteen_bit(x), "convt2d: cuBLAS grad_weight: 16-bit NCHW needs torch 2.8+");
  const at::Tensor prod = at::bmm(xm, gm.transpose(1, 2));
#endif
  g.copy_(prod.sum(0));
}

}  // namespace cuda
}  // namespace convt2d
