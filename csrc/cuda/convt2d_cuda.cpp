// CUDA op glue: validation, device guard, allocation, weight packing and the
// choice of kernel. Kernels (in *.cu) only see the plain structs of common/kernels.h.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Logging.h>
#include <torch/library.h>

#include "common/tuning.h"
#include "cuda/common/kernels.h"
#include "glue.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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

// mma.sync / WMMA need compute capability 8.0 or newer.
bool is_sm80_plus() { return at::cuda::getCurrentDeviceProperties()->major >= 8; }

// Elements per 16-byte chunk, the channel granule of the tensor-core kernels' loads
// (4 for fp32, 8 for 16-bit types).
int64_t chunk_elems(DType dt) { return dt == DType::kFloat ? 4 : 8; }

// Weight [G*Cig, Cog, kh, kw] permuted to [G][kh][kw][a][b] (contiguous).
// The GEMM's B is [n][k] for the tensor-core v2 kernel (K-major) and [k][n]
// for v1; forward has (k, n) = (Cig, Cog), grad_input (Cog, Cig).
at::Tensor pack_weight(const at::Tensor& w, const Problem& p, bool dgrad, bool k_major) {
  auto v = w.view({p.groups, p.cin_g(), p.cout_g(), p.kh, p.kw});  // [G][ci][co][ky][kx]
  const bool ci_last = dgrad != k_major;  // forward K = ci; dgrad K = co
  // The forward layout [G][ci][co][t] -> [G][t][co][ci] by one tiled kernel: torch's
  // generic permute copy took 11 us on vae's 2.4 MB bf16 weight (forward 0.135 -> 0.132 ms
  // with the kernel). The other layout, [G][t][ci*co], a plain transpose, stays on torch's
  // copy: the kernel (B = 1) measured slower there (vae bf16 grad_input 0.101 -> 0.111 ms).
  // CONVT2D_TORCH_PACK=1: torch's copy for both (A/B).
  const char* tp = std::getenv("CONVT2D_TORCH_PACK");
  if (ci_last && !(tp && tp[0] == '1') && w.is_contiguous() &&
      (w.element_size() == 2 || w.element_size() == 4)) {
    auto out = at::empty({p.groups, p.kh, p.kw, p.cout_g(), p.cin_g()}, w.options());
    const cudaError_t e = cuda::launch_reverse3(w.data_ptr(), out.data_ptr(), p.groups,
                                                p.cin_g(), p.cout_g(), p.kh * p.kw,
                                                int(w.element_size()),
                                                at::cuda::getCurrentCUDAStream());
    if (e == cudaSuccess) return out;
    check_launch(e == cudaErrorInvalidValue ? cudaSuccess : e, "weight packing");
  }
  return ci_last ? v.permute({0, 3, 4, 2, 1}).contiguous() : v.permute({0, 3, 4, 1, 2}).contiguous();
}

// The tensor-core kernels read their activation channels-last. torch's
// generic copy moves an NCHW tensor at ~0.7 TB/s; a tiled transpose is ~3x faster.
at::Tensor to_channels_last(const at::Tensor& t, cudaStream_t st) {
  if (t.is_contiguous(at::MemoryFormat::ChannelsLast) || !t.is_contiguous() ||
      t.size(0) > 65535 || t.size(1) > 65535 * 64)
    return t.contiguous(at::MemoryFormat::ChannelsLast);
  auto out = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::ChannelsLast));
  check_launch(cuda::launch_nchw_to_nhwc(t.data_ptr(), out.data_ptr(), t.size(0), t.size(1),
                                         t.size(2) * t.size(3), int(t.element_size()), st),
               "channels-last copy");
  return out;
}

// The narrow kernel's routing bound: reduced channels per output (Cin/groups x taps per
// phase) from which it runs for 1..8 outputs per group (forward/narrow_output.cu). It beat the direct
// kernels and the GEMM on all 13 shapes measured, down to 18 reduced channels per
// output (perf-log v14); below that (output-write-bound) it is unmeasured.
constexpr double kNarrowMinK = 16;

// Kernel override for A/B timing: CONVT2D_KERNEL = tc | v1 | direct | patch | narrow.
const char* kernel_override() {
  const char* e = std::getenv("CONVT2D_KERNEL");
  return e ? e : "";
}

// ---- autotuning (torch.backends.cudnn.benchmark = True) ---------------------------
// Like cuDNN's algorithm search: the first call of a problem times every candidate
// kernel choice, the heuristics' own choice among them, and caches the outcome per
// (op, problem, dtype, math mode, input layout, bias, device) in common/tuning.h. Every
// later call of the problem, and every CUDA graph capture, uses the cached choice and
// times nothing; a capture never tunes (it runs the heuristics' choice).
// The outcome is cached whatever it is: a candidate that fails is skipped (its error is
// kept in the record, convt2d.tuning_log()), and where every candidate fails, or none
// beats the heuristics' choice by more than the timing noise, the heuristics' choice
// (tuning::kHeuristic) is what is cached.
// Off unless cudnn.benchmark is set, and off under a CONVT2D_KERNEL override.
bool autotune_on() { return at::globalContext().benchmarkCuDNN() && !*kernel_override(); }

