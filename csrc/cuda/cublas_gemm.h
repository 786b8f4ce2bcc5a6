// The cuBLAS algorithms (Algo::k*CublasGemm): passes that are exactly one dense GEMM
// (planner.h, dense_gemm_shape), run as torch's mm / bmm (cuBLAS). The planner's
// can_implement states the layouts each takes; these only run what it allowed.
#pragma once
#include <ATen/ATen.h>

#include "common/problem.h"
#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {

// out = conv_transpose2d(x, w, b) (b may be undefined) in out's dtype dt.
void cublas_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                    const at::Tensor& out, const Problem& p, DType dt);
// The GEMM + col2im forward's GEMM on the images of x (a chunk; p: the whole problem): y =
// x * w over all taps, w as Cin x Cout*kh*kw. Channels-last x: one GEMM, y [pixel][co][tap];
// NCHW x: one per image, y [image][co][tap][pixel]. y contiguous, fp32 (fp32_out, 16-bit x,
// torch 2.8+) or x's dtype.
void cublas_taps_gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& y,
                      const Problem& p, bool fp32_out);
// gi = grad_input from grad_output go.
void cublas_grad_input(const at::Tensor& go, const at::Tensor& w, const at::Tensor& gi,
                       const Problem& p);
// gw ([Cin][Cout][kh][kw], contiguous) = grad_weight.
void cublas_grad_weight(const at::Tensor& x, const at::Tensor& go, const at::Tensor& gw,
                        const Problem& p);
// Whether mm / bmm take an fp32 out_dtype for 16-bit operands (torch 2.8+).
bool cublas_fp32_out();

}  // namespace cuda
}  // namespace convt2d
