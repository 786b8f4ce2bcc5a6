// Shared by the depthwise forward and grad_input (forward/depthwise.cu,
// grad_input/dgrad_depthwise.cu): one input channel per group, so each output is a short sum
// over the taps of one channel plane, and the GEMM kernels' tiles would be one channel wide.
// Both passes are one tiled kernel (common/depthwise_tiled.cu; docs/design.md, "Depthwise"):
//   forward    out[n, co, oy, ox] = bias[co] + sum over taps of x[n, co/m, iy, ix] w[co, ky, kx],
//              oy = iy*sh - ph + ky*dh (a transposed convolution of the plane);
//   grad_input gi[n, c, iy, ix] = sum over j < m and taps of go[n, c*m+j, oy, ox] w[c*m+j, ky, kx]
//              with the same oy (a strided convolution of the m planes).
// A block takes a tile of one image's output plane (NCHW: one channel) or of 8 / 32 channels
// (channels-last, and NCHW planes of a few outputs: a lane per channel): it stages the input region
// the tile reads (per channel lane, or once where a forward block's channels share one plane),
// zero-filled outside the tensor, and the taps' weights in shared memory (fp32;
// fp64 for double), then each thread sums V consecutive outputs of one row per item (an item), one
// weight load per tap for all of them; where a tap row's column reads step by one position per tap
// (every forward without dilation, grad_input at stride 1 or 2 without dilation) the values the
// item reads are loaded once into a register window, so that a tap costs V FMAs, a weight load and
// about one staged load (a thread per output spent ~40 instructions of index arithmetic and
// predicated global loads per tap).
// The walk is in stride-phase coordinates along each dimension: output o = q*P + r - o_off, with
// P the stride (forward; grad_input has one phase), and within phase r the taps read the staged
// input at q*A + base[r] + t*Ct, t < nt[r] (tap k = fk[r] + t*kstep).
#pragma once
#include <algorithm>
#include <cstdint>

#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {

constexpr int kDwMaxStride = 32;      // phase tables per dimension
constexpr int kDwThreads = 256;
// Outputs per item (consecutive q of one row, q = xl*V + v): 7 for NCHW, odd so that lanes
// reading their windows V elements apart hit distinct shared-memory banks; 8 for channels-last
// (a lane per channel).
constexpr int dw_v(int cb) { return cb == 1 ? 7 : 8; }
constexpr int kDwSmemBytes = 48 * 1024;  // the tile's budget; past it only the smallest tile
// More SMs than a GPU has: a launch of at least as many blocks fills any GPU (dw_plan asks
// the device's count only below it).
constexpr int kDwSmBound = 256;

// One spatial dimension of the walk.
struct DwDim {
  int out_len = 0, in_len = 0;  // the written tensor's extent; the read tensor's
  int P = 1;                    // stride phases (the forward's stride; 1 for grad_input)
  int q_first = 0, nq = 0;      // q range; output o = q*P + r - o_off
  int o_off = 0;
  int in_mul = 1, in_add = 0;   // first read position of a tile whose first q is q0
  int A = 1, Ct = 1;            // staged-input step per q and per tap
  int kstep = 1;                // tap step within a phase
  int TQ = 1, span = 1, tiles = 1;  // q per tile, staged positions per tile, tiles
  int nt[kDwMaxStride];         // taps of phase r
  int fk[kDwMaxStride];         // its first tap
  int base[kDwMaxStride];       // staged position of its first tap at q0
};

struct DwArgs {
  DwDim y, x;
  int C = 0;        // written channels: Cout (forward) / Cin (grad_input)
  int cgroups = 0;  // channel groups of CB
  int m = 1;        // Cout / groups
  int mloop = 1;    // read planes per written channel: 1 (forward) / m (grad_input)
  bool fwd = true;
  int kk = 1, kw = 1;
  int XL = 1;       // items per tile row and phase; an item's outputs are q = xl*V + v
  int items = 0;    // TQy * Py * Px * XL
  TensorRef in, out;   // read (x / grad_output) and written (out / grad_input) tensors
  const void* w = nullptr;     // [Cout][kh*kw] contiguous
  const void* bias = nullptr;  // [Cout] or nullptr
};

