// The planner (planner.h): every kernel choice of the CUDA backend, as rules over a Query.
// The rules come from measurements (docs/perf-log.md); the shape classes they separate and
// each algorithm's idea and floor are in docs/design.md. Reading order: can_implement (what
// each algorithm takes), then one plan_* function per pass.
#include "cuda/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <unordered_map>

namespace convt2d {
namespace cuda {
namespace {

// Elements per 16-byte chunk, the channel granule of the tensor-core kernels' loads.
int64_t chunk_elems(DType dt) { return dt == DType::kFloat ? 4 : 8; }

// Reduced channels per output element: Cin/groups x the taps reaching one stride phase.
double k_per_output(const Problem& p) {
  return double(p.cin_g() * p.kh * p.kw) / double(p.sh * p.sw);
}

// The narrow kernel's bound: reduced channels per output from which it runs for 1..8
// outputs per group. It beat the direct kernels and the GEMM on every such layer measured,
// down to 18 reduced channels per output; below that (output-write-bound) it is unmeasured.
constexpr double kNarrowMinK = 16;

bool tensor_cores(const Query& q) { return q.sm80 && q.dt != DType::kDouble; }
// The forward's tensor-core implicit GEMM takes the input channels as they are (whole 16-byte
// chunks per group) at full rate (16-bit, or TF32 allowed: not 3xTF32).
bool fast_tc_gemm(const Query& q) {
  return tensor_cores(q) && q.p.cin_g() % chunk_elems(q.dt) == 0 && q.math != MathMode::kIEEE;
}

// ---- the cost model ----------------------------------------------------------------------
// An algorithm's time = its kernel and copy launches x kLaunch + max(bytes / bandwidth, work /
// rate), with its work padded to its tiles and its rate scaled by how much of the GPU its grid
// fills. Round-number rates of an H100-class GPU, checked against every candidate timed on a
// 100-layer sweep (scripts/calibrate.py, docs/design.md "The planner"): they rank candidates
// well (the choice within 10% of the best on 80-90% of layers), but absolute times are off by
// up to 3x, so a forward choice of the measured rules is replaced only for a 2x prediction.
constexpr double kLaunch = 5e-6;             // s per kernel / copy launch (host + gap)
constexpr double kBandwidth = 2.4e12;        // bytes/s, achieved
constexpr double kGemmBlocks = 264;          // implicit-GEMM blocks that fill the GPU
constexpr double kDirectThreads = 2048 * 132;  // direct-gradient threads that fill it
constexpr double kDirectPixels = 64 * 132;   // direct / narrow forward output pixels that do
constexpr double kNarrowRate = 8e12;         // FLOP/s, narrow forward (fp32 FMA)
constexpr double kDirectSimtRate = 4e12;     // FLOP/s, CUDA-core direct forward
constexpr double kDirectTcRate = 25e12;      // FLOP/s, tensor-core direct forward
constexpr double kDirectDgradRate = 2.0e12;  // products/s (the weight load is warp-uniform)
constexpr double kDirectWgradRate = 1.5e12;  // products/s (two loads each)
constexpr double kDepthwiseRate = 5e12;      // depthwise forward: tap products per output / s
// The depthwise grad_weight kernels, tap products (weight elements x pixels) / s, measured
// (H100, 7 layers, one input channel to 1..1024 outputs per group): the per-pixel kernel
// 5.5-6.5e11 on all; the tiled one 1.4-2.0e12 at stride 1, 8.5e11 at stride 2 and 4.2e11 at
// stride 4 (fitted as the rate over sqrt(sh*sw))
constexpr double kDepthwiseWgradRate = 6e11;
constexpr double kDepthwiseWgradTiledRate = 2e12;
// ... and outputs / s: its stores ran at 2-6e11 outputs/s on layers of 60-130M outputs (tuning
// seed 1 + probes; 2-5x their bytes' floor), whatever the taps
constexpr double kDepthwiseOutRate = 3e11;
// The forward's depthwise rule gives way to the cost model's direct kernels above this many
// outputs per group (their channel tiles fill)
constexpr int64_t kDepthwiseMaxOutputs = 32;

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
int64_t elem_bytes(DType dt) {
  return dt == DType::kDouble ? 8 : dt == DType::kFloat ? 4 : 2;
}
// Effective GEMM rate (FLOP/s) on tensor cores or CUDA cores.
double gemm_rate(const Query& q, bool tensor) {
  if (!tensor) return q.dt == DType::kDouble ? 5e12 : 15e12;
  if (q.dt == DType::kHalf || q.dt == DType::kBFloat16) return 300e12;
  return q.math == MathMode::kIEEE ? 50e12 : 150e12;
}
double fill(double work_units, double full) { return std::min(1.0, std::max(work_units, 1.0) / full); }

// The tensor-core implicit GEMM's K tile per tap (elements): 128-byte rows, 64-byte where the
// channels reduced per tap take less; fewer channels leave the rest of the tile zero.
int64_t k_tile(int64_t kc, DType dt) {
  const int64_t eb = elem_bytes(dt);
  return (kc * eb >= 128 ? 128 : 64) / eb;
}
// The tensor-core implicit GEMM's grid and K loop (forward per phase, or grad_input): its
// blocks (128-row tiles x N tiles x phases x groups), K tiles per block (k_tile), and the
// elements of its output.
struct IgemmShape {
  double blocks = 0, iters = 0, tile_flops = 0, out_elems = 0;
};
IgemmShape igemm_shape(const Query& q, bool dgrad) {
  const Problem& p = q.p;
  const int64_t phases = dgrad ? 1 : p.sh * p.sw;
  const int64_t kc = dgrad ? p.cout_g() : p.cin_g(), nc = dgrad ? p.cin_g() : p.cout_g();
  const int64_t m = dgrad ? p.N * p.H * p.W
                          : p.N * ((p.Ho + p.sh - 1) / p.sh) * ((p.Wo + p.sw - 1) / p.sw);
  const int64_t bn = nc <= 32 ? 32 : nc <= 64 ? 64 : 128;
  const int64_t bk = k_tile(kc, q.dt);
  const int64_t taps = dgrad ? p.kh * p.kw
                             : ((p.kh + p.sh - 1) / p.sh) * ((p.kw + p.sw - 1) / p.sw);
  IgemmShape s;
  s.blocks = double((m + 127) / 128) * double((nc + bn - 1) / bn) * double(phases * p.groups);
  s.iters = double(taps * ((kc + bk - 1) / bk));
  s.tile_flops = 2.0 * 128 * double(bn) * double(bk);
  s.out_elems = dgrad ? double(p.N * p.Cin * p.H * p.W) : double(p.N * p.Cout * p.Ho * p.Wo);
  return s;
}
// Its time with the K loop split into `splits` ranges: whole waves of kGemmBlocks blocks,
// each block's K tiles plus about three tiles' worth of pipeline fill and epilogue, and,
// split, the fp32 partials written and read once more and the reduction's launch.
double igemm_split_time(const Query& q, const IgemmShape& s, int splits) {
  const double per_tile = s.tile_flops / (gemm_rate(q, true) / kGemmBlocks);
  const double waves = std::ceil(s.blocks * splits / kGemmBlocks);
  double t = waves * (std::ceil(s.iters / splits) + 3) * per_tile;
  if (splits > 1) t += kLaunch + 2.0 * 4.0 * splits * s.out_elems / kBandwidth;
  return t;
}

double cublas_time(Pass pass, const Query& q);
// cuBLAS's fp32 GEMM at IEEE precision (torch's matmul default, whatever TF32 allows the
// convolution): about 30 TFLOP/s measured on an H100 (8 GFLOP in 268 us).
constexpr double kCublasFp32Rate = 30e12;
double cublas_rate(DType dt) {
  return dt == DType::kFloat ? kCublasFp32Rate : dt == DType::kDouble ? 50e12 : 300e12;
}

// Forward: bytes of x, out and the weight; FLOPs of the taps that reach each phase.
double fwd_time(Algo a, const Query& q) {
  const Problem& p = q.p;
  const double kk = double(p.kh * p.kw), phases = double(p.sh * p.sw);
  const double pix = double(p.N * p.Ho * p.Wo);
  const double bytes = double(elem_bytes(q.dt)) *
                       double(p.N * p.Cin * p.H * p.W + p.N * p.Cout * p.Ho * p.Wo +
                              p.Cin * p.cout_g() * p.kh * p.kw);
  const double flops = 2.0 * pix * double(p.Cout) * double(p.cin_g()) * kk / phases;
  const double mem = bytes / kBandwidth;
  // The direct and narrow kernels' tiles span 32 columns of a stride phase (a lane or an MMA
  // row per column): a phase narrower than that (a 1-D signal, W = 1, or a few columns)
  // leaves the rest of each tile idle, so their work is that of the phase's columns rounded up
  // to 32.
  const int64_t nqx = (p.Wo + p.sw - 1) / p.sw;
  const double col_util = double(nqx) / double(round_up(std::max<int64_t>(1, nqx), 32));
  switch (a) {
    case Algo::kNarrowOutput: {
      // Its warps take 32 columns (col_util) x 8 rows of a stride phase: narrow phases (a
      // small image) leave lanes idle, so its work is that of the rounded-up phase.
      const double nqy = double((p.Ho + p.sh - 1) / p.sh);
      const double util = col_util * nqy / double(round_up(int64_t(nqy), 8));
      return kLaunch + std::max(mem, flops / util / (kNarrowRate * fill(pix / util, kDirectPixels)));
    }
    case Algo::kDirectSimt:
      return kLaunch + std::max(mem, flops / col_util /
                                         (kDirectSimtRate * fill(pix / col_util, kDirectPixels)));
    case Algo::kDirect:
    case Algo::kDirectTensorOp: {  // + the weight packing (one launch); tiles of 16+ outputs
      // Its rate scaled by the warps resident per SM against a tall tile's: many input
      // channels per group make the staged input rows so wide that shared memory holds one
      // tile row per stride phase, 2-4 warps per SM (direct_tc_occupancy).
      const double occ = direct_tc_occupancy(p, q.dt, q.math);
      return 2 * kLaunch +
             std::max(mem, flops * double(round_up(p.cout_g(), 16)) / double(p.cout_g()) /
                               col_util /
                               (kDirectTcRate * occ * fill(pix / col_util, kDirectPixels)));
    }
    case Algo::kFwdDepthwise: {  // per output and tap a staged load and an FMA, per output a store
      const double taps = double((p.kh + p.sh - 1) / p.sh) * double((p.kw + p.sw - 1) / p.sw);
      const double outs = double(p.N * p.Cout * p.Ho * p.Wo);
      return kLaunch + std::max(mem, outs / kDepthwiseOutRate + outs * taps / kDepthwiseRate);
    }
    case Algo::kFwdCublasGemm:
      return cublas_time(Pass::kForward, q);
    case Algo::kFwdGemmCol2im: {
      // The GEMM over all taps (x read once; N = Cout*kh*kw, the implicit GEMM's padded to
      // its 32-column tiles), its result written and read once more, the output; per chunk
      // the GEMM's launches (the implicit GEMM's: + x's channels-last copy and, though it now
      // runs once, the weight's packing: a launch per further chunk too many) and the col2im
      // pass; the implicit GEMM's weight's packing bytes once.
      const Col2imSplit s = col2im_split(q);
      const double eb = double(elem_bytes(q.dt)), m = double(p.N * p.H * p.W);
      const double cols = double(p.Cout) * kk, k = double(p.Cin);
      const double yb = (s.fp32 ? 4.0 : eb) * m * cols;
      const double chunks = std::ceil(double(p.N) / double(s.images));
      // (each chunk's GEMM streams the whole weight: a large weight over many chunks is read
      // many times)
      const double io = eb * (m * k + chunks * k * cols) + yb;
      double gemm, launches;
      if (s.cublas) {
        gemm = std::max(io / kBandwidth, 2.0 * m * cols * k / cublas_rate(q.dt));
        launches = 2;
      } else {
        gemm = std::max(io / kBandwidth,
                        2.0 * m * double(round_up(int64_t(cols), 32)) * k / gemm_rate(q, true));
        launches = 3;
        gemm += 2.0 * eb * k * cols / kBandwidth;
      }
      // x copied channels-last for a GEMM over pixel rows (the implicit GEMM's NCHW x, or
      // cuBLAS's x_copy): read and written once more.
      if (s.x_rows && !q.x_cl) {
        gemm += 2.0 * eb * m * k / kBandwidth;
        launches += 1;
      }
      return chunks * launches * kLaunch + gemm +
             (yb + eb * double(p.N * p.Cout * p.Ho * p.Wo)) / kBandwidth;
    }
    case Algo::kPatchGemm:
      return kLaunch + std::max(mem, 2.0 * double(p.N * p.H * p.W) * double(p.groups) *
                                         double(round_up(p.cout_g() * p.kh * p.kw, 64)) *
                                         double(p.cin_g()) / gemm_rate(q, true));
    case Algo::kFwdPadded: {  // + zero fill, copy of x, weight padding
      Query r = q;
      const int64_t cip = round_up(p.cin_g(), chunk_elems(q.dt));
      r.p.Cin = p.groups * cip;
      return 2 * kLaunch + fwd_time(Algo::kImplicitGemm, r) +
             2.0 * double(p.N * p.groups * cip * p.H * p.W * elem_bytes(q.dt)) / kBandwidth;
    }
    default: {  // the implicit GEMM per phase: M = that phase's pixels in 128-row tiles
      const bool tensor = tensor_cores(q) && p.cin_g() % chunk_elems(q.dt) == 0;
      const double m = double(round_up(std::max<int64_t>(1, p.N * p.Ho * p.Wo / (p.sh * p.sw)), 128));
      const double blocks = m / 128 * double((p.cout_g() + 63) / 64) * double(p.groups) * phases;
      const double f = 2.0 * m * phases * double(p.groups) *
                       double(round_up(p.cout_g(), p.cout_g() <= 32 ? 32 : 64)) *
                       double(round_up(p.cin_g(), tensor ? k_tile(p.cin_g(), q.dt) : 16)) * kk /
                       phases;
      if (tensor) {  // split-K where the grid is small (igemm_k_splits)
        const IgemmShape s = igemm_shape(q, false);
        const int k = igemm_k_splits(q, false);
        if (k > 1) return 3 * kLaunch + std::max(mem, igemm_split_time(q, s, k));
      }
      return 3 * kLaunch + std::max(mem, f / (gemm_rate(q, tensor) * fill(blocks, kGemmBlocks)));
    }
  }
}

// ---- cuBLAS GEMM (dense_gemm_shape) --------------------------------------------------------
// The GEMM of a pass (M x N x K; M rows of the row-major result; a 1x1 kernel's passes not
// all channels-last run one per image, `batch` of them: only grad_weight's then has a
// different shape, per-image products summed), and the extra work its layouts need: a copy
// of the weight (a 1x1 input with a channels-last output / grad_output: its rows run
// taps-major), the forward's bias pass.
struct DenseGemm {
  double m = 0, n = 0, k = 0, batch = 1, extra_bytes = 0;
  // bytes of its three matrices (A and B per image where batched), of elem_bytes eb
  double matrix_bytes(double eb) const { return eb * (batch * (m * k + k * n) + m * n); }
  int launches = 1;
  // cuBLAS's slow shapes: a single output column (Cout*kh*kw = 1: matrix-vector products),
  // per-image gradients of a single input channel (matrix-vector products), per-image
  // matrices whose rows (H*W) are not whole 16-byte chunks. A single input channel is not slow
  // in the forward (K = 1: outer products) nor in one GEMM over all pixels: one input channel
  // to 64 (1x1 kernel, 256x256, batch 32) ran 0.1-0.19 ms on cuBLAS in every pass (the forward
  // per image, the gradients with channels-last grad_output) against 0.23-1.6 ms on the
  // depthwise and direct kernels (docs/design.md, the `cublas_gemm` row).
  bool slow_shape = false;
};
DenseGemm dense_gemm(Pass pass, const Query& q) {
  const Problem& p = q.p;
  const double kk = double(p.kh * p.kw), eb = double(elem_bytes(q.dt));
  const bool pixel = p.H == 1 && p.W == 1;
  // (the gradients: one GEMM wherever grad_output is channels-last, the other tensor
  // copied to or from channels-last where it is not)
  const bool per_image = !pixel && !(pass == Pass::kForward ? q.x_cl && q.out_cl : q.go_cl);
  const double pix = pixel ? double(p.N) : double(p.N * p.H * p.W);
  const double cols = pixel ? double(p.Cout) * kk : double(p.Cout);  // grad_output's per pixel
  DenseGemm g;
  const int64_t row_elems = 16 / elem_bytes(q.dt);
  // (a one-channel grad_output counts as channels-last too: the one-GEMM gradients of a
  // single output column would copy x and grad_input)
  g.slow_shape = cols == 1 || (per_image && pass != Pass::kForward && p.Cin == 1) ||
                 (per_image && (p.H * p.W) % row_elems != 0);
  if (pixel && kk > 1 && (pass == Pass::kForward ? !q.out_nchw : !q.go_nchw)) {
    g.extra_bytes += 2 * eb * double(p.Cin) * cols;  // the weight permuted taps-major
    g.launches++;
  }
  if (pass == Pass::kForward) {
    g.m = pix; g.n = cols; g.k = double(p.Cin);
    if (q.bias) {
      g.extra_bytes += 2 * eb * pix * cols;
      g.launches++;
    }
  } else if (pass == Pass::kGradInput) {
    g.m = pix; g.n = double(p.Cin); g.k = cols;
    if (!pixel && q.go_cl && !q.out_cl) {  // the result permuted into grad_input
      g.extra_bytes += 2 * eb * pix * double(p.Cin);
      g.launches++;
    }
  } else {
    g.m = double(p.Cin); g.n = cols; g.k = pix;
    if (!pixel && q.go_cl && !q.x_cl) {  // x copied channels-last
      g.extra_bytes += 2 * eb * pix * double(p.Cin);
      g.launches++;
    }
    if (per_image && p.N > 1) {  // per-image products (fp32), summed
      g.batch = double(p.N);
      g.k = double(p.H * p.W);
      g.extra_bytes += 2 * 4 * double(p.N) * double(p.Cin) * cols;
      g.launches += q.dt == DType::kHalf || q.dt == DType::kBFloat16 ? 2 : 1;
    }
  }
  return g;
}
double cublas_time(Pass pass, const Query& q) {
  const DenseGemm g = dense_gemm(pass, q);
  const double eb = double(elem_bytes(q.dt));
  const double bytes = g.matrix_bytes(eb) + g.extra_bytes;
  // fp64 on tensor cores; tiles of 64 x 64 filling the GPU, K split where it is long (not
  // for the batched per-image products).
  const double rate = cublas_rate(q.dt);
  const double tiles = std::ceil(g.m / 64) * std::ceil(g.n / 64) * g.batch;
  const double ksplit = g.batch > 1 ? 1.0 : std::max(1.0, g.k / 512);
  const double f = std::min(1.0, tiles * ksplit / kGemmBlocks);
  return g.launches * kLaunch +
         std::max(bytes / kBandwidth, 2.0 * g.batch * g.m * g.n * g.k / (rate * f));
}
// Whether the planner takes cuBLAS for a dense-GEMM pass (tuning sweep: forced cuBLAS
// against the other algorithms on 61 such layers). fp64 always (cuBLAS on tensor cores
// against the CUDA-core implicit GEMM). Not on cuBLAS's slow shapes (DenseGemm::slow_shape:
// up to 3x slower there). 16-bit types: otherwise always.
// fp32 runs cuBLAS at IEEE precision, so only where that is no slower than the bytes moved
// (x 1.25) or takes under 10 us, and not grad_weight's per-image products where they fill
// under a quarter of the GPU (1-8 tiles a image: 3x slower than the grad_weight kernels).
// Never where grad_weight's per-image products would take more memory than its operands.
bool prefer_cublas(Pass pass, const Query& q) {
  const DenseGemm g = dense_gemm(pass, q);
  // grad_weight's per-image fp32 products ([N][Cin][Cout]) must not outgrow the operands
  // they are computed from (batch 256 x 1024 x 1024 on 8x8 images: 1 GiB for a 2 MiB
  // gradient): there the grad_weight kernels' small split workspace wins.
  if (g.batch > 1) {
    const double eb = double(elem_bytes(q.dt));
    if (4.0 * g.batch * g.m * g.n > eb * g.batch * g.k * (g.m + g.n)) return false;
  }
  if (q.dt == DType::kDouble) return true;
  if (g.slow_shape) return false;
  if (q.dt != DType::kFloat) return true;
  if (g.batch > 1 && std::ceil(g.m / 64) * std::ceil(g.n / 64) * g.batch < kGemmBlocks / 4)
    return false;
  const double eb = double(elem_bytes(q.dt));
  const double mem = g.matrix_bytes(eb) / kBandwidth;
  const double compute = 2.0 * g.batch * g.m * g.n * g.k / kCublasFp32Rate;
  return compute <= std::max(1.25 * mem, 10e-6);
}

// Bytes every backward algorithm moves at least: grad_output, x, weight, both gradients.
double backward_bytes(const Query& q) {
  const Problem& p = q.p;
  return double(elem_bytes(q.dt)) *
         double(p.N * p.Cout * p.Ho * p.Wo + 2 * p.N * p.Cin * p.H * p.W +
                2 * p.Cin * p.cout_g() * p.kh * p.kw);
}
// grad_input as the implicit GEMM: M = N*H*W pixels in 128-row tiles, N = Cin/groups in
// 64-wide tiles, K = Cout/groups (padded to 16-byte chunks on tensor cores) x taps, per
// group; the channels-last copy and the weight packing besides the kernel.
double dgrad_gemm_time(const Query& q) {
  const Problem& p = q.p;
  const bool tensor = tensor_cores(q) && p.cout_g() % chunk_elems(q.dt) == 0;
  const double m = double(round_up(p.N * p.H * p.W, 128));
  const double blocks = m / 128 * double((p.cin_g() + 63) / 64) * double(p.groups);
  const double flops = 2.0 * m * double(p.groups) * double(round_up(p.cin_g(), 64)) *
                       double(round_up(p.cout_g(), tensor ? chunk_elems(q.dt) : 16) * p.kh * p.kw);
  if (tensor) {  // split-K where the grid is small (igemm_k_splits)
    const int k = igemm_k_splits(q, true);
    if (k > 1)
      return 3 * kLaunch + std::max(backward_bytes(q) / kBandwidth,
                                    igemm_split_time(q, igemm_shape(q, true), k));
  }
  return (tensor ? 3 : 2) * kLaunch +
         std::max(backward_bytes(q) / kBandwidth,
                  flops / (gemm_rate(q, tensor) * fill(blocks, kGemmBlocks)));
}
// One thread per grad_input element.
double dgrad_direct_time(const Query& q) {
  const Problem& p = q.p;
  const double n = double(p.N * p.Cin * p.H * p.W);
  const double products = n * double(p.cout_g() * p.kh * p.kw);
  return kLaunch + std::max(backward_bytes(q) / kBandwidth,
                            products / (kDirectDgradRate * fill(n, kDirectThreads)));
}
// grad_weight: the tensorop kernel's GEMM has M = taps x Cout/groups (tiles of 128), N =
// Cin/groups (tiles of 64), K = N*H*W split over the GPU (copies, kernel, reduction); the
// CUDA-core one a GEMM per tap (kernel, reduction).
double wgrad_time(Algo a, const Query& q) {
  const Problem& p = q.p;
  const double P = double(p.N * p.H * p.W), kk = double(p.kh * p.kw);
  const double mem = backward_bytes(q) / kBandwidth;
  switch (a) {
    case Algo::kWgradDirect: {
      // A warp reads `lanes` consecutive pixels of 32 / lanes weight elements: below 8 lanes
      // (more than 32 weight elements per group) its loads stop coalescing, and the rate
      // falls with the lanes.
      const int64_t M = p.cin_g() * p.cout_g() * p.kh * p.kw;
      const double lanes = double(256 / std::min<int64_t>(std::max<int64_t>(M, 1), 256));
      const double eff = std::min(1.0, lanes / 8.0);
      return 2 * kLaunch +
             std::max(mem, double(p.Cin * p.cout_g()) * kk * P / (kDirectWgradRate * eff));
    }
    case Algo::kWgradDepthwise:  // x and grad_output read once; a product per tap and pixel
      return 2 * kLaunch + std::max(mem, double(p.Cout) * kk * P / kDepthwiseWgradRate);
    case Algo::kWgradDepthwiseTiled:  // the same, a product per tap and pixel from registers
      return 2 * kLaunch +
             std::max(mem, double(p.Cout) * kk * P * std::sqrt(double(p.sh * p.sw)) /
                               kDepthwiseWgradTiledRate);
    case Algo::kWgradWgmmaNchw:
    case Algo::kWgradTensorOp:
      return 4 * kLaunch +
             std::max(mem, 2.0 * P * double(p.groups) *
                               double(round_up(p.kh * p.kw * p.cout_g(), 128)) *
                               double(round_up(p.cin_g(), 64)) / gemm_rate(q, true));
    default:  // kWgradSimt
      return 2 * kLaunch +
             std::max(mem, 2.0 * P * double(p.groups) * kk * double(round_up(p.cout_g(), 128)) *
                               double(round_up(p.cin_g(), 64)) / gemm_rate(q, false));
  }
}

// The query with each group's input / output channels padded to cig / cog.
Query padded(const Query& q, int64_t cig, int64_t cog) {
  Query r = q;
  r.p.Cin = q.p.groups * cig;
  r.p.Cout = q.p.groups * cog;
  r.x_nchw = false;  // the padded copies are channels-last
  r.go_nchw = false;
  r.x_unit_w = r.go_unit_w = false;
  return r;
}
// Bytes of the zero-filled channels-last copies of the padded operands (written twice: the
// zero fill and the copy; read once by the kernel's own pass over them).
double pad_bytes(const Query& q, int64_t cig, int64_t cog, bool pad_x) {
  const Problem& p = q.p;
  double e = double(p.N * p.groups * cog * p.Ho * p.Wo);
  if (pad_x) e += double(p.N * p.groups * cig * p.H * p.W);
  return 2.0 * e * double(elem_bytes(q.dt));
}
double dgrad_padded_time(const Query& q) {  // + zero fill, copy, weight padding
  const int64_t cog = round_up(q.p.cout_g(), chunk_elems(q.dt));
  return 2 * kLaunch + dgrad_gemm_time(padded(q, q.p.cin_g(), cog)) +
         pad_bytes(q, q.p.cin_g(), cog, false) / kBandwidth;
}
double wgrad_padded_time(const Query& q) {  // + two zero fills and copies, the slice
  const int64_t c = chunk_elems(q.dt);
  const int64_t cig = round_up(q.p.cin_g(), c), cog = round_up(q.p.cout_g(), c);
  return 3 * kLaunch + wgrad_time(Algo::kWgradTensorOp, padded(q, cig, cog)) +
         pad_bytes(q, cig, cog, true) / kBandwidth;
}

}  // namespace

int64_t padded_channels(int64_t c, DType dt) { return round_up(c, chunk_elems(dt)); }

bool dense_gemm_shape(const Problem& p) {
  const int64_t lim = (int64_t(1) << 31) - 1;
  const int64_t kk = p.kh * p.kw;
  const bool one_by_one = p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1;
  const bool one_pixel = p.H == 1 && p.W == 1 && p.dh == 1 && p.dw == 1;
  return p.groups == 1 && p.ph == 0 && p.pw == 0 && p.oph == 0 && p.opw == 0 &&
         (one_by_one || one_pixel) && p.N > 0 && p.Cin > 0 && p.Cout > 0 && p.H * p.W > 0 &&
         p.N * p.H * p.W < lim && p.Cout * kk < lim && p.Cin < lim &&
         p.N * p.Cin * p.H * p.W < lim && p.N * p.Cout * p.Ho * p.Wo < lim &&
         p.Cin * p.Cout * kk < lim;
}

bool col2im_gemm_shape(const Problem& p) {
  const int64_t lim = (int64_t(1) << 31) - 1;
  const int64_t kk = p.kh * p.kw, hw = p.H * p.W;
  return p.groups == 1 && !dense_gemm_shape(p) && p.N > 0 && p.Cin > 0 && p.Cout > 0 &&
         hw > 0 && p.sh <= 16 && p.sw <= 16 && p.N * p.Cout * p.Ho * p.Wo < lim &&
         p.Ho + p.ph < lim && p.Wo + p.pw < lim && p.N * hw < lim && p.Cout * kk < lim &&
         p.Cin < lim && p.N * p.Cin * hw < lim && hw * p.Cout * kk < lim &&
         p.Cin * p.Cout * kk < lim;
}

bool taps_overlap(const Problem& p) {
  return (p.kh > 1 && (p.kh - 1) * p.dh >= p.sh) || (p.kw > 1 && (p.kw - 1) * p.dw >= p.sw);
}

Col2imSplit col2im_split(const Query& q) {
  const Problem& p = q.p;
  Col2imSplit s;
  // cuBLAS on NCHW x: one GEMM per image, H*W columns wide, each reading the whole weight.
  // Images narrower than a 128-column tile are copied channels-last for one GEMM over all
  // pixels where the weight's re-reads are over twice the copy's cost (x's bytes twice, and a
  // launch as bytes). Measured (H200): 33-69 MB of re-reads 1.1-4x faster with the copy,
  // 12-16 MB no faster (L2 serves them: the per-image route's model charges none).
  const double xb = double(elem_bytes(q.dt)) * double(p.N * p.Cin * p.H * p.W);
  const double reread = double(elem_bytes(q.dt)) * double(p.N) * double(p.Cin * p.Cout * p.kh * p.kw);
  const bool cublas_copies =
      !q.x_cl && p.H * p.W < kCol2imRowsBelow && reread > 2.0 * (2.0 * xb + kLaunch * kBandwidth);
  // fp32: cuBLAS runs its GEMM at IEEE precision (~30 TFLOP/s), the tensor-core implicit
  // GEMM at TF32 (or 3xTF32 with TF32 off) but reads x channels-last (a copy of NCHW x): the
  // engine of the smaller time, GEMM FLOPs at its rate + the copy's bytes (cuBLAS's too where
  // it copies). 16-bit and fp64: cuBLAS (16-bit with an fp32 result: summed taps round once).
  const bool igemm_ok = q.dt == DType::kFloat && tensor_cores(q) && p.Cin % chunk_elems(q.dt) == 0;
  if (igemm_ok) {
    const double flops = 2.0 * double(p.N * p.H * p.W) * double(p.Cout * p.kh * p.kw) * double(p.Cin);
    const double copy = q.x_cl ? 0.0 : 2.0 * xb / kBandwidth;
    s.cublas = q.cublas && flops / cublas_rate(q.dt) + (cublas_copies ? copy : 0.0) <
                               flops / gemm_rate(q, true) + copy;
  }
  s.x_copy = s.cublas && cublas_copies;
  s.x_rows = !s.cublas || q.x_cl || s.x_copy;
  s.fp32 = (q.dt == DType::kHalf || q.dt == DType::kBFloat16) && s.cublas && q.cublas_fp32_out;
  const int64_t eb = s.fp32 ? 4 : elem_bytes(q.dt);
  const int64_t per_image = std::max<int64_t>(1, p.H * p.W * p.Cout * p.kh * p.kw * eb);
  s.images = std::max<int64_t>(1, std::min<int64_t>(p.N, kCol2imChunkBytes / per_image));
  s.image_bytes = per_image;
  return s;
}

// The tap gather's grad_output: no more taps than stride phases, each grad_output element
// gathered at most once (at most 1.5x as many gathered elements as grad_output has: heavy
// padding can make it many times more; a little over 1x, from cropped edge taps, still gains).
bool gather_permutes(const Problem& p) {
  const int64_t kk = p.kh * p.kw;
  return kk <= p.sh * p.sw && p.sh * p.sw > 1 && 2 * p.H * p.W * kk <= 3 * p.Ho * p.Wo;
}
// Overlapping taps (an im2col of grad_output): the gathered elements, N*H*W*Cout*kh*kw, at
// most 2.5x the weight's, Cin*Cout/groups*kh*kw (few pixels against many input channels).
bool gather_weight_sized(const Problem& p) { return 2 * p.N * p.H * p.W <= 5 * p.cin_g(); }
// ... or at most 4x x's, N*H*W*Cin (few output channels from many input channels).
bool gather_input_sized(const Problem& p) {
  return p.cout_g() * p.kh * p.kw <= 4 * p.cin_g();
}

bool can_implement(Algo a, const Query& q) {
  const Problem& p = q.p;
  // A 1x1 input's tensors are dense N x C matrices in either layout; a 1x1 kernel's only
  // where x, grad_output and the result share one (NCHW: a GEMM per image).
  const bool x_ok = q.x_nchw || q.x_cl, go_ok = q.go_nchw || q.go_cl;
  const bool out_ok = q.out_nchw || q.out_cl;
  switch (a) {
    case Algo::kFwdCublasGemm:
      return q.cublas && dense_gemm_shape(p) && x_ok && out_ok;
    case Algo::kFwdGemmCol2im: {
      // The GEMM on cuBLAS (not under torch's deterministic mode; 16-bit taps that overlap
      // summed from its fp32 result) or on the tensor-core implicit GEMM (col2im_split).
      // One image's GEMM result at most 8 chunks' bytes (its buffer holds one image at least).
      if (!(col2im_gemm_shape(p) && x_ok && out_ok)) return false;
      const Col2imSplit s = col2im_split(q);
      const bool sixteen = q.dt == DType::kHalf || q.dt == DType::kBFloat16;
      return s.image_bytes <= 8 * kCol2imChunkBytes &&
             (!s.cublas || (q.cublas && (s.fp32 || !sixteen || !taps_overlap(p))));
    }
    case Algo::kDgradCublasGemm:
      return q.cublas && dense_gemm_shape(p) && go_ok && out_ok;
    case Algo::kWgradCublasGemm: {
      // Per-image products (not all channels-last, several images) are summed in fp32:
      // torch 2.8+ for 16-bit types.
      const bool sixteen = q.dt == DType::kHalf || q.dt == DType::kBFloat16;
      return q.cublas && dense_gemm_shape(p) && x_ok && go_ok &&
             (!sixteen || q.cublas_fp32_out || dense_gemm(Pass::kGradWeight, q).batch == 1);
    }
    case Algo::kNarrowOutput:  // fp32 / fp16 / bf16, 1..8 outputs per group (it checks the dtype)
      return narrow_forward_supported(p, q.dt);
    case Algo::kDirect:
    case Algo::kDirectSimt:    // its shared-memory budget; fp64 has no direct kernel
      return q.dt != DType::kDouble && direct_forward_fits(p, q.dt);
    case Algo::kDirectTensorOp:
      return q.dt != DType::kDouble && direct_forward_fits(p, q.dt) &&
             direct_tc_channels(p, q.dt, q.math) > 0;
    case Algo::kFwdDepthwise:  // one input channel per group, its staged region fitting
      return depthwise_forward_supported(p, q.dt, q.out_cl && p.Cout > 1);
    case Algo::kWgradDepthwise:
      return wgrad_depthwise_supported(p);
    case Algo::kWgradDepthwiseTiled:  // one input channel per group, a tile's stage fitting
      return wgrad_depthwise_tiled_supported(p, q.dt, q.go_cl && p.Cout > 1);
    case Algo::kDgradDepthwise:
      return dgrad_depthwise_supported(p);
    case Algo::kDgradDepthwiseTiled:
      return dgrad_depthwise_tiled_supported(p, q.dt, q.out_cl && p.Cin > 1);
    case Algo::kPatchGemm:     // kernel == stride, NCHW in and out
      return tensor_cores(q) && q.x_nchw && q.out_nchw && patch_gemm_supported(p, q.dt);
    case Algo::kImplicitGemm:
    case Algo::kImplicitGemmSimt:  // any problem (tensor cores where the operands allow)
      return true;
    case Algo::kImplicitGemmMma:
      return tensor_cores(q);
    case Algo::kImplicitGemmWgmma:
    case Algo::kImplicitGemmWgmmaWs:
    case Algo::kImplicitGemmHalo:  // igemm_kernel falls back where igemm_caps says it cannot run
      return tensor_cores(q) && q.wgmma;
    case Algo::kWgradTensorOp:  // whole 16-byte channel chunks on both sides
      return tensor_cores(q) && p.N > 0 && p.Cin > 0 && p.H * p.W > 0 &&
             p.cin_g() % chunk_elems(q.dt) == 0 && p.cout_g() % chunk_elems(q.dt) == 0;
    case Algo::kWgradWgmmaNchw:  // fp32; its tiles are 64 x 64 channels (>= 32 per group)
      return can_implement(Algo::kWgradTensorOp, q) && q.dt == DType::kFloat && q.wgmma &&
             p.cin_g() >= 32 && p.cout_g() >= 32 && q.x_unit_w && q.go_unit_w;
    case Algo::kWgradSimt:
      return true;
    case Algo::kDgradDirect:
      return p.N * p.Cin * p.H * p.W > 0 && dgrad_direct_supported(p);
    case Algo::kFwdPadded:  // only where Cin/groups is not whole chunks already
      return tensor_cores(q) && p.cin_g() % chunk_elems(q.dt) != 0;
    case Algo::kDgradPadded:  // only where Cout/groups is not whole chunks already
      return tensor_cores(q) && p.N * p.Cin * p.H * p.W > 0 &&
             p.cout_g() % chunk_elems(q.dt) != 0;
    case Algo::kWgradPadded:
      return tensor_cores(q) && p.N * p.Cin * p.H * p.W > 0 && p.Cout > 0 &&
             (p.cin_g() % chunk_elems(q.dt) != 0 || p.cout_g() % chunk_elems(q.dt) != 0);
    case Algo::kWgradDirect:  // some weight elements and pixels (else the glue zero-fills)
      return p.N * p.H * p.W > 0 && p.Cin * p.cout_g() * p.kh * p.kw > 0;
    case Algo::kTapGather: {
      // A permutation of grad_output (gather_permutes), or with overlapping taps an im2col no
      // larger than 2.5x the weight (gather_weight_sized) or than x (gather_input_sized);
      // strides, paddings, dilations below 2^20 and kernel sizes below 2^10 (the gather
      // kernel's 32-bit ints) and its grid (64 gathered channels a block, 65535 blocks); the
      // 1x1 problems' input channels in whole 16-byte chunks (their gathered channels are
      // padded to them).
      const int64_t kk = p.kh * p.kw;
      const int64_t big = int64_t(1) << 20;
      return (q.want_gi || q.want_gw) && tensor_cores(q) &&
             (gather_permutes(p) ||
              (kk > p.sh * p.sw && (gather_weight_sized(p) || gather_input_sized(p)))) &&
             p.sh < big && p.sw < big && p.ph < big && p.pw < big && p.dh < big && p.dw < big &&
             p.kh < (1 << 10) && p.kw < (1 << 10) && p.N <= 65535 &&
             p.groups * padded_channels(p.cout_g() * kk, q.dt) <= int64_t(65535) * 64 &&
             p.N * p.Cin * p.H * p.W > 0 && p.cin_g() % chunk_elems(q.dt) == 0;
    }
    case Algo::kTapGatherCublas: {  // one group; the 1x1 problems' GEMMs within cuBLAS's ints
      const int64_t lim = (int64_t(1) << 31) - 1;
      const int64_t c2 = padded_channels(p.Cout * p.kh * p.kw, q.dt);  // gathered, padded
      return can_implement(Algo::kTapGather, q) && q.cublas && p.groups == 1 &&
             p.N * p.H * p.W * c2 < lim && p.Cin * c2 < lim &&
             p.N * p.Cin * p.H * p.W < lim;
    }
    case Algo::kStrided:
      return true;
    default:
      return false;
  }
}

namespace {
// Stride phases of at most 16x16 pixels with 32 or more input channels per group: the narrow
// kernel's 32-column x 8-row warp tiles are then mostly idle while the GEMM's K loop is long
// (tuning seed 1, 1..8 outputs per group: the GEMM 2-10x faster on such layers), where the
// tensor-core GEMM can replace it (not with TF32 off: its 3xTF32 variant, forward_rules).
bool narrow_idle(const Query& q) {
  const Problem& p = q.p;
  const int64_t phase_pix = ((p.Ho + p.sh - 1) / p.sh) * ((p.Wo + p.sw - 1) / p.sw);
  return p.cin_g() >= 32 && phase_pix <= 256 && tensor_cores(q) && q.math != MathMode::kIEEE;
}

// Where the GEMM over all taps + col2im beats the per-phase kernels (docs/design.md, "GEMM +
// col2im"). The GEMM reads x once with all Cout*kh*kw columns in its tiles; the per-phase
// kernels read x once per tap and pad N = Cout to 32 (the implicit GEMM) or run on CUDA cores
// (the narrow and direct kernels), so it wins where outputs are few against many input
// channels, and loses where its result (Cout*kh*kw per pixel, written and read once more)
// outweighs x (Cin per pixel).
// - Taps that never overlap (kernel <= stride): x's channels dominate (256 or more, at least 8
//   per output column of a pixel). Tuning seed 1, 43 such layers x fp32 / bf16: it won on all
//   10 rows of this class (1.1-4.9x, geomean 1.9x) and lost outside it (128 -> 16 k1 s2:
//   1.3-1.6x slower; 320 -> 16 k2 s2 fp32, 5 channels a column: 1.8x slower than the patch
//   GEMM). Only to a contiguous NCHW output (all 10 were NCHW). fp32 on cuBLAS (IEEE) only
//   where it is no slower than the bytes moved (x 1.25) or under 10 us.
// - Taps that overlap: at most 2 columns per input channel (Cout*kh*kw <= 2*Cin) and 1..8
//   outputs with 256 or more input channels, or, where its result has 2^18 or more elements
//   (smaller layers: its launches and its cuBLAS calls' fixed costs lost), 1..8 outputs with
//   64 or more input channels or up to 32 outputs with 256 or more. Tuning seed 1 (the
//   first 300 layers with one group and Cout <= 64, x fp32 / bf16, forced against the
//   default): in the class without the size condition it took 0.02-0.89x the
//   default's time on 43 of 50 rows (geomean of the 50: 0.43; 768 -> 4 k7 s2 fp32 1479 ->
//   181 us, 1024 -> 4 k16 s1 26 -> 0.6 ms) and 1.01-1.45x on 7 (24-62 us layers, two fp32
//   layers on the narrow kernel; such layers since remeasured faster with the GEMM + col2im:
//   forward_rules); on the 130 rows outside it lost in geomean 1.49x, up to 50x (64 -> 56 k9
//   on 256x256: its result 18x x's bytes). Validation seed 2 (Cout <= 32): the
//   layers it lost to torch on were small (under 2^18 result elements, 26-52 us).
bool col2im_preferred(const Query& q) {
  const Problem& p = q.p;
  const double cols = double(p.Cout * p.kh * p.kw);
  if (taps_overlap(p)) {
    const double ycols = double(p.N * p.H * p.W) * cols;  // the GEMM result's elements
    return cols <= 2.0 * double(p.Cin) &&
           ((p.Cout <= 8 && p.Cin >= 256) ||
            (ycols >= double(1 << 18) &&
             ((p.Cout <= 8 && p.Cin >= 64) || (p.Cout <= 32 && p.Cin >= 256))));
  }
  if (!(p.Cin >= 256 && double(p.Cin) >= 8 * cols && q.out_nchw)) return false;
  if (q.dt != DType::kFloat || !col2im_split(q).cublas) return true;
  const double m = double(p.N * p.H * p.W), eb = double(elem_bytes(q.dt));
  const double bytes = eb * (m * double(p.Cin) + double(p.Cin) * cols + 2 * m * cols +
                             double(p.N * p.Cout * p.Ho * p.Wo));
  const double compute = 2.0 * m * cols * double(p.Cin) / kCublasFp32Rate;
  return compute <= std::max(1.25 * bytes / kBandwidth, 10e-6);
}

// A tiny 16-bit layer for the GEMM + col2im forward (forward_rules).
bool tiny_col2im(const Query& q) {
  const Problem& p = q.p;
  const bool sixteen = q.dt == DType::kHalf || q.dt == DType::kBFloat16;
  const double ycols = double(p.N * p.H * p.W) * double(p.Cout * p.kh * p.kw);
  return sixteen && ycols <= double(1 << 22) && p.Cin >= 128 && p.Cout > 8 &&
         p.kh * p.kw > 1;
}

// Strided 1x1 kernels on stride phases of at most 16x16 pixels with 32 or more input channels
// per group in whole 16-byte chunks: the tensor-core implicit GEMM, not the direct kernels,
// even where the bytes bound the layer (tuning seed 1, 24 strided 1x1 layers: on the 5 such
// layers x fp32 / bf16 the GEMM took 0.45-0.97x the direct kernel's time, geomean 0.66, e.g.
// 96 -> 1024 on 13x13 bf16 110 -> 49 us; on larger phases it lost up to 4x, the direct
// kernel's coalesced rows winning there). Measured on 1x1 kernels with 48+ channels only.
bool small_phase_gemm(const Query& q) {
  const Problem& p = q.p;
  const int64_t phase_pix = ((p.Ho + p.sh - 1) / p.sh) * ((p.Wo + p.sw - 1) / p.sw);
  return p.kh == 1 && p.kw == 1 && p.sh * p.sw > 1 && phase_pix <= 256 && p.cin_g() >= 32 &&
         fast_tc_gemm(q);
}

// Channels-last x with 32 or more outputs per group and the input channels in whole 16-byte
// chunks, TF32 allowed: the tensor-core implicit GEMM, not the direct kernels, even where the
// bytes bound the layer (few reduced channels per output). The direct kernels' lanes read
// channels-last x a pixel apart, with few channels per pixel. Tuning seed 1: every such
// layer the direct kernel ran (8 rows, fp32 / bf16) took 0.27-0.67x its time on the implicit
// GEMM (32 -> 384 k3 s3 on 56x128 fp32 782 -> 211 us); validation seed 2: 9 of 10 rows faster
// (0.15-0.89x; 192 -> 128 k1 s2 on 64x64 fp32 1965 -> 298 us), one slower (8 -> 32 k7 s3 on
// 64x64, batch 1, fp32: 29 -> 54 us). With channels to pad (implicit_gemm_padded) the class
// lost on 8 of 15 rows, once 8.6x (4 -> 56 k7 bf16, 17 -> 146 us): not taken.
bool cl_gemm(const Query& q) {
  return q.x_cl && !q.x_nchw && q.p.cout_g() >= 32 && fast_tc_gemm(q);
}

// Each output reduces over 1024 or more products (k_per_output) and the tensor-core GEMM takes
// the channels, TF32 allowed: not the direct kernels (forward_rules, and not the cost model's
// candidates either), whose lanes run that reduction serially, each lane a few outputs, and a
// small layer has too few lanes to hide it (scripts/calibrate.py, channels-last x, 1-4 outputs
// per group, the layers the rules sent to them: the GEMM 1.1-10x faster than the best direct
// kernel on all 8 such layers, 128 -> 4 k=(4,5) on 32x32 fp32 376 -> 37 us; 0.8-1.3x of it at
// 256-1000 products). (8 or more outputs with such reductions are the GEMM's already: gemm_ok.)
bool long_reduction(const Query& q) { return k_per_output(q.p) >= 1024 && fast_tc_gemm(q); }

// The measured rules (the order to try; the last never declines).
std::vector<Algo> forward_rules(const Query& q) {
  std::vector<Algo> seq;
  const Problem& p = q.p;
  const double kpo = k_per_output(p);
  // A pass that is exactly one dense GEMM (a 1x1 kernel at stride 1, a 1x1 input; one group,
  // so of the layers below a single input channel only): cuBLAS, where prefer_cublas; for
  // fp64 (not measured against it) after the depthwise kernel.
  const bool blas = can_implement(Algo::kFwdCublasGemm, q) && prefer_cublas(Pass::kForward, q);
  if (blas && q.dt != DType::kDouble) seq.push_back(Algo::kFwdCublasGemm);
  // One input channel per group (depthwise; a single input channel): each output has a
  // handful of taps, the bytes moved are the floor, and the depthwise kernel reads x once
  // per tap in the output's own memory order (either layout).
  if (can_implement(Algo::kFwdDepthwise, q)) seq.push_back(Algo::kFwdDepthwise);
  if (blas && q.dt == DType::kDouble) seq.push_back(Algo::kFwdCublasGemm);
  // Many input channels against few output columns per input pixel (Cout*kh*kw): one GEMM
  // over all taps reads x once, with all the columns in its tiles, then a col2im pass; the
  // per-phase kernels read x once per tap, their N (Cout) padded to 32 (an RGB or keypoint
  // head, a strided 1x1 kernel to 16 channels; col2im_preferred).
  // 1..8 outputs per group with many reduced channels per output (a GAN's RGB layer, a
  // keypoint head) and x rows contiguous (its loads run along W): the narrow kernel.
  // Not where its warps would idle (narrow_idle).
  const bool idle = narrow_idle(q);
  const bool narrow = can_implement(Algo::kNarrowOutput, q) && p.cout_g() <= 8 &&
                      kpo >= kNarrowMinK && q.x_unit_w && !idle;
  // (fp32 with fewer than 256 input channels once stayed on the narrow kernel, measured as
  // fast then; tuning seed 1 now: the GEMM + col2im took 0.72-0.76x its time on the class's
  // two such rows, 96 / 128 -> 3 on 256x256 images, and 0.72x the implicit GEMM's on a 64 -> 4
  // k5 layer the cost model had moved off the narrow kernel; validation seed 2 + zoo, 8 rows:
  // geomean 0.55x the better of the two (96 -> 1 k9 on 100x100: 7.7x faster), 1-2% slower on
  // two. Measured with TF32 allowed; TF32 off, not measured.)
  if (can_implement(Algo::kFwdGemmCol2im, q) && col2im_preferred(q))
    seq.push_back(Algo::kFwdGemmCol2im);
  if (narrow) seq.push_back(Algo::kNarrowOutput);
  // Memory-bound shapes (few reduced channels per output, or few outputs per group) go to
  // the direct kernel; the rest are implicit GEMMs. 8 to 31 outputs per group with 256 or
  // more reduced channels per output are compute-bound: the implicit GEMM measured faster
  // there despite its narrow N (Cin 128 -> Cout 24 k3 s2 fp32: 0.175 -> 0.037 ms; a
  // stride-1 Cin 32 -> 16 k3 lost, 0.029 -> 0.033). Below 8 outputs the GEMM's 3xTF32
  // variant lost badly (64 -> 3 k4 s2, TF32 off: 0.222 -> 0.530 ms), so those stay direct.
  // Only where the tensor-core GEMM takes the channels (whole 16-byte chunks).
  const bool tc_gemm = q.dt != DType::kDouble && p.cin_g() % chunk_elems(q.dt) == 0;
  // 1..8 outputs per group on those idle phases (narrow_idle), whatever the narrow kernel's
  // own conditions (channels-last x, few reduced channels per output included): the
  // tensor-core GEMM, channels padded where needed (held-out seed 3011: the default within 10%
  // of the fastest candidate on 35 of 42 such layers, 12 of them channels-last).
  if (idle && p.cout_g() <= 8) {
    seq.push_back(tc_gemm ? Algo::kImplicitGemm : Algo::kFwdPadded);
    return seq;
  }
  const bool gemm_ok = tc_gemm && p.cout_g() >= 8 && kpo >= 256;
  const bool memory_bound = (p.cout_g() < 32 && !gemm_ok) || kpo < 64 || !q.sm80;
  // Kernel == stride (each output pixel one tap; NCHW x and output): the patch GEMM, compute-
  // bound (U-Net's k=2 s=2) and, for kernels larger than 1x1, memory-bound too. It reads x
  // once as stored for all kh*kw columns and writes each output row segment once; the direct
  // kernels, which memory-bound layers ran before, pad few input channels to a 16-byte K item
  // and stage x per tap (tuning seed 7100: the patch GEMM 1.6-3x faster on all 4 such layers
  // x fp32 / bf16, 64 x 3 -> 384 k=2 s=2 on 8x8 64 -> 21 us; held-out seeds 7101-7110: 1.1-3.3x
  // on all 31 such rows). A memory-bound 1x1 kernel (no taps to share) stays on the
  // direct kernels: the patch GEMM's 128-column tile holds only Cout/groups columns there, and
  // it measured both ways (128 -> 1024 in 8 groups 2.4x faster; 48 -> 256 in 8 groups, 6 -> 32
  // channels a group, fp32, 343 -> 907 us), so not until a model separates them. Not for fp32
  // with TF32 off, where its 3xTF32 variant (one block per SM) measured slower than the halo
  // kernel's 3xFP16 (0.71 vs 0.69 ms on a U-Net decoder layer).
  const bool patch = can_implement(Algo::kPatchGemm, q) && q.math != MathMode::kIEEE;
  const bool patch_first = patch && (!memory_bound || p.kh * p.kw > 1);
  if (patch_first) seq.push_back(Algo::kPatchGemm);
  if (memory_bound && cl_gemm(q)) {
    seq.push_back(Algo::kImplicitGemm);
    return seq;
  }
  if (memory_bound && can_implement(Algo::kDirect, q) && !small_phase_gemm(q) &&
      !long_reduction(q)) {
    seq.push_back(Algo::kDirect);
    return seq;
  }
  if (patch && !patch_first) seq.push_back(Algo::kPatchGemm);
  // Tiny 16-bit layers that would run the per-phase implicit GEMM (the GEMM + col2im's result
  // at most 2^22 elements, 128+ input channels, 9+ outputs, kernels larger than 1x1: a
  // generator's or decoder's first layers, pix2pix's bottleneck): the implicit GEMM's few
  // tiles per phase leave most SMs idle over a long reduction (Cin x taps), while cuBLAS's
  // one GEMM over all taps spreads the columns (Cout*kh*kw) over the GPU and the col2im
  // moves a few MB. Tuning seed 1 (layers of up to 4096 pixels, one group) + zoo, bf16: 41
  // such rows, the implicit GEMM took geomean 1.66x its time (0.89-3.65x; pix2pix 1024 ->
  // 512 on 8x8 images 107 -> 51 us), below torch on 20 rows before and 1 after. One strided
  // 1x1 kernel lost 5x (256 -> 192 on 104 pixels, unexplained): 1x1 kernels stay. fp32 gained
  // nothing (geomean 1.06x, 0.76-3.8x; not analysed: cuBLAS's fp32 GEMM runs at IEEE
  // precision, and the 1x1 problem's TF32 implicit GEMM may idle as the per-phase one does).
  if (seq.empty() && tiny_col2im(q) && can_implement(Algo::kFwdGemmCol2im, q))
    seq.push_back(Algo::kFwdGemmCol2im);
  seq.push_back(Algo::kImplicitGemm);
  return seq;
}

// Whether the cost model may pick algorithm a: it can take the problem, and the rules'
// conditions hold that measurements support everywhere (the narrow kernel's loads need
// contiguous x rows, and its warps must not idle; the patch GEMM's 3xTF32 lost to the halo
// kernel's 3xFP16; the GEMM + col2im as measured).
bool forward_model_candidate(Algo a, const Query& q) {
  if (!can_implement(a, q)) return false;
  if (a == Algo::kNarrowOutput) return q.x_unit_w && !narrow_idle(q);
  if (a == Algo::kPatchGemm) return q.math != MathMode::kIEEE;
  // The GEMM + col2im where the model puts it 2x under the rules' choice (tiny inputs under
  // large or dilated kernels, few outputs, few input channels: docs/design.md, the planner):
  // on the 165 rows of held-out sweeps (seeds 7101-7110, TF32 allowed and bf16) that it took,
  // geomean 1.55x over the rules' choice, 134 faster, 23 slower (small layers whose fixed
  // costs the model underrates, and two rows of one layer with a 170 MB weight that the
  // weight's per-chunk reads, in its model since, gave back to the implicit GEMM), 43 from
  // below torch to at or above it and 4 the other way.
  // Not measured with TF32 off (its GEMM then the 3xTF32 / 3xFP16 implicit GEMM of the 1x1
  // problem) nor for fp64: the rules only there.
  if (a == Algo::kFwdGemmCol2im) return q.dt != DType::kDouble && q.math != MathMode::kIEEE;
  return true;
}
}  // namespace

static std::vector<Algo> plan_forward_uncached(const Query& q, Algo forced) {
  std::vector<Algo> seq;
  if (forced != Algo::kNone && can_implement(forced, q)) seq.push_back(forced);
  const std::vector<Algo> rules = forward_rules(q);
  // The cost model's choice goes first where it predicts at least 2x over the rules' (its
  // absolute error is large; the rules were measured).
  Algo rule = rules.front();
  if (rule == Algo::kDirect)
    rule = can_implement(Algo::kDirectTensorOp, q) ? Algo::kDirectTensorOp : Algo::kDirectSimt;
  Algo best = rule;
  double tb = fwd_time(rule, q);
  for (Algo a : {Algo::kNarrowOutput, Algo::kDirectSimt, Algo::kDirectTensorOp,
                 Algo::kPatchGemm, Algo::kFwdPadded, Algo::kFwdDepthwise, Algo::kImplicitGemm,
                 Algo::kFwdGemmCol2im}) {
    // (cuBLAS, where the rules take it, stays: prefer_cublas has weighed it.)
    if (rule == Algo::kFwdCublasGemm || rule == Algo::kFwdGemmCol2im) break;
    if (a == rule || !forward_model_candidate(a, q)) continue;
    // One input channel per group: the model's direct-kernel times are far too low there
    // (a dilated depthwise k3 s3 layer: predicted 0.2 ms, ran 7.9 ms; the depthwise kernel
    // beat the direct ones by 2x in geomean over the class; docs/design.md, the planner).
    // (The narrow kernel likewise: 491 us against the depthwise kernel's 93 on a 256-channel
    // k1 s2 layer of 13x13 images, bf16.)
    // With many outputs per input channel the direct kernels' channel tiles fill, and they
    // are candidates (one input channel to 48-4096 outputs per group on 16 layers: they or the
    // patch GEMM ran 1.4-10x faster than the depthwise kernel on the 7 largest).
    if (rule == Algo::kFwdDepthwise && q.p.cout_g() <= kDepthwiseMaxOutputs &&
        (a == Algo::kDirectSimt || a == Algo::kDirectTensorOp || a == Algo::kNarrowOutput))
      continue;
    // Nor the direct kernels where the GEMM measured faster: small stride phases of a strided
    // 1x1 kernel (small_phase_gemm; the model charges the GEMM three launches against their
    // one or two: 24 -> 17 us on 48 -> 32 k1 s2, 7x7), channels-last x with many outputs
    // (cl_gemm) and long reductions (long_reduction: the model put direct_simt at 48 us on
    // the layer where it ran 376).
    if ((small_phase_gemm(q) || cl_gemm(q) || long_reduction(q)) &&
        (a == Algo::kDirectSimt || a == Algo::kDirectTensorOp))
      continue;
    const double t = fwd_time(a, q);
    if (t < tb) {
      tb = t;
      best = a;
    }
  }
  if (best != rule && 2 * tb < fwd_time(rule, q)) seq.push_back(best);
  seq.insert(seq.end(), rules.begin(), rules.end());
  return seq;
}

std::vector<Algo> forward_candidates(const Query& q) {
  std::vector<Algo> c;
  for (Algo a : {Algo::kPatchGemm, Algo::kNarrowOutput, Algo::kDirectTensorOp,
                 Algo::kDirectSimt, Algo::kFwdPadded, Algo::kFwdDepthwise, Algo::kFwdCublasGemm,
                 Algo::kFwdGemmCol2im})
    if (can_implement(a, q)) c.push_back(a);
  if (tensor_cores(q)) {
    // The implicit GEMM's kernels: on Hopper the two-block wgmma one and, for 64 or more
    // outputs per group, the warp-specialised and the halo kernels; elsewhere mma.sync.
    c.push_back(q.wgmma ? Algo::kImplicitGemmWgmma : Algo::kImplicitGemmMma);
    if (q.wgmma && q.p.cout_g() >= 64) {
      c.push_back(Algo::kImplicitGemmWgmmaWs);
      c.push_back(Algo::kImplicitGemmHalo);
    }
  }
  return c;
}

static Algo plan_backward_transform_uncached(const Query& q, Algo forced) {
  // The tap gather replaces the channels-last copy of all of grad_output that the strided
  // problem reads only kh*kw / (sh*sw) of (a U-Net's k=2 s=2, a dilated k=3 at stride 5).
  if (forced == Algo::kStrided) return Algo::kStrided;
  if (!can_implement(Algo::kTapGather, q)) return Algo::kStrided;
  if (forced == Algo::kTapGather) return Algo::kTapGather;
  const Problem& p = q.p;
  if (forced == Algo::kTapGatherCublas && can_implement(Algo::kTapGatherCublas, q))
    return Algo::kTapGatherCublas;
  // The gathered columns per group; the domain the first rules were measured in (NCHW
  // grad_output, the columns in whole 16-byte chunks: no padding columns); x's size, below
  // which the few-output rules' extra launches cost more than they save.
  const int64_t kk = p.kh * p.kw, cols = p.cout_g() * kk;
  const bool measured = q.go_nchw && cols % chunk_elems(q.dt) == 0;
  const bool large_x = p.N * p.Cin * p.H * p.W >= (int64_t(1) << 19);
  if (!gather_permutes(p)) {  // (so overlapping taps: can_implement)
    // Overlapping taps: the gather is an im2col of grad_output (as large as the weight times
    // pixels / input channels), worth it where the weight dominates the bytes (tuning seed 1,
    // 40 such layers + 8 zoo layers, NCHW, x fp32 / bf16, whole backward). Not where the
    // strided problem is one dense GEMM already (a 1x1 input without padding: 1.7-3.3x slower).
    if (dense_gemm_shape(p)) return Algo::kStrided;
    // - cuBLAS on the gathered 1x1 problems where the weight is large (4M+ elements) and the
    //   gathered operand small against it: 1/16 of it (fp32, whose cuBLAS GEMM runs at IEEE
    //   precision), up to 2.5x (16-bit) with at most 64K gathered columns (longer reductions:
    //   cuBLAS 3.4x slower on a k16 s4 layer). Every such layer won: strided 1.2-4.2x its
    //   time, e.g. pix2pix's 1024 -> 512 on 2x2 images fp32 232 -> 87 us, 512 -> 768 k9 s3 on
    //   14x64 bf16 1174 -> 296 us; with smaller weights it won on some layers and lost up to
    //   2.3x on others (cuBLAS's small GEMMs), so those stay on the kernels.
    // - else the tensor-core kernels on the gathered problem where its pixels are at most
    //   half the input channels (per group): strided took 0.52-1.15x its time, geomean ~0.83
    //   (and ~0.9 on a validation seed); with more pixels the gather lost (up to 4x). Measured
    //   with 32+ input channels and 128+ gathered channels (Cout/groups x taps) per group.
    const int64_t pix = p.N * p.H * p.W;
    const bool sixteen = q.dt == DType::kHalf || q.dt == DType::kBFloat16;
    // (These two rules: measured only.)
    if (measured && can_implement(Algo::kTapGatherCublas, q) &&
        p.Cin * p.Cout * kk >= (int64_t(1) << 22) &&
        (16 * pix <= p.Cin || (sixteen && 2 * pix <= 5 * p.Cin && p.Cout * kk <= 65536)))
      return Algo::kTapGatherCublas;
    // - Few output channels from many input channels (the im2col at most twice x, or 3x
    //   with at most 8 outputs per group; x at least 2^19 elements; either layout, any
    //   Cout/groups*kh*kw, padded): the strided problem's GEMMs have N (grad_input) or M
    //   (grad_weight) = Cout/groups, padded to a tile of 32+ and re-reading x per phase,
    //   while the gathered problem reads x once per gradient with the taps in the GEMMs' K
    //   (grad_input) or N (grad_weight). Tuning seed 1 (every overlapping-tap layer with an
    //   im2col up to 4x x, 72 layers) + 8 zoo layers, fp32 and bf16: with the im2col at most
    //   twice x, 93 rows, strided took geomean 1.80x the gather's time (up to 7.2x: 1024 -> 4
    //   k=16 channels-last bf16; 384 -> 1 k=9 on 32x32 images fp32 929 -> 192 us), 7 rows
    //   slower (0.82-0.99x); the keypoint head 1319 -> 592 us fp32. Below 2^19 elements 6 of
    //   22 rows lost (down to 0.30x, 11-77 us layers: the extra launches cost more than they
    //   save); with larger im2cols 18 of 31 lost (0.45-0.97x), all with 16+ outputs per
    //   group. Validation seed 2 agreed, and showed layers of 1-3 outputs with im2cols 2-3x x
    //   left strided 1.6-2.6x slower than gathered: the 3x bound for 8 outputs or fewer.
    if ((cols <= 2 * p.cin_g() || (p.cout_g() <= 8 && cols <= 3 * p.cin_g())) && large_x)
      return Algo::kTapGather;
    return measured && 2 * pix <= p.cin_g() && p.cin_g() >= 32 && cols >= 128
               ? Algo::kTapGather
               : Algo::kStrided;
  }
  // Kernel == stride (the gather copies all of grad_output) on images of at most 256 pixels
  // with 32+ input channels: the strided problem's one channels-last copy measured faster
  // (tuning seed 1, 60 kernel <= stride layers x fp32 / bf16: on the 8 such layers strided
  // took 0.54-1.02x the gather's time, geomean 0.87, e.g. 32 -> 384 k4 s4 on 16x16 bf16
  // 349 -> 190 us; on larger images, fewer channels or kernels smaller than the stride the
  // gather won, up to 2.9x).
  if (p.kh == p.sh && p.kw == p.sw && p.H * p.W <= 256 && p.Cin >= 32) return Algo::kStrided;
  // The rest: measured first with NCHW grad_output and Cout/groups*kh*kw in whole chunks.
  // Few outputs (at most 8 per group, x at least 2^19 elements) gather in either layout with
  // the columns padded: the strided problem's GEMMs pad Cout/groups to a tile of 32+ and run
  // once per stride phase, while the gathered problem reads x once per gradient. Tuning seed
  // 1 (the 67 kernel <= stride layers of its first 300 with a multiple of 8 input channels
  // per group, x fp32 / bf16, forced bwd:tap_gather against the default): the 10 such rows
  // the old condition left strided took geomean 0.65x the strided time (0.32-1.06x; 768 -> 3
  // k2 s2 on 128x128 bf16 327 -> 105 us); smaller layers of the class lost on 4 of 6 rows (to
  // 1.8x slower: a channels-last 256 -> 4 k(1,3) on 4x16 images); channels-last grad_output
  // with 16+ outputs lost up to 3.8x. Validation seed 2: 8 rows newly gathered, geomean 0.76x the
  // strided time; two grouped rows with one output per group (one gathered column, padded to a
  // chunk: 768 -> 8 k1 s2 d2 g8) 1.2-1.4x slower, not excluded yet. Measured with TF32 allowed; a
  // 1x1 input (one dense GEMM strided) is not excluded either (no such layer measured).
  // 9+ outputs per group with the columns not in whole chunks, NCHW grad_output: gathered
  // where the strided problem's grad_weight would run on zero-padded channels-last copies
  // (kWgradPadded, which copies all of grad_output, twice: the gather reads each of its taps'
  // elements once). Tuning seed 1 + validation seed 2, every such row (9 rows of 5 layers, fp32
  // and bf16) ran gathered in 0.32-0.67x the strided time (1024 -> 21 k1 s2 on 64x64 bf16 393 ->
  // 127 us; 16 -> 21 k3 s3 on 56x56, x 2^18 elements, 79 -> 47-53 us); the two rows of the
  // class whose strided grad_weight ran unpadded (96 -> 21 k1 s2 on 13x13, simt) lost 1.7-1.8x
  // gathered and stay strided. Channels-last grad_output: not measured. (The strided problem's
  // planned grad_weight, not a forced one, decides.)
  const bool padded_wgrad = p.cout_g() > 8 && q.go_nchw && q.want_gw &&
                            plan_grad_weight(q, Algo::kNone) == Algo::kWgradPadded;
  return measured || (p.cout_g() <= 8 && large_x) || padded_wgrad ? Algo::kTapGather
                                                                  : Algo::kStrided;
}

// Taps that read each grad_output element of a depthwise layer (k*gcd(s, d)/s per dimension, at
// least 1: kh*kw / (sh*sw) where each dilation is coprime with its stride).
static double depthwise_go_reads(const Problem& p) {
  auto per_dim = [](int64_t k, int64_t s, int64_t d) {
    return std::max(1.0, double(k) * double(std::gcd(s, d)) / double(s));
  };
  return per_dim(p.kh, p.sh, p.dh) * per_dim(p.kw, p.sw, p.dw);
}

// The depthwise tiled kernels' staging pays (grad_input, NCHW grad_weight): at stride 1, or
// where the taps overlap in both dimensions ((k-1)*d >= s: each staged element read by
// several taps) and the register window applies along the row (stride <= 2, no dilation: a
// tap costs V FMAs and about one staged load); for grad_weight (many_reads) also where so
// many taps read each element (more than 16) that staging pays without the window.
static bool depthwise_tiles_pay(const Query& q, bool many_reads) {
  const Problem& p = q.p;
  if (p.sh == 1 && p.sw == 1) return true;
  const bool overlap = (p.kh - 1) * p.dh >= p.sh && (p.kw - 1) * p.dw >= p.sw;
  const bool window = p.sw <= 2 && p.dw == 1;
  return overlap && (window || (many_reads && depthwise_go_reads(p) > 16));
}

static Algo plan_grad_input_uncached(const Query& q, Algo forced) {
  // grad_input is the strided conv2d of grad_output with the weight: one implicit GEMM, its
  // tensor-core kernel picked by igemm_kernel (below), unless
  // the GEMM's N (Cin/groups) and K (Cout/groups x taps) are so small that its tiles are
  // mostly padding: then the direct kernel, whose floor is the bytes moved (cost model).
  if (forced != Algo::kNone && forced >= Algo::kImplicitGemm && forced <= Algo::kDgradCublasGemm &&
      can_implement(forced, q))
    return forced;
  // Exactly one dense GEMM: cuBLAS where prefer_cublas (as the forward).
  // The backward's tap-gathered 1x1 problem only where the transform chose cuBLAS for it
  // (kTapGatherCublas: overlapping taps, a large weight): prefer_cublas's rule for it (16-bit,
  // kernel <= stride) measured once 2x slower on a U-Net decoder layer (256 -> 128 k2 s2 on
  // 64x64 images, batch 16: 0.157-0.159 ms in three runs, 0.387 in a fourth; docs/perf-log.md),
  // unexplained, so that stays on the kernels.
  if (can_implement(Algo::kDgradCublasGemm, q) &&
      (q.tap_gathered ? q.tap_cublas : prefer_cublas(Pass::kGradInput, q)))
    return Algo::kDgradCublasGemm;
  // One input channel per group and at most 8 outputs per group: the depthwise kernels. With
  // more outputs per input channel (a single input channel to hundreds) their serial sum over
  // them leaves the GPU latency-bound (one input channel to 512, k=4 s=2, a thread per element:
  // 1.1 ms against 0.08 ms for cuDNN), and the cost model chooses below.
  // The tiled kernel stages each grad_output region once per tile and sums a tap row from a
  // register window where its column reads step by one per tap and by one or two per output
  // (no dilation along the row, stride 1 or 2): it wins where that window applies and every
  // staged element is read by several taps: at stride 1, and where the taps overlap in both
  // dimensions ((k-1)*d >= s) and more than 4 taps read each element (1024 channels,
  // k=(7,3) s=2: 0.58 against 1.03 ms; k=7 and k=9 at s=2: 1.2x). Elsewhere (kernel <= stride
  // along a dimension, where most of the staged region, sh*sw times grad_input's, is never
  // read; strides past 2; dilation along the row; k=4 s=2, 4 taps an element, 0.8-0.95x tiled)
  // a thread per grad_input element, reading grad_output once per tap in grad_input's memory
  // order (k=4 s=4: 0.11 against 0.19 ms; k=4 s=3: 0.21 against 0.25).
  const bool strided = q.p.sh > 1 || q.p.sw > 1;
  if (q.p.cout_g() <= 8 && can_implement(Algo::kDgradDepthwiseTiled, q) &&
      depthwise_tiles_pay(q, false) && !(strided && depthwise_go_reads(q.p) <= 4))
    return Algo::kDgradDepthwiseTiled;
  if (can_implement(Algo::kDgradDepthwise, q) && q.p.cout_g() <= 8) return Algo::kDgradDepthwise;
  // Cout/groups not in whole 16-byte chunks keeps the GEMM off tensor cores; padding the
  // channels with zeros (a copy of grad_output) puts it back on them.
  Algo best = Algo::kImplicitGemm;
  double t = dgrad_gemm_time(q);
  if (can_implement(Algo::kDgradDirect, q) && dgrad_direct_time(q) < t) {
    best = Algo::kDgradDirect;
    t = dgrad_direct_time(q);
  }
  if (can_implement(Algo::kDgradPadded, q) && dgrad_padded_time(q) < t) best = Algo::kDgradPadded;
  return best;
}

std::vector<Algo> grad_input_candidates(const Query& q) {
  std::vector<Algo> c;
  if (tensor_cores(q) && q.wgmma && q.p.cin_g() >= 64)
    c = {Algo::kImplicitGemmWgmma, Algo::kImplicitGemmWgmmaWs, Algo::kImplicitGemmHalo};
  if (can_implement(Algo::kDgradDepthwise, q)) c.push_back(Algo::kDgradDepthwise);
  if (can_implement(Algo::kDgradDepthwiseTiled, q)) c.push_back(Algo::kDgradDepthwiseTiled);
  // cuBLAS and the direct kernel (where the model puts it within 4x of the GEMM, either
  // side), each against the implicit GEMM.
  const bool blas = can_implement(Algo::kDgradCublasGemm, q);
  if (blas) c.push_back(Algo::kDgradCublasGemm);
  const double d = dgrad_direct_time(q), g = dgrad_gemm_time(q);
  const bool direct = can_implement(Algo::kDgradDirect, q) && d < 4 * g && g < 4 * d;
  if (direct) c.push_back(Algo::kDgradDirect);
  if (blas || direct) c.push_back(Algo::kImplicitGemm);
  return c;
}

static Algo plan_grad_weight_uncached(const Query& q, Algo forced) {
  if (forced == Algo::kWgradSimt) return Algo::kWgradSimt;
  if ((forced == Algo::kWgradWgmmaNchw || forced == Algo::kWgradTensorOp ||
       forced == Algo::kWgradDirect || forced == Algo::kWgradPadded ||
       forced == Algo::kWgradDepthwise || forced == Algo::kWgradDepthwiseTiled ||
       forced == Algo::kWgradCublasGemm) &&
      can_implement(forced, q))
    return forced;
  // Exactly one dense GEMM: cuBLAS where prefer_cublas (as the forward).
  // (The tap-gathered problem: as plan_grad_input.)
  if (can_implement(Algo::kWgradCublasGemm, q) &&
      (q.tap_gathered ? q.tap_cublas : prefer_cublas(Pass::kGradWeight, q)))
    return Algo::kWgradCublasGemm;
  // One input channel per group: the depthwise kernels read x and grad_output once. The tiled
  // kernel stages the grad_output region a tile's taps read and sums a tap row from a register
  // window (as grad_input's; depthwise_tiles_pay). Channels-last grad_output: a lane per
  // channel, where the per-pixel kernel's lanes stride over channels; it wins for few outputs
  // per group and, where some grad_output element is read by several taps, for many
  // (channels-last 3x3 s=3: 0.32 against 0.50 ms; one input channel to 48, k=7 s=3: 0.63
  // against 0.77; without reuse the per-pixel kernel: one input channel to 192, k=3 s=3, 0.20
  // against 0.30). NCHW: the per-pixel kernel reads grad_output along rows, coalesced, and
  // the tiled one wins only where depthwise_tiles_pay (1024 channels k=(7,3) s=2: 0.64
  // against 1.20 ms; 56 channels k=(16,3) s=2 dilation 2, 48 taps an element: 43 against 56
  // us; k=(1,5) s=2: 0.17 against 0.13 ms; k=9 s=4: 0.26 against 0.16; one input channel to
  // 384, k=(3,1) s=2 dilation 2: 0.68 against 0.32).
  const bool go_reuse = taps_overlap(q.p);  // some grad_output element read by several taps
  const bool go_lanes = q.go_cl && q.p.Cout > 1;
  const bool tiled = go_lanes ? q.p.cout_g() <= 8 || go_reuse : go_reuse && depthwise_tiles_pay(q, true);
  Algo dw = Algo::kNone;
  if (tiled && can_implement(Algo::kWgradDepthwiseTiled, q)) dw = Algo::kWgradDepthwiseTiled;
  else if (can_implement(Algo::kWgradDepthwise, q)) dw = Algo::kWgradDepthwise;
  else if (can_implement(Algo::kWgradDepthwiseTiled, q)) dw = Algo::kWgradDepthwiseTiled;
  // A single input channel (one group) to more than 8 outputs (as grad_input's rule): the
  // depthwise kernel unless the cost model puts the tensor-core GEMM on channels padded to a
  // 16-byte chunk below it. One input channel to 768 / 1024, k=7 s=2 and k=16 s=4: the
  // depthwise kernels 0.73 / 1.66 ms, the padded GEMM 0.30 / 0.55 ms, bf16. (Measured with one
  // group: grouped layers, whose padding multiplies x by the chunk, stay on the depthwise
  // kernels; nor the CUDA-core kernels, whose direct one's model was 2x optimistic on a
  // 4-group layer of 14 outputs each.)
  if (dw != Algo::kNone) {
    if (q.p.groups == 1 && q.p.cout_g() > 8 && can_implement(Algo::kWgradPadded, q) &&
        wgrad_padded_time(q) < wgrad_time(dw, q))
      return Algo::kWgradPadded;
    return dw;
  }
  // fp32 with TF32 off (3xTF32) from the NCHW tensors themselves on Hopper wgmma: no
  // channels-last copies. With TF32 on, the tensorop kernel's TF32 tiles measured faster.
  Algo a = Algo::kWgradSimt;
  if (q.math == MathMode::kIEEE && can_implement(Algo::kWgradWgmmaNchw, q))
    a = Algo::kWgradWgmmaNchw;
  else if (can_implement(Algo::kWgradTensorOp, q))
    a = Algo::kWgradTensorOp;
  // Few weight elements against a long reduction (few channels per group, few output
  // channels): the GEMMs' tiles are mostly padding; the direct kernel splits the pixels
  // over the whole GPU (cost model).
  double t = wgrad_time(a, q);
  if (can_implement(Algo::kWgradDirect, q) && wgrad_time(Algo::kWgradDirect, q) < t) {
    a = Algo::kWgradDirect;
    t = wgrad_time(a, q);
  }
  // Channels not in whole 16-byte chunks: the tensorop kernel on zero-padded copies.
  if (can_implement(Algo::kWgradPadded, q) && wgrad_padded_time(q) < t) a = Algo::kWgradPadded;
  return a;
}

bool grad_weight_reads_nchw_x(const Query& q, const Variant& var) {
  // NCHW x read as it is (K-major tiles, no channels-last copy) where that measured faster:
  // 1x1 problems (as the tap gather makes) and few channels per group (< 32). With many
  // channels and taps the K-major kernel lost more than the copy costs.
  const Problem& p = q.p;
  const bool pref = var.wgrad_x >= 0 ? var.wgrad_x == 1 : p.kh * p.kw == 1 || p.cin_g() < 32;
  return pref && q.x_nchw && (p.H * p.W) % chunk_elems(q.dt) == 0;
}

// ---- the plan cache ------------------------------------------------------------------------
namespace {
// Every field of a query (the device too: the direct and narrow kernels' conditions read its
// shared memory and SM count), the pass and the forced algorithm: the whole input of a plan.
using PlanKey = std::array<int64_t, 23>;
PlanKey plan_key(Pass pass, const Query& q, Algo forced) {
  const Problem& p = q.p;
  const bool flags[] = {q.sm80,    q.wgmma,   q.x_nchw,   q.x_cl,         q.x_unit_w,
                        q.out_nchw, q.out_cl, q.bias,     q.go_nchw,      q.go_cl,
                        q.go_unit_w, q.want_gi, q.want_gw, q.tap_gathered, q.tap_cublas,
                        q.cublas,   q.cublas_fp32_out};
  int64_t bits = 0;
  for (bool f : flags) bits = bits * 2 + (f ? 1 : 0);
  return {p.N,  p.Cin, p.H,  p.W,  p.Cout, p.Ho,  p.Wo,         p.kh,         p.kw,
          p.groups, p.sh, p.sw, p.ph, p.pw, p.oph, p.opw, p.dh, p.dw, int64_t(q.dt) * 16 + int64_t(q.math),
          bits, int64_t(pass), int64_t(forced), int64_t(q.device)};
}
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (int64_t v : k) h = (h ^ uint64_t(v)) * 1099511628211ull;
    return size_t(h);
  }
};
// Per thread (no lock on the hot path), at most kPlanCacheSize problems (then emptied: a
// model with changing shapes does not grow it without bound).
constexpr size_t kPlanCacheSize = 4096;
template <class F>
const std::vector<Algo>& cached_plan(Pass pass, const Query& q, Algo forced, F plan) {
  thread_local std::unordered_map<PlanKey, std::vector<Algo>, PlanKeyHash> cache;
  const PlanKey key = plan_key(pass, q, forced);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kPlanCacheSize) cache.clear();
  return cache.emplace(key, plan()).first->second;
}
}  // namespace

