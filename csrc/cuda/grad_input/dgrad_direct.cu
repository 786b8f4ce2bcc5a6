// grad_input where the implicit GEMM's tiles would be mostly padding: few output channels per
// group (an RGB or keypoint layer's grad_input, K = Cout/groups x taps small) or few channels
// per group. Each thread takes one grad_input pixel and CC consecutive input channels of one
// group on CUDA cores, so each grad_output value it gathers serves CC outputs:
//   gi[n, ci, iy, ix] = sum over co in ci's group, (ky, kx) of
//       w[ci, co, ky, kx] * go[n, co, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw]
// NCHW grad_input: lanes walk pixels (coalesced stores per channel; warp-uniform weight loads).
// Channels-last: lanes walk channel chunks (CC-element vector stores). The weight comes
// transposed per group, wt[g][co][ky][kx][ci - g*cig], for channels-last and for 4+ channels a
// thread (dgrad_direct_transposed_weight), so the CC weights of a tap are one vector load
// (contiguous across lanes in channels-last); otherwise as it is. The floor is the bytes moved:
// grad_input written once, grad_output read about once per tap through L1 (docs/design.md,
// the planner's table). Any dtype and strides.
#include "cuda/common/fast_div.cuh"
#include "cuda/common/kernels.h"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/mma_core.cuh"

#include <algorithm>