struct DwLaunch {
  int cb = 1;            // channels per block: 1 (NCHW), 8 or 32 (channels-last, tiny NCHW planes)
  bool one_plane = false;  // the forward's cb channels all read one plane, staged once
  int threads = kDwThreads;  // cb == 1: down to 32 for planes of few items
  size_t smem = 0;
  int64_t blocks = 0;
};

inline int dw_gcd(int64_t a, int64_t b) { return int(b == 0 ? a : dw_gcd(b, a % b)); }

// The forward's geometry along one dimension: a transposed convolution of extent K, stride s,
// padding pad, dilation dil, from in_len to out_len positions.
inline bool dw_dim_forward(DwDim& d, int64_t K, int64_t s, int64_t pad, int64_t dil,
                           int64_t in_len, int64_t out_len) {
  if (s > kDwMaxStride) return false;
  d.out_len = int(out_len);
  d.in_len = int(in_len);
  d.P = int(s);
  d.kstep = int(s / dw_gcd(s, dil));
  const int64_t istep = d.kstep * dil / s;
  d.q_first = int(pad / s);
  d.nq = int((out_len - 1 + pad) / s - pad / s + 1);
  d.o_off = int(pad);
  int64_t maxoff = 0;
  int64_t fd[kDwMaxStride];
  for (int r = 0; r < kDwMaxStride; ++r) {
    d.nt[r] = 0;
    d.fk[r] = 0;
    fd[r] = 0;
    if (r >= s) continue;
    for (int64_t k = 0; k < K && k < s; ++k)
      if ((k * dil) % s == r) {
        d.fk[r] = int(k);
        fd[r] = (k * dil - r) / s;
        d.nt[r] = int((K - 1 - k) / d.kstep + 1);
        maxoff = std::max(maxoff, fd[r] + (d.nt[r] - 1) * istep);
        break;
      }
  }
  if (maxoff > (int64_t(1) << 20)) return false;
  for (int r = 0; r < kDwMaxStride; ++r) d.base[r] = int(maxoff - fd[r]);
  d.A = 1;
  d.Ct = int(-istep);
  d.in_mul = 1;
  d.in_add = int(-maxoff);
  d.span = int(maxoff) + 1;  // + TQ - 1 (dw_set_tile)
  return true;
}

// grad_input's geometry along one dimension: a convolution of extent K, stride s, padding
// pad, dilation dil, read from in_len (grad_output) into out_len (grad_input) positions.
inline bool dw_dim_dgrad(DwDim& d, int64_t K, int64_t s, int64_t pad, int64_t dil,
                         int64_t in_len, int64_t out_len) {
  if ((K - 1) * dil > (int64_t(1) << 20) || s > (int64_t(1) << 10)) return false;
  d.out_len = int(out_len);
  d.in_len = int(in_len);
  d.P = 1;
  d.kstep = 1;
  d.q_first = 0;
  d.nq = int(out_len);
  d.o_off = 0;
  for (int r = 0; r < kDwMaxStride; ++r) d.nt[r] = d.fk[r] = d.base[r] = 0;
  d.nt[0] = int(K);
  d.A = int(s);
  d.Ct = int(dil);
  d.in_mul = int(s);
  d.in_add = int(-pad);
  d.span = int((K - 1) * dil + 1);  // + (TQ - 1) * s (dw_set_tile)
  return true;
}

inline int64_t dw_span(const DwDim& d, int64_t TQ, int64_t span1) {
  return span1 + (TQ - 1) * int64_t(d.A);
}

// The device's opt-in shared memory per block (227 KB on H100).
inline int64_t dw_smem_optin() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return kDwSmemBytes;
  return std::max<int64_t>(v, kDwSmemBytes);
}