std::vector<Algo> plan_forward(const Query& q, Algo forced) {
  return cached_plan(Pass::kForward, q, forced, [&] { return plan_forward_uncached(q, forced); });
}
Algo plan_backward_transform(const Query& q, Algo forced) {
  return cached_plan(Pass::kBackward, q, forced, [&] {
    return std::vector<Algo>{plan_backward_transform_uncached(q, forced)};
  }).front();
}
Algo plan_grad_input(const Query& q, Algo forced) {
  return cached_plan(Pass::kGradInput, q, forced, [&] {
    return std::vector<Algo>{plan_grad_input_uncached(q, forced)};
  }).front();
}
Algo plan_grad_weight(const Query& q, Algo forced) {
  return cached_plan(Pass::kGradWeight, q, forced, [&] {
    return std::vector<Algo>{plan_grad_weight_uncached(q, forced)};
  }).front();
}

int igemm_k_splits(const Query& q, bool dgrad) {
  // Split the K loop where the grid is small (tiny images with many channels: a generator's
  // first layers, a bottleneck, 1x1 inputs): the splits that minimise the model's time, at
  // least two K tiles each, the fp32 partials within 256 MiB.
  // Only where the unsplit grid fills under 35% of the GPU and the model predicts 1.5x: the
  // unsplit run is often the warp-specialised or halo kernel, faster per tile than the
  // two-block kernel that splits (tuning seed 1: splits of grids at 35-50% lost up to 1.35x).
  if (!tensor_cores(q)) return 1;
  const IgemmShape s = igemm_shape(q, dgrad);
  if (s.blocks >= 0.35 * kGemmBlocks || s.iters < 4) return 1;
  int best = 1;
  const double t1 = igemm_split_time(q, s, 1);
  double tb = t1;
  for (int k = 2; k <= 64 && k * 2 <= s.iters; ++k) {
    if (4.0 * k * s.out_elems > double(int64_t(1) << 28)) break;
    const double t = igemm_split_time(q, s, k);
    if (t < tb) {
      tb = t;
      best = k;
    }
  }
  return t1 >= 1.5 * tb ? best : 1;
}

