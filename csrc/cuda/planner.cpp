// The planner (planner.h): every kernel choice of the CUDA backend, as rules over a Query.
// The rules come from measurements (docs/perf-log.md); the shape classes they separate and
// each algorithm's idea and floor are in docs/design.md. Reading order: can_implement (what
// each algorithm takes), then one plan_* function per pass.
#include "cuda/planner.h"

#include <algorithm>

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

}  // namespace

bool can_implement(Algo a, const Query& q) {
  const Problem& p = q.p;
  switch (a) {
    case Algo::kNarrowOutput:  // fp32 / fp16 / bf16, 1..8 outputs per group (it checks the dtype)
      return narrow_forward_supported(p, q.dt);
    case Algo::kDirect:
    case Algo::kDirectSimt:    // its shared-memory budget; fp64 has no direct kernel
      return q.dt != DType::kDouble && direct_forward_fits(p, q.dt);
    case Algo::kDirectTensorOp:
      return q.dt != DType::kDouble && direct_forward_fits(p, q.dt) &&
             direct_tc_channels(p, q.dt, q.math) > 0;
    case Algo::kPatchGemm:     // kernel == stride, NCHW in and out
      return tensor_cores(q) && q.x_nchw && q.out_nchw && patch_gemm_supported(p, q.dt);
    case Algo::kImplicitGemm:
    case Algo::kImplicitGemmSimt:  // any problem (tensor cores where the operands allow)
      return true;
    case Algo::kImplicitGemmMma:
      return tensor_cores(q);
    case Algo::kImplicitGemmWgmma:
    case Algo::kImplicitGemmWgmmaWs:
    case Algo::kImplicitGemmHalo:  // the launcher falls back where the kernel cannot take it
      return tensor_cores(q) && q.wgmma;
    case Algo::kWgradTensorOp:  // whole 16-byte channel chunks on both sides
      return tensor_cores(q) && p.N > 0 && p.Cin > 0 && p.H * p.W > 0 &&
             p.cin_g() % chunk_elems(q.dt) == 0 && p.cout_g() % chunk_elems(q.dt) == 0;
    case Algo::kWgradWgmmaNchw:  // fp32; its tiles are 64 x 64 channels (>= 32 per group)
      return can_implement(Algo::kWgradTensorOp, q) && q.dt == DType::kFloat && q.wgmma &&
             p.cin_g() >= 32 && p.cout_g() >= 32 && q.x_unit_w && q.go_unit_w;
    case Algo::kWgradSimt:
      return true;
    case Algo::kTapGather: {
      // No more taps than stride phases, and at most 1.5x as many gathered elements as
      // grad_output has (heavy padding can make it many times more; a little over 1x, from
      // cropped edge taps, still gains); strides, paddings, dilations below 2^20 and kernel
      // sizes below 2^10 (the gather kernel's 32-bit ints); the 1x1 problems' channels in
      // whole 16-byte chunks; NCHW grad_output (a channels-last one is read as it is).
      const int64_t kk = p.kh * p.kw;
      const int64_t big = int64_t(1) << 20;
      return (q.want_gi || q.want_gw) && tensor_cores(q) && kk <= p.sh * p.sw &&
             p.sh * p.sw > 1 && 2 * p.H * p.W * kk <= 3 * p.Ho * p.Wo && p.sh < big &&
             p.sw < big && p.ph < big && p.pw < big && p.dh < big && p.dw < big &&
             p.kh < (1 << 10) && p.kw < (1 << 10) && (p.Cout * kk) % 4 == 0 &&
             p.N <= 65535 && q.go_nchw && p.N * p.Cin * p.H * p.W > 0 &&
             p.cin_g() % chunk_elems(q.dt) == 0 && (p.cout_g() * kk) % chunk_elems(q.dt) == 0;
    }
    case Algo::kStrided:
      return true;
    default:
      return false;
  }
}

