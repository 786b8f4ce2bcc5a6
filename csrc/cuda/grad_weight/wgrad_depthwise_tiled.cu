// Depthwise grad_weight: one input channel per group (Cin == groups, m = Cout/groups outputs
// per input channel).
//   gw[co, ky, kx] = sum over (n, iy, ix) of x[n, co / m, iy, ix] * go[n, co, oy, ox],
//   oy = iy*sh - ph + ky*dh, ox = ix*sw - pw + kx*dw (zero outside grad_output)
// Cout*kh*kw weights, each a reduction over N*H*W pixels: the floor is reading x and
// grad_output once (docs/design.md, "Depthwise").
// (grad_weight/wgrad_depthwise.cu reads grad_output straight from memory, a thread per
// pixel; the planner takes it where no grad_output element is read twice (channels-last: past
// 8 outputs per group), and for strided NCHW where the register window below does not apply
// and few taps read each element, or taps overlap in one dimension only.)
// Tiled: a block takes CB channels (a lane per channel where grad_output is channels-last, 32
// or 8; one channel for NCHW, whose 256 lanes run along rows), a chunk of up to KR x KW taps and
// a range of tiles; a tile is TN images x TY rows x TX columns of x. Per tile the block stages
// the tile of x and the grad_output region its taps read (zero outside both tensors) in shared
// memory, 16 global loads in flight per thread. Each thread then takes items, V consecutive x
// pixels of one row: it holds their x values and, per tap row, the grad_output values the row's
// taps read in a register window (where column reads step by one per tap and by 1 or 2 per
// pixel), so a tap costs V FMAs and about one staged load. The taps' sums stay in registers
// over all the block's tiles; at the end the item lanes are added in a fixed order into an fp32
// (fp64) workspace [splits][Cout*kh*kw], whose splits a second kernel adds in a fixed order
// into gw: deterministic.
#include "cuda/common/depthwise.cuh"
#include "cuda/common/kernels.h"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/mma_core.cuh"

#include <algorithm>

