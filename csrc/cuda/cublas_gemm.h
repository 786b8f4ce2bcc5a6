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
// out = conv_transpose2d(x, w, b) for a scatter_gemm_shape problem: y = x * w over all
// taps (cuBLAS), then its columns scattered to their output pixels with the bias.
void cublas_forward_scatter(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                            const at::Tensor& out, const Problem& p, DType dt);
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
