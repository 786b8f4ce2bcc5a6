// CUDA kernel parameters and launchers. Plain C++: no torch headers, so the
// .cu files compile fast and only the op glue (convt2d_cuda.cpp) touches torch.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>
#include "common/algo.h"
#include "common/problem.h"

namespace convt2d {
namespace cuda {

enum class DType : int { kFloat = 0, kDouble = 1, kHalf = 2, kBFloat16 = 3 };

// A 4-D tensor seen by a kernel: base pointer and element strides.
struct TensorRef {
  void* ptr = nullptr;
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;
};

// Implicit GEMM over a gathered activation (CUTLASS-style problem mapping):
//   mode kForward: one GEMM per stride phase (ry, rx) and group g,
//       M = N * nq_y * nq_x   (the phase's output pixels)
//       N = Nc = Cout/groups  (output channels)
//       K = Kc * ntap_y * ntap_x  (Kc = Cin/groups; only taps reaching the phase)
//       src = x [N, Cin, H, W], dst = out [N, Cout, Ho, Wo]
//   mode kDgrad (grad_input = strided conv2d of grad_output with the weight):
//       one phase, M = N * H * W, N = Nc = Cin/groups, K = Kc * kh * kw (Kc = Cout/groups)
//       src = grad_out [N, Cout, Ho, Wo], dst = grad_in [N, Cin, H, W]
// wpk is the weight packed as [G][kh][kw][Kc][Nc] (contiguous), so a K-row
// of B is contiguous over the GEMM's N.
enum class IgemmMode : int { kForward = 0, kDgrad = 1 };
enum class MathMode : int { kDefault = 0, kTF32 = 1, kIEEE = 2 };

struct IgemmParams {
  Problem p;
  IgemmMode mode = IgemmMode::kForward;
  TensorRef src, dst;
  const void* wpk = nullptr;
  const void* bias = nullptr;  // [G*Nc] or nullptr (forward only)
  int64_t Hs = 0, Ws = 0;      // src spatial size
  int64_t Hd = 0, Wd = 0;      // dst spatial size
  int64_t Kc = 0, Nc = 0;      // reduced / produced channels per group
  int64_t phases_y = 1, phases_x = 1;
  int64_t max_m = 0;           // largest per-phase M (grid sizing)
  // The tensor-core kernel, as the planner chose it (cuda::igemm_kernel): 0 Hopper two-block,
  // 1 warp-specialised, 2 halo (implicit_gemm/igemm_halo_sm90.cu), 3 mma.sync (no wgmma).
  int ws = 3;
  Variant var;                 // forced variants (CONVT2D_ALGO options)
  // 3xTF32 on the halo kernel (fp32, TF32 off): wpk split into big and small TF32
  // halves (launch_split_tf32, same layout as wpk), and a device int that is nonzero
  // when a weight is not finite or |w| >= 2^60. wpk itself stays the unsplit weight.
  const void* wpk_hi = nullptr;
  const void* wpk_lo = nullptr;
  const int* wflag = nullptr;
  // 3xFP16 (fp32 with TF32 off, tc_halo_f16x3_applies): wpk with each GEMM column (g, n)
  // scaled by 2^w16_scale[g * Nc + n] and split into big and small fp16 halves
  // (launch_split_f16, same layout as wpk), and a device int f16_flag, nonzero when an
  // operand is out of the 3xFP16 range (the 3xTF32 kernel then reruns the product).
  const void* w16_hi = nullptr;
  const void* w16_lo = nullptr;
  const int* w16_scale = nullptr;
  int* f16_flag = nullptr;
  // When set, the kernel exits at once unless *run_if != 0 (the 3xTF32 fallback).
  const int* run_if = nullptr;
  // Forward, fp32 with TF32 off, NCHW x (set by the op glue): src is then an unfilled
  // channels-last buffer for the same tensor and src_nchw the NCHW original. The 3xFP16
  // halo kernel reads src_nchw itself where it can (implicit_gemm/igemm_halo_sm90.cu, f16x3_nchw_ok), and src is
  // then filled only for its 3xTF32 fallback, gated on f16_flag; every other path fills src
  // first (fill_src_nhwc).
  TensorRef src_nchw;
  // Kernels whose blocks take several tiles (the persistent 3xFP16 and looped 3xTF32 halo
  // kernels): the number of tiles, taken in turn (tile = block index + k * grid size).
  int64_t tiles = 0;
  // Split-K (few output tiles against a long reduction: tiny images with many channels): the
  // K loop is cut into k_splits ranges, one per blockIdx.y, and each writes its fp32 partial
  // tile, without bias, to split_ws + blockIdx.y * split_stride, a buffer with dst's element
  // strides; launch_igemm_split_reduce then adds the ranges in a fixed order, with the bias,
  // into dst (deterministic). Only the tensor-core two-block kernel (tc_igemm_kernel) splits.
  int k_splits = 1;
  float* split_ws = nullptr;
  int64_t split_stride = 0;
  // Each dimension's phase geometry (make_geo of phase r, common/mma_core.cuh), filled on the host
  // by fill_phase_geo: a tile reads it (phase_geo) instead of recomputing it, which cost
  // two dozen divisions at every tile start. geo_ok = 0: not filled (more
  // than kGeoTab phases, or a value past int32), the device computes it.
  struct PhaseGeo {
    int32_t om, oa, im, ia, it, nq, k0, ks, ntap;
  };
  static constexpr int kGeoTab = 8;
  PhaseGeo geo_y[kGeoTab] = {}, geo_x[kGeoTab] = {};
  int geo_ok = 0;
};

// The current device's SM count, queried per call (the devices of one process may
// differ): grid sizing of the narrow and the persistent / looped halo kernels (forward/narrow_output.cu).
int sm_count();

// prm.src (channels-last) from prm.src_nchw (forward: N x Cin x H x W, contiguous): always
// (run_if null) or only where *run_if != 0 (implicit_gemm/igemm_halo_sm90.cu). Nothing when src_nchw is unset.
cudaError_t fill_src_nhwc(const IgemmParams& prm, const int* run_if, cudaStream_t st);

// Fills prm.geo_y / geo_x / geo_ok from prm.p, mode, phases and Hd / Wd (implicit_gemm/igemm_cuda_core.cu).
void fill_phase_geo(IgemmParams& prm);

// grad_weight[ci, co, ky, kx] = sum over (n, iy, ix) of x * grad_out(gathered):
// per tap a GEMM with M = Cin/groups, N = Cout/groups, K = N*H*W, split-K over
// blocks into a float/double workspace [splits][G][kh*kw][Cig][Cog], then a
// fixed-order reduction over splits (deterministic).
struct WgradParams {
  Problem p;
  TensorRef x, gout;
  void* workspace = nullptr;  // float (double for fp64) [splits][G][kh*kw][Cig][Cog]
  void* gw = nullptr;         // [Cin][Cog][kh][kw] contiguous, dtype of x
  int64_t splits = 1;
  int64_t k_per_split = 0;    // pixels per split (multiple of the tile's BK)
  int tile = -1;              // tensor-core tile, a kWgradTileNames index (the planner's
                              // cuda::wgrad_tile, or autotune's: 0..kTcWgradTiles-1)
  Variant var;                // forced variants (CONVT2D_ALGO options)
  // grad_weight/wgrad_tensor_core.cu: x is NCHW contiguous (not channels-last): its tiles are read K-major
  // (pixels contiguous), so the backward needs no channels-last copy of x.
  bool x_nchw = false;
  // grad_weight/wgrad_nchw_sm90.cu with sw > 1: gout holds grad_out as sw stride-phase planes
  // [N][Cout][sw][Ho][ceil(Wo/sw)] (plane r: columns r, r + sw, ...; gout.sh / sc / sn the
  // row / channel / image strides), gout_sp the stride between planes.
  int64_t gout_sp = 0;
};

// grad_weight on tensor cores (grad_weight/wgrad_tensor_core.cu): grad_out read channels-last (sc == 1,
// 16-byte aligned pixels), x channels-last too or, with x_nchw, NCHW contiguous with
// H*W whole 16-byte chunks; per group one GEMM with M = kh*kw*Cog
// (m = tap*Cog + co), N = Cig, K = N*H*W, split-K into the fp32 workspace
// [splits][G][M][N], then a fixed-order reduction into gw (deterministic).
struct TcWgradPlan {
  int64_t splits = 1, k_per_split = 0, ws_elems = 0;
};

// Direct CUDA-core forward for few channels per group (write-bandwidth-bound
// shapes): one thread per output pixel, COB output channels per thread,
// the group's weights staged in shared memory.
struct DirectParams {
  Problem p;
  TensorRef x, out;
  const void* w = nullptr;     // [Cin][Cog][kh][kw] contiguous
  const void* bias = nullptr;  // [Cout] or nullptr
  // Tensor-core kernel (forward/direct_tensor_core.cu): the weight packed as
  // [G][ceil(Cog/kC)][kh*kw][ceil(Cig/kCh)][kC][kCh], zero padded, kCh = 16 bytes of
  // elements (8 for 16-bit, 4 for fp32), kC = wpk_channels = direct_tc_channels(p, dt,
  // math); nullptr: the CUDA-core kernels run.
  const void* wpk = nullptr;
  int wpk_channels = 0;
  Variant var;                 // forced variants (CONVT2D_ALGO options: narrow_wp)
};

// Forward for kernel == stride, no padding / output padding, dilation 1 (forward/patch_gemm.cu):
// per (n, group) one GEMM C[h*W + w][(co*kh + ky)*kw + kx] = x[ci][h*W + w] . w[ci][...]
// read straight from NCHW x and the unpacked weight, pixel-shuffled in the epilogue
// into NCHW out. x, out, w contiguous (NCHW / [Cin][Cog][kh][kw]).
struct PatchParams {
  Problem p;
  const void* x = nullptr;
  void* out = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;  // [Cout] or nullptr
};

// Launchers: return cudaSuccess or the launch error.
cudaError_t launch_igemm(const IgemmParams& prm, DType dt, MathMode math, cudaStream_t st);
// Tensor-core implicit GEMM (implicit_gemm/igemm_tensor_core.cu): src read channels-last
// (src.sc == 1), wpk packed K-major [G][kh][kw][Nc][Kc]; fp32 in MathMode::kIEEE runs as 3xTF32.
bool tc_igemm_supported(const IgemmParams& prm, DType dt);
// Which of the tensor-core implicit GEMM's kernels can run prm (where tc_igemm_supported):
// capabilities only; the planner (cuda::igemm_kernel) chooses among them and sets prm.ws.
struct IgemmCaps {
  bool wgmma = false;      // the Hopper wgmma kernels (two-block, warp-specialised): an sm_90a
                           // build on 9.0, more than 32 GEMM columns, K rows of 128+ bytes, not 3xTF32
  bool ws_tma = false;     // the warp-specialised kernel's TMA loader (its maps encode; not
                           // forced off by Variant::loader = 0)
  bool halo = false;       // the halo kernel (tc_halo_supported)
  int64_t halo_tap_cols = 0;  // its most tap columns per stride phase (its source reuse)
};
IgemmCaps igemm_caps(const IgemmParams& prm, DType dt, MathMode math);
// Runs the kernel prm.ws names (0 Hopper two-block, 1 warp-specialised, 2 halo, 3 mma.sync);
// where that kernel cannot run prm, the mma.sync kernel (the halo kernel: an error).
cudaError_t launch_tc_igemm(const IgemmParams& prm, DType dt, MathMode math, cudaStream_t st);
// dst[e] = sum over s < splits (in order) of ws[s * numel + e] (+ bias[c]) for the dense dst
// of numel elements whose channel is c = (e / inner) % C (inner = H*W for NCHW, 1 for
// channels-last): split-K's reduction (implicit_gemm/igemm_tensor_core.cu).
cudaError_t launch_igemm_split_reduce(const float* ws, int splits, void* dst, const void* bias,
                                      int64_t numel, int64_t C, int64_t inner, DType dt,
                                      cudaStream_t st);
// The forward's col2im (common/layout_kernels.cu; cuBLAS GEMM + col2im forward):
// out[n][co][oy][ox] = bias[co] + the sum over the taps (ky, kx) that reach (oy, ox) of the GEMM
// result y = x * w over all taps. y's element (n, co, tap = ky*kw + kx, pixel = iy*W + ix)
// lies at n*ysn + co*ysc + tap*yst + pixel*ysp; y is float (y_float: 16-bit x, the GEMM's
// fp32 result) or of out's dtype. One thread per output element in out's memory order
// (chan_last: channels fastest, else columns). cudaErrorInvalidValue, nothing launched, where
// the output has 2^31 or more elements or a stride exceeds 16.
struct Col2imArgs {
  Problem p;
  int64_t ysn = 0, ysc = 0, yst = 0, ysp = 0;
  TensorRef out;
  bool chan_last = false;
};
cudaError_t launch_col2im_taps(const Col2imArgs& a, const void* y, const void* bias, DType dt,
                               bool y_float, cudaStream_t st);
// dst[e] += bias[(e / inner) % C] for the dense dst of numel elements (common/layout_kernels.cu):
// the cuBLAS forward's bias (inner = H*W for NCHW, taps for a 1x1 input, 1 channels-last).
cudaError_t launch_add_bias(void* dst, const void* bias, int64_t numel, int64_t C, int64_t inner,
                            DType dt, cudaStream_t st);
// Halo variant (implicit_gemm/igemm_halo_sm90.cu, sm_90a builds on compute capability 9.0): the tap
// columns read shifted views of one staged source halo. fp32 in MathMode::kIEEE
// runs as 3xTF32 and needs prm.wpk_hi / wpk_lo / wflag.
bool tc_halo_supported(const IgemmParams& prm, DType dt, MathMode math);
// The halo kernel's most tap columns per stride phase of prm's GEMM.
int64_t tc_halo_tap_cols(const IgemmParams& prm);
cudaError_t launch_tc_halo(const IgemmParams& prm, DType dt, MathMode math, cudaStream_t st);
// fp32 -> big and small TF32 halves (3xTF32, round to nearest; a finite value that
// would round to inf keeps a truncated big half; inf / NaN have no small half), and
// *flag |= 1 where a value is not finite or |v| >= 2^60 (flag zeroed by the caller).
cudaError_t launch_split_tf32(const float* src, float* hi, float* lo, int64_t n, int* flag,
                              cudaStream_t st);
// 3xFP16 weight split: the packed weight [groups][kk][nc][kc] (fp32) with each GEMM column
// (g, n) times 2^s, s chosen from the column's max |w| so its largest value lies in
// [2^14, 2^15) (scale[g * nc + n] = s), split into big and small fp16 halves (round to
// nearest), same layout; *flag |= 1 where a column's max |w| is not finite or outside
// [2^-46, 2^75) (flag zeroed by the caller).
cudaError_t launch_split_f16(const float* src, void* hi, void* lo, int64_t groups, int64_t kk,
                             int64_t nc, int64_t kc, int* scale, int* flag,
                             cudaStream_t st);
// Whether the halo kernel's 3xFP16 variant runs this fp32 product with TF32 off (then the
// caller provides w16_hi / w16_lo / w16_scale / f16_flag beside the 3xTF32 halves).
bool tc_halo_f16x3_applies(const IgemmParams& prm);
// True when this build has the sm_90a wgmma kernels (CONVT2D_WGMMA) and the current
// device is compute capability 9.0, the one their machine code loads on.
bool wgmma_device();
cudaError_t launch_wgrad(const WgradParams& prm, DType dt, MathMode math, cudaStream_t st);
bool tc_wgrad_supported(const WgradParams& prm, DType dt);
// The split of the tensorop grad_weight with tile `tile` (as WgradParams::tile, which must
// then hold the same value).
TcWgradPlan tc_wgrad_plan(const Problem& p, DType dt, MathMode math, int num_sms, int tile,
                          bool x_nchw);
constexpr int kTcWgradTiles = 5;
cudaError_t launch_tc_wgrad(const WgradParams& prm, DType dt, MathMode math, cudaStream_t st);
// The fixed-order reduction of a [splits][G][kh*kw*Cog][Cig] fp32 workspace into
// prm.gw (the tensor-core grad_weight kernels' second step), and its launch limits.
bool tc_wgrad_reduce_fits(const Problem& p);
cudaError_t launch_tc_wgrad_reduce(const WgradParams& prm, DType dt, cudaStream_t st);
// grad_weight on Hopper wgmma from NCHW operands (grad_weight/wgrad_nchw_sm90.cu; fp32: 3xTF32 with
// MathMode::kIEEE, else TF32): x and grad_out read K-major (pixels contiguous) by TMA,
// so neither needs a channels-last copy (with sw > 1 grad_out comes as stride-phase
// planes, WgradParams::gout_sp). Needs an sm_90a build on a 9.0 device, x / grad_out with
// unit W stride, 16-byte aligned base and other strides (the glue pads rows whose width
// is not a multiple of 4). Its workspace
// and split are sized by tc_wgrad_km_plan (k_per_split counts 32-pixel row tiles).
bool tc_wgrad_km_supported(const WgradParams& prm, DType dt);
TcWgradPlan tc_wgrad_km_plan(const Problem& p, int num_sms);
cudaError_t launch_tc_wgrad_km(const WgradParams& prm, MathMode math, cudaStream_t st);
cudaError_t launch_direct_forward(const DirectParams& prm, DType dt, cudaStream_t st);
// Depthwise forward (forward/depthwise.cu; any dtype): one input channel per group
// (Cin/groups == 1), strides up to 32, the staged region within shared memory (dw_plan).
// chan_last: the output is channels-last (a lane per channel); w is the weight contiguous,
// [Cout][kh*kw]. cudaErrorInvalidValue: not taken, nothing launched.
bool depthwise_forward_supported(const Problem& p, DType dt, bool chan_last);
cudaError_t launch_depthwise_forward(const DirectParams& prm, bool chan_last, DType dt,
                                     cudaStream_t st);
// Narrow forward (forward/narrow_output.cu; fp32 / fp16 / bf16, fp32 FMA for all): 1..8 output
// channels per group with many reduced channels per output (a GAN's RGB layer), the
// taps' row offsets stepping by one (dilation dividing the stride), phase weights
// within 64 KB. launched = false: not taken, nothing launched. It ignores wpk.
bool narrow_forward_supported(const Problem& p, DType dt);
cudaError_t launch_narrow_forward(const DirectParams& prm, DType dt, cudaStream_t st,
                                  bool& launched);
// Shape conditions of the patch GEMM (bf16 / fp16 / fp32; compute capability 8.0+):
// kh == sh and kw == sw (powers of two, kh*kw dividing 128), dilation 1, no padding or
// output padding, W and Cout/groups*kh*kw whole 16-byte chunks, at most 65535 pixel tiles
// and images x groups.
bool patch_gemm_supported(const Problem& p, DType dt);
// launched = false: not taken (shape, alignment or grid limits), nothing launched.
cudaError_t launch_patch_gemm(const PatchParams& prm, DType dt, MathMode math, cudaStream_t st,
                              bool& launched);
// Tensor-core direct forward (forward/direct_tensor_core.cu; bf16 / fp16, and fp32 with TF32 allowed, on
// compute capability 8.0+).
// launched = false: not taken (no packed weight prm.wpk, i.e. direct_tc_channels
// said 0 or the planner chose the CUDA-core kernels), nothing launched;
// launch_direct_forward tries it first.
cudaError_t launch_direct_tc(const DirectParams& prm, DType dt, cudaStream_t st, bool& launched);
// Output channels per block of the tensor-core direct kernel (16, 32 or 64) for the
// problem, or 0 when it does not take it; the glue packs DirectParams::wpk for it.
// nt_cap: Variant::direct_nt (0: the kernel's own cap).
int direct_tc_channels(const Problem& p, DType dt, MathMode math, int nt_cap = 0);
// The tensor-core direct kernel's resident warps per SM for the problem against those of a
// tile as tall as the problem's stride phases allow (at least two blocks per SM): 1 where
// nothing is lost or the kernel does not take the problem. Many input channels per group make
// the staged input rows so wide that shared memory holds one tile row per stride phase: a few
// warps per SM, which hide no latency (the planner's cost model).
double direct_tc_occupancy(const Problem& p, DType dt, MathMode math);

// Direct gradients on CUDA cores for few channels per group or few output channels
// (grad_input/dgrad_direct.cu, grad_weight/wgrad_direct.cu): any dtype and strides.
struct DirectGradParams {
  Problem p;
  TensorRef x, gout, gin;      // input (grad_weight), grad_output, grad_input (grad_input)
  const void* w = nullptr;     // grad_input: the weight, as each launcher says
  void* workspace = nullptr;   // grad_weight: fp32 (fp64) [splits][G * Cig*Cog*kh*kw]
  void* gw = nullptr;          // grad_weight: [Cin][Cog][kh][kw] contiguous, dtype of x
  int64_t splits = 1, pix_per_split = 0;  // grad_weight: the pixel (n, iy, ix) ranges
};
struct DirectWgradPlan {
  int64_t splits = 1, pix_per_split = 0, ws_elems = 0;
};
// grad_input (grad_input/dgrad_direct.cu): w is the weight [Cin][Cog][kh][kw] contiguous, or,
// where dgrad_direct_transposed_weight(p, chan_last) says (chan_last: grad_input's stride
// along C is 1 and Cin > 1), transposed per group, [G][Cog][kh][kw][Cig] contiguous;
// grad_output and grad_input any strides.
// cudaErrorInvalidValue: not taken (dgrad_direct_supported), nothing launched.
bool dgrad_direct_supported(const Problem& p);
bool dgrad_direct_transposed_weight(const Problem& p, bool chan_last);
// Input channels a thread of the direct grad_input kernel takes (before alignment).
int dgrad_direct_cc(const Problem& p);
cudaError_t launch_dgrad_direct(const DirectGradParams& prm, DType dt, cudaStream_t st);
// Depthwise grad_input (any dtype and strides): one input channel per group. A thread per
// element (grad_input/dgrad_depthwise.cu): grad_input under 2^31 elements; chan_last (grad_input
// channels-last: channels fastest) with w the weight transposed to [kh*kw][Cout], else w
// [Cout][kh*kw]. Tiled (grad_input/dgrad_depthwise_tiled.cu): the staged region within shared
// memory (dw_plan), w [Cout][kh*kw] in either layout. cudaErrorInvalidValue: not taken, nothing
// launched.
bool dgrad_depthwise_supported(const Problem& p);
cudaError_t launch_dgrad_depthwise(const DirectGradParams& prm, bool chan_last, DType dt,
                                   cudaStream_t st);
bool dgrad_depthwise_tiled_supported(const Problem& p, DType dt, bool chan_last);
cudaError_t launch_dgrad_depthwise_tiled(const DirectGradParams& prm, bool chan_last, DType dt,
                                         cudaStream_t st);
DirectWgradPlan wgrad_direct_plan(const Problem& p, DType dt, int num_sms);
cudaError_t launch_wgrad_direct(const DirectGradParams& prm, DType dt, cudaStream_t st);
// The second kernel of the direct and depthwise grad_weight kernels (grad_weight/wgrad_direct.cu):
// the fp32 (fp64) partial sums ws [splits][elems] added in a fixed order into gw (dtype dt).
cudaError_t launch_wgrad_split_sum(const void* ws, void* gw, int64_t splits, int64_t elems,
                                   DType dt, cudaStream_t st);
// Depthwise grad_weight (any dtype and strides): one input channel per group. A thread per
// pixel (grad_weight/wgrad_depthwise.cu): kh*kw <= 1024, N*H*W under 2^30; channel lanes
// fastest where grad_output is channels-last (chan_last), pixel lanes fastest otherwise.
// Tiled (grad_weight/wgrad_depthwise_tiled.cu): tiles of x and the grad_output region their
// taps read staged in shared memory, chan_last a lane per channel; cudaErrorInvalidValue: not
// taken, nothing launched. Workspace and split from the kernel's plan (the same chan_last; the
// tiled kernel's splits and tiles per split in DirectGradParams' splits and pix_per_split).
bool wgrad_depthwise_supported(const Problem& p);
DirectWgradPlan wgrad_depthwise_plan(const Problem& p, bool chan_last, DType dt, int num_sms);
cudaError_t launch_wgrad_depthwise(const DirectGradParams& prm, bool chan_last, DType dt,
                                   cudaStream_t st);
bool wgrad_depthwise_tiled_supported(const Problem& p, DType dt, bool chan_last);
DirectWgradPlan wgrad_depthwise_tiled_plan(const Problem& p, bool chan_last, DType dt,
                                           int num_sms);
cudaError_t launch_wgrad_depthwise_tiled(const DirectGradParams& prm, bool chan_last, DType dt,
                                         cudaStream_t st);

// Contiguous NCHW -> contiguous NHWC (channels-last) copy (common/layout_kernels.cu).
cudaError_t launch_nchw_to_nhwc(const void* src, void* dst, int64_t N, int64_t C, int64_t HW,
                                int elem_bytes, cudaStream_t st);
// The same copy of 4-byte elements, done only where *run_if != 0 (one wave of blocks that
// otherwise exit at once).
cudaError_t launch_nchw_to_nhwc_if(const void* src, void* dst, int64_t N, int64_t C, int64_t HW,
                                   const int* run_if, cudaStream_t st);

// Tap gather of grad_output (any strides: NCHW, channels-last) into channels-last dst
// [N][H][W][groups*kgp] (common/layout_kernels.cu): per group g, column c*kh*kw + ky*kw + kx
// (c < Cout/groups) = gout[n][g*Cout/groups + c][y*sh - ph + ky*dh][x*sw - pw + kx*dw], zero
// outside and in the padding columns up to kgp; the backward's 1x1 view of the problem.
// cudaErrorInvalidValue: not taken (groups*kgp not a multiple of 4, kgp < Cout/groups*kh*kw,
// grid limits, dst alignment), nothing launched.
cudaError_t launch_tap_gather(const void* gout, const int64_t (&strides)[4], void* dst,
                              const Problem& p, int64_t kgp, int elem_bytes, cudaStream_t st);

// out[g][c][b][a] = in[g][a][b][c], both contiguous, 2- or 4-byte elements, C <= 256
// (common/layout_kernels.cu; the weight packing). cudaErrorInvalidValue: not taken, nothing launched.
cudaError_t launch_reverse3(const void* in, void* out, int64_t G, int64_t A, int64_t B,
                            int64_t C, int elem_bytes, cudaStream_t st);

// The direct tensor-core forward's weight (DirectParams::wpk): w [G*Cig][Cog][kk] contiguous
// -> out [G][ceil(Cog/kc)][kk][ceil(Cig/ke)][kc][ke], zero past Cig and Cog, in one pass
// (common/layout_kernels.cu); 2- or 4-byte elements, else cudaErrorInvalidValue (nothing
// launched).
cudaError_t launch_pack_direct_weight(const void* w, void* out, int64_t G, int64_t Cig,
                                      int64_t Cog, int64_t kk, int64_t kc, int64_t ke,
                                      int elem_bytes, cudaStream_t st);

// Heuristics the glue asks before launching.
bool direct_forward_fits(const Problem& p, DType dt);  // shared-memory budget
int64_t wgrad_split_count(const Problem& p, DType dt, MathMode math, int num_sms);
int64_t wgrad_tile_k(DType dt, MathMode math);

}  // namespace cuda
}  // namespace convt2d
