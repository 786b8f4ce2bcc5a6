// Depthwise forward: one input channel per group (Cin == groups; Cout/groups = m outputs per
// input channel, m = 1 for a plain depthwise layer), as CenterNet-style upsampling and
// MobileNet-style decoders use.
//   out[n, co, oy, ox] = bias[co] + sum over (ky, kx) of x[n, co / m, iy, ix] * w[co, ky, kx]
//   with oy = iy*sh - ph + ky*dh, ox = ix*sw - pw + kx*dw (the weight [Cin][m][kh][kw] is
//   [Cout][kh*kw] when contiguous).
// Each output has at most ceil(kh/sh) x ceil(kw/sw) taps: the layer is bound by the bytes it
// moves (the output, mostly), and the GEMM kernels' tiles would be one channel wide.
// One thread per output element, walked in the output's memory order so that a warp's loads
// and stores are coalesced: channels fastest for channels-last (a warp reads 32 consecutive
// channels of an x pixel, and of the weight transposed to [kh*kw][Cout]), columns fastest for
// NCHW (the weight row is warp-uniform). A thread visits only the taps that reach its output:
// the residue of oy + ph modulo sh gives the first tap row (a table per launch), then every
// sh / gcd(sh, dh)-th; the same for columns. Index arithmetic by multiply-high (FastDiv);
// the tap loads predicated and unrolled, so that several are in flight.
// Accumulates in fp32 (fp64 for double); 31-bit element indices (depthwise_forward_supported).
#include "cuda/common/depthwise.cuh"
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"

#include <algorithm>

namespace convt2d {
namespace cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, bool kChanLast>
__global__ void __launch_bounds__(kThreads) depthwise_forward_kernel(const DirectParams prm,
                                                                     const DwGeo g) {
  using Acc = typename AccOf<T>::type;
  const Problem& p = prm.p;
  const int Cout = int(p.Cout), H = int(p.H), W = int(p.W), kh = int(p.kh), kw = int(p.kw);
  const int ph = int(p.ph), pw = int(p.pw);
  const uint32_t total = uint32_t(p.N * p.Cout * p.Ho * p.Wo);
  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ w = static_cast<const T*>(prm.w);
  const T* __restrict__ bias = static_cast<const T*>(prm.bias);
  T* __restrict__ out = static_cast<T*>(prm.out.ptr);
  // The weight of (co, tap): [tap][Cout] (channels-last walk) or [Cout][tap].
  const int w_co = kChanLast ? 1 : kh * kw, w_tap = kChanLast ? Cout : 1;
  const uint32_t step = gridDim.x * kThreads;
  for (uint32_t e = blockIdx.x * kThreads + threadIdx.x; e < total; e += step) {
    uint32_t r = e, n, co, oy, ox;
    if constexpr (kChanLast) {
      g.c.divmod(r, r, co);
      g.w.divmod(r, r, ox);
      g.h.divmod(r, n, oy);
    } else {
      g.w.divmod(r, r, ox);
      g.h.divmod(r, r, oy);
      g.c.divmod(r, n, co);
    }
    const uint32_t c = g.m.div(co);
    Acc acc = bias ? Cvt<T>::to_acc(bias[co]) : Acc(0);
    uint32_t qy, ry, qx, rx;
    g.sy.divmod(oy + ph, qy, ry);
    g.sx.divmod(ox + pw, qx, rx);
    const int ky0 = g.fky[ry], kx0 = g.fkx[rx];
    const int iy0 = int(qy) - g.fdy[ry], ix0 = int(qx) - g.fdx[rx];
    const T* xc = x + int64_t(n) * prm.x.sn + int64_t(c) * prm.x.sc;
    const T* wc = w + int64_t(co) * w_co;
    for (int ky = ky0, iy = iy0; ky < kh && iy >= 0; ky += g.kstep_y, iy -= g.istep_y) {
      if (iy >= H) continue;
      const T* xr = xc + int64_t(iy) * prm.x.sh;
      const T* wr = wc + int64_t(ky) * kw * w_tap;
      // Predicated loads, four taps in flight (the loop is bound by their latency).
#pragma unroll 4
      for (int kx = kx0, ix = ix0; kx < kw && ix >= 0; kx += g.kstep_x, ix -= g.istep_x) {
        const bool ok = ix < W;
        const Acc xv = ok ? Cvt<T>::to_acc(xr[int64_t(ix) * prm.x.sw]) : Acc(0);
        acc += xv * Cvt<T>::to_acc(wr[int64_t(kx) * w_tap]);
      }
    }
    out[int64_t(n) * prm.out.sn + int64_t(co) * prm.out.sc + int64_t(oy) * prm.out.sh +
        int64_t(ox) * prm.out.sw] = Cvt<T>::from_acc(acc);
  }
}

template <typename T>
cudaError_t run(const DirectParams& prm, bool chan_last, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t total = p.N * p.Cout * p.Ho * p.Wo;
  if (total == 0) return cudaSuccess;
  const DwGeo g = make_dw_geo(p, p.Cout, p.Ho, p.Wo);
  const int64_t blocks =
      std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(sm_count()) * 32);
  if (chan_last)
    depthwise_forward_kernel<T, true><<<unsigned(blocks), kThreads, 0, st>>>(prm, g);
  else
    depthwise_forward_kernel<T, false><<<unsigned(blocks), kThreads, 0, st>>>(prm, g);
  return cudaGetLastError();
}

}  // namespace

bool depthwise_forward_supported(const Problem& p) {
  // 31-bit element indices, coordinates and tap offsets; strides within the tap tables,
  // kernels within their int8 entries.
  const int64_t lim = (int64_t(1) << 31) - (int64_t(1) << 24);
  const int64_t big = int64_t(1) << 24;
  return p.cin_g() == 1 && p.N * p.Cout * p.Ho * p.Wo < lim && p.sh <= kDwMaxStride &&
         p.sw <= kDwMaxStride && p.kh < 127 && p.kw < 127 && p.dh < big && p.dw < big &&
         p.ph < big && p.pw < big && p.H < big && p.W < big && p.Ho < big && p.Wo < big;
}

cudaError_t launch_depthwise_forward(const DirectParams& prm, bool chan_last, DType dt,
                                     cudaStream_t st) {
  if (!depthwise_forward_supported(prm.p)) return cudaErrorInvalidValue;
  switch (dt) {
    case DType::kFloat: return run<float>(prm, chan_last, st);
    case DType::kDouble: return run<double>(prm, chan_last, st);
    case DType::kHalf: return run<__half>(prm, chan_last, st);
    case DType::kBFloat16: return run<__nv_bfloat16>(prm, chan_last, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace convt2d
