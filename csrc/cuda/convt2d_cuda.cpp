// CUDA op glue: validation, device guard, allocation, weight packing, autotune, and
// running what the planner (planner.cpp) chose. Kernels (in *.cu) only see the plain
// structs of common/kernels.h.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Logging.h>
#include <torch/library.h>

#include "common/algo.h"
#include "common/tuning.h"
#include "cuda/common/kernels.h"
#include "cuda/cublas_gemm.h"
#include "cuda/planner.h"
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
// The GEMM's B is [n][k] for the tensor-core implicit GEMM (K-major) and [k][n]
// for the CUDA-core implicit GEMM; forward has (k, n) = (Cig, Cog), grad_input (Cog, Cig).
at::Tensor pack_weight(const at::Tensor& w, const Problem& p, bool dgrad, bool k_major) {
  auto v = w.view({p.groups, p.cin_g(), p.cout_g(), p.kh, p.kw});  // [G][ci][co][ky][kx]
  const bool ci_last = dgrad != k_major;  // forward K = ci; dgrad K = co
  // The forward layout [G][ci][co][t] -> [G][t][co][ci] by one tiled kernel: torch's
  // generic permute copy took 11 us on the 2.4 MB bf16 weight of a batch-1 512 -> 256, k=3
  // layer (forward 0.135 -> 0.132 ms with the kernel). The other layout, [G][t][ci*co], a
  // plain transpose, stays on torch's copy: the kernel (B = 1) measured slower there (same
  // layer, bf16 grad_input 0.101 -> 0.111 ms).
  if (ci_last && w.is_contiguous() &&
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
// Off unless cudnn.benchmark is set, and off while CONVT2D_ALGO forces choices.
bool autotune_on() {
  return at::globalContext().benchmarkCuDNN() && !algo_override().active;
}

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
// planner's choice) and its name for the record (an algorithm's name, common/algo.h).
struct Candidate {
  int id;
  const char* name;
};

// The candidates for algorithms `algos`, after the planner's own choice.
std::vector<Candidate> candidates(const std::vector<Algo>& algos) {
  std::vector<Candidate> c{{tuning::kHeuristic, "heuristic"}};
  for (Algo a : algos) c.push_back({int(a), algo_name(a)});
  return c;
}

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

// The planner's query for a call: problem, number format, device, layouts.
cuda::Query make_query(const Problem& p, DType dt, MathMode math) {
  cuda::Query q;
  q.p = p;
  q.dt = dt;
  q.math = math;
  q.device = c10::cuda::current_device();
  q.sm80 = is_sm80_plus();
  q.wgmma = cuda::wgmma_device();
  // cuBLAS (through torch's mm): not under torch's deterministic mode, whose cuBLAS
  // workspace check would raise, nor for fp32 at IEEE precision where torch lets cuBLAS use
  // TF32 (torch.backends.cuda.matmul.allow_tf32).
  auto& ctx = at::globalContext();
  q.cublas = !ctx.deterministicAlgorithms() &&
             !(dt == DType::kFloat && math == MathMode::kIEEE && ctx.allowTF32CuBLAS());
  q.cublas_fp32_out = cuda::cublas_fp32_out();
  return q;
}

// One implicit GEMM (forward per phase, or grad_input) as algorithm `algo` (one of
// Algo::kImplicitGemm*): the tensor-core kernels when the operands allow it (source read
// channels-last), else (and for kImplicitGemmSimt) the CUDA-core kernel.
// packed: the weight already packed for the tensor-core kernels (pack_weight, K-major), for a
// caller that runs the same GEMM on several chunks of src (the GEMM + col2im forward);
// undefined: packed here.
void run_igemm(cuda::IgemmMode mode, const at::Tensor& src, const at::Tensor& dst,
               const at::Tensor& weight, const at::Tensor& bias, const Problem& p, DType dt,
               MathMode math, cudaStream_t st, Algo algo, const Variant& var,
               const at::Tensor& packed = at::Tensor()) {
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
  prm.var = var;
  cuda::fill_phase_geo(prm);

  const bool want_v2 = sm80 && dt != DType::kDouble && algo != Algo::kImplicitGemmSimt;
  // The tensor-core implicit GEMM needs whole 16-byte chunks of channels: check that before
  // paying for the channels-last copy (tc_igemm_supported checks the rest).
  const int64_t chunk = chunk_elems(dt);
  if (want_v2 && prm.Kc % chunk == 0) {
    // Forward, fp32 with TF32 off, NCHW x: the channels-last copy is left to the kernels
    // (prm.src_nchw): the 3xFP16 halo kernel reads NCHW x itself where it can, every other
    // path fills the copy first.
    const bool defer = fwd && dt == DType::kFloat && math == MathMode::kIEEE &&
                       src.is_contiguous() && !src.is_contiguous(at::MemoryFormat::ChannelsLast) &&
                       src.size(0) <= 65535 && src.size(1) <= 65535 * 64;
    const at::Tensor s2 =
        defer ? at::empty(src.sizes(), src.options().memory_format(at::MemoryFormat::ChannelsLast))
              : to_channels_last(src, st);
    const at::Tensor w2 = packed.defined() ? packed : pack_weight(weight, p, !fwd, /*k_major=*/true);
    prm.src = ref(s2);
    if (defer) prm.src_nchw = ref(src);
    prm.wpk = w2.data_ptr();
    if (cuda::tc_igemm_supported(prm, dt)) {
      // Split-K (planner: a grid under 35% of the GPU, a predicted 1.5x; the override's
      // k_splits) into fp32 partials shaped like dst, added with the bias by
      // launch_igemm_split_reduce. Not where the warp-specialised or halo kernel is forced.
      // Then the kernel (planner: cuda::igemm_kernel, among those igemm_caps can run).
      const cuda::Query q = make_query(p, dt, math);
      const int forced_ws = cuda::igemm_kernel_select(algo);
      const bool cl = dst.is_contiguous(at::MemoryFormat::ChannelsLast);
      int splits = var.k_splits > 0                     ? var.k_splits
                   : forced_ws == 1 || forced_ws == 2 ? 1
                                                        : cuda::igemm_k_splits(q, !fwd);
      if (!(dst.is_contiguous() || cl)) splits = 1;
      prm.ws = cuda::igemm_kernel(q, !fwd, cuda::igemm_caps(prm, dt, math), forced_ws, splits);
      at::Tensor split_ws;
      if (splits > 1) {
        split_ws = at::empty({splits, dst.numel()}, dst.options().dtype(at::kFloat));
        prm.k_splits = splits;
        prm.split_ws = split_ws.data_ptr<float>();
        prm.split_stride = dst.numel();
      }
      // 3xTF32 on the Hopper halo kernel: the weight's big and small TF32 halves.
      at::Tensor halves, wflag, halves16, f16_state;
      if (dt == DType::kFloat && math == MathMode::kIEEE && prm.ws == 2) {
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
      if (splits > 1)
        check_launch(cuda::launch_igemm_split_reduce(
                         prm.split_ws, splits, dst.data_ptr(), prm.bias, dst.numel(),
                         dst.size(1), cl ? 1 : dst.size(2) * dst.size(3), dt, st),
                     "split-K reduction");
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

// t [N, G*c, H, W] (any layout) as a channels-last [N, G*cp, H, W] tensor whose channels
// c..cp-1 of each group are zero: the padded algorithms' operands (16-byte channel chunks).
// Nothing to pad: t's channels-last copy (t itself where it is one). Channels-last t (more than
// one channel and one pixel, where that layout differs from NCHW): torch's zero fill + row copy.
// Otherwise one launch of the tap gather on the identity 1x1 problem
// (each channel a column, padded to cp per group), which writes the zeros with the data and
// reads along pixels (its lanes would read a channels-last t a pixel apart); torch's fill +
// permuted copy (the generic kernel's ~0.7 TB/s) where the gather declines.
at::Tensor pad_group_channels(const at::Tensor& t, int64_t G, int64_t c, int64_t cp) {
  cudaStream_t st = at::cuda::getCurrentCUDAStream();
  if (c == cp) return to_channels_last(t, st);
  const int64_t N = t.size(0), H = t.size(2), W = t.size(3);
  auto out = at::empty({N, H, W, G * cp}, t.options());
  const bool cl = t.is_contiguous(at::MemoryFormat::ChannelsLast) && G * c > 1 && H * W > 1;
  cudaError_t e = cudaErrorInvalidValue;
  if (!cl && c > 0) {
    Problem g;  // the identity 1x1 problem of t's channels, grouped as the padding is
    g.N = N;
    g.Cin = g.Cout = G * c;
    g.groups = G;
    g.H = g.Ho = H;
    g.W = g.Wo = W;
    const int64_t s[4] = {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
    e = cuda::launch_tap_gather(t.data_ptr(), s, out.data_ptr(), g, cp, int(t.element_size()),
                                st);
  }
  if (e != cudaErrorInvalidValue) {
    check_launch(e, "channel padding");
  } else {
    out.zero_();
    if (c > 0)
      out.view({N, H, W, G, cp}).narrow(4, 0, c).copy_(
          t.reshape({N, G, c, H, W}).permute({0, 3, 4, 1, 2}));
  }
  return out.permute({0, 3, 1, 2});
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
  const AlgoOverride& ov = algo_override();
  cuda::Query q = make_query(p, dt, math);
  q.x_nchw = input.is_contiguous();
  q.x_cl = input.is_contiguous(at::MemoryFormat::ChannelsLast);
  q.x_unit_w = input.stride(3) == 1;
  q.out_nchw = out.is_contiguous();
  q.out_cl = out.is_contiguous(at::MemoryFormat::ChannelsLast);
  q.bias = b.defined();

  // The direct and narrow kernels' parameters for the contiguous weight w (kept alive by
  // the caller).
  auto direct_params = [&](const at::Tensor& w) {
    cuda::DirectParams prm;
    prm.p = p;
    prm.x = ref(input);
    prm.out = ref(out);
    prm.w = w.data_ptr();
    prm.bias = b.defined() ? b.data_ptr() : nullptr;
    prm.var = ov.var;
    return prm;
  };
  // The direct forward; tensor_cores: its tensor-core kernel where it takes the shape
  // (direct_tc_channels), else the CUDA-core ones.
  auto run_direct = [&](bool tensor_cores) {
    auto w = weight.contiguous();
    cuda::DirectParams prm = direct_params(w);
    at::Tensor wpk;
    const int kc = tensor_cores ? cuda::direct_tc_channels(p, dt, math, ov.var.direct_nt) : 0;
    if (kc > 0) {
      // [G][Cig][Cog][kk] -> [G][Cog/kc][kk][Cig/ke][kc][ke], both channel counts zero
      // padded; ke = channels per 16 bytes (8 for 16-bit, 4 for fp32 with TF32 allowed).
      // One kernel: torch's zeros + copy + permute took three launches and three
      // allocations, more host time than a small layer's kernel (docs/design.md, "Per-call
      // host cost").
      const int64_t G = p.groups, cig = p.cin_g(), cog = p.cout_g(), kk = p.kh * p.kw;
      const int64_t ke = chunk_elems(dt);
      const int64_t nch = (cig + ke - 1) / ke, ncob = (cog + kc - 1) / kc;
      wpk = at::empty({G * ncob * kk * nch * kc * ke}, w.options());
      check_launch(cuda::launch_pack_direct_weight(w.data_ptr(), wpk.data_ptr(), G, cig, cog, kk,
                                                   kc, ke, int(w.element_size()), st),
                   "direct weight packing");
      prm.wpk = wpk.data_ptr();
      prm.wpk_channels = kc;
    }
    check_launch(cuda::launch_direct_forward(prm, dt, st), "direct forward");
  };
  // false: the launcher declined (nothing launched).
  auto run_narrow = [&]() -> bool {
    auto w = weight.contiguous();
    const cuda::DirectParams prm = direct_params(w);
    bool launched = false;
    check_launch(cuda::launch_narrow_forward(prm, dt, st, launched), "narrow forward");
    return launched;
  };
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
  // One GEMM y = x * w over all taps, then col2im (each output element's taps summed, with
  // the bias), chunk by chunk of the planner's col2im_split (y's buffer reused).
  auto run_gemm_col2im = [&]() {
    const cuda::Col2imSplit split = cuda::col2im_split(q);
    const int64_t kk = p.kh * p.kw, hw = p.H * p.W, ck = p.Cout * kk, nb = split.images;
    const at::Tensor ybuf = at::empty(
        {nb * hw * ck}, input.options().dtype(split.fp32 ? at::kFloat : input.scalar_type()));
    cuda::Col2imArgs a;
    a.p = p;
    if (split.x_rows) {  // y [pixel][co][tap]
      a.ysn = hw * ck; a.ysc = kk; a.yst = 1; a.ysp = ck;
    } else {  // y [image][co][tap][pixel] (cuBLAS, one GEMM per NCHW image)
      a.ysn = ck * hw; a.ysc = kk * hw; a.yst = hw; a.ysp = 1;
    }
    a.out = ref(out);
    a.chan_last = !out.is_contiguous();
    // The implicit GEMM's 1x1 problem: Cout*kh*kw outputs, the weight viewed as Cin x
    // Cout*kh*kw x 1 x 1.
    Problem p1 = pointwise_problem(p, ck);
    const at::Tensor w1 = split.cublas ? weight : weight.reshape({p.Cin, ck, 1, 1});
    // Its weight packed once for all chunks, not per chunk: the packing is a transpose of the
    // whole weight (Cin x Cout*kh*kw), which a large layer's many chunks would repeat.
    const at::Tensor w1pk = split.cublas ? at::Tensor()
                                         : pack_weight(w1, p1, /*dgrad=*/false, /*k_major=*/true);
    for (int64_t n0 = 0; n0 < p.N; n0 += nb) {
      const int64_t n = std::min(nb, p.N - n0);
      const at::Tensor xn = input.narrow(0, n0, n);
      // cuBLAS over pixel rows of NCHW images too small for a GEMM each (col2im_split).
      const at::Tensor xc = split.x_copy ? xn.contiguous(at::MemoryFormat::ChannelsLast) : xn;
      const at::Tensor y = ybuf.narrow(0, 0, n * hw * ck);
      if (split.cublas) {
        cuda::cublas_taps_gemm(xc, weight, y, p, split.fp32);
      } else {
        p1.N = n;
        const at::Tensor yd = y.view({n, p.H, p.W, ck}).permute({0, 3, 1, 2});
        run_igemm(cuda::IgemmMode::kForward, xc, yd, w1, at::Tensor(), p1, dt, math, st,
                  Algo::kImplicitGemm, ov.var, w1pk);
      }
      a.p.N = n;
      a.out.ptr = out.narrow(0, n0, n).data_ptr();
      check_launch(cuda::launch_col2im_taps(a, y.data_ptr(), b.defined() ? b.data_ptr() : nullptr,
                                            dt, split.fp32, st),
                   "GEMM + col2im forward");
    }
  };
  // Runs algorithm a; false where its launcher declined.
  auto run_algo = [&](Algo a) -> bool {
    switch (a) {
      case Algo::kNarrowOutput: return run_narrow();
      case Algo::kPatchGemm: return run_patch();
      case Algo::kDirect:
      case Algo::kDirectTensorOp: run_direct(true); return true;
      case Algo::kDirectSimt: run_direct(false); return true;
      case Algo::kFwdCublasGemm: cuda::cublas_forward(input, weight, b, out, p, dt); return true;
      case Algo::kFwdGemmCol2im: run_gemm_col2im(); return true;
      case Algo::kFwdDepthwise: {
        // Channels-last output: a lane per channel. The weight [Cout][kh*kw] contiguous.
        const bool cl = out.stride(1) == 1 && p.Cout > 1;
        const at::Tensor w = weight.contiguous();
        const cudaError_t e = cuda::launch_depthwise_forward(direct_params(w), cl, dt, st);
        if (e == cudaErrorInvalidValue) return false;  // not taken, nothing launched
        check_launch(e, "depthwise forward");
        return true;
      }
      case Algo::kFwdPadded: {
        // x and the weight with each group's input channels zero-padded to whole 16-byte
        // chunks: the tensor-core implicit GEMM then takes the problem.
        const int64_t G = p.groups, cig = p.cin_g(), cip = cuda::padded_channels(cig, dt);
        Problem pp = p;
        pp.Cin = G * cip;
        const at::Tensor xp = pad_group_channels(input, G, cig, cip);
        const at::Tensor wp =
            at::constant_pad_nd(weight.reshape({G, cig, p.cout_g(), p.kh, p.kw}),
                                {0, 0, 0, 0, 0, 0, 0, cip - cig})
                .view({G * cip, p.cout_g(), p.kh, p.kw});
        run_igemm(cuda::IgemmMode::kForward, xp, out, wp, b, pp, dt, math, st,
                  Algo::kImplicitGemm, ov.var);
        return true;
      }
      default:
        run_igemm(cuda::IgemmMode::kForward, input, out, weight, b, p, dt, math, st, a, ov.var);
        return true;
    }
  };
  // The plan's algorithms in order until one launches (its last never declines).
  auto run_plan = [&](const std::vector<Algo>& plan) {
    for (Algo a : plan) {
      if (run_algo(a)) {
        record_algorithm(Pass::kForward, a);
        return;
      }
    }
  };

  const std::vector<Algo> plan = cuda::plan_forward(q, ov.get(Pass::kForward));
  if (autotune_on()) {
    auto run = [&](int c) {
      if (c == tuning::kHeuristic) run_plan(plan);
      else run_plan({Algo(c), Algo::kImplicitGemm});
    };
    run(autotune(tune_key("fwd", p, dt, math, input, weight, b.defined()),
                 candidates(cuda::forward_candidates(q)), run, st));
    return out;
  }
  run_plan(plan);
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
  // (the placeholders of gradients not asked for are made at the end: no allocations before)
  at::Tensor gi, gw, gb;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const AlgoOverride& ov = algo_override();

  const auto gi_format = suggest_memory_format(input, weight);
  bool gathering = false;     // planning the tap gather's 1x1 problem
  bool gather_cublas = false;  // ... for cuBLAS (kTapGatherCublas)
  // The planner's query for problem pp with grad_output go (the strided problem, or the 1x1
  // problem of the tap gather).
  auto query = [&](const Problem& pp, const at::Tensor& go, const at::Tensor& x, bool want_gi,
                   bool want_gw) {
    cuda::Query q = make_query(pp, dt, math);
    q.x_nchw = x.is_contiguous();
    q.x_cl = x.is_contiguous(at::MemoryFormat::ChannelsLast);
    q.x_unit_w = x.stride(3) == 1;
    // grad_input's layout (one channel or one pixel: both)
    const bool both = x.size(1) == 1 || x.size(2) * x.size(3) == 1;
    q.out_nchw = both || gi_format == at::MemoryFormat::Contiguous;
    q.out_cl = both || gi_format == at::MemoryFormat::ChannelsLast;
    q.go_nchw = go.is_contiguous();
    q.go_cl = go.is_contiguous(at::MemoryFormat::ChannelsLast);
    q.go_unit_w = go.stride(3) == 1;
    q.tap_gathered = gathering;
    q.tap_cublas = gathering && gather_cublas;
    q.want_gi = want_gi;
    q.want_gw = want_gw;
    return q;
  };
  // gi and gw (its layout set at the end) for the problem p (the lambda's own, which
  // hides the caller's) from grad_output go (NCHW or channels-last) and the weight wv
  // ([Cin][Cog][kh][kw] of that problem).
  std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                   const Problem&, const at::Tensor&, bool, bool)>
      grads;
  grads = [&](const at::Tensor& go, const at::Tensor& wv, const Problem& p, const at::Tensor& x,
              bool want_gi, bool want_gw) -> std::pair<at::Tensor, at::Tensor> {
    at::Tensor gi, gw;  // undefined where not asked for
    const cuda::Query q = query(p, go, x, want_gi, want_gw);
    // Channels padded to whole 16-byte chunks (implicit_gemm_padded, tensorop_padded): the
    // gradients of the padded problem on tensor cores, then the real channels.
    const int64_t G = p.groups, cig = p.cin_g(), cog = p.cout_g();
    // grad_output padded once for both gradients where both run padded
    at::Tensor go_p;
    auto padded_go = [&](int64_t cop) {
      if (!go_p.defined()) go_p = pad_group_channels(go, G, cog, cop);
      return go_p;
    };
    if (want_gi && cuda::plan_grad_input(q, ov.get(Pass::kGradInput)) == Algo::kDgradPadded) {
      const int64_t cop = cuda::padded_channels(cog, dt);
      Problem pp = p;
      pp.Cout = G * cop;
      const at::Tensor w_p = at::constant_pad_nd(wv, {0, 0, 0, 0, 0, cop - cog});
      gi = grads(padded_go(cop), w_p, pp, x, true, false).first;
      record_algorithm(Pass::kGradInput, Algo::kDgradPadded);
      want_gi = false;
    }
    if (want_gw && p.N > 0 &&
        cuda::plan_grad_weight(q, ov.get(Pass::kGradWeight)) == Algo::kWgradPadded) {
      const int64_t cip = cuda::padded_channels(cig, dt), cop = cuda::padded_channels(cog, dt);
      Problem pp = p;
      pp.Cin = G * cip;
      pp.Cout = G * cop;
      const at::Tensor w_shape = at::empty({pp.Cin, cop, p.kh, p.kw}, wv.options());
      const at::Tensor gwp = grads(padded_go(cop), w_shape, pp,
                                   pad_group_channels(x, G, cig, cip), false, true).second;
      gw = gwp.view({G, cip, cop, p.kh, p.kw}).narrow(1, 0, cig).narrow(2, 0, cog)
               .reshape({p.Cin, cog, p.kh, p.kw});
      record_algorithm(Pass::kGradWeight, Algo::kWgradPadded);
      want_gw = false;
    }
    go_p.reset();  // (not held through the unpadded gradient below)
    if (!want_gi && !want_gw) return {gi, gw};
    const Algo wgrad = want_gw && p.N > 0
                           ? cuda::plan_grad_weight(q, ov.get(Pass::kGradWeight))
                           : Algo::kNone;
    // grad_weight on tensor cores reads go channels-last, and the channels-last go is shared
    // with grad_input (which reads it so too); the NCHW grad_weight kernel reads go as it is.
    const bool km = wgrad == Algo::kWgradWgmmaNchw;
    const bool tc_wgrad = km || wgrad == Algo::kWgradTensorOp;
    const at::Tensor gout = tc_wgrad && !(km && !want_gi) ? to_channels_last(go, st) : go;

    if (want_gi) {
      gi = at::empty(x.sizes(), x.options().memory_format(gi_format));
      if (gi.numel() > 0) {
        const Algo dgrad = cuda::plan_grad_input(q, ov.get(Pass::kGradInput));
        auto run = [&](int c) {
          const Algo a = c == tuning::kHeuristic ? dgrad : Algo(c);
          if (a == Algo::kDgradCublasGemm) {
            cuda::cublas_grad_input(go, wv, gi, p);
            return;
          }
          if (a == Algo::kDgradDepthwise || a == Algo::kDgradDepthwiseTiled) {
            // Channels-last grad_input: walked channels fastest (a thread per element: the
            // weight transposed to [kh*kw][Cout]) or a lane per channel (tiled: [Cout][kh*kw]).
            const bool cl = gi.stride(1) == 1 && p.Cin > 1;
            const bool tiled = a == Algo::kDgradDepthwiseTiled;
            const at::Tensor wd = cl && !tiled
                                      ? wv.reshape({p.Cout, p.kh * p.kw}).t().contiguous()
                                      : wv.contiguous();
            cuda::DirectGradParams dp;
            dp.p = p;
            dp.gout = ref(go);
            dp.gin = ref(gi);
            dp.w = wd.data_ptr();
            check_launch(tiled ? cuda::launch_dgrad_depthwise_tiled(dp, cl, dt, st)
                               : cuda::launch_dgrad_depthwise(dp, cl, dt, st),
                         "grad_input (depthwise)");
            return;
          }
          if (a == Algo::kDgradDirect) {
            // grad_output as it is (any layout); the weight as it is or transposed to
            // [G][Cog][kh][kw][Cig] (dgrad_direct.cu).
            const bool cl = gi.stride(1) == 1 && p.Cin > 1;
            const at::Tensor wc =
                cuda::dgrad_direct_transposed_weight(p, cl)
                    ? wv.reshape({G, cig, cog * p.kh * p.kw}).transpose(1, 2).contiguous()
                    : wv.contiguous();
            cuda::DirectGradParams dp;
            dp.p = p;
            dp.gout = ref(go);
            dp.gin = ref(gi);
            dp.w = wc.data_ptr();
            check_launch(cuda::launch_dgrad_direct(dp, dt, st), "grad_input (direct)");
            return;
          }
          run_igemm(cuda::IgemmMode::kDgrad, gout, gi, wv, at::Tensor(), p, dt, math, st, a,
                    ov.var);
        };
        int c = tuning::kHeuristic;
        if (autotune_on())
          c = autotune(tune_key("dgrad", p, dt, math, go, weight, false),
                       candidates(cuda::grad_input_candidates(q)), run, st);
        run(c);
        record_algorithm(Pass::kGradInput, c == tuning::kHeuristic ? dgrad : Algo(c));
      }
    }
    if (want_gw) {
      if (p.N == 0) {
        gw = at::zeros(wv.sizes(), wv.options());
      } else {
        gw = at::empty(wv.sizes(), wv.options().memory_format(at::MemoryFormat::Contiguous));
        cuda::WgradParams prm;
        prm.p = p;
        prm.gw = gw.data_ptr();
        prm.var = ov.var;
        Algo ran = Algo::kNone;
        if (wgrad == Algo::kWgradCublasGemm) {
          cuda::cublas_grad_weight(x, go, gw, p);
          ran = wgrad;
        }
        if (wgrad == Algo::kWgradDepthwise || wgrad == Algo::kWgradDepthwiseTiled ||
            wgrad == Algo::kWgradDirect) {
          // The direct kernels: pixels split over the GPU into an fp32 (fp64) workspace.
          // Depthwise: channel lanes fastest where grad_output is channels-last, else pixels.
          const bool dw = wgrad == Algo::kWgradDepthwise;
          const bool tiled = wgrad == Algo::kWgradDepthwiseTiled;
          const bool cl = go.stride(1) == 1 && p.Cout > 1;
          const cuda::DirectWgradPlan plan =
              dw      ? cuda::wgrad_depthwise_plan(p, cl, dt, sms)
              : tiled ? cuda::wgrad_depthwise_tiled_plan(p, cl, dt, sms)
                      : cuda::wgrad_direct_plan(p, dt, sms);
          cuda::DirectGradParams dp;
          dp.p = p;
          dp.x = ref(x);
          dp.gout = ref(go);
          dp.gw = gw.data_ptr();
          dp.splits = plan.splits;
          dp.pix_per_split = plan.pix_per_split;
          auto ws = at::empty({plan.ws_elems},
                              x.options().dtype(dt == DType::kDouble ? at::kDouble : at::kFloat));
          dp.workspace = ws.data_ptr();
          if (dw)
            check_launch(cuda::launch_wgrad_depthwise(dp, cl, dt, st), "grad_weight (depthwise)");
          else if (tiled)
            check_launch(cuda::launch_wgrad_depthwise_tiled(dp, cl, dt, st),
                         "grad_weight (depthwise, tiled)");
          else
            check_launch(cuda::launch_wgrad_direct(dp, dt, st), "grad_weight (direct)");
          ran = wgrad;
        }
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
          const at::Tensor xk = rows16(x);
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
            auto ws = at::empty({plan.ws_elems}, x.options().dtype(at::kFloat));
            prm.workspace = ws.data_ptr();
            check_launch(cuda::launch_tc_wgrad_km(prm, math, st), "grad_weight (wgmma, NCHW)");
            ran = Algo::kWgradWgmmaNchw;
          }
        }
        if (tc_wgrad && ran == Algo::kNone) {
          prm.x_nchw = cuda::grad_weight_reads_nchw_x(q, ov.var);
          // (gout is NCHW here only when km was expected to take grad_weight and did not.)
          const at::Tensor gcl = gout.is_same(go) && !go.is_contiguous(at::MemoryFormat::ChannelsLast)
                                     ? to_channels_last(go, st)
                                     : gout;
          prm.x = ref(x);
          prm.gout = ref(gcl);
          if (prm.x_nchw && !cuda::tc_wgrad_supported(prm, dt)) prm.x_nchw = false;
          const at::Tensor x2 = prm.x_nchw ? x : to_channels_last(x, st);
          prm.x = ref(x2);
          if (cuda::tc_wgrad_supported(prm, dt)) {
            auto run = [&](int tile) {  // (tuning::kHeuristic: the planner's tile)
              if (tile < 0) tile = cuda::wgrad_tile(q, prm.x_nchw, ov.var.wgrad_tile);
              const cuda::TcWgradPlan plan = cuda::tc_wgrad_plan(p, dt, math, sms, tile,
                                                                 prm.x_nchw);
              prm.tile = tile;
              prm.splits = plan.splits;
              prm.k_per_split = plan.k_per_split;
              auto ws = at::empty({plan.ws_elems}, x.options().dtype(at::kFloat));
              prm.workspace = ws.data_ptr();
              check_launch(cuda::launch_tc_wgrad(prm, dt, math, st), "grad_weight (tensor cores)");
            };
            int tile = -1;
            if (autotune_on() && math != MathMode::kIEEE) {
              // The heuristics' choice (the wgmma tiles where they apply) or one of the
              // mma.sync tiles, named as the override names them (kWgradTileNames).
              static_assert(cuda::kTcWgradTiles <= kWgradTileCount, "tile names");
              static const std::vector<std::string> names = [] {
                std::vector<std::string> n;
                for (int t = 0; t < cuda::kTcWgradTiles; ++t)
                  n.push_back(std::string("tensorop:") + kWgradTileNames[t]);
                return n;
              }();
              std::vector<Candidate> tiles{{tuning::kHeuristic, "heuristic"}};
              for (int t = 0; t < cuda::kTcWgradTiles; ++t) tiles.push_back({t, names[t].c_str()});
              tile = autotune(tune_key("wgrad", p, dt, math, x, weight, false), tiles, run, st);
            }
            run(tile);
            ran = Algo::kWgradTensorOp;
          }
        }
        if (ran == Algo::kNone) {
          run_wgrad_v1(prm, x, go, dt, math, sms, st);
          ran = Algo::kWgradSimt;
        }
        record_algorithm(Pass::kGradWeight, ran);
      }
    }
    return {gi, gw};
  };

  // The backward transform (planner): grad_output gathered per tap (common/layout_kernels.cu,
  // channels-last; with overlapping taps an im2col) makes both gradients 1x1 problems over
  // groups*Kgp channels (Kgp: Cout/groups*kh*kw padded with zero columns to whole 16-byte
  // chunks), with the weight viewed as [Cin][Kgp][1][1] (zero-padded likewise).
  const int64_t kk = p.kh * p.kw;
  bool gathered = false;
  const Algo transform = cuda::plan_backward_transform(
      query(p, grad_output, input, output_mask[0], output_mask[1]), ov.get(Pass::kBackward));
  if (transform == Algo::kTapGather || transform == Algo::kTapGatherCublas) {
    const int64_t kg = p.cout_g() * kk, kgp = cuda::padded_channels(kg, dt);
    const Problem p1 = pointwise_problem(p, p.groups * kgp);
    auto g2 = at::empty({p.N, p1.Cout, p.H, p.W},
                        grad_output.options().memory_format(at::MemoryFormat::ChannelsLast));
    const int64_t gs[4] = {grad_output.stride(0), grad_output.stride(1), grad_output.stride(2),
                           grad_output.stride(3)};
    const cudaError_t e = cuda::launch_tap_gather(grad_output.data_ptr(), gs, g2.data_ptr(), p,
                                                  kgp, int(grad_output.element_size()), st);
    if (e != cudaErrorInvalidValue) {
      check_launch(e, "grad_output tap gather");
      gathering = true;
      gather_cublas = transform == Algo::kTapGatherCublas;
      at::Tensor w1 = weight.contiguous().view({p.Cin, kg});
      if (kgp != kg) w1 = at::constant_pad_nd(w1, {0, kgp - kg});
      std::tie(gi, gw) = grads(g2, w1.view({p.Cin, kgp, 1, 1}), p1, input, output_mask[0],
                               output_mask[1]);
      if (gw.defined()) {
        gw = gw.view({p.Cin, kgp});
        if (kgp != kg) gw = gw.narrow(1, 0, kg).contiguous();
        gw = gw.view(weight.sizes());
      }
      gathered = true;
    }
  }
  if (!gathered)
    std::tie(gi, gw) = grads(grad_output, weight, p, input, output_mask[0], output_mask[1]);
  record_algorithm(Pass::kBackward, gathered ? transform : Algo::kStrided);
  if (output_mask[1]) gw = gw.contiguous(weight.suggest_memory_format());
  if (output_mask[2]) {
    gb = grad_output.sum({0, 2, 3});  // one bandwidth-bound pass, fp32 accumulation
  }
  if (!output_mask[0]) gi = not_requested(input);
  if (!output_mask[1]) gw = not_requested(input);
  if (!output_mask[2]) gb = not_requested(input);
  return {gi, gw, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(convt2d, CUDA, m) {
  m.impl("forward", &forward_cuda);
  m.impl("backward", &backward_cuda);
}

}  // namespace convt2d