int igemm_kernel(const Query& q, bool dgrad, const IgemmCaps& caps, int forced, int k_splits) {
  const Problem& p = q.p;
  // Forced where it can run (the warp-specialised and halo kernels do not split K).
  if (forced == 3) return 3;
  if (forced == 2 && caps.halo && k_splits == 1) return 2;
  if (forced == 0 || forced == 1) return caps.wgmma ? (k_splits > 1 ? 0 : forced) : 3;
  const int64_t nc = dgrad ? p.cin_g() : p.cout_g();
  const bool fp32 = q.dt == DType::kFloat, split = fp32 && q.math == MathMode::kIEEE;
  // The halo kernel (one staged source halo that the tap columns read shifted). Measured on
  // the H100: it wins with three or more tap columns per phase where the GEMM has at most 64
  // columns or the type is fp32 (dense stride-1 layers, k=(3,5), forward and grad_input); it
  // loses with 128 16-bit columns (bf16 forward: 2.04 vs 1.87 ms) and with two tap columns
  // per phase (stride-2 k=4 / k=3 layers, forward: 15-20% slower). 3xTF32 (fp32, TF32 off):
  // wherever it runs, against the mma.sync 3xTF32 kernel (about 2x slower).
  // Where the warp-specialised kernel's TMA loader applies it beats the halo kernel on GEMMs
  // of more than 64 columns (fp32, dense stride-1 with 128 outputs per group, forward: 2.657
  // -> 2.314 ms) and on 16-bit grad_input (dense stride-1, bf16: 64 outputs per group 1.354
  // -> 1.223; 128 loses 1.5%, 1.750 -> 1.776); the halo kernel keeps 16-bit forward (64
  // outputs per group, bf16: 1.429 vs 1.546) and fp32 with <= 64 columns (64 outputs per
  // group 2.073 vs 2.396; 128 outputs per group, grad_input: 2.949 vs 3.449).
  const bool halo_wins = split || (caps.halo_tap_cols >= 3 && (nc <= 64 || fp32));
  if (caps.halo && k_splits == 1 && halo_wins &&
      (split || !(nc > 64 || (!fp32 && dgrad)) || !caps.ws_tma))
    return 2;
  if (!caps.wgmma) return 3;
  if (k_splits > 1) return 0;
  // The warp-specialised 256-row tiles (one block per SM) wherever its TMA loader applies
  // (faster than the two-block kernel on every benchmarked layer it takes: bf16 forward,
  // k=2 stride 2 0.161 -> 0.146 ms, dense stride-1 with 64 outputs per group 2.215 -> 1.536),
  // and with the cp.async loader for more than 64 columns and a long K loop (an average K
  // row, per stride phase, of 12+ tiles of 128 bytes); below that the fill and the
  // unoverlapped epilogue of a single resident block cost more than the two-block kernel
  // (cp.async loader, bf16: k=2 stride 2 0.197 vs 0.176 ms, dense stride-1 with 64 outputs per
  // group 2.27 vs 2.22 ms).
  const int64_t kc = dgrad ? p.cout_g() : p.cin_g();
  const int64_t phases = dgrad ? 1 : p.sh * p.sw;
  const int64_t k_row_bytes = kc * p.kh * p.kw * elem_bytes(q.dt) / phases;
  return caps.ws_tma || (nc > 64 && k_row_bytes >= 12 * 128) ? 1 : 0;
}

