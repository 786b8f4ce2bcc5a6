// The planner: which algorithm computes each pass of a problem, and the candidates that
// autotune times. One place for every kernel choice of the CUDA backend (docs/design.md,
// "The planner"); the op glue (convt2d_cuda.cpp) only runs what it returns. Plain C++: no
// torch headers.
#pragma once
#include <vector>

#include "common/algo.h"
#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {

// Everything a choice depends on besides the override: the problem, the number format,
// the device and the operands' layouts.
struct Query {
  Problem p;
  DType dt = DType::kFloat;
  MathMode math = MathMode::kDefault;
  int device = 0;          // the CUDA device (kernels' limits are read per device: the plan cache)
  bool sm80 = false;       // compute capability 8.0+ (mma.sync, cp.async)
  bool wgmma = false;      // an sm_90a build on a 9.0 device (wgmma, TMA)
  // forward
  bool x_nchw = false;     // x contiguous NCHW
  bool x_cl = false;       // x contiguous channels-last
  bool x_unit_w = false;   // x.stride(3) == 1
  bool out_nchw = false;   // the output (backward: grad_input) contiguous NCHW
  bool out_cl = false;     // ... contiguous channels-last
  bool bias = false;       // the forward adds a bias
  // backward
  bool go_nchw = false;    // grad_output contiguous NCHW
  bool go_cl = false;      // grad_output contiguous channels-last
  bool go_unit_w = false;  // grad_output.stride(3) == 1
  bool want_gi = false, want_gw = false;
  bool tap_gathered = false;  // the 1x1 problem of the backward's tap gather
  bool tap_cublas = false;    // ... on cuBLAS (the transform kTapGatherCublas)
  // cuBLAS may run the call: not under torch's deterministic mode (its workspace alert), and
  // for fp32 with TF32 off only where torch's matmul precision keeps cuBLAS at IEEE fp32.
  bool cublas = false;
  bool cublas_fp32_out = false;  // torch has mm / bmm with an fp32 out_dtype (2.8+)
};

// Whether every pass of p is exactly one dense GEMM (docs/design.md, "cuBLAS GEMM"): one
// group, no padding or output padding, and either a 1x1 kernel at stride 1 (M = N*H*W
// pixels, K and N the channels) or a 1x1 input without dilation (M = N, the output's
// Cout*kh*kw per image one GEMM row: a generator's first layer); sizes within cuBLAS's
// 32-bit dimensions.
bool dense_gemm_shape(const Problem& p);

// Whether the forward can run as one dense GEMM y = x * w over all taps (M = N*H*W pixels,
// N = Cout*kh*kw, K = Cin) and a col2im pass that sums each output element's taps (one
// group, strides up to 16, not already dense_gemm_shape; sizes within 32-bit dimensions).
bool col2im_gemm_shape(const Problem& p);
// Whether two taps reach one output element ((k-1)*d >= s in either dimension).
bool taps_overlap(const Problem& p);

// The GEMM + col2im forward's GEMM (Algo::kFwdGemmCol2im): on cuBLAS or on the tensor-core
// implicit GEMM of the 1x1 problem x * w (fp32 where it takes the channels), its result in
// fp32 (16-bit x, cuBLAS with an fp32 out_dtype) or x's dtype, and images per chunk: GEMM
// and col2im run chunk by chunk so the result's buffer stays within kCol2imChunkBytes.
constexpr int64_t kCol2imChunkBytes = int64_t(32) << 20;
// cuBLAS's per-image GEMM of an NCHW x is H*W columns wide: below one 128-column tile most of
// each tile idles and every image re-reads the weight (measured, H200, the GEMM + col2im on
// 2x2 images at batch 64-128 with one GEMM over a channels-last copy instead: 128 x 96 -> 256
// k3 bf16 67 -> 17 us, 64 x 21 -> 512 k5 d2 fp32 150 -> 101 us).
constexpr int64_t kCol2imRowsBelow = 128;
struct Col2imSplit {
  bool cublas = true;
  bool fp32 = false;
  // The GEMM runs over pixel rows (y [pixel][co][tap]): the implicit GEMM always, cuBLAS where
  // x is channels-last or is copied so (x_copy: NCHW images of fewer pixels than
  // kCol2imRowsBelow whose per-image GEMMs would re-read the weight for over twice the copy's cost);
  // else cuBLAS runs one GEMM per NCHW image (y [image][co][tap][pixel]).
  bool x_rows = true;
  bool x_copy = false;  // x copied channels-last for it
  int64_t images = 1;
  int64_t image_bytes = 0;  // one image's GEMM result
};
Col2imSplit col2im_split(const Query& q);

// An algorithm's conditions: whether it can take the query's pass (fwd, dgrad or wgrad by
// the algorithm). A launcher may still decline (grid limits, alignment): the glue then
// runs the next algorithm of the plan.
bool can_implement(Algo a, const Query& q);

// Forward: the algorithms to try in order, each until one launches; the last never
// declines. forced (CONVT2D_ALGO fwd:) goes first where it can take the problem.
std::vector<Algo> plan_forward(const Query& q, Algo forced);
// The forward candidates autotune times besides the plan's first choice.
std::vector<Algo> forward_candidates(const Query& q);

// The backward's problem transform: kTapGather where grad_output gathered per tap (a
// permutation of it, or with overlapping taps an im2col) makes both gradients 1x1 problems,
// kTapGatherCublas where those then run on cuBLAS, else kStrided.
Algo plan_backward_transform(const Query& q, Algo forced);

// grad_input (query: the problem the gradients run on, after the transform).
Algo plan_grad_input(const Query& q, Algo forced);
std::vector<Algo> grad_input_candidates(const Query& q);

// grad_weight, and whether its tensorop kernel reads NCHW x as it is (else a channels-last
// copy; var: the override's wgrad_x).
Algo plan_grad_weight(const Query& q, Algo forced);
bool grad_weight_reads_nchw_x(const Query& q, const Variant& var);
// The tensorop grad_weight's tile, a kWgradTileNames index (the mma.sync tiles narrow .. bigwide,
// the wgmma tiles wg64 .. wg128k), for x read NCHW or channels-last (x_nchw); forced:
// Variant::wgrad_tile (-1 none; "nowg": the choice without the wgmma tiles). fp32 with TF32
// off has one tile (3xTF32), whatever this returns.
int wgrad_tile(const Query& q, bool x_nchw, int forced);

// c channels rounded up to whole 16-byte chunks of dt (the padded algorithms' channels).
int64_t padded_channels(int64_t c, DType dt);

// IgemmParams::ws of a forced implicit-GEMM kernel (kImplicitGemmWgmma, ...WgmmaWs, ...Halo,
// ...Mma), -1 for any other algorithm.
int igemm_kernel_select(Algo a);
// The tensor-core implicit GEMM's kernel (IgemmParams::ws: 0 Hopper two-block, 1
// warp-specialised, 2 halo, 3 mma.sync) for the query's forward (dgrad false) or grad_input,
// among those caps says can run, with k_splits K ranges (only the two-block and the mma.sync
// kernels split); forced (igemm_kernel_select, -1 none) where it can run.
int igemm_kernel(const Query& q, bool dgrad, const IgemmCaps& caps, int forced, int k_splits);
// IgemmParams::k_splits for the tensor-core implicit GEMM of the query's forward (dgrad
// false) or grad_input: 1 unless its grid fills under 35% of the GPU and the split is
// predicted 1.5x faster (cost model).
int igemm_k_splits(const Query& q, bool dgrad);

}  // namespace cuda
}  // namespace convt2d