std::string tune_key(const char* op, const Problem& p, DType dt, MathMode math,
                     const at::Tensor& x, const at::Tensor& w, bool bias) {
  std::string k = op;
  for (int64_t v : {p.N, p.Cin, p.H, p.W, p.Cout, p.Ho, p.Wo, p.kh, p.kw, p.groups, p.sh, p.sw,
                    p.ph, p.pw, p.oph, p.opw, p.dh, p.dw}) {
    k += ',';
    k += std::to_string(v);
  }
  const char* layout = x.is_contiguous() ? "nchw"
                       : x.is_contiguous(at::MemoryFormat::ChannelsLast) ? "nhwc" : "strided";
  static const char* const dtypes[] = {"f32", "f64", "f16", "bf16"};
  static const char* const maths[] = {"default", "tf32", "ieee"};
  // (the weight's layout decides the output's, and so which candidates apply)
  const char* wlayout = w.is_contiguous() ? "" : "|w:nhwc";
  k += std::string("|") + dtypes[int(dt)] + '|' + maths[int(math)] + '|' + layout + wlayout +
       (bias ? "|bias|cuda:" : "|-|cuda:") + std::to_string(x.get_device());
  return k;
}

// One autotune candidate: an id the caller's run() understands (tuning::kHeuristic: the
// heuristics' choice) and a name for the record.
struct Candidate {
  int id;
  const char* name;
};

