// Depthwise grad_input, a thread per element (dgrad:depthwise: the planner's choice for strided
// layers where few taps read each grad_output element; at stride 1 and where many do, the tiled
// kernel of grad_input/dgrad_depthwise_tiled.cu): one input
// channel per group (Cin == groups, m = Cout/groups outputs per input channel).
//   gi[n, c, iy, ix] = sum over j < m, (ky, kx) of
//       go[n, c*m + j, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw] * w[c*m + j, ky, kx]
// m x kh x kw products per element, bound by reading grad_output: one thread per grad_input
// element, walked in grad_input's memory order (channels fastest for channels-last, with the
// weight transposed to [kh*kw][Cout] so a warp's weight loads are consecutive; columns fastest
// for NCHW, the weight warp-uniform); index arithmetic by multiply-high (FastDiv), tap loads
// predicated and unrolled so that several are in flight. fp32
// accumulation (fp64 for double); 31-bit element indices (dgrad_depthwise_supported).
#include "cuda/common/fast_div.cuh"
#include "cuda/common/kernels.h"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/mma_core.cuh"

#include <algorithm>

namespace convt2d {
namespace cuda {
namespace {

// The largest stride whose tap tables (DwGeo::fk / fd) the kernels keep.
constexpr int kDwGeoMaxStride = 32;

struct DwGeo {
  FastDiv c, w, h;        // the walked tensor's channels, columns, rows
  FastDiv m;              // outputs per input channel (Cout / groups)
  FastDiv sy, sx;         // strides (forward: the residue of oy + ph decides the taps)
  int kstep_y = 1, kstep_x = 1, istep_y = 0, istep_x = 0;
  // Forward, per residue r of (o + pad) mod s: the first tap k with k*dil = r (mod s) (k
  // itself when none; fk >= k means no tap) and the input coordinate's offset, so that the
  // first tap reads (o + pad) / s - fd[r].
  int8_t fky[kDwGeoMaxStride], fkx[kDwGeoMaxStride];
  int32_t fdy[kDwGeoMaxStride], fdx[kDwGeoMaxStride];
};

int dw_geo_gcd(int a, int b) { return b == 0 ? a : dw_geo_gcd(b, a % b); }

// The geometry of problem p for a walk over a tensor of c x h x w (per image).
DwGeo make_dw_geo(const Problem& p, int64_t c, int64_t h, int64_t w) {
  DwGeo g;
  g.c = FastDiv(uint32_t(c));
  g.w = FastDiv(uint32_t(w));
  g.h = FastDiv(uint32_t(h));
  g.m = FastDiv(uint32_t(p.cout_g()));
  g.sy = FastDiv(uint32_t(p.sh));
  g.sx = FastDiv(uint32_t(p.sw));
  g.kstep_y = int(p.sh / dw_geo_gcd(int(p.sh), int(p.dh)));
  g.kstep_x = int(p.sw / dw_geo_gcd(int(p.sw), int(p.dw)));
  g.istep_y = int(g.kstep_y * p.dh / p.sh);
  g.istep_x = int(g.kstep_x * p.dw / p.sw);
  auto tables = [](int s, int k, int dil, int8_t* fk, int32_t* fd) {
    for (int r = 0; r < kDwGeoMaxStride; ++r) {
      fk[r] = int8_t(k < 127 ? k : 127);
      fd[r] = 0;
      if (r >= s) continue;
      for (int kk = 0; kk < k && kk < s; ++kk)
        if ((int64_t(kk) * dil) % s == r) {
          fk[r] = int8_t(kk);
          fd[r] = int32_t((int64_t(kk) * dil - r) / s);
          break;
        }
    }
  };
  tables(int(p.sh), int(p.kh), int(p.dh), g.fky, g.fdy);
  tables(int(p.sw), int(p.kw), int(p.dw), g.fkx, g.fdx);
  return g;
}


constexpr int kThreads = 256;

template <typename T, bool kChanLast>
__global__ void __launch_bounds__(kThreads) dgrad_depthwise_kernel(const DirectGradParams prm,
                                                                   const DwGeo g) {
  using Acc = typename AccOf<T>::type;
  const Problem& p = prm.p;
  const int Cout = int(p.Cout), Ho = int(p.Ho), Wo = int(p.Wo), kh = int(p.kh), kw = int(p.kw);
  const int m = int(p.cout_g()), sh = int(p.sh), sw = int(p.sw), dh = int(p.dh), dw = int(p.dw);
  const uint32_t total = uint32_t(p.N * p.Cin * p.H * p.W);
  const T* __restrict__ go = static_cast<const T*>(prm.gout.ptr);
  const T* __restrict__ w = static_cast<const T*>(prm.w);
  T* __restrict__ gi = static_cast<T*>(prm.gin.ptr);
  const int w_co = kChanLast ? 1 : kh * kw, w_tap = kChanLast ? Cout : 1;
  const uint32_t step = gridDim.x * kThreads;
  for (uint32_t e = blockIdx.x * kThreads + threadIdx.x; e < total; e += step) {
    uint32_t r = e, n, c, iy, ix;
    if constexpr (kChanLast) {
      g.c.divmod(r, r, c);
      g.w.divmod(r, r, ix);
      g.h.divmod(r, n, iy);
    } else {
      g.w.divmod(r, r, ix);
      g.h.divmod(r, r, iy);
      g.c.divmod(r, n, c);
    }
    const int oy0 = int(iy) * sh - int(p.ph), ox0 = int(ix) * sw - int(p.pw);
    Acc acc = Acc(0);
    for (int j = 0; j < m; ++j) {
      const int co = int(c) * m + j;
      const T* gc = go + int64_t(n) * prm.gout.sn + int64_t(co) * prm.gout.sc;
      const T* wc = w + int64_t(co) * w_co;
      for (int ky = 0; ky < kh; ++ky) {
        const int oy = oy0 + ky * dh;
        if (unsigned(oy) >= unsigned(Ho)) continue;
        const T* gr = gc + int64_t(oy) * prm.gout.sh;
        const T* wr = wc + int64_t(ky) * kw * w_tap;
        // Predicated loads, four taps in flight (the loop is bound by their latency).
#pragma unroll 4
        for (int kx = 0; kx < kw; ++kx) {
          const int ox = ox0 + kx * dw;
          const bool ok = unsigned(ox) < unsigned(Wo);
          const Acc gv = ok ? Cvt<T>::to_acc(gr[int64_t(ox) * prm.gout.sw]) : Acc(0);
          acc += gv * Cvt<T>::to_acc(wr[int64_t(kx) * w_tap]);
        }
      }
    }
    gi[int64_t(n) * prm.gin.sn + int64_t(c) * prm.gin.sc + int64_t(iy) * prm.gin.sh +
       int64_t(ix) * prm.gin.sw] = Cvt<T>::from_acc(acc);
  }
}

template <typename T>
cudaError_t run(const DirectGradParams& prm, bool chan_last, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t total = p.N * p.Cin * p.H * p.W;
  if (total == 0) return cudaSuccess;
  const DwGeo g = make_dw_geo(p, p.Cin, p.H, p.W);
  const int64_t blocks =
      std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(sm_count()) * 32);
  if (chan_last)
    dgrad_depthwise_kernel<T, true><<<unsigned(blocks), kThreads, 0, st>>>(prm, g);
  else
    dgrad_depthwise_kernel<T, false><<<unsigned(blocks), kThreads, 0, st>>>(prm, g);
  return cudaGetLastError();
}

}  // namespace

bool dgrad_depthwise_supported(const Problem& p) {
  // 31-bit element indices and coordinates (iy*sh + ky*dh and the like), and weight offsets
  // (co * kh*kw, co = c*m + j: the weight's elements).
  const int64_t lim = (int64_t(1) << 31) - (int64_t(1) << 24);
  const int64_t big = int64_t(1) << 14;
  return p.cin_g() == 1 && p.N * p.Cin * p.H * p.W < lim && p.N * p.Cin * p.H * p.W > 0 &&
         p.Cout * p.kh * p.kw < lim &&
         p.H < big && p.W < big && p.sh < big && p.sw < big && p.kh * p.dh < (1 << 30) - big * big &&
         p.kw * p.dw < (1 << 30) - big * big && p.ph < big && p.pw < big && p.Ho < (1 << 30) &&
         p.Wo < (1 << 30);
}

cudaError_t launch_dgrad_depthwise(const DirectGradParams& prm, bool chan_last, DType dt,
                                   cudaStream_t st) {
  if (!dgrad_depthwise_supported(prm.p)) return cudaErrorInvalidValue;
  return DTYPE_SWITCH(dt, T, [&] { return run<T>(prm, chan_last, st); });
}

}  // namespace cuda
}  // namespace convt2d
