// The depthwise forward / grad_input kernel (common/depthwise.cuh says what it computes and how
// the walk is laid out). CB channels per block: 1 for NCHW (the 256 threads are item lanes,
// consecutive lanes on consecutive items of a row; staged loads and the staged outputs' stores
// run along rows) and 8 or 32 for channels-last and for NCHW planes of a few outputs (a lane per
// channel, 256/CB item lanes; dw_plan). ONE: the forward's CB channels all read one plane (the
// outputs per input channel a multiple of CB), staged once for all lanes (SC = 1 staged value
// per position, read by a warp's lanes as a broadcast) rather than once per lane (SC = CB).
#include "cuda/common/depthwise.cuh"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/mma_core.cuh"

namespace convt2d {
namespace cuda {
namespace {

constexpr int kDwKMax = 8;  // taps per register window (longer rows take several)
constexpr int kDwLoads = 8; // staging loads in flight per thread

// The taps of one item whose column reads step by one per tap (Ct = +-1) and by A per output:
// per tap row and chunk of up to kDwKMax taps, the (V-1)*A + taps staged values it reads are
// loaded once into registers, so each tap costs a weight load and V FMAs.
// si: staged index of tap row 0, tap 0, output 0 (lane included); wi: the weight index of
// tap (0, 0); per tap row the staged index steps by sy_step and the weight's by wy_step.
template <typename Acc, int SC, int V, int A>
__device__ __forceinline__ void dw_item_window(Acc (&acc)[V], const Acc* s_in, const Acc* s_w,
                                               int si, int wi, int nty, int sy_step, int wy_step,
                                               int ntx, int ct, int wx_step) {
  constexpr int W = (V - 1) * A + kDwKMax;
  for (int t_y = 0; t_y < nty; ++t_y, si += sy_step, wi += wy_step) {
    for (int t0 = 0; t0 < ntx; t0 += kDwKMax) {
      const int tn = min(kDwKMax, ntx - t0);
      // Window offset u holds the staged value at base + u (in SC units); window offset tt
      // of the chunk's taps is tap t0 + tt (Ct = +1) or t0 + tn - 1 - tt (Ct = -1).
      const int base = si + (ct > 0 ? t0 : -(t0 + tn - 1)) * SC;
      Acc win[W];
#pragma unroll
      for (int u = 0; u < W; ++u)
        if (u < (V - 1) * A + tn) win[u] = s_in[base + u * SC];
#pragma unroll
      for (int tt = 0; tt < kDwKMax; ++tt) {
        if (tt >= tn) break;
        const int t = ct > 0 ? t0 + tt : t0 + tn - 1 - tt;
        const Acc wv = s_w[wi + t * wx_step];
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] += win[v * A + tt] * wv;
      }
    }
  }
}

// Any steps: a staged load per tap and output.
template <typename Acc, int V>
__device__ __forceinline__ void dw_item_generic(Acc (&acc)[V], const Acc* s_in, const Acc* s_w,
                                                int si, int wi, int nty, int sy_step,
                                                int wy_step, int ntx, int sx_step, int wx_step,
                                                int vstep) {
  for (int t_y = 0; t_y < nty; ++t_y, si += sy_step, wi += wy_step) {
    int sx = si, wx = wi;
    for (int t_x = 0; t_x < ntx; ++t_x, sx += sx_step, wx += wx_step) {
      const Acc wv = s_w[wx];
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] += s_in[sx + v * vstep] * wv;
    }
  }
}

// Three blocks per SM (two for fp64): at most 80 (128) registers, the windows included.
template <typename T, int CB, bool ONE>
__global__ void __launch_bounds__(kDwThreads, sizeof(typename AccOf<T>::type) == 8 ? 2 : 3)
    dw_tiled_kernel(const __grid_constant__ DwArgs a) {
  using Acc = typename AccOf<T>::type;
  constexpr int V = dw_v(CB), IT = 1;
  constexpr int SC = ONE ? 1 : CB;  // staged values per position
  const int nthr = int(blockDim.x), IL = nthr / CB;  // item lanes (NCHW blocks of small planes: 32+ threads)
  extern __shared__ __align__(16) unsigned char dw_smem[];
  Acc* s_in = reinterpret_cast<Acc*>(dw_smem);
  const int span_x = a.x.span, span_y = a.y.span;
  Acc* s_w = s_in + span_y * span_x * SC;
  Acc* s_out = s_w + a.kk * CB;
  int b = int(blockIdx.x);
  const int tx = b % a.x.tiles;
  b /= a.x.tiles;
  const int ty = b % a.y.tiles;
  b /= a.y.tiles;
  const int cg = b % a.cgroups;
  const int n = b / a.cgroups;
  const int q0y = a.y.q_first + ty * a.y.TQ, q0x = a.x.q_first + tx * a.x.TQ;
  const int iy_lo = q0y * a.y.in_mul + a.y.in_add, ix_lo = q0x * a.x.in_mul + a.x.in_add;
  const int cl = int(threadIdx.x) % CB, il = int(threadIdx.x) / CB;
  const int sl = ONE ? 0 : cl;  // this lane's staged value of a position
  const int c = cg * CB + cl;
  const bool c_ok = c < a.C;
  const T* __restrict__ in = static_cast<const T*>(a.in.ptr) + int64_t(n) * a.in.sn;
  const T* __restrict__ w = static_cast<const T*>(a.w);
  T* __restrict__ out = static_cast<T*>(a.out.ptr) + int64_t(n) * a.out.sn;
  const int Py = a.y.P, Px = a.x.P, XL = a.XL, TW = a.x.TQ * Px;
  // Column reads one staged position apart per tap, one or two per output: the register window.
  const int ax = a.x.A, ctx = a.x.Ct;
  const bool unit = (ctx == 1 || ctx == -1) && (ax == 1 || ax == 2);
  const int sy_step = a.y.Ct * span_x * SC, wy_step = a.y.kstep * a.kw * CB;
  const int sx_step = ctx * SC, wx_step = a.x.kstep * CB;
  const Acc bias_v = a.bias && c_ok ? Cvt<T>::to_acc(static_cast<const T*>(a.bias)[c]) : Acc(0);
  for (int ib = 0; ib < a.items; ib += IL * IT) {
    Acc acc[IT][V];
#pragma unroll
    for (int it = 0; it < IT; ++it)
#pragma unroll
      for (int v = 0; v < V; ++v) acc[it][v] = bias_v;
    for (int j = 0; j < a.mloop; ++j) {
      if (ib == 0 || a.mloop > 1) {
        if (ib > 0 || j > 0) __syncthreads();
        // The read plane and weight row of channel c: forward x[co / m] with w[co]; grad_input
        // go[c*m + j] with w[c*m + j].
        // (ONE: the block's one plane, cg*CB / m; its channels all exist, C a multiple of CB.)
        const int rc = ONE ? cg * CB / a.m : a.fwd ? c / a.m : c * a.m + j;
        const int wr = a.fwd ? c : c * a.m + j;
        for (int t = il; t < a.kk; t += IL)
          s_w[t * CB + cl] = c_ok ? Cvt<T>::to_acc(w[int64_t(wr) * a.kk + t]) : Acc(0);
        const T* plane = in + int64_t(rc) * a.in.sc;
        // The loads' lanes: each thread one position (ONE), or per channel lane its item lanes.
        const int ld = ONE ? int(threadIdx.x) : il, LN = ONE ? nthr : IL;
        // kDwLoads loads in flight per thread (a plane region per block: the loads' latency,
        // not their bandwidth, bounded a loop of one load at a time).
        const int npix = span_y * span_x;
        // Raw values, converted at the store: a conversion next to its (predicated) load
        // would wait for it before the next load issues.
        const T zero = Cvt<T>::from_acc(Acc(0));
        for (int p0 = ld; p0 < npix; p0 += LN * kDwLoads) {
          T vals[kDwLoads];
#pragma unroll
          for (int k = 0; k < kDwLoads; ++k) {
            const int pix = p0 + k * LN;
            vals[k] = zero;
            const int sy = pix / span_x, sx = pix - sy * span_x;
            const int iy = iy_lo + sy, ix = ix_lo + sx;
            if (pix < npix && (ONE || c_ok) && unsigned(iy) < unsigned(a.y.in_len) &&
                unsigned(ix) < unsigned(a.x.in_len))
              vals[k] = plane[int64_t(iy) * a.in.sh + int64_t(ix) * a.in.sw];
          }
#pragma unroll
          for (int k = 0; k < kDwLoads; ++k)
            if (p0 + k * LN < npix) s_in[(p0 + k * LN) * SC + sl] = Cvt<T>::to_acc(vals[k]);
        }
        __syncthreads();
      }
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        const int item = ib + il + it * IL;
        if (item >= a.items) break;
        const int xl = item % XL, r2 = item / XL;
        const int rx = r2 % Px, row = r2 / Px;
        const int ry = row % Py, qyl = row / Py;
        const int si =
            ((qyl * a.y.A + a.y.base[ry]) * span_x + xl * V * ax + a.x.base[rx]) * SC + sl;
        const int wi = (a.y.fk[ry] * a.kw + a.x.fk[rx]) * CB + cl;
        const int nty = a.y.nt[ry], ntx = a.x.nt[rx];
        if (unit && ax == 1)
          dw_item_window<Acc, SC, V, 1>(acc[it], s_in, s_w, si, wi, nty, sy_step, wy_step, ntx,
                                        ctx, wx_step);
        else if (unit)
          dw_item_window<Acc, SC, V, 2>(acc[it], s_in, s_w, si, wi, nty, sy_step, wy_step, ntx,
                                        ctx, wx_step);
        else
          dw_item_generic<Acc, V>(acc[it], s_in, s_w, si, wi, nty, sy_step, wy_step, ntx,
                                  sx_step, wx_step, ax * SC);
      }
    }
    // Store: channels-last straight to the tensor (a warp's lanes along channels); NCHW staged
    // in shared memory and written out row by row below (an item's outputs are consecutive).
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int item = ib + il + it * IL;
      if (item >= a.items) break;
      const int xl = item % XL, r2 = item / XL;
      const int rx = r2 % Px, row = r2 / Px;
      const int ry = row % Py, qyl = row / Py;
      const int oy = (q0y + qyl) * Py + ry - a.y.o_off;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int qxl = xl * V + v;
        if constexpr (CB == 1) {
          s_out[row * TW + qxl * Px + rx] = acc[it][v];
        } else {
          const int ox = (q0x + qxl) * Px + rx - a.x.o_off;
          if (c_ok && unsigned(oy) < unsigned(a.y.out_len) && unsigned(ox) < unsigned(a.x.out_len))
            out[int64_t(c) * a.out.sc + int64_t(oy) * a.out.sh + int64_t(ox) * a.out.sw] =
                Cvt<T>::from_acc(acc[it][v]);
        }
      }
    }
  }
  if constexpr (CB == 1) {
    __syncthreads();
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int oy0 = q0y * Py - a.y.o_off, ox0 = q0x * Px - a.x.o_off;
    T* plane = out + int64_t(c) * a.out.sc;
    for (int ly = warp; ly < a.y.TQ * Py; ly += nthr / 32) {
      const int oy = oy0 + ly;
      if (unsigned(oy) >= unsigned(a.y.out_len)) continue;
      for (int lx = lane; lx < TW; lx += 32) {
        const int ox = ox0 + lx;
        if (unsigned(ox) < unsigned(a.x.out_len))
          plane[int64_t(oy) * a.out.sh + int64_t(ox) * a.out.sw] = Cvt<T>::from_acc(s_out[ly * TW + lx]);
      }
    }
  }
}

template <typename T>
cudaError_t run(const DwArgs& a, const DwLaunch& l, cudaStream_t st) {
  if (l.blocks == 0) return cudaSuccess;
  auto kern = l.cb == 1   ? dw_tiled_kernel<T, 1, false>
              : l.cb == 8 ? (l.one_plane ? dw_tiled_kernel<T, 8, true> : dw_tiled_kernel<T, 8, false>)
                          : (l.one_plane ? dw_tiled_kernel<T, 32, true> : dw_tiled_kernel<T, 32, false>);
  if (l.smem > size_t(kDwSmemBytes)) {  // the smallest tile of a large dilated kernel
    // The device's limit, not this launch's size: a launch from another host thread between
    // this set and this launch cannot lower it.
    const cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(dw_smem_optin()));
    if (e != cudaSuccess) return e;
  }
  kern<<<unsigned(l.blocks), l.threads, l.smem, st>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_dw_tiled(const DwArgs& a, const DwLaunch& l, DType dt, cudaStream_t st) {
  return DTYPE_SWITCH(dt, T, [&] { return run<T>(a, l, st); });
}

}  // namespace cuda
}  // namespace convt2d