int wgrad_tile(const Query& q, bool x_nchw, int forced) {
  const Problem& p = q.p;
  constexpr int kBigTall = 3, kBigWide = 4, kWg64 = 5, kWg128 = 6, kNoWg = 9;
  static_assert(kWgradTileCount == kNoWg + 1, "kWgradTileNames");
  // The wgmma tiles: 16-bit, x channels-last, an sm_90a build on a 9.0 device.
  const bool wg_ok = (q.dt == DType::kHalf || q.dt == DType::kBFloat16) && !x_nchw && q.wgmma;
  if (forced >= 0 && forced < kWg64) return forced;
  if (wg_ok && forced >= kWg64 && forced < kNoWg) return forced;
  // wgmma's 256 (tap, output channel) rows x 64 / 128 input channels where there are 128 rows;
  // else the 64x64-warp mma.sync tiles (measured on the suite: they win in every dtype), with
  // 128 input channels per tile once there are that many.
  if (wg_ok && forced != kNoWg && p.kh * p.kw * p.cout_g() >= 128)
    return p.cin_g() > 64 ? kWg128 : kWg64;
  return p.cin_g() > 64 ? kBigWide : kBigTall;
}

int igemm_kernel_select(Algo a) {
  switch (a) {
    case Algo::kImplicitGemmWgmma: return 0;
    case Algo::kImplicitGemmWgmmaWs: return 1;
    case Algo::kImplicitGemmHalo: return 2;
    case Algo::kImplicitGemmMma: return 3;
    default: return -1;
  }
}

}  // namespace cuda
}  // namespace convt2d
