// Shared by the depthwise kernels (forward/depthwise.cu, grad_input/dgrad_depthwise.cu): the
// launch-fixed index arithmetic of one output (forward) or grad_input (dgrad) element.
#pragma once
#include <cstdint>

#include "cuda/common/fast_div.cuh"
#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {

// The largest stride whose tap tables (DwGeo::fk / fd) the kernels keep.
constexpr int kDwMaxStride = 32;

struct DwGeo {
  FastDiv c, w, h;        // the walked tensor's channels, columns, rows
  FastDiv m;              // outputs per input channel (Cout / groups)
  FastDiv sy, sx;         // strides (forward: the residue of oy + ph decides the taps)
  int kstep_y = 1, kstep_x = 1, istep_y = 0, istep_x = 0;
  // Forward, per residue r of (o + pad) mod s: the first tap k with k*dil = r (mod s) (k
  // itself when none; fk >= k means no tap) and the input coordinate's offset, so that the
  // first tap reads (o + pad) / s - fd[r].
  int8_t fky[kDwMaxStride], fkx[kDwMaxStride];
  int32_t fdy[kDwMaxStride], fdx[kDwMaxStride];
};

inline int dw_gcd(int a, int b) { return b == 0 ? a : dw_gcd(b, a % b); }

// The geometry of problem p for a walk over a tensor of c x h x w (per image).
inline DwGeo make_dw_geo(const Problem& p, int64_t c, int64_t h, int64_t w) {
  DwGeo g;
  g.c = FastDiv(uint32_t(c));
  g.w = FastDiv(uint32_t(w));
  g.h = FastDiv(uint32_t(h));
  g.m = FastDiv(uint32_t(p.cout_g()));
  g.sy = FastDiv(uint32_t(p.sh));
  g.sx = FastDiv(uint32_t(p.sw));
  g.kstep_y = int(p.sh / dw_gcd(int(p.sh), int(p.dh)));
  g.kstep_x = int(p.sw / dw_gcd(int(p.sw), int(p.dw)));
  g.istep_y = int(g.kstep_y * p.dh / p.sh);
  g.istep_x = int(g.kstep_x * p.dw / p.sw);
  auto tables = [](int s, int k, int dil, int8_t* fk, int32_t* fd) {
    for (int r = 0; r < kDwMaxStride; ++r) {
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

}  // namespace cuda
}  // namespace convt2d