std::vector<Algo> plan_forward(const Query& q, Algo forced) {
  std::vector<Algo> seq;
  if (forced != Algo::kNone && can_implement(forced, q)) seq.push_back(forced);
  const Problem& p = q.p;
  const double kpo = k_per_output(p);
  // 1..8 outputs per group with many reduced channels per output (a GAN's RGB layer, a
  // keypoint head) and x rows contiguous (its loads run along W): the narrow kernel.
  if (can_implement(Algo::kNarrowOutput, q) && p.cout_g() <= 8 && kpo >= kNarrowMinK &&
      q.x_unit_w)
    seq.push_back(Algo::kNarrowOutput);
  // Memory-bound shapes (few reduced channels per output, or few outputs per group) go to
  // the direct kernel; the rest are implicit GEMMs. 8 to 31 outputs per group with 256 or
  // more reduced channels per output are compute-bound: the implicit GEMM measured faster
  // there despite its narrow N (Cin 128 -> Cout 24 k3 s2 fp32: 0.175 -> 0.037 ms; a
  // stride-1 Cin 32 -> 16 k3 lost, 0.029 -> 0.033). Below 8 outputs the GEMM's 3xTF32
  // variant lost badly (64 -> 3 k4 s2, TF32 off: 0.222 -> 0.530 ms), so those stay direct.
  // Only where the tensor-core GEMM takes the channels (whole 16-byte chunks).
  const bool tc_gemm = q.dt != DType::kDouble && p.cin_g() % chunk_elems(q.dt) == 0;
  const bool gemm_ok = tc_gemm && p.cout_g() >= 8 && kpo >= 256;
  const bool memory_bound = (p.cout_g() < 32 && !gemm_ok) || kpo < 64 || !q.sm80;
  if (memory_bound && can_implement(Algo::kDirect, q)) {
    seq.push_back(Algo::kDirect);
    return seq;
  }
  // Compute-bound kernel == stride layers (U-Net's k=2 s=2): the patch GEMM; not for fp32
  // with TF32 off, where its 3xTF32 variant (one block per SM) measured slower than the
  // halo kernel's 3xFP16 (0.71 vs 0.69 ms on a U-Net decoder layer).
  if (can_implement(Algo::kPatchGemm, q) && q.math != MathMode::kIEEE)
    seq.push_back(Algo::kPatchGemm);
  seq.push_back(Algo::kImplicitGemm);
  return seq;
}

std::vector<Algo> forward_candidates(const Query& q) {
  std::vector<Algo> c;
  for (Algo a : {Algo::kPatchGemm, Algo::kNarrowOutput, Algo::kDirect})
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

Algo plan_backward_transform(const Query& q, Algo forced) {
  // The tap gather replaces the channels-last copy of all of grad_output that the strided
  // problem reads only kh*kw / (sh*sw) of (a U-Net's k=2 s=2, a dilated k=3 at stride 5).
  if (forced == Algo::kStrided) return Algo::kStrided;
  return can_implement(Algo::kTapGather, q) ? Algo::kTapGather : Algo::kStrided;
}

Algo plan_grad_input(const Query& q, Algo forced) {
  // grad_input is the strided conv2d of grad_output with the weight: one implicit GEMM, its
  // tensor-core kernel picked by the launcher (implicit_gemm/igemm_tensor_core.cu).
  if (forced != Algo::kNone && forced >= Algo::kImplicitGemm && forced <= Algo::kImplicitGemmSimt &&
      can_implement(forced, q))
    return forced;
  return Algo::kImplicitGemm;
}

std::vector<Algo> grad_input_candidates(const Query& q) {
  if (!(tensor_cores(q) && q.wgmma && q.p.cin_g() >= 64)) return {};
  return {Algo::kImplicitGemmWgmma, Algo::kImplicitGemmWgmmaWs, Algo::kImplicitGemmHalo};
}

Algo plan_grad_weight(const Query& q, Algo forced) {
  if (forced == Algo::kWgradSimt) return Algo::kWgradSimt;
  if ((forced == Algo::kWgradWgmmaNchw || forced == Algo::kWgradTensorOp) &&
      can_implement(forced, q))
    return forced;
  // fp32 with TF32 off (3xTF32) from the NCHW tensors themselves on Hopper wgmma: no
  // channels-last copies. With TF32 on, the tensorop kernel's TF32 tiles measured faster.
  if (q.math == MathMode::kIEEE && can_implement(Algo::kWgradWgmmaNchw, q))
    return Algo::kWgradWgmmaNchw;
  if (can_implement(Algo::kWgradTensorOp, q)) return Algo::kWgradTensorOp;
  return Algo::kWgradSimt;
}

bool grad_weight_reads_nchw_x(const Query& q, const Variant& var) {
  // NCHW x read as it is (K-major tiles, no channels-last copy) where that measured faster:
  // 1x1 problems (as the tap gather makes) and few channels per group (< 32). With many
  // channels and taps the K-major kernel lost more than the copy costs.
  const Problem& p = q.p;
  const bool pref = var.wgrad_x >= 0 ? var.wgrad_x == 1 : p.kh * p.kw == 1 || p.cin_g() < 32;
  return pref && q.x_nchw && (p.H * p.W) % chunk_elems(q.dt) == 0;
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
