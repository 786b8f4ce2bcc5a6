// convt2d: the transposed-convolution problem in plain C++ (no torch headers).
//
// Semantics are those of torch.nn.functional.conv_transpose2d:
//   x      [N, Cin, H, W]
//   weight [Cin, Cout/groups, kh, kw]
//   out    [N, Cout, Ho, Wo],  Ho = (H-1)*sh - 2*ph + dh*(kh-1) + oph + 1
//   out[n, g*Cog+co, oy, ox] += x[n, g*Cig+ci, iy, ix] * w[g*Cig+ci, co, ky, kx]
//        where oy = iy*sh - ph + ky*dh,  ox = ix*sw - pw + kx*dw.
//
// Stride-phase decomposition (used by every backend): the output rows with
// (oy + ph) % sh == ry only receive taps ky with (ky*dh) % sh == ry. Those taps
// form an arithmetic progression ky = ky0 + j*kstep, kstep = sh / gcd(sh, dh),
// and for them iy = qy - (ky*dh - ry)/sh where oy = qy*sh + ry - ph.
// So each phase is a dense stride-1 correlation with no zero taps and no
// per-tap modulo test; PhaseDim below holds the per-dimension numbers.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define CONVT2D_HD __host__ __device__ __forceinline__
#else
#define CONVT2D_HD inline
#endif

namespace convt2d {

struct Problem {
  int64_t N = 0, Cin = 0, H = 0, W = 0;  // input
  int64_t Cout = 0, Ho = 0, Wo = 0;      // output
  int64_t kh = 1, kw = 1, groups = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, oph = 0, opw = 0, dh = 1, dw = 1;
  CONVT2D_HD int64_t cin_g() const { return Cin / groups; }
  CONVT2D_HD int64_t cout_g() const { return Cout / groups; }
};

// The 1x1 problem over p's input pixels with `cout` output channels (kernel, stride and
// dilation 1, no padding, output H x W; groups kept): the GEMM + col2im forward's GEMM and the
// backward's tap-gathered problem.
inline Problem pointwise_problem(const Problem& p, int64_t cout) {
  Problem p1 = p;
  p1.Cout = cout;
  p1.Ho = p.H;
  p1.Wo = p.W;
  p1.kh = p1.kw = p1.sh = p1.sw = p1.dh = p1.dw = 1;
  p1.ph = p1.pw = p1.oph = p1.opw = 0;
  return p1;
}

CONVT2D_HD int64_t gcd64(int64_t a, int64_t b) {
  while (b) { int64_t t = a % b; a = b; b = t; }
  return a;
}
CONVT2D_HD int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  return (a >= 0) ? a / b : -((-a + b - 1) / b);
}

// One spatial dimension of one stride phase r in [0, s).
//   output index   o  = (q0 + q)*s + r - p,   q in [0, nq)
//   tap j          k  = k0 + j*kstep,          j in [0, ntap)
//   input index    i  = (q0 + q) - koff0 - j*koff_step
// i may fall outside [0, in) and then contributes nothing.
struct PhaseDim {
  int64_t q0 = 0, nq = 0;             // output positions of this phase
  int64_t k0 = 0, kstep = 1, ntap = 0; // taps reaching this phase
  int64_t koff0 = 0, koff_step = 0;   // input offset of tap 0 and per tap
};

CONVT2D_HD PhaseDim make_phase_dim(int64_t r, int64_t s, int64_t p, int64_t d,
                               int64_t k, int64_t out) {
  PhaseDim pd;
  // q range: 0 <= q*s + r - p < out
  pd.q0 = floor_div(p - r + s - 1, s);           // ceil((p - r)/s)
  int64_t q_end = floor_div(out - 1 + p - r, s);  // floor((out-1+p-r)/s)
  pd.nq = q_end >= pd.q0 ? q_end - pd.q0 + 1 : 0;
  // taps: (k*d) % s == r
  pd.kstep = s / gcd64(s, d);
  pd.k0 = -1;
  for (int64_t kk = 0; kk < k && kk < pd.kstep; ++kk)
    if ((kk * d) % s == r) { pd.k0 = kk; break; }
  if (pd.k0 < 0) { pd.ntap = 0; pd.k0 = 0; }
  else pd.ntap = (k - 1 - pd.k0) / pd.kstep + 1;
  pd.koff0 = (pd.k0 * d - r) / s;        // exact division
  pd.koff_step = pd.kstep * d / s;       // exact division
  return pd;
}

}  // namespace convt2d