// The kernel's arguments and launch for problem p (forward or grad_input), or false where the
// kernel cannot take it (sizes past its 31-bit coordinates, strides past its phase tables, a
// staged region past the device's shared memory even for the smallest tile). Tiles are sized
// to kDwSmemBytes, shrinking rows then columns; a problem whose smallest tile needs more (large
// dilated kernels, channels-last) gets that tile, up to the device's opt-in limit.
// chan_last: the written tensor is channels-last (a lane per channel); acc_bytes: 4, or 8 for
// double.
inline bool dw_plan(const Problem& p, bool fwd, bool chan_last, int acc_bytes, DwArgs& a,
                    DwLaunch& l) {
  const int64_t lim = int64_t(1) << 30, big = int64_t(1) << 24;
  if (p.cin_g() != 1 || p.kh >= big || p.kw >= big || p.H >= big || p.W >= big ||
      p.Ho >= big || p.Wo >= big || p.ph >= big || p.pw >= big || p.dh >= big || p.dw >= big ||
      p.Cout * p.kh * p.kw >= lim || p.N * p.Cout * p.Ho * p.Wo >= lim * 2 ||
      p.N * p.Cin * p.H * p.W >= lim * 2)
    return false;
  a = DwArgs();
  a.fwd = fwd;
  a.m = int(p.cout_g());
  a.C = int(fwd ? p.Cout : p.Cin);
  a.mloop = fwd ? 1 : a.m;
  a.kk = int(p.kh * p.kw);
  a.kw = int(p.kw);
  bool ok = fwd ? dw_dim_forward(a.y, p.kh, p.sh, p.ph, p.dh, p.H, p.Ho) &&
                      dw_dim_forward(a.x, p.kw, p.sw, p.pw, p.dw, p.W, p.Wo)
                : dw_dim_dgrad(a.y, p.kh, p.sh, p.ph, p.dh, p.Ho, p.H) &&
                      dw_dim_dgrad(a.x, p.kw, p.sw, p.pw, p.dw, p.Wo, p.W);
  if (!ok) return false;
  const int64_t sy1 = a.y.span, sx1 = a.x.span;
  const int Py = a.y.P, Px = a.x.P;
  // The tile for cb channels per block: items per block to a target, sized to the budget
  // (rows, then columns, shrink), or false where even the smallest tile exceeds the device.
  int64_t XL = 1, TQy = 1, smem = 0;
  // A forward block of cb > 1 channels whose outputs per input channel are a multiple of cb
  // reads one plane: staged once, not once per channel lane (one input channel to 96 outputs
  // of 32x32, k=9: a lane's copy each made the tiles 32x smaller than the budget allows).
  auto one_plane = [&](int cb) { return fwd && cb > 1 && a.m % cb == 0; };
  auto stage_bytes = [&](int cb) {
    const int64_t TQx = XL * dw_v(cb);
    return (dw_span(a.y, TQy, sy1) * dw_span(a.x, TQx, sx1) * (one_plane(cb) ? 1 : cb) +
            int64_t(a.kk) * cb + (cb == 1 ? TQy * Py * TQx * Px : 0)) * acc_bytes;
  };
  auto tile = [&](int cb) {
    const int il = kDwThreads / cb;
    const int V = dw_v(cb);
    // Items (V outputs of one row and phase) per block: 4 per item lane; one where grad_input
    // sums several planes per channel (m > 1), whose sums stay in registers across them.
    const int64_t target = int64_t(il) * (a.mloop > 1 ? 1 : 4);
    XL = std::min<int64_t>((a.x.nq + V - 1) / V, cb == 1 ? 16 : cb == 8 ? 8 : 4);
    XL = std::max<int64_t>(XL, 1);
    TQy = std::max<int64_t>(1, std::min<int64_t>(target / (Py * Px * XL), a.y.nq));
    for (;;) {
      smem = stage_bytes(cb);
      if (smem <= kDwSmemBytes) return true;
      if (TQy > 1) TQy = (TQy + 1) / 2;
      else if (XL > 1) XL = (XL + 1) / 2;
      else return smem <= dw_smem_optin();
    }
  };
  // Channels-last: 32 (or, for 16 channels or fewer and for a forward of 8-24 outputs per
  // input channel, below, 8) channels per block; where even the smallest such tile's stage
  // exceeds the device's shared memory (large dilated kernels), fewer channels per block, down
  // to one (lanes along the row, as NCHW).
  // NCHW planes so small that one block's tile, the whole plane, holds at most 16 items, so
  // that its one warp would have half its lanes or more idle (tiny spatial sizes: 2x2 to ~8x8
  // outputs): a lane per channel as for channels-last (the strides are the tensor's; a lane
  // per plane), so that a block's threads work (128 x 768 planes of 2x2, k=3: 0.16 ms for
  // 3 MB of traffic, block scheduling, against 0.04). With more items the warp's lanes are
  // mostly busy and the NCHW tile stays (13x13 planes, k=9: 50 us against 70 per channel).
  // A forward with 8, 16 or 24 outputs per input channel takes 8 channels per block, one
  // plane each, rather than 32 lanes over several planes' copies (8 and 16 outputs per channel:
  // 1.05-12x). Other multiples of 8 that are not multiples of 32 (40, 48, 56, 80, ...: a
  // block's 32 lanes span two planes) ran 0.84-1.07x as 8 channels per block and stay at 32
  // lanes over the planes' copies; multiples of 32 stage their one plane at 32 (one_plane).
  const int lanes_cb = fwd && a.m % 8 == 0 && a.m < 32 ? 8 : a.C > 16 ? 32 : 8;
  int cb = chan_last ? lanes_cb : 1;
  if (!chan_last && tile(1) && TQy * Py * Px * XL <= 16 && TQy >= a.y.nq &&
      XL * dw_v(1) >= a.x.nq)
    cb = lanes_cb;
  while (!tile(cb)) {
    if (cb == 1) return false;
    cb = cb == 32 ? 8 : 1;
  }
  const int V = dw_v(cb);
  // Blocks: images x channel groups x tiles in y and x.
  const int64_t planes = p.N * ((a.C + cb - 1) / cb) * ((a.x.nq + XL * V - 1) / (XL * V));
  auto blocks = [&] { return planes * ((a.y.nq + TQy - 1) / TQy); };
  // Fewer blocks than SMs (few images and channels, e.g. one input channel to 8 at batch 8: a
  // block per plane): shorter tiles, down to a row, until each SM has one (14 -> 10 us there;
  // asking for two per SM made tiles shorter than their halo pays for: 16 -> 19 us on 21
  // planes of 199x199, k=7).
  if (blocks() < int64_t(kDwSmBound)) {
    const int64_t want = sm_count();
    while (TQy > 1 && blocks() < want) TQy = (TQy + 1) / 2;
    smem = stage_bytes(cb);
  }
  a.XL = int(XL);
  a.y.TQ = int(TQy);
  a.x.TQ = int(XL * V);
  a.y.span = int(dw_span(a.y, TQy, sy1));
  a.x.span = int(dw_span(a.x, XL * V, sx1));
  a.y.tiles = int((a.y.nq + TQy - 1) / TQy);
  a.x.tiles = int((a.x.nq + a.x.TQ - 1) / a.x.TQ);
  a.items = int(TQy * Py * Px * XL);
  a.cgroups = (a.C + cb - 1) / cb;
  l.cb = cb;
  l.one_plane = one_plane(cb);
  if (cb == 1) l.threads = int(std::min<int64_t>(kDwThreads, (a.items + 31) / 32 * 32));
  l.smem = size_t(smem);
  l.blocks = blocks();
  return l.blocks < (int64_t(1) << 31) - 1;
}

// Launches the tiled kernel (common/depthwise_tiled.cu) for arguments from dw_plan.
cudaError_t launch_dw_tiled(const DwArgs& a, const DwLaunch& l, DType dt, cudaStream_t st);

}  // namespace cuda
}  // namespace convt2d