// Median time of candidate c in ms, as a training step sees it: per run the larger of
// its GPU time (CUDA events) and its host time (launch work, allocation), with L2
// flushed before each run (an L2-sized memset; none where flush is null), after one
// untimed warm-up run. Runs enough repetitions that a microsecond kernel is timed over
// about 2 ms (5 to 40 runs).
double time_candidate(int c, const std::function<void(int)>& run, cudaStream_t st,
                      void* flush, size_t flush_bytes) {
  using clock = std::chrono::steady_clock;
  struct Events {
    std::vector<cudaEvent_t> ev;
    ~Events() {
      for (cudaEvent_t e : ev) cudaEventDestroy(e);
    }
  } evs;
  auto event = [&]() {
    cudaEvent_t e = nullptr;
    check_launch(cudaEventCreate(&e), "autotune event");
    evs.ev.push_back(e);
    return e;
  };
  // Warm-up (workspace allocation, first-launch costs) and a first estimate.
  cudaEvent_t w0 = event(), w1 = event();
  check_launch(cudaEventRecord(w0, st), "autotune event");
  auto h0 = clock::now();
  run(c);
  double host_ms = std::chrono::duration<double, std::milli>(clock::now() - h0).count();
  check_launch(cudaEventRecord(w1, st), "autotune event");
  check_launch(cudaEventSynchronize(w1), "autotune warm-up");
  float est = 0.f;
  check_launch(cudaEventElapsedTime(&est, w0, w1), "autotune event");
  const double first = std::max<double>(est, host_ms);
  const int reps = int(std::min(40.0, std::max(5.0, std::ceil(2.0 / std::max(first, 1e-3)))));
  std::vector<cudaEvent_t> e0(reps), e1(reps);
  std::vector<double> host(reps);
  for (int r = 0; r < reps; ++r) {
    e0[r] = event();
    e1[r] = event();
  }
  for (int r = 0; r < reps; ++r) {
    if (flush) check_launch(cudaMemsetAsync(flush, r & 0xff, flush_bytes, st), "autotune L2 flush");
    check_launch(cudaEventRecord(e0[r], st), "autotune event");
    h0 = clock::now();
    run(c);
    host[r] = std::chrono::duration<double, std::milli>(clock::now() - h0).count();
    check_launch(cudaEventRecord(e1[r], st), "autotune event");
  }
  check_launch(cudaEventSynchronize(e1[reps - 1]), "autotune run");
  std::vector<double> t(reps);
  for (int r = 0; r < reps; ++r) {
    float ms = 0.f;
    check_launch(cudaEventElapsedTime(&ms, e0[r], e1[r]), "autotune event");
    t[r] = std::max<double>(ms, host[r]);
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

// A candidate must beat the heuristics' choice by more than this to replace it: the
// run-to-run spread of medians measured on one problem (about 1-2% on the H100) with a
// margin, plus 1 us for microsecond kernels.
constexpr double kTuneRelNoise = 0.03;
constexpr double kTuneAbsNoiseMs = 0.001;

// The id to run for `key`: the cached outcome, else (tuning on, not capturing, at least
// two candidates) the outcome of timing `cands` now, which is then cached; else
// tuning::kHeuristic. `cands` must hold tuning::kHeuristic.
int autotune(const std::string& key, const std::vector<Candidate>& cands,
             const std::function<void(int)>& run, cudaStream_t st) {
  if (cands.size() < 2) return tuning::kHeuristic;
  int cached = tuning::kHeuristic;
  if (tuning::lookup(key, &cached)) {
    for (const Candidate& c : cands)
      if (c.id == cached) return cached;
    return tuning::kHeuristic;  // (a choice that does not apply to these tensors)
  }
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
    return tuning::kHeuristic;
  // The L2 flush buffer (freed on return, before the caller's run of the choice). Where it
  // does not fit, candidates are timed without flushing rather than not at all.
  const size_t flush_bytes =
      size_t(std::max(at::cuda::getCurrentDeviceProperties()->l2CacheSize, 1 << 20));
  at::Tensor flush;
  try {
    flush = at::empty({int64_t(flush_bytes)}, at::TensorOptions().dtype(at::kByte).device(
                                                  at::kCUDA, c10::cuda::current_device()));
  } catch (const c10::Error&) {
    (void)cudaGetLastError();
  }
  void* const flush_ptr = flush.defined() ? flush.data_ptr() : nullptr;
  tuning::Record rec;
  rec.key = key;
  double heur_ms = -1, best_ms = -1;
  int best = tuning::kHeuristic;
  for (const Candidate& c : cands) {
    tuning::CandidateTime ct;
    ct.name = c.name;
    try {
      ct.ms = time_candidate(c.id, run, st, flush_ptr, flush_bytes);
    } catch (const std::exception& e) {
      // A candidate that cannot run here (launch refused, workspace out of memory) is
      // skipped and the launch error cleared. A device-side fault is sticky: it is not
      // cleared, and the next CUDA call reports it.
      (void)cudaGetLastError();
      std::string msg = e.what();
      msg = msg.substr(0, msg.find('\n'));
      ct.skipped = msg.empty() ? "error" : msg;
      ct.ms = -1;
    }
    if (ct.ms >= 0) {
      if (c.id == tuning::kHeuristic) heur_ms = ct.ms;
      if (best_ms < 0 || ct.ms < best_ms) {
        best_ms = ct.ms;
        best = c.id;
      }
    }
    rec.candidates.push_back(std::move(ct));
  }
  // Within the noise of the heuristics' choice: keep it.
  if (heur_ms >= 0 && heur_ms <= best_ms * (1 + kTuneRelNoise) + kTuneAbsNoiseMs)
    best = tuning::kHeuristic;
  for (const Candidate& c : cands)
    if (c.id == best) rec.chosen = c.name;
  // The debug log (TORCH_CPP_LOG_LEVEL=INFO); convt2d.tuning_log() returns the same.
  std::string line = "convt2d autotune " + key + ":";
  for (const tuning::CandidateTime& ct : rec.candidates)
    line += " " + ct.name + (ct.skipped.empty() ? " " + std::to_string(ct.ms) + " ms;"
                                                : " skipped (" + ct.skipped + ");");
  LOG(INFO) << line << " -> " << rec.chosen;
  tuning::store(key, best, std::move(rec));
  return best;
}

// One implicit GEMM (forward per phase, or grad_input): the tensor-core v2
// kernel when the operands allow it (source read channels-last), else v1.
void run_igemm(cuda::IgemmMode mode, const at::Tensor& src, const at::Tensor& dst,
               const at::Tensor& weight, const at::Tensor& bias, const Problem& p, DType dt,
               MathMode math, cudaStream_t st, int ws = -1) {
  const bool sm80 = is_sm80_plus();
  const bool fwd = mode == cuda::IgemmMode::kForward;
  cuda::IgemmParams prm;
  prm.p = p;
  prm.mode = mode;
  prm.dst = ref(dst);
  prm.bias = bias.defined() ? bias.data_ptr() : nullptr;
  prm.Hs = fwd ? p.H : p.Ho; prm.Ws = fwd ? p.W : p.Wo;
  prm.Hd = fwd ? p.Ho : p.H; prm.Wd = fwd ? p.Wo : p.W;
  prm.Kc = fwd ? p.cin_g() : p.cout_g();
  prm.Nc = fwd ? p.cout_g() : p.cin_g();
  prm.phases_y = fwd ? p.sh : 1;
  prm.phases_x = fwd ? p.sw : 1;
  int64_t mq_y = 0, mq_x = 0;
  if (fwd) {
    for (int64_t r = 0; r < p.sh; ++r)
      mq_y = std::max(mq_y, make_phase_dim(r, p.sh, p.ph, p.dh, p.kh, p.Ho).nq);
    for (int64_t r = 0; r < p.sw; ++r)
      mq_x = std::max(mq_x, make_phase_dim(r, p.sw, p.pw, p.dw, p.kw, p.Wo).nq);
  } else {
    mq_y = p.H; mq_x = p.W;
  }
  prm.max_m = p.N * mq_y * mq_x;
  prm.ws = ws;
  cuda::fill_phase_geo(prm);

  const bool want_v2 = sm80 && dt != DType::kDouble &&
                       std::strcmp(kernel_override(), "v1") != 0;
  // The v2 kernel needs whole 16-byte chunks of channels: check that before
  // paying for the channels-last copy (tc_igemm_supported checks the rest).
  const int64_t chunk = chunk_elems(dt);
  if (want_v2 && prm.Kc % chunk == 0) {
    // Forward, fp32 with TF32 off, NCHW x: the channels-last copy is left to the kernels
    // (prm.src_nchw): the 3xFP16 halo kernel reads NCHW x itself where it can, every other
    // path fills the copy first (perf-log v18).
    const bool defer = fwd && dt == DType::kFloat && math == MathMode::kIEEE &&
                       src.is_contiguous() && !src.is_contiguous(at::MemoryFormat::ChannelsLast) &&
                       src.size(0) <= 65535 && src.size(1) <= 65535 * 64;
    const at::Tensor s2 =
        defer ? at::empty(src.sizes(), src.options().memory_format(at::MemoryFormat::ChannelsLast))
              : to_channels_last(src, st);
    const at::Tensor w2 = pack_weight(weight, p, !fwd, /*k_major=*/true);
    prm.src = ref(s2);
    if (defer) prm.src_nchw = ref(src);
    prm.wpk = w2.data_ptr();
    if (cuda::tc_igemm_supported(prm, dt)) {
      // 3xTF32 on the Hopper halo kernel: the weight's big and small TF32 halves.
      at::Tensor halves, wflag, halves16, f16_state;
      if (dt == DType::kFloat && math == MathMode::kIEEE &&
          cuda::tc_halo_supported(prm, dt, math)) {
        halves = at::empty({2, w2.numel()}, w2.options());
        wflag = at::zeros({1}, w2.options().dtype(at::kInt));
        float* hi = halves.data_ptr<float>();
        check_launch(cuda::launch_split_tf32(w2.data_ptr<float>(), hi, hi + w2.numel(), w2.numel(),
                                             wflag.data_ptr<int>(), st),
                     "3xTF32 weight split");
        prm.wpk_hi = hi;
        prm.wpk_lo = hi + w2.numel();
        prm.wflag = wflag.data_ptr<int>();
        // 3xFP16 where it applies (its 3xTF32 fallback uses the halves above).
        if (cuda::tc_halo_f16x3_applies(prm)) {
          halves16 = at::empty({2, w2.numel()}, w2.options().dtype(at::kHalf));
          // [G * Nc] column scales, then the flag (zeroed).
          f16_state = at::zeros({p.groups * prm.Nc + 1}, w2.options().dtype(at::kInt));
          at::Half* h16 = halves16.data_ptr<at::Half>();
          int* scales = f16_state.data_ptr<int>();
          int* flag = scales + p.groups * prm.Nc;
          check_launch(cuda::launch_split_f16(w2.data_ptr<float>(), h16, h16 + w2.numel(),
                                              p.groups, p.kh * p.kw, prm.Nc, prm.Kc, scales,
                                              flag, st),
                       "3xFP16 weight split");
          prm.w16_hi = h16;
          prm.w16_lo = h16 + w2.numel();
          prm.w16_scale = scales;
          prm.f16_flag = flag;
        }
      }
      check_launch(cuda::launch_tc_igemm(prm, dt, math, st), "tensor-core implicit GEMM");
      return;
    }
  }
  TORCH_CHECK(sm80 || dt == DType::kDouble || math == MathMode::kIEEE,
              "convt2d: tensor-core kernels need compute capability 8.0 or newer");
  const at::Tensor w1 = pack_weight(weight, p, !fwd, /*k_major=*/false);
  prm.src = ref(src);
  prm.src_nchw = cuda::TensorRef{};
  prm.wpk = w1.data_ptr();
  check_launch(cuda::launch_igemm(prm, dt, math, st), "implicit GEMM");
}

// grad_weight on CUDA cores / WMMA (grad_weight/wgrad_cuda_core.cu): any dtype, layout and channel count.
void run_wgrad_v1(cuda::WgradParams& prm, const at::Tensor& input, const at::Tensor& grad_output,
                  DType dt, MathMode math, int sms, cudaStream_t st) {
  const Problem& p = prm.p;
  prm.x = ref(input);
  prm.gout = ref(grad_output);
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

  // The direct and narrow kernels' parameters for the contiguous weight w (kept alive by
  // the caller).
  auto direct_params = [&](const at::Tensor& w) {
    cuda::DirectParams prm;
    prm.p = p;
    prm.x = ref(input);
    prm.out = ref(out);
    prm.w = w.data_ptr();
    prm.bias = b.defined() ? b.data_ptr() : nullptr;
    return prm;
  };
  auto run_direct = [&] {
    auto w = weight.contiguous();
    cuda::DirectParams prm = direct_params(w);
    at::Tensor wpk;
    if (const int kc = cuda::direct_tc_channels(p, dt, math)) {
      // [G][Cig][Cog][kk] -> [G][Cog/kc][kk][Cig/ke][kc][ke], both channel counts zero
      // padded; ke = channels per 16 bytes (8 for 16-bit, 4 for fp32 with TF32 allowed)
      const int64_t G = p.groups, cig = p.cin_g(), cog = p.cout_g(), kk = p.kh * p.kw;
      const int64_t ke = chunk_elems(dt);
      const int64_t nch = (cig + ke - 1) / ke, ncob = (cog + kc - 1) / kc;
      auto wz = at::zeros({G, nch * ke, ncob * kc, kk}, w.options());
      wz.narrow(1, 0, cig).narrow(2, 0, cog).copy_(w.view({G, cig, cog, kk}));
      wpk = wz.view({G, nch, ke, ncob, kc, kk}).permute({0, 3, 5, 1, 4, 2}).contiguous();
      prm.wpk = wpk.data_ptr();
      prm.wpk_channels = kc;
    }
    check_launch(cuda::launch_direct_forward(prm, dt, st), "direct forward");
  };
  // 1..8 outputs per group with many reduced channels per output (a GAN's RGB layer):
  // the narrow CUDA-core kernel (forward/narrow_output.cu). false: not taken, nothing launched.
  auto run_narrow = [&]() -> bool {
    auto w = weight.contiguous();
    const cuda::DirectParams prm = direct_params(w);
    bool launched = false;
    check_launch(cuda::launch_narrow_forward(prm, dt, st, launched), "narrow forward");
    return launched;
  };
  // kernel == stride (no padding, dilation 1): one GEMM per (n, group) straight from NCHW,
  // pixel-shuffled in the epilogue (forward/patch_gemm.cu). false: not taken, nothing launched.
  auto run_patch = [&]() -> bool {
    auto w = weight.contiguous();
    cuda::PatchParams pp;
    pp.p = p;
    pp.x = input.data_ptr();
    pp.out = out.data_ptr();
    pp.w = w.data_ptr();
    pp.bias = b.defined() ? b.data_ptr() : nullptr;
    bool launched = false;
    check_launch(cuda::launch_patch_gemm(pp, dt, math, st, launched), "patch GEMM forward");
    return launched;
  };
  const bool patch_ok = is_sm80_plus() && dt != DType::kDouble && input.is_contiguous() &&
                        out.is_contiguous() && cuda::patch_gemm_supported(p, dt);
  const bool direct_ok = cuda::direct_forward_fits(p, dt) && dt != DType::kDouble;
  const bool narrow_ok = cuda::narrow_forward_supported(p, dt);  // checks the dtype
  // The heuristics' choice.
  auto run_heuristic = [&]() {
    // Memory-bound shapes (few reduced channels per output, or few outputs per
    // group) go to the direct kernel; the rest are implicit GEMMs. 8 to 31 outputs per
    // group with 256 or more reduced channels per output are compute-bound: the
    // implicit GEMM measured faster there despite its narrow N (off-suite, perf-log
    // v13: Cin 128 -> Cout 24 k3 s2 fp32 0.175 -> 0.037 ms, 64 -> 8 k4 s2 0.068 ->
    // 0.046; a stride-1 Cin 32 -> 16 k3 at 288 lost 0.029 -> 0.033). Below 8 outputs
    // (a GAN's RGB layer) the GEMM's 3xTF32 variant lost badly (64 -> 3 k4 s2 with TF32
    // off 0.222 -> 0.530 ms), so those stay direct (the narrow kernel above takes 1..8
    // outputs per group first where it applies). Only where the tensor-core GEMM
    // takes the channels (whole 16-byte chunks).
    const double k_per_output = double(p.cin_g() * p.kh * p.kw) / double(p.sh * p.sw);
    const char* ko = kernel_override();
    // 1..8 outputs per group with >= kNarrowMinK reduced channels per output and x rows
    // contiguous (its loads run along W): the narrow kernel (CONVT2D_NARROW=0: never).
    const char* nw_env = std::getenv("CONVT2D_NARROW");
    const bool narrow_default = !*ko && (nw_env == nullptr || nw_env[0] != '0') &&
                                p.cout_g() <= 8 && k_per_output >= kNarrowMinK &&
                                input.stride(3) == 1;
    if (narrow_ok && (narrow_default || std::strcmp(ko, "narrow") == 0) && run_narrow())
      return;
    const bool tc_gemm = dt != DType::kDouble && p.cin_g() % chunk_elems(dt) == 0;
    const bool gemm_ok = tc_gemm && p.cout_g() >= 8 && k_per_output >= 256;
    bool memory_bound = (p.cout_g() < 32 && !gemm_ok) || k_per_output < 64 || !is_sm80_plus();
    if (std::strcmp(ko, "direct") == 0) memory_bound = true;
    if (std::strcmp(ko, "patch") == 0) memory_bound = false;
    if (std::strcmp(ko, "tc") == 0 || std::strcmp(ko, "v1") == 0) memory_bound = false;
    if (memory_bound && direct_ok) {
      run_direct();
      return;
    }
    // Compute-bound kernel == stride shapes (U-Net's k=2 s=2): the patch GEMM, unless an
    // override names another kernel (CONVT2D_KERNEL=tc: the per-phase implicit GEMM). Not
    // by default for fp32 with TF32 off: its 3xTF32 variant (one block per SM) measured
    // slower than the halo kernel's (unet 0.71 vs 0.69 ms).
    const bool patch_default = !*ko && math != MathMode::kIEEE;
    if (patch_ok && (patch_default || std::strcmp(ko, "patch") == 0) && run_patch()) return;
    run_igemm(cuda::IgemmMode::kForward, input, out, weight, b, p, dt, math, st);
  };

  if (autotune_on()) {
    // The direct kernel; the implicit GEMM (igemm: on Hopper its two-block kernel, elsewhere
    // the mma.sync one), on the Hopper warp-specialised kernel (igemm_ws, tested for
    // Cout/groups >= 64) or on the Hopper halo kernel (igemm_halo; where either does not
    // apply, what the launcher picks); the patch GEMM (kernel == stride, NCHW); the narrow
    // kernel (1..8 outputs per group).
    std::vector<Candidate> cands{{tuning::kHeuristic, "heuristic"}};
    if (patch_ok) cands.push_back({4, "patch_gemm"});
    if (narrow_ok) cands.push_back({5, "narrow"});
    if (direct_ok) cands.push_back({0, "direct"});
    if (is_sm80_plus() && dt != DType::kDouble) {
      cands.push_back({1, "igemm"});
      if (p.cout_g() >= 64) {
        cands.push_back({2, "igemm_ws"});
        cands.push_back({3, "igemm_halo"});
      }
    }
    auto run = [&](int c) {
      if (c == tuning::kHeuristic) run_heuristic();
      else if (c == 0) run_direct();
      else if (c == 4 && run_patch()) return;
      else if (c == 5 && run_narrow()) return;
      else run_igemm(cuda::IgemmMode::kForward, input, out, weight, b, p, dt, math, st,
                     c >= 4 ? -1 : c - 1);
    };
    run(autotune(tune_key("fwd", p, dt, math, input, weight, b.defined()), cands, run, st));
    return out;
  }
  run_heuristic();
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
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;

  const int64_t chunk = chunk_elems(dt);
  const auto gi_format = suggest_memory_format(input, weight);
  // gi and gw (its layout set at the end) for the problem p (the lambda's own, which
  // hides the caller's) from grad_output go (NCHW or channels-last) and the weight wv
  // ([Cin][Cog][kh][kw] of that problem).
  auto grads = [&](const at::Tensor& go, const at::Tensor& wv, const Problem& p) {
    // grad_weight on tensor cores reads x and go channels-last; the
    // channels-last go is shared with grad_input (which reads it so too).
    const bool tc_wgrad = output_mask[1] && p.N > 0 && is_sm80_plus() && dt != DType::kDouble &&
                          std::strcmp(kernel_override(), "v1") != 0 && p.cin_g() % chunk == 0 &&
                          p.cout_g() % chunk == 0 && input.numel() > 0;
    // fp32 grad_weight from the NCHW tensors themselves on Hopper wgmma (grad_weight/wgrad_nchw_sm90.cu):
    // taken for IEEE fp32 (3xTF32) where it applies; CONVT2D_WGRAD_KM=1 / 0: also for TF32
    // / never (A/B).
    const char* km_env = std::getenv("CONVT2D_WGRAD_KM");
    // (At least 32 channels per group on both sides: its tiles are 64 x 64 channels.)
    const bool km = tc_wgrad && dt == DType::kFloat && p.cin_g() >= 32 && p.cout_g() >= 32 &&
                    (math == MathMode::kIEEE ? !(km_env && km_env[0] == '0')
                                             : (km_env && km_env[0] == '1')) &&
                    input.stride(3) == 1 && go.stride(3) == 1 && cuda::wgmma_device();
    const at::Tensor gout = tc_wgrad && !(km && !output_mask[0]) ? to_channels_last(go, st) : go;

    if (output_mask[0]) {
      gi = at::empty(input.sizes(), input.options().memory_format(gi_format));
      if (gi.numel() > 0) {
        int ws = -1;
        if (autotune_on() && is_sm80_plus() && dt != DType::kDouble && p.cin_g() >= 64) {
          auto run = [&](int c) {
            run_igemm(cuda::IgemmMode::kDgrad, gout, gi, wv, at::Tensor(), p, dt, math, st, c);
          };
          // The launcher's choice (heuristic) or one of its implicit-GEMM kernels
          // (cuda::IgemmParams::ws).
          ws = autotune(tune_key("dgrad", p, dt, math, go, weight, false),
                        {{tuning::kHeuristic, "heuristic"}, {0, "igemm"}, {1, "igemm_ws"},
                         {2, "igemm_halo"}},
                        run, st);
        }
        run_igemm(cuda::IgemmMode::kDgrad, gout, gi, wv, at::Tensor(), p, dt, math, st, ws);
      }
    }
    if (output_mask[1]) {
      if (p.N == 0) {
        gw = at::zeros(wv.sizes(), wv.options());
      } else {
        gw = at::empty(wv.sizes(), wv.options().memory_format(at::MemoryFormat::Contiguous));
        cuda::WgradParams prm;
        prm.p = p;
        prm.gw = gw.data_ptr();
        bool done = false;
        if (km) {
          // TMA needs 16-byte row strides: rows whose width is not a multiple of 4 floats
          // are copied into a padded buffer first.
          auto rows16 = [](const at::Tensor& t) {
            if (t.size(3) % 4 == 0 && t.stride(2) % 4 == 0 && t.stride(1) % 4 == 0 &&
                t.stride(0) % 4 == 0)
              return t;
            auto buf = at::empty({t.size(0), t.size(1), t.size(2), (t.size(3) + 3) / 4 * 4},
                                 t.options());
            auto v = buf.narrow(3, 0, t.size(3));
            v.copy_(t);
            return v;
          };
          const at::Tensor xk = rows16(input);
          at::Tensor gk;
          if (p.sw == 1) {
            gk = rows16(go);
          } else {
            // grad_out as sw stride-phase planes [N][Cout][sw][Ho][Wq4] (plane r: columns
            // r, r + sw, ...; rows padded to whole 16-byte chunks, zero past the data).
            const int64_t s = p.sw, wq = (p.Wo + s - 1) / s, wq4 = (wq + 3) / 4 * 4;
            const bool whole = wq * s == p.Wo && wq4 == wq && go.is_contiguous();
            gk = whole ? at::empty({p.N, p.Cout, s, p.Ho, wq4}, go.options())
                       : at::zeros({p.N, p.Cout, s, p.Ho, wq4}, go.options());
            if (whole) {
              gk.copy_(go.view({p.N, p.Cout, p.Ho, wq, s}).permute({0, 1, 4, 2, 3}));
            } else {
              for (int64_t r = 0; r < s && r < p.Wo; ++r) {
                const at::Tensor src = go.slice(3, r, p.Wo, s);
                gk.select(2, r).narrow(3, 0, src.size(3)).copy_(src);
              }
            }
            prm.gout_sp = gk.stride(2);
            gk = gk.select(2, 0).narrow(3, 0, wq);  // the plane-0 view: N, C, H, W strides
          }
          prm.x = ref(xk);
          prm.gout = ref(gk);
          if (cuda::tc_wgrad_km_supported(prm, dt)) {
            const cuda::TcWgradPlan plan = cuda::tc_wgrad_km_plan(p, sms);
            prm.splits = plan.splits;
            prm.k_per_split = plan.k_per_split;
            auto ws = at::empty({plan.ws_elems}, input.options().dtype(at::kFloat));
            prm.workspace = ws.data_ptr();
            check_launch(cuda::launch_tc_wgrad_km(prm, math, st), "grad_weight (wgmma, NCHW)");
            done = true;
          }
        }
        if (tc_wgrad && !done) {
          // NCHW x read as it is (K-major tiles, no channels-last copy) where that measured
          // faster: 1x1 problems (the tap gather's: unet bf16 grad_weight 0.156 -> 0.137 ms)
          // and few channels per group (seedD, 8: 0.583 -> 0.537). On seedA / seedB / dcgan
          // / vae the K-major kernel lost more than the copy costs (seedA bf16 2.08 -> 2.20
          // ms), so x is copied channels-last there. CONVT2D_WGRAD_XCOPY=1 / 0: always /
          // never copy (A/B).
          const char* xc = std::getenv("CONVT2D_WGRAD_XCOPY");
          const bool xn_pref = xc && *xc ? xc[0] == '0' : p.kh * p.kw == 1 || p.cin_g() < 32;
          prm.x_nchw = xn_pref && input.is_contiguous() && (p.H * p.W) % chunk == 0;
          // (gout is NCHW here only when km was expected to take grad_weight and did not.)
          const at::Tensor gcl = gout.is_same(go) && !go.is_contiguous(at::MemoryFormat::ChannelsLast)
                                     ? to_channels_last(go, st)
                                     : gout;
          prm.x = ref(input);
          prm.gout = ref(gcl);
          if (prm.x_nchw && !cuda::tc_wgrad_supported(prm, dt)) prm.x_nchw = false;
          const at::Tensor x2 = prm.x_nchw ? input : to_channels_last(input, st);
          prm.x = ref(x2);
          if (cuda::tc_wgrad_supported(prm, dt)) {
            auto run = [&](int tile) {
              const cuda::TcWgradPlan plan = cuda::tc_wgrad_plan(p, dt, math, sms, tile,
                                                                 prm.x_nchw);
              prm.tile = tile;
              prm.splits = plan.splits;
              prm.k_per_split = plan.k_per_split;
              auto ws = at::empty({plan.ws_elems}, input.options().dtype(at::kFloat));
              prm.workspace = ws.data_ptr();
              check_launch(cuda::launch_tc_wgrad(prm, dt, math, st), "grad_weight (tensor cores)");
            };
            int tile = -1;
            if (autotune_on() && math != MathMode::kIEEE) {
              // The heuristics' choice (the wgmma kernel where it applies) or one of
              // the numbered mma.sync tiles.
              static const char* const names[] = {"tc_wgrad_tile0", "tc_wgrad_tile1",
                                                  "tc_wgrad_tile2", "tc_wgrad_tile3",
                                                  "tc_wgrad_tile4", "tc_wgrad_tile5",
                                                  "tc_wgrad_tile6", "tc_wgrad_tile7"};
              static_assert(cuda::kTcWgradTiles <= 8, "name the new tiles");
              std::vector<Candidate> tiles{{tuning::kHeuristic, "heuristic"}};
              for (int t = 0; t < cuda::kTcWgradTiles; ++t) tiles.push_back({t, names[t]});
              tile = autotune(tune_key("wgrad", p, dt, math, input, weight, false), tiles, run, st);
            }
            run(tile);
            done = true;
          }
        }
        if (!done) run_wgrad_v1(prm, input, go, dt, math, sms, st);
      }
    }
  };

  // No more taps than stride phases (kh*kw <= sh*sw: seedC's k=3 d=2 s=5, U-Net's k=2 s=2),
  // and at most 1.5x as many gathered elements as grad_output has (heavy padding can make
  // it many times more; a little over 1x, from cropped edge taps, still gains);
  // strides, paddings, dilations below 2^20 and kernel sizes below 2^10 (the gather kernel
  // keeps them in 32-bit ints): grad_output's tap gather (common/layout_kernels.cu; channels-last) makes
  // both gradients 1x1 problems over Cout*kh*kw channels, with the weight viewed as
  // [Cin][Cog*kh*kw][1][1]. It replaces the channels-last copy of all of grad_output that
  // the strided problem reads only kh*kw/(sh*sw) of. CONVT2D_BWD_GATHER=0: off (A/B).
  const char* ge = std::getenv("CONVT2D_BWD_GATHER");
  const int64_t kk = p.kh * p.kw;
  const bool gather = (output_mask[0] || output_mask[1]) && !(ge && ge[0] == '0') &&
                      is_sm80_plus() && dt != DType::kDouble &&
                      std::strcmp(kernel_override(), "v1") != 0 && kk <= p.sh * p.sw &&
                      2 * p.H * p.W * kk <= 3 * p.Ho * p.Wo && p.sh < (1 << 20) && p.sw < (1 << 20) &&
                      p.ph < (1 << 20) && p.pw < (1 << 20) && p.dh < (1 << 20) &&
                      p.dw < (1 << 20) && p.kh < (1 << 10) && p.kw < (1 << 10) &&
                      p.sh * p.sw > 1 && (p.Cout * kk) % 4 == 0 && p.N <= 65535 &&
                      grad_output.is_contiguous() && input.numel() > 0 && p.cin_g() % chunk == 0 &&
                      (p.cout_g() * kk) % chunk == 0;
  bool gathered = false;
  if (gather) {
    Problem p1 = p;
    p1.Cout = p.Cout * kk;
    p1.Ho = p.H; p1.Wo = p.W;
    p1.kh = p1.kw = p1.sh = p1.sw = p1.dh = p1.dw = 1;
    p1.ph = p1.pw = p1.oph = p1.opw = 0;
    auto g2 = at::empty({p.N, p1.Cout, p.H, p.W},
                        grad_output.options().memory_format(at::MemoryFormat::ChannelsLast));
    const cudaError_t e = cuda::launch_tap_gather(grad_output.data_ptr(), g2.data_ptr(), p,
                                                  int(grad_output.element_size()), st);
    if (e != cudaErrorInvalidValue) {
      check_launch(e, "grad_output tap gather");
      grads(g2, weight.contiguous().view({p.Cin, p.cout_g() * kk, 1, 1}), p1);
      if (gw.defined() && gw.numel() > 0) gw = gw.view(weight.sizes());
      gathered = true;
    }
  }
  if (!gathered) grads(grad_output, weight, p);
  if (output_mask[1]) gw = gw.contiguous(weight.suggest_memory_format());
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