namespace convt2d {
namespace cuda {
namespace {

// CC elements loaded / stored as one aligned vector.
template <typename T, int CC>
struct alignas(sizeof(T) * CC > 16 ? 16 : sizeof(T) * CC) Pack {
  T v[CC];
};

struct DgradDirectGeo {
  FastDiv W, H, chunks;   // chunks = Cin / CC
  FastDiv chunks_per_group;
  int64_t items = 0;      // N * H * W * chunks
};

template <typename T, bool kChanLast, bool kWt, int CC>
__global__ void __launch_bounds__(256, 3) dgrad_direct_kernel(const DirectGradParams prm,
                                                           const DgradDirectGeo geo) {
  using Acc = typename AccOf<T>::type;
  const Problem& p = prm.p;
  const int cig = int(p.cin_g()), cog = int(p.cout_g()), kk = int(p.kh * p.kw);
  const T* __restrict__ go = static_cast<const T*>(prm.gout.ptr);
  const T* __restrict__ wt = static_cast<const T*>(prm.w);
  T* __restrict__ gi = static_cast<T*>(prm.gin.ptr);
  const uint32_t step = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < uint32_t(geo.items); i += step) {
    uint32_t r = i, n, chunk, iy, ix;
    if constexpr (kChanLast) {  // (n, iy, ix, chunk): channel chunks fastest
      geo.chunks.divmod(r, r, chunk);
      geo.W.divmod(r, r, ix);
      geo.H.divmod(r, n, iy);
    } else {  // (n, chunk, iy, ix): columns fastest
      geo.W.divmod(r, r, ix);
      geo.H.divmod(r, r, iy);
      geo.chunks.divmod(r, n, chunk);
    }
    uint32_t g, j;
    geo.chunks_per_group.divmod(chunk, g, j);
    const int ci0 = int(g) * cig + int(j) * CC;
    const T* gp = go + int64_t(n) * prm.gout.sn + int64_t(g) * cog * prm.gout.sc;
    // kWt: wt[g][co][tap][j*CC + c]; else w[ci0 + c][co][tap].
    const T* wp = wt + int64_t(g) * cog * kk * cig + int64_t(j) * CC * (kWt ? 1 : cog * kk);
    Acc acc[CC];
#pragma unroll
    for (int c = 0; c < CC; ++c) acc[c] = Acc(0);
    // Coordinates in 32-bit ints (dgrad_direct_supported); pointers stepped, not recomputed.
    const int64_t gsh = prm.gout.sh, gsw = prm.gout.sw, gsc = prm.gout.sc;
    const int wci = kWt ? 1 : cog * kk;        // between input channels' weights
    const int wco = kWt ? kk * cig : kk;       // between output channels' weights
    const int wtap = kWt ? cig : 1;            // between taps' weights
    int oy = int(iy) * int(p.sh) - int(p.ph);
    for (int ky = 0; ky < int(p.kh); ++ky, oy += int(p.dh)) {
      if (unsigned(oy) >= unsigned(p.Ho)) continue;
      const T* qrow = gp + oy * gsh;
      int ox = int(ix) * int(p.sw) - int(p.pw);
      for (int kx = 0; kx < int(p.kw); ++kx, ox += int(p.dw)) {
        if (unsigned(ox) >= unsigned(p.Wo)) continue;
        const T* q = qrow + ox * gsw;
        const T* wq = wp + (ky * int(p.kw) + kx) * wtap;
#pragma unroll 2
        for (int co = 0; co < cog; ++co, q += gsc, wq += wco) {
          const Acc v = Cvt<T>::to_acc(*q);
          if constexpr (kWt) {
            const Pack<T, CC> wv = *reinterpret_cast<const Pack<T, CC>*>(wq);
#pragma unroll
            for (int c = 0; c < CC; ++c) acc[c] += v * Cvt<T>::to_acc(wv.v[c]);
          } else {
#pragma unroll
            for (int c = 0; c < CC; ++c) acc[c] += v * Cvt<T>::to_acc(wq[c * wci]);
          }
        }
      }
    }
    T* out = gi + int64_t(n) * prm.gin.sn + int64_t(iy) * prm.gin.sh + int64_t(ix) * prm.gin.sw;
    if constexpr (kChanLast) {  // contiguous channels (launch: sc == 1, aligned)
      Pack<T, CC> o;
#pragma unroll
      for (int c = 0; c < CC; ++c) o.v[c] = Cvt<T>::from_acc(acc[c]);
      *reinterpret_cast<Pack<T, CC>*>(out + ci0) = o;
    } else {
#pragma unroll
      for (int c = 0; c < CC; ++c) out[int64_t(ci0 + c) * prm.gin.sc] = Cvt<T>::from_acc(acc[c]);
    }
  }
}

template <typename T, bool kWt, int CC>
cudaError_t run_cc(const DirectGradParams& prm, bool chan_last, const DgradDirectGeo& geo,
                   cudaStream_t st) {
  // Blocks of 256 threads, smaller where that leaves SMs idle (a small layer's few items).
  const int64_t sms = sm_count();
  const int bs = geo.items >= sms * 512 ? 256 : geo.items >= sms * 128 ? 128 : 64;
  const int64_t blocks = std::min<int64_t>((geo.items + bs - 1) / bs, sms * 16 * (256 / bs));
  if (chan_last)
    dgrad_direct_kernel<T, true, kWt, CC><<<unsigned(blocks), bs, 0, st>>>(prm, geo);
  else
    dgrad_direct_kernel<T, false, kWt, CC><<<unsigned(blocks), bs, 0, st>>>(prm, geo);
  return cudaGetLastError();
}

template <typename T, bool kWt>
cudaError_t run_wt(const DirectGradParams& prm, bool chan_last, int cc, const DgradDirectGeo& geo,
                   cudaStream_t st) {
  switch (cc) {
    case 8: return run_cc<T, kWt, 8>(prm, chan_last, geo, st);
    case 4: return run_cc<T, kWt, 4>(prm, chan_last, geo, st);
    case 2: return run_cc<T, kWt, 2>(prm, chan_last, geo, st);
    default: return run_cc<T, kWt, 1>(prm, chan_last, geo, st);
  }
}

template <typename T>
cudaError_t run(const DirectGradParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  if (!dgrad_direct_supported(p)) return cudaErrorInvalidValue;
  if (p.N * p.Cin * p.H * p.W == 0) return cudaSuccess;
  const bool cl = prm.gin.sc == 1 && p.Cin > 1;
  const bool wt = dgrad_direct_transposed_weight(p, cl);
  // CC (dgrad_direct_cc), lowered where the vector loads (transposed weight) or stores
  // (channels-last; the strides of size-1 dimensions do not matter) would be misaligned.
  const uintptr_t addr = reinterpret_cast<uintptr_t>(prm.gin.ptr);
  const uintptr_t waddr = reinterpret_cast<uintptr_t>(prm.w);
  auto mult = [](int64_t extent, int64_t stride, int c) { return extent == 1 || stride % c == 0; };
  int cc = dgrad_direct_cc(p);
  while (cc > 1 &&
         ((wt && waddr % (sizeof(T) * cc) != 0) ||
          (cl && (!mult(p.N, prm.gin.sn, cc) || !mult(p.H, prm.gin.sh, cc) ||
                  !mult(p.W, prm.gin.sw, cc) || addr % (sizeof(T) * cc) != 0))))
    cc /= 2;
  DgradDirectGeo geo;
  geo.W = FastDiv(uint32_t(p.W));
  geo.H = FastDiv(uint32_t(p.H));
  geo.chunks = FastDiv(uint32_t(p.Cin / cc));
  geo.chunks_per_group = FastDiv(uint32_t(p.cin_g() / cc));
  geo.items = p.N * p.H * p.W * (p.Cin / cc);
  return wt ? run_wt<T, true>(prm, cl, cc, geo, st) : run_wt<T, false>(prm, cl, cc, geo, st);
}

}  // namespace

int dgrad_direct_cc(const Problem& p) {
  // The widest of 8, 4, 2, 1 that divides Cin/groups (chunks never cross a group) and still
  // leaves one 128-thread block per SM: fewer channels a thread only on the smallest layers,
  // whose few long-running threads are latency-bound. (Measured on the direct rows of a
  // sweep: a GPU's worth of threads, 132 x 1024, as the bar made layers of 25K-130K threads
  // at 8 channels up to 1.5x slower; under ~13K threads, 1 channel was up to 2.4x faster.)
  constexpr int64_t kMinThreads = 132 * 128;
  const int64_t elems = p.N * p.Cin * p.H * p.W;
  int cc = 8;
  while (cc > 1 && (p.cin_g() % cc != 0 || elems / cc < std::min(elems, kMinThreads))) cc /= 2;
  return cc;
}

bool dgrad_direct_transposed_weight(const Problem& p, bool chan_last) {
  // Channels-last lanes take different channels (the transposed weight keeps their loads
  // contiguous); NCHW lanes share them, and 4 or more channels a thread make one vector load
  // of the transposed weight worth its copy.
  return chan_last || dgrad_direct_cc(p) >= 4;
}

bool dgrad_direct_supported(const Problem& p) {
  // 31-bit work items (pixels x channels), tap coordinates (iy*sh - ph + ky*dh, bounded as a
  // whole, each factor first so that no product wraps) and the weight's offsets within a group
  // (Cout/groups x taps x Cin/groups).
  const int64_t lim = (int64_t(1) << 31) - (int64_t(1) << 24);
  for (int64_t v : {p.H, p.W, p.sh, p.sw, p.ph, p.pw, p.kh, p.kw, p.dh, p.dw, p.Ho, p.Wo})
    if (v >= lim) return false;
  return p.N * p.Cin * p.H * p.W < lim && p.H * p.sh + p.ph + p.kh * p.dh < lim &&
         p.W * p.sw + p.pw + p.kw * p.dw < lim && p.cout_g() * p.kh * p.kw * p.cin_g() < lim;
}

cudaError_t launch_dgrad_direct(const DirectGradParams& prm, DType dt, cudaStream_t st) {
  return DTYPE_SWITCH(dt, T, [&] { return run<T>(prm, st); });
}

}  // namespace cuda
}  // namespace convt2d