namespace convt2d {
namespace cuda {
namespace {

constexpr int kThreads = 256;
// Blocks per SM: up to 128 registers a thread (the taps' sums, the staging loads in flight).
constexpr int kResident = 2;
constexpr int kLoads = 16;              // staging loads in flight per thread
// The stage's budget: 48 KB; 96 KB (the device's opt-in limit if lower; two blocks per SM)
// for channels-last tiles of 8 / 32 channels, whose rows are short, so that they get rows
// enough that the taps' halo stays small. (NCHW tiles reach their items before 48 KB; a larger
// budget only made fewer tiles for small layers: 15 -> 18 us on 32 images of 7x7.)
constexpr int kStageBytes = 48 * 1024, kStageBytesCl = 96 * 1024;
constexpr int kSmemPerSm = 227 * 1024;  // for the residency estimate (H100; smaller GPUs: fewer splits waste nothing)
// x pixels per item: odd for NCHW, so that lanes V elements apart hit distinct banks.
constexpr int wdw_v(int cb) { return cb == 1 ? 7 : 8; }
constexpr int wdw_kw(int kw) { return kw <= 4 ? 4 : 8; }  // columns per chunk: 4 or 8
// Tap rows a thread sums (KR x KW taps in registers): 10 / 5 (fp64, whose values take two
// registers: 4 / 2), so that a 5x5 kernel takes one chunk.
constexpr int wdw_kr(int kwt, int acc_bytes) { return (acc_bytes == 8 ? 16 : 40) / kwt; }

struct WdwArgs {
  TensorRef x, go;
  void* ws = nullptr;
  int N = 0, C = 0, m = 1, H = 0, W = 0, Ho = 0, Wo = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int nr = 1, nc = 1;            // tap rows / columns per chunk (the last may have fewer)
  int rchunks = 1, cchunks = 1;  // chunks of tap rows / columns
  int TN = 1, TY = 1, TX = 1, XL = 1;  // tile: images, rows, columns (XL items of V)
  int GY = 1, GX = 1;            // staged grad_output rows / columns per image
  int tn_tiles = 1, ty_tiles = 1, tx_tiles = 1, tiles = 0, tiles_per_split = 1;
  int cgroups = 1;
};

struct WdwLaunch {
  int cb = 1, kwt = 4;  // channels per block; template KW
  size_t smem = 0;
  int64_t cblocks = 0, splits = 1;
};

// KW columns of one tap row, the window held in registers: A = sw (1 or 2) with dw == 1.
template <typename Acc, int CB, int V, int KW, int A>
__device__ __forceinline__ void wdw_row_window(Acc (&acc)[KW], const Acc (&xv)[V],
                                               const Acc* s_go, int gi, int ncol) {
  constexpr int WN = (V - 1) * A + KW;
  Acc win[WN];
#pragma unroll
  for (int u = 0; u < WN; ++u) win[u] = u < (V - 1) * A + ncol ? s_go[gi + u * CB] : Acc(0);
#pragma unroll
  for (int kx = 0; kx < KW; ++kx) {
    if (kx >= ncol) break;
#pragma unroll
    for (int v = 0; v < V; ++v) acc[kx] += xv[v] * win[v * A + kx];
  }
}

// Any steps: a staged load per tap and pixel.
template <typename Acc, int CB, int V, int KW>
__device__ __forceinline__ void wdw_row_generic(Acc (&acc)[KW], const Acc (&xv)[V],
                                                const Acc* s_go, int gi, int ncol, int vstep,
                                                int kstep) {
#pragma unroll
  for (int kx = 0; kx < KW; ++kx) {
    if (kx >= ncol) break;
#pragma unroll
    for (int v = 0; v < V; ++v) acc[kx] += xv[v] * s_go[gi + v * vstep + kx * kstep];
  }
}

// A thread's walk over a staged region of TN images x rows x cols positions: its position
// (lane il first) and the step between its positions (IL, the item lanes), decoded once, so
// that staging divides nothing per element.
struct WdwWalk {
  int sx, sy, nl, dsx, dsy, dnl;
  __device__ WdwWalk(int il, int IL, int rows, int cols) {
    sx = il % cols;
    sy = (il / cols) % rows;
    nl = il / cols / rows;
    dsx = IL % cols;
    dsy = (IL / cols) % rows;
    dnl = IL / cols / rows;
  }
  __device__ __forceinline__ void step(int rows, int cols) {
    sx += dsx;
    if (sx >= cols) {
      sx -= cols;
      ++sy;
    }
    sy += dsy;
    if (sy >= rows) {
      sy -= rows;
      ++nl;
    }
    nl += dnl;
  }
};

// Stages the region (TN images from n0; rows x cols positions from (r0, c0)) of one channel
// plane of src, zero outside the tensor (N images of Hd x Wd), into dst (a lane per channel),
// kLoads loads in flight per thread (latency, not bandwidth, bounds a loop of one at a time).
template <typename T, typename Acc, int CB>
__device__ __forceinline__ void wdw_stage(Acc* dst, const T* __restrict__ src, const TensorRef& r,
                                          WdwWalk w, int count, int rows, int cols, int n0,
                                          int r0, int c0, int N, int Hd, int Wd, int il, int IL,
                                          int cl, bool c_ok) {
  const T zero = Cvt<T>::from_acc(Acc(0));
  for (int p0 = il; p0 < count; p0 += IL * kLoads) {
    // Raw values, converted at the store: a conversion next to its (predicated) load would
    // wait for it before the next load issues (16-bit types measured 2x slower so).
    T vals[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int n = n0 + w.nl, y = r0 + w.sy, x = c0 + w.sx;
      vals[k] = zero;
      if (p0 + k * IL < count && c_ok && n < N && unsigned(y) < unsigned(Hd) &&
          unsigned(x) < unsigned(Wd))
        vals[k] = src[int64_t(n) * r.sn + int64_t(y) * r.sh + int64_t(x) * r.sw];
      w.step(rows, cols);
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k)
      if (p0 + k * IL < count) dst[(p0 + k * IL) * CB + cl] = Cvt<T>::to_acc(vals[k]);
  }
}

template <typename T, int CB, int KW>
__global__ void __launch_bounds__(kThreads, kResident)
    wgrad_dw_tiled_kernel(const __grid_constant__ WdwArgs a) {
  using Acc = typename AccOf<T>::type;
  constexpr int V = wdw_v(CB), KR = wdw_kr(KW, int(sizeof(Acc))), IL = kThreads / CB;
  extern __shared__ __align__(16) unsigned char wdw_smem[];
  Acc* s_x = reinterpret_cast<Acc*>(wdw_smem);
  const int nx = a.TN * a.TY * a.TX, ng = a.TN * a.GY * a.GX;
  const Acc* s_go = s_x + nx * CB;  // staged right after the x tile: position pos >= nx
  int b = int(blockIdx.x);
  const int cg = b % a.cgroups;
  b /= a.cgroups;
  const int cc = b % a.cchunks, rc = b / a.cchunks;
  const int ky0 = rc * a.nr, nr = min(a.nr, a.kh - ky0);
  const int kx0 = cc * a.nc, ncol = min(a.nc, a.kw - kx0);
  const int cl = int(threadIdx.x) % CB, il = int(threadIdx.x) / CB;
  const int co = cg * CB + cl;
  const bool c_ok = co < a.C;
  const T* __restrict__ xp = static_cast<const T*>(a.x.ptr) + (c_ok ? int64_t(co / a.m) * a.x.sc : 0);
  const T* __restrict__ gp = static_cast<const T*>(a.go.ptr) + (c_ok ? int64_t(co) * a.go.sc : 0);
  Acc acc[KR][KW];
#pragma unroll
  for (int r = 0; r < KR; ++r)
#pragma unroll
    for (int k = 0; k < KW; ++k) acc[r][k] = Acc(0);
  const bool win1 = a.dw == 1 && a.sw == 1, win2 = a.dw == 1 && a.sw == 2;
  const int items = a.TN * a.TY * a.XL;
  const int t_begin = int(blockIdx.y) * a.tiles_per_split;
  const int t_end = min(a.tiles, t_begin + a.tiles_per_split);
  const WdwWalk wx(il, IL, a.TY, a.TX), wg(il, IL, a.GY, a.GX);
  for (int tile = t_begin; tile < t_end; ++tile) {
    int tt = tile;
    const int txi = tt % a.tx_tiles;
    tt /= a.tx_tiles;
    const int tyi = tt % a.ty_tiles, tni = tt / a.ty_tiles;
    const int n0 = tni * a.TN, iy0 = tyi * a.TY, ix0 = txi * a.TX;
    const int gy0 = iy0 * a.sh - a.ph + ky0 * a.dh, gx0 = ix0 * a.sw - a.pw + kx0 * a.dw;
    if (tile > t_begin) __syncthreads();
    wdw_stage<T, Acc, CB>(s_x, xp, a.x, wx, nx, a.TY, a.TX, n0, iy0, ix0, a.N, a.H, a.W, il, IL,
                          cl, c_ok);
    wdw_stage<T, Acc, CB>(s_x + nx * CB, gp, a.go, wg, ng, a.GY, a.GX, n0, gy0, gx0, a.N, a.Ho,
                          a.Wo, il, IL, cl, c_ok);
    __syncthreads();
    for (int item = il; item < items; item += IL) {
      const int xl = item % a.XL, r = item / a.XL;
      const int row = r % a.TY, nl = r / a.TY;
      const int xi = ((nl * a.TY + row) * a.TX + xl * V) * CB + cl;
      Acc xv[V];
#pragma unroll
      for (int v = 0; v < V; ++v) xv[v] = s_x[xi + v * CB];
      const int gi0 = ((nl * a.GY + row * a.sh) * a.GX + xl * V * a.sw) * CB + cl;
#pragma unroll
      for (int kr = 0; kr < KR; ++kr) {
        if (kr >= nr) break;
        const int gi = gi0 + kr * a.dh * a.GX * CB;
        if (win1)
          wdw_row_window<Acc, CB, V, KW, 1>(acc[kr], xv, s_go, gi, ncol);
        else if (win2)
          wdw_row_window<Acc, CB, V, KW, 2>(acc[kr], xv, s_go, gi, ncol);
        else
          wdw_row_generic<Acc, CB, V, KW>(acc[kr], xv, s_go, gi, ncol, a.sw * CB, a.dw * CB);
      }
    }
  }
  // The item lanes' sums in a fixed order (the stage's shared memory reused: the launch
  // sizes it for KR*KW rows of kThreads + 1, the + 1 keeping NCHW's reads conflict-free).
  __syncthreads();
  Acc* red = s_x;
  constexpr int RS = kThreads + 1;
#pragma unroll
  for (int r = 0; r < KR; ++r)
#pragma unroll
    for (int k = 0; k < KW; ++k) red[(r * KW + k) * RS + int(threadIdx.x)] = acc[r][k];
  __syncthreads();
  const int kk = a.kh * a.kw;
  Acc* ws = static_cast<Acc*>(a.ws) + int64_t(blockIdx.y) * a.C * kk;
  for (int i = int(threadIdx.x); i < CB * KR * KW; i += kThreads) {
    const int c = i % CB, t = i / CB, kr = t / KW, kx = t % KW;
    const int o = cg * CB + c;
    if (o >= a.C || kr >= nr || kx >= ncol) continue;
    Acc s = Acc(0);
    for (int l = 0; l < IL; ++l) s += red[t * RS + l * CB + c];
    ws[int64_t(o) * kk + (ky0 + kr) * a.kw + kx0 + kx] = s;
  }
}

// The stage's elements (x tile + grad_output region) of a tile, times CB.
int64_t wdw_stage_elems(const WdwArgs& a, int64_t cb) {
  return (int64_t(a.TN) * a.TY * a.TX + int64_t(a.TN) * a.GY * a.GX) * cb;
}

void wdw_set_region(WdwArgs& a) {
  a.GY = int((int64_t(a.TY) - 1) * a.sh + (int64_t(a.nr) - 1) * a.dh + 1);
  a.GX = int((int64_t(a.TX) - 1) * a.sw + (int64_t(a.nc) - 1) * a.dw + 1);
}

// Arguments and launch shape for problem p, or false where the kernel cannot take it (sizes
// past its 31-bit shared-memory and tile coordinates; a stage past the budget even for the
// smallest tile of one channel). chan_last: grad_output channels-last (a lane per channel:
// 32, or 8 for 16 channels or fewer; fewer where the smallest tile's stage does not fit).
// Tiles grow (rows, then images) to a target of items per lane within the budget; the tiles are
// split so that the blocks fill the GPU about four times over (the last wave's tail short).
bool wdw_plan(const Problem& p, bool chan_last, int acc_bytes, int num_sms, WdwArgs& a,
              WdwLaunch& l) {
  const int64_t big = int64_t(1) << 24, lim = int64_t(1) << 30;
  if (p.cin_g() != 1 || p.N <= 0 || p.Cout <= 0 || p.kh >= big || p.kw >= big ||
      p.H >= big || p.W >= big || p.Ho >= big || p.Wo >= big || p.ph >= big || p.pw >= big ||
      p.dh >= big || p.dw >= big || p.sh >= big || p.sw >= big || p.N >= lim ||
      p.Cout * p.kh * p.kw >= lim || p.H * p.W == 0)
    return false;
  a = WdwArgs();
  a.N = int(p.N);
  a.C = int(p.Cout);
  a.m = int(p.cout_g());
  a.H = int(p.H);
  a.W = int(p.W);
  a.Ho = int(p.Ho);
  a.Wo = int(p.Wo);
  a.kh = int(p.kh);
  a.kw = int(p.kw);
  a.sh = int(p.sh);
  a.sw = int(p.sw);
  a.ph = int(p.ph);
  a.pw = int(p.pw);
  a.dh = int(p.dh);
  a.dw = int(p.dw);
  l.kwt = wdw_kw(a.kw);
  const int KR = wdw_kr(l.kwt, acc_bytes);
  a.cchunks = (a.kw + l.kwt - 1) / l.kwt;
  a.nc = (a.kw + a.cchunks - 1) / a.cchunks;
  a.rchunks = (a.kh + KR - 1) / KR;
  a.nr = (a.kh + a.rchunks - 1) / a.rchunks;
  int cb = chan_last ? (a.C > 16 ? 32 : 8) : 1;
  for (;;) {
    const int V = wdw_v(cb), IL = kThreads / cb;
    const int64_t budget =
        cb == 1 ? kStageBytes : std::min<int64_t>(kStageBytesCl, dw_smem_optin());
    // Items per tile: two per lane (NCHW); channels-last, eight (its rows are short: more of
    // them keep the halo of rows the taps reach small).
    const int64_t target = int64_t(IL) * (cb == 1 ? 2 : 8);
    a.XL = int(std::clamp<int64_t>((a.W + V - 1) / V, 1, cb == 1 ? 16 : cb == 8 ? 8 : 4));
    a.TX = a.XL * V;
    a.TY = a.TN = 1;
    wdw_set_region(a);
    if (wdw_stage_elems(a, cb) * acc_bytes <= budget) {
      // Grow rows, then images, to the target.
      while (int64_t(a.TN) * a.TY * a.XL < target) {
        const WdwArgs keep = a;
        if (a.TY < a.H) a.TY = std::min(a.H, a.TY * 2);
        else if (a.TN < a.N) a.TN = std::min(a.N, a.TN * 2);
        else break;
        wdw_set_region(a);
        if (wdw_stage_elems(a, cb) * acc_bytes > budget) {
          a = keep;
          break;
        }
      }
      break;
    }
    if (cb == 1) return false;
    cb = cb == 32 ? 8 : 1;
  }
  l.cb = cb;
  a.tx_tiles = (a.W + a.TX - 1) / a.TX;
  a.ty_tiles = (a.H + a.TY - 1) / a.TY;
  a.tn_tiles = (a.N + a.TN - 1) / a.TN;
  const int64_t tiles = int64_t(a.tx_tiles) * a.ty_tiles * a.tn_tiles;
  if (tiles >= lim) return false;
  a.tiles = int(tiles);
  a.cgroups = (a.C + cb - 1) / cb;
  const int64_t red = int64_t(kThreads + 1) * KR * l.kwt;
  l.smem = size_t(std::max(wdw_stage_elems(a, cb), red) * acc_bytes);
  l.cblocks = int64_t(a.cgroups) * a.rchunks * a.cchunks;
  // Blocks resident per SM: the register bound or shared memory's.
  const int64_t resident = std::max<int64_t>(
      1, std::min<int64_t>(kResident, kSmemPerSm / int64_t(l.smem + 1024)));
  int64_t splits = (4 * resident * std::max(num_sms, 1) + l.cblocks - 1) / l.cblocks;
  // The workspace within 256 MiB.
  splits = std::min<int64_t>(
      splits, std::max<int64_t>(1, (int64_t(1) << 28) / (acc_bytes * p.Cout * p.kh * p.kw)));
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(tiles, 65535));
  a.tiles_per_split = int((tiles + splits - 1) / splits);
  l.splits = (tiles + a.tiles_per_split - 1) / a.tiles_per_split;
  return l.cblocks < (int64_t(1) << 31) - 1;
}

template <typename T>
cudaError_t run(const DirectGradParams& prm, bool chan_last, cudaStream_t st) {
  using Acc = typename AccOf<T>::type;
  WdwArgs a;
  WdwLaunch l;
  // The tiling from wdw_plan, the split from wgrad_depthwise_plan (prm: its splits and tiles
  // per split).
  if (!wdw_plan(prm.p, chan_last, int(sizeof(Acc)), 1, a, l) || prm.pix_per_split <= 0 ||
      prm.splits != (a.tiles + prm.pix_per_split - 1) / prm.pix_per_split)
    return cudaErrorInvalidValue;
  a.tiles_per_split = int(prm.pix_per_split);
  l.splits = prm.splits;
  a.x = prm.x;
  a.go = prm.gout;
  a.ws = prm.workspace;
  decltype(&wgrad_dw_tiled_kernel<T, 1, 4>) kern = nullptr;
  if (l.cb == 32) kern = l.kwt == 4 ? wgrad_dw_tiled_kernel<T, 32, 4> : wgrad_dw_tiled_kernel<T, 32, 8>;
  else if (l.cb == 8) kern = l.kwt == 4 ? wgrad_dw_tiled_kernel<T, 8, 4> : wgrad_dw_tiled_kernel<T, 8, 8>;
  else kern = l.kwt == 4 ? wgrad_dw_tiled_kernel<T, 1, 4> : wgrad_dw_tiled_kernel<T, 1, 8>;
  if (l.smem > size_t(48 * 1024)) {
    // The device's limit, not this launch's size: a launch from another host thread between
    // this set and this launch cannot lower it.
    const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(dw_smem_optin()));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(unsigned(l.cblocks), unsigned(l.splits));
  kern<<<grid, kThreads, l.smem, st>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool wgrad_depthwise_tiled_supported(const Problem& p, DType dt, bool chan_last) {
  WdwArgs a;
  WdwLaunch l;
  return wdw_plan(p, chan_last, dt == DType::kDouble ? 8 : 4, 1, a, l);
}

DirectWgradPlan wgrad_depthwise_tiled_plan(const Problem& p, bool chan_last, DType dt,
                                           int num_sms) {
  WdwArgs a;
  WdwLaunch l;
  DirectWgradPlan plan;
  if (!wdw_plan(p, chan_last, dt == DType::kDouble ? 8 : 4, num_sms, a, l)) return plan;
  plan.splits = l.splits;
  plan.pix_per_split = a.tiles_per_split;  // tiles per split
  plan.ws_elems = l.splits * p.Cout * p.kh * p.kw;
  return plan;
}

cudaError_t launch_wgrad_depthwise_tiled(const DirectGradParams& prm, bool chan_last, DType dt,
                                         cudaStream_t st) {
  const cudaError_t e = DTYPE_SWITCH(dt, T, [&] { return run<T>(prm, chan_last, st); });
  if (e != cudaSuccess) return e;
  return launch_wgrad_split_sum(prm.workspace, prm.gw, prm.splits,
                                prm.p.Cout * prm.p.kh * prm.p.kw, dt, st);
}

}  // namespace cuda
}  // namespace convt2d
