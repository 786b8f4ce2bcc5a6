// NCHW -> NHWC copy for the tensor-core kernels' channels-last operand:
// 64 pixels x 64 channels per block through shared memory, so both the reads
// (along pixels) and the writes (along channels) are coalesced. When C and
// H*W are multiples of 4 (and the pointers aligned), each thread moves 4
// elements per access (8- or 16-byte vectors): the scalar version was
// issue-bound at ~1.1 TB/s (bf16 input 64 x 64 x 128 x 256: 0.46 ms for 0.52 GB).
#include "cuda/common/kernels.h"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/fast_div.cuh"
#include "cuda/common/ptx.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

namespace convt2d {
namespace cuda {
namespace {

constexpr int kTile = 64;

template <typename U>  // U: an unsigned integer of the element's size
__global__ void __launch_bounds__(256) nchw_to_nhwc_kernel(const U* __restrict__ src,
                                                           U* __restrict__ dst, int64_t C,
                                                           int64_t HW) {
  __shared__ U tile[kTile][kTile + 1];
  const int64_t n = blockIdx.z;
  const int64_t p0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  const U* s = src + n * C * HW;
  U* d = dst + n * C * HW;
  for (int i = threadIdx.x; i < kTile * kTile; i += 256) {
    const int c = i / kTile, q = i % kTile;  // lanes along pixels
    if (c0 + c < C && p0 + q < HW) tile[c][q] = s[(c0 + c) * HW + p0 + q];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTile * kTile; i += 256) {
    const int q = i / kTile, c = i % kTile;  // lanes along channels
    if (c0 + c < C && p0 + q < HW) d[(p0 + q) * C + c0 + c] = tile[c][q];
  }
}

// Gated copy (launch_nchw_to_nhwc_if, the 3xTF32 fallback's operand when the 3xFP16 kernel
// read NCHW x itself): the generic kernel's 64 x 64 tiles in a grid-stride loop over (tile,
// image), every block exiting at once when *run_if == 0.
__global__ void __launch_bounds__(256) nchw_to_nhwc_if_kernel(const uint32_t* __restrict__ src,
                                                              uint32_t* __restrict__ dst,
                                                              int64_t N, int64_t C, int64_t HW,
                                                              const int* run_if) {
  if (*reinterpret_cast<const volatile int*>(run_if) == 0) return;
  __shared__ uint32_t tile[kTile][kTile + 1];
  const int64_t tp = (HW + kTile - 1) / kTile, tc = (C + kTile - 1) / kTile;
  for (int64_t b = blockIdx.x; b < tp * tc * N; b += gridDim.x) {
    const int64_t n = b / (tp * tc), rem = b - n * tp * tc;
    const int64_t c0 = rem / tp * kTile, p0 = rem % tp * kTile;
    const uint32_t* s = src + n * C * HW;
    uint32_t* d = dst + n * C * HW;
    __syncthreads();  // the previous tile's reads of `tile` are done
    for (int i = threadIdx.x; i < kTile * kTile; i += 256) {
      const int c = i / kTile, q = i % kTile;
      if (c0 + c < C && p0 + q < HW) tile[c][q] = s[(c0 + c) * HW + p0 + q];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * kTile; i += 256) {
      const int q = i / kTile, c = i % kTile;
      if (c0 + c < C && p0 + q < HW) d[(p0 + q) * C + c0 + c] = tile[c][q];
    }
  }
}

template <typename U> struct Vec4;
template <> struct Vec4<uint16_t> { using type = uint2; };
template <> struct Vec4<uint32_t> { using type = uint4; };

// Second half of both vector kernels: the staged tile[channel][pixel] (pr pixels, cr
// channels, cr % 4 == 0) to NHWC rows d[pixel * C + channel], 4-channel vectors, lanes
// along channels.
template <typename U>
__device__ __forceinline__ void store_tile_c4(const U (&tile)[kTile][kTile + 2], U* d, int64_t C,
                                              int pr, int cr) {
  using V = typename Vec4<U>::type;
  constexpr int VPR = kTile / 4;  // vectors per tile row
#pragma unroll
  for (int it = 0; it < kTile * VPR / 256; ++it) {
    const int i = threadIdx.x + it * 256;
    const int q = i / VPR, c = (i % VPR) * 4;
    if (c < cr && q < pr) {
      union { V v; U e[4]; } u;
#pragma unroll
      for (int j = 0; j < 4; ++j) u.e[j] = tile[c + j][q];
      *reinterpret_cast<V*>(d + q * C + c) = u.v;
    }
  }
}

// Any H*W (e.g. odd: a grad_output of 257 x 766), C % 4 == 0: scalar reads along
// pixels (a channel row's start is not vector-aligned), 4-channel vector writes; the 16
// reads per thread unrolled with pointer steps (the generic kernel above spent its issue
// slots on 64-bit index math: 1.4 TB/s on that 0.8 GB grad_output).
template <typename U>
__global__ void __launch_bounds__(256) nchw_to_nhwc_c4_kernel(const U* __restrict__ src,
                                                              U* __restrict__ dst, int64_t C,
                                                              int64_t HW) {
  __shared__ U tile[kTile][kTile + 2];
  const int64_t n = blockIdx.z;
  const int64_t p0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  const int pr = int(HW - p0 < kTile ? HW - p0 : kTile);
  const int cr = int(C - c0 < kTile ? C - c0 : kTile);  // a multiple of 4
  const int q = threadIdx.x & (kTile - 1), cb = threadIdx.x >> 6;  // 4 channel rows per pass
  const U* s = src + (n * C + c0 + cb) * HW + p0 + q;
  const int64_t step = 4 * HW;
  U v[kTile / 4];
#pragma unroll
  for (int it = 0; it < kTile / 4; ++it) {
    const int c = cb + 4 * it;
    v[it] = (q < pr && c < cr) ? s[it * step] : U(0);
  }
#pragma unroll
  for (int it = 0; it < kTile / 4; ++it) tile[cb + 4 * it][q] = v[it];
  __syncthreads();
  store_tile_c4<U>(tile, dst + (n * HW + p0) * C + c0, C, pr, cr);
}

template <typename U>
__global__ void __launch_bounds__(256) nchw_to_nhwc_vec_kernel(const U* __restrict__ src,
                                                               U* __restrict__ dst, int64_t C,
                                                               int64_t HW) {
  using V = typename Vec4<U>::type;
  __shared__ U tile[kTile][kTile + 2];  // +2: rows stay 4-byte aligned, banks spread
  const int64_t n = blockIdx.z;
  const int64_t p0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  const U* s = src + n * C * HW + c0 * HW + p0;
  U* d = dst + n * C * HW + p0 * C + c0;
  const int64_t pr = HW - p0, cr = C - c0;  // pixels / channels left (multiples of 4)
  constexpr int VPR = kTile / 4;            // vectors per tile row
#pragma unroll
  for (int it = 0; it < kTile * VPR / 256; ++it) {
    const int i = threadIdx.x + it * 256;
    const int c = i / VPR, q = (i % VPR) * 4;  // lanes along pixels
    if (c < cr && q < pr) {
      union { V v; U e[4]; } u;
      u.v = *reinterpret_cast<const V*>(s + c * HW + q);
#pragma unroll
      for (int j = 0; j < 4; ++j) tile[c][q + j] = u.e[j];
    }
  }
  __syncthreads();
  store_tile_c4<U>(tile, d, C, int(pr < kTile ? pr : kTile), int(cr < kTile ? cr : kTile));
}

template <typename U>
cudaError_t run(const void* src, void* dst, int64_t N, int64_t C, int64_t HW, cudaStream_t st) {
  const int64_t gx = (HW + kTile - 1) / kTile, gy = (C + kTile - 1) / kTile;
  if (gx > 0x7fffffffLL || gy > 65535 || N > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid{unsigned(gx), unsigned(gy), unsigned(N)};
  if constexpr (sizeof(U) <= 4) {
    constexpr uintptr_t va = 4 * sizeof(U);
    if (C % 4 == 0 && HW % 4 == 0 && reinterpret_cast<uintptr_t>(src) % va == 0 &&
        reinterpret_cast<uintptr_t>(dst) % va == 0) {
      nchw_to_nhwc_vec_kernel<U><<<grid, 256, 0, st>>>(static_cast<const U*>(src),
                                                        static_cast<U*>(dst), C, HW);
      return cudaGetLastError();
    }
    if (C % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % va == 0) {
      nchw_to_nhwc_c4_kernel<U><<<grid, 256, 0, st>>>(static_cast<const U*>(src),
                                                       static_cast<U*>(dst), C, HW);
      return cudaGetLastError();
    }
  }
  nchw_to_nhwc_kernel<U><<<grid, 256, 0, st>>>(static_cast<const U*>(src), static_cast<U*>(dst),
                                               C, HW);
  return cudaGetLastError();
}

// Tap gather of grad_output for the backward: dst[n][y][x][g*Kgp + j] with j = c*kk + ky*kw +
// kx (c an output channel of group g) = gout[n][g*Cout_g + c][y*sh - ph + ky*dh][x*sw - pw +
// kx*dw] (zero outside, and zero for the padding columns Kg <= j < Kgp), channels-last, so
// both gradients become 1x1 problems over C2 = groups*Kgp channels (no more taps than stride
// phases: a permutation of grad_output; overlapping taps: its im2col). grad_output is read
// through its strides (NCHW or channels-last). A block gathers 64 pixels of one image
// (flattened y*W + x, so that small images fill the tile) and 64 channels c2: a per-channel
// table (channel plane, row and column offsets) first, then 16 reads per thread with lanes
// along the pixels (stride sw within a row; the other taps of the same columns hit L1), and
// the tile leaves as 4-channel vectors (store_tile_c4).
struct TapGatherArgs {
  int64_t Ho, Wo, HW, C2, W;
  int64_t sN, sC, sH, sW;  // grad_output's strides (elements)
  int64_t Kg, Kgp, cout_g;  // gathered columns per group, padded to Kgp
  int kk, kw, sh, sw, ph, pw, dh, dw;
};

// kUnitW: grad_output's W stride is 1 (NCHW), the index math of the contiguous case.
template <typename U, bool kUnitW>
__global__ void __launch_bounds__(256) tap_gather_kernel(const U* __restrict__ src,
                                                         U* __restrict__ dst, TapGatherArgs a) {
  __shared__ U tile[kTile][kTile + 2];
  __shared__ int64_t plane[kTile];
  __shared__ int rowoff[kTile], coloff[kTile];
  const int64_t n = blockIdx.z, p0 = int64_t(blockIdx.x) * kTile;
  const int64_t c0 = int64_t(blockIdx.y) * kTile;
  const int pr = int(a.HW - p0 < kTile ? a.HW - p0 : kTile);
  const int cr = int(a.C2 - c0 < kTile ? a.C2 - c0 : kTile);  // a multiple of 4
  if (threadIdx.x < kTile) {
    const int c = threadIdx.x;
    int64_t pl = -1;
    int ry = 0, cx = 0;
    const int64_t cc = c0 + c, g = cc / a.Kgp, j = cc - g * a.Kgp;
    if (c < cr && j < a.Kg) {
      const int64_t cg = j / a.kk;
      const int t = int(j - cg * a.kk), ky = t / a.kw, kx = t - ky * a.kw;
      pl = n * a.sN + (g * a.cout_g + cg) * a.sC;
      ry = ky * a.dh - a.ph;
      cx = kx * a.dw - a.pw;
    }
    plane[c] = pl;
    rowoff[c] = ry;
    coloff[c] = cx;
  }
  __syncthreads();
  const int q = threadIdx.x & (kTile - 1), cb = threadIdx.x >> 6;  // 4 channel rows per pass
  const int64_t pix = p0 + q, y = pix / a.W, ys = y * a.sh, xs = (pix - y * a.W) * a.sw;
  U v[kTile / 4];
#pragma unroll
  for (int it = 0; it < kTile / 4; ++it) {
    const int c = cb + 4 * it;
    const int64_t pl = plane[c], iy = ys + rowoff[c], ix = xs + coloff[c];
    v[it] = (q < pr && pl >= 0 && iy >= 0 && iy < a.Ho && ix >= 0 && ix < a.Wo)
                ? src[pl + iy * a.sH + (kUnitW ? ix : ix * a.sW)]
                : U(0);
  }
#pragma unroll
  for (int it = 0; it < kTile / 4; ++it) tile[cb + 4 * it][q] = v[it];
  __syncthreads();
  store_tile_c4<U>(tile, dst + (n * a.HW + p0) * a.C2 + c0, a.C2, pr, cr);
}

template <typename U>
cudaError_t run_tap_gather(const void* src, const int64_t (&strides)[4], void* dst,
                           const Problem& p, int64_t kgp, cudaStream_t st) {
  TapGatherArgs a;
  a.Ho = p.Ho; a.Wo = p.Wo; a.HW = p.H * p.W; a.W = p.W;
  a.sN = strides[0]; a.sC = strides[1]; a.sH = strides[2]; a.sW = strides[3];
  a.kk = int(p.kh * p.kw); a.kw = int(p.kw);
  a.cout_g = p.cout_g(); a.Kg = a.cout_g * a.kk; a.Kgp = kgp; a.C2 = p.groups * kgp;
  a.sh = int(p.sh); a.sw = int(p.sw); a.ph = int(p.ph); a.pw = int(p.pw);
  a.dh = int(p.dh); a.dw = int(p.dw);
  const int64_t gx = (a.HW + kTile - 1) / kTile, gy = (a.C2 + kTile - 1) / kTile;
  constexpr uintptr_t va = 4 * sizeof(U);
  if (a.C2 % 4 || kgp < a.Kg || gx > 0x7fffffffLL || gy > 65535 || p.N > 65535 ||
      reinterpret_cast<uintptr_t>(dst) % va)
    return cudaErrorInvalidValue;
  const dim3 grid(unsigned(gx), unsigned(gy), unsigned(p.N));
  if (a.sW == 1)
    tap_gather_kernel<U, true><<<grid, 256, 0, st>>>(static_cast<const U*>(src),
                                                      static_cast<U*>(dst), a);
  else
    tap_gather_kernel<U, false><<<grid, 256, 0, st>>>(static_cast<const U*>(src),
                                                       static_cast<U*>(dst), a);
  return cudaGetLastError();
}

// 3xTF32 weight halves for the halo kernel (implicit_gemm/igemm_halo_sm90.cu), and the flag that sends
// its items to the careful sum.
__global__ void __launch_bounds__(256) split_tf32_kernel(const float* __restrict__ src,
                                                         float* __restrict__ hi,
                                                         float* __restrict__ lo, int64_t n,
                                                         int* __restrict__ flag) {
  bool bad = false;
  for (int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x; i < n; i += int64_t(gridDim.x) * 256) {
    const float v = src[i];
    bad |= !(fabsf(v) < 0x1p60f);
    uint32_t h = __float_as_uint(v), l;
    split_tf32(h, l);
    hi[i] = __uint_as_float(h);
    lo[i] = __uint_as_float(l);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1);
}

// 3xFP16 weight split (launch_split_f16): one block per GEMM column (g, n) of the packed
// weight [G][kk][Nc][Kc]: the column's largest |w| gives its scale 2^s, then the column's
// scaled values are split into fp16 halves.
__global__ void __launch_bounds__(128) split_f16_kernel(const float* __restrict__ src,
                                                        __half* __restrict__ hi,
                                                        __half* __restrict__ lo, int64_t kk,
                                                        int64_t nc, int64_t kc,
                                                        int* __restrict__ scale,
                                                        int* __restrict__ flag) {
  __shared__ uint32_t wmax[4];
  const int64_t g = blockIdx.x / nc, n = blockIdx.x - g * nc;
  const int64_t per = kk * kc;
  const int64_t base = (g * kk * nc + n) * kc;
  auto at = [&](int64_t i) {  // i-th element of the column: tap i / kc, channel i % kc
    const int64_t tap = i / kc;
    return base + tap * nc * kc + (i - tap * kc);
  };
  uint32_t m = 0;
  for (int64_t i = threadIdx.x; i < per; i += 128) m = max(m, __float_as_uint(src[at(i)]) & 0x7fffffffu);
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31) == 0) wmax[threadIdx.x >> 5] = m;
  __syncthreads();
  m = max(max(wmax[0], wmax[1]), max(wmax[2], wmax[3]));
  bool bad = false;
  const int s = f16x3_scale(m, bad);
  if (threadIdx.x == 0) {
    scale[blockIdx.x] = s;
    if (bad) atomicOr(flag, 1);
  }
  const float sc = exp2i(s);
  for (int64_t i = threadIdx.x; i < per; i += 128) {
    const int64_t o = at(i);
    const float v = src[o] * sc;
    const __half h = __float2half_rn(v);
    hi[o] = h;
    lo[o] = __float2half_rn(v - __half2float(h));
  }
}

// Weight packing for the implicit GEMMs: out[g][c][b][a] = in[g][a][b][c] (reverses the
// three inner axes; with B = 1 a plain transpose of [A][C]). A block moves 32 a x TB b x
// all C (TB*C <= 64 where C allows) through shared memory, 8 loads in flight per thread:
// the reads are runs of TB*C contiguous elements, the writes 32 contiguous a per (c, b)
// line. Elements travel as U (their size); the shared tile is
// U-typed with an odd pitch so a warp's column reads do not conflict (2-byte U: pairs share
// a bank word, still at most 2-way).
template <typename U>
__global__ void __launch_bounds__(256) reverse3_kernel(const U* __restrict__ in,
                                                       U* __restrict__ out, int64_t A, int64_t B,
                                                       int C, int TB, int pitch) {
  extern __shared__ __align__(16) unsigned char rv_smem[];
  U* tile = reinterpret_cast<U*>(rv_smem);  // [32][pitch]
  const int64_t a0 = int64_t(blockIdx.x) * 32, b0 = int64_t(blockIdx.y) * TB;
  const int64_t g = blockIdx.z;
  const int na = A - a0 < 32 ? int(A - a0) : 32;
  const int nb = B - b0 < TB ? int(B - b0) : TB;
  const int run = nb * C;
  const U* src = in + ((g * A + a0) * B + b0) * C;
  const int total = na * run;
  constexpr int kIlp = 8;  // loads in flight per thread (one at a time was latency-bound)
  for (int i0 = threadIdx.x; i0 < total; i0 += kIlp * blockDim.x) {
    U v[kIlp];
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const int i = i0 + k * blockDim.x;
      const int a = i / run, r = i - a * run;
      if (i < total) v[k] = src[int64_t(a) * B * C + r];
    }
#pragma unroll
    for (int k = 0; k < kIlp; ++k) {
      const int i = i0 + k * blockDim.x;
      const int a = i / run, r = i - a * run;
      if (i < total) tile[a * pitch + r] = v[k];
    }
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  for (int line = warp; line < C * nb; line += nwarps) {
    const int c = line / nb, b = line - c * nb;
    if (lane < na) out[((g * C + c) * B + b0 + b) * A + a0 + lane] = tile[lane * pitch + b * C + c];
  }
}

template <typename U>
cudaError_t run_reverse3(const void* in, void* out, int64_t G, int64_t A, int64_t B, int64_t C,
                         cudaStream_t st) {
  if (C > 256) return cudaErrorInvalidValue;
  // 32 x (<= 64) elements per block: a 512 x 256 x 9 weight gives 592 blocks.
  const int64_t tb = std::max<int64_t>(1, std::min<int64_t>(B, 64 / C));
  const int64_t gx = (A + 31) / 32, gy = (B + tb - 1) / tb;
  if (gx > 0x7fffffffLL || gy > 65535 || G > 65535) return cudaErrorInvalidValue;
  const int pitch = int((tb * C) | 1);
  const size_t smem = size_t(32) * pitch * sizeof(U);
  reverse3_kernel<U><<<dim3(unsigned(gx), unsigned(gy), unsigned(G)), 256, smem, st>>>(
      static_cast<const U*>(in), static_cast<U*>(out), A, B, int(C), int(tb), pitch);
  return cudaGetLastError();
}

// dst[e] += bias[(e / inner) % C] in place, V elements (16 bytes) a thread where every
// vector lies in one channel (inner % V == 0) or runs over V consecutive channels (inner == 1,
// C % V == 0): the cuBLAS forward's bias (one pass, torch's broadcast add is not vectorised
// along a broadcast inner dimension). Sums in fp32 (fp64 for double), rounded once.
template <typename T> __device__ __forceinline__ T add_rounded(T a, T b) { return a + b; }
template <> __device__ __forceinline__ __half add_rounded(__half a, __half b) {
  return __float2half_rn(__half2float(a) + __half2float(b));
}
template <> __device__ __forceinline__ __nv_bfloat16 add_rounded(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__global__ void __launch_bounds__(256) add_bias_kernel(T* __restrict__ dst,
                                                       const T* __restrict__ bias, int64_t nvec,
                                                       int64_t C, int64_t inner) {
  for (int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x; i < nvec;
       i += int64_t(gridDim.x) * 256) {
    Pack<T, V> p = reinterpret_cast<Pack<T, V>*>(dst)[i];
    const int64_t c0 = (i * V / inner) % C;
#pragma unroll
    for (int j = 0; j < V; ++j) p.v[j] = add_rounded(p.v[j], bias[inner == 1 ? c0 + j : c0]);
    reinterpret_cast<Pack<T, V>*>(dst)[i] = p;
  }
}

template <typename T>
cudaError_t run_add_bias(void* dst, const void* bias, int64_t numel, int64_t C, int64_t inner,
                         cudaStream_t st) {
  constexpr int V = 16 / sizeof(T);
  const bool vec = reinterpret_cast<uintptr_t>(dst) % 16 == 0 && numel % V == 0 &&
                   (inner % V == 0 || (inner == 1 && C % V == 0));
  const int64_t nvec = vec ? numel / V : numel;
  const int64_t blocks = std::min<int64_t>((nvec + 255) / 256, 132 * 16);
  if (vec)
    add_bias_kernel<T, V><<<unsigned(blocks), 256, 0, st>>>(
        static_cast<T*>(dst), static_cast<const T*>(bias), nvec, C, inner);
  else
    add_bias_kernel<T, 1><<<unsigned(blocks), 256, 0, st>>>(
        static_cast<T*>(dst), static_cast<const T*>(bias), nvec, C, inner);
  return cudaGetLastError();
}

// out[n][co][oy][ox] = bias[co] + the sum over the taps (ky, kx) that reach (oy, ox) of the
// GEMM result y = x * w (col2im): tap ky reaches output row oy from input row
// iy = (oy + ph - ky*dh) / sh where that division is exact and 0 <= iy < H. y's element
// (n, co, tap = ky*kw + kx, pixel = iy*W + ix) lies at n*ysn + co*ysc + tap*yst + pixel*ysp.
// The taps of a row form an arithmetic sequence: from first[r] (r = (oy + ph) mod sh, the
// host's table) in steps of step, the input row falling by di each step. One thread per
// output element, in the output's memory order (grid-stride), summed in tap order in Acc
// (deterministic), rounded once.
// The kernel's arguments: the caller's, the divisors of the index decode and the tap tables.
struct Col2imPlan {
  static constexpr int kMaxStride = 16;
  Col2imArgs args;
  int64_t numel = 0;
  FastDiv div_c, div_h, div_w, div_sh, div_sw;
  int32_t first_y[kMaxStride], skip_y[kMaxStride], first_x[kMaxStride], skip_x[kMaxStride];
  int32_t step_y = 1, di_y = 0, step_x = 1, di_x = 0;
};

template <typename T, typename Y, typename Acc>
__global__ void __launch_bounds__(256) col2im_taps_kernel(Col2imPlan a, const Y* __restrict__ y,
                                                          const T* __restrict__ bias,
                                                          T* __restrict__ out) {
  const Problem& p = a.args.p;
  const uint32_t total = uint32_t(a.numel);
  for (uint32_t e = blockIdx.x * 256u + threadIdx.x; e < total; e += gridDim.x * 256u) {
    uint32_t n, co, oy, ox, r;
    if (a.args.chan_last) {  // e = ((n * Ho + oy) * Wo + ox) * Cout + co
      a.div_c.divmod(e, r, co);
      a.div_w.divmod(r, r, ox);
      a.div_h.divmod(r, n, oy);
    } else {  // e = ((n * Cout + co) * Ho + oy) * Wo + ox
      a.div_w.divmod(e, r, ox);
      a.div_h.divmod(r, r, oy);
      a.div_c.divmod(r, n, co);
    }
    Acc v = bias ? Acc(bias[co]) : Acc(0);
    const Col2imArgs& g = a.args;
    const Y* yb = y + int64_t(n) * g.ysn + int64_t(co) * g.ysc;
    uint32_t qy, ry, qx, rx;
    a.div_sh.divmod(oy + uint32_t(p.ph), qy, ry);
    a.div_sw.divmod(ox + uint32_t(p.pw), qx, rx);
    // first tap ky and its input row; both sequences run while the tap is in the kernel and
    // the input row is not negative
    int ky = a.first_y[ry];
    int iy = int(qy) - a.skip_y[ry];
    const int kx0 = a.first_x[rx];
    const int ix0 = int(qx) - a.skip_x[rx];
    for (; ky < p.kh && iy >= 0; ky += a.step_y, iy -= a.di_y) {
      if (iy >= p.H) continue;
      const Y* yr = yb + int64_t(ky * p.kw) * g.yst + int64_t(iy) * p.W * g.ysp;
      for (int kx = kx0, ix = ix0; kx < p.kw && ix >= 0; kx += a.step_x, ix -= a.di_x)
        if (ix < p.W) v += Acc(yr[int64_t(kx) * g.yst + int64_t(ix) * g.ysp]);
    }
    out[int64_t(n) * g.out.sn + int64_t(co) * g.out.sc + int64_t(oy) * g.out.sh +
        int64_t(ox) * g.out.sw] = T(v);
  }
}

template <typename T, typename Y, typename Acc>
cudaError_t run_col2im_taps(const Col2imPlan& a, const void* y, const void* bias,
                            cudaStream_t st) {
  const int64_t blocks = std::min<int64_t>((a.numel + 255) / 256, 132 * 32);
  col2im_taps_kernel<T, Y, Acc><<<unsigned(blocks), 256, 0, st>>>(
      a, static_cast<const Y*>(y), static_cast<const T*>(bias), static_cast<T*>(a.args.out.ptr));
  return cudaGetLastError();
}

// One dimension's tap table (make_phase_dim per residue r of (o + pad) mod s): the first tap
// k with k*d = r (mod s), or k = kernel (none), and how far its input index lies below
// (o + pad) / s; taps then step by s / gcd(s, d), the input index falling by step*d / s.
bool tap_table(int64_t s, int64_t d, int64_t k, int32_t* first, int32_t* skip, int32_t& step,
               int32_t& di) {
  if (s < 1 || s > Col2imPlan::kMaxStride || d < 1 || k < 1) return false;
  for (int64_t r = 0; r < s; ++r) {
    const PhaseDim pd = make_phase_dim(r, s, 0, d, k, 1);
    first[r] = int32_t(pd.ntap > 0 ? pd.k0 : k);
    skip[r] = int32_t(pd.koff0);
    step = int32_t(pd.kstep);
    di = int32_t(pd.koff_step);
  }
  return true;
}

}  // namespace

cudaError_t launch_col2im_taps(const Col2imArgs& args, const void* y, const void* bias,
                               DType dt, bool y_float, cudaStream_t st) {
  Col2imPlan a;
  a.args = args;
  const Problem& p = args.p;
  a.numel = p.N * p.Cout * p.Ho * p.Wo;
  if (a.numel == 0) return cudaSuccess;
  if (a.numel > 0x7fffffffLL || p.Ho + p.ph > 0x7fffffffLL || p.Wo + p.pw > 0x7fffffffLL ||
      !tap_table(p.sh, p.dh, p.kh, a.first_y, a.skip_y, a.step_y, a.di_y) ||
      !tap_table(p.sw, p.dw, p.kw, a.first_x, a.skip_x, a.step_x, a.di_x))
    return cudaErrorInvalidValue;
  a.div_c = FastDiv(uint32_t(p.Cout));
  a.div_h = FastDiv(uint32_t(p.Ho));
  a.div_w = FastDiv(uint32_t(p.Wo));
  a.div_sh = FastDiv(uint32_t(p.sh));
  a.div_sw = FastDiv(uint32_t(p.sw));
  switch (dt) {
    case DType::kHalf:
      return y_float ? run_col2im_taps<__half, float, float>(a, y, bias, st)
                     : run_col2im_taps<__half, __half, float>(a, y, bias, st);
    case DType::kBFloat16:
      return y_float ? run_col2im_taps<__nv_bfloat16, float, float>(a, y, bias, st)
                     : run_col2im_taps<__nv_bfloat16, __nv_bfloat16, float>(a, y, bias, st);
    case DType::kFloat: return run_col2im_taps<float, float, float>(a, y, bias, st);
    case DType::kDouble: return run_col2im_taps<double, double, double>(a, y, bias, st);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_add_bias(void* dst, const void* bias, int64_t numel, int64_t C, int64_t inner,
                            DType dt, cudaStream_t st) {
  if (numel == 0) return cudaSuccess;
  if (C <= 0 || inner <= 0) return cudaErrorInvalidValue;
  return DTYPE_SWITCH(dt, T, [&] { return run_add_bias<T>(dst, bias, numel, C, inner, st); });
}

cudaError_t launch_split_tf32(const float* src, float* hi, float* lo, int64_t n, int* flag,
                              cudaStream_t st) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 1024);
  split_tf32_kernel<<<unsigned(blocks), 256, 0, st>>>(src, hi, lo, n, flag);
  return cudaGetLastError();
}

cudaError_t launch_split_f16(const float* src, void* hi, void* lo, int64_t groups, int64_t kk,
                             int64_t nc, int64_t kc, int* scale, int* flag, cudaStream_t st) {
  if (groups * nc == 0 || kk * kc == 0) return cudaSuccess;
  if (groups * nc > 0x7fffffffLL) return cudaErrorInvalidValue;
  split_f16_kernel<<<unsigned(groups * nc), 128, 0, st>>>(src, static_cast<__half*>(hi),
                                                         static_cast<__half*>(lo), kk, nc, kc,
                                                         scale, flag);
  return cudaGetLastError();
}

cudaError_t launch_nchw_to_nhwc(const void* src, void* dst, int64_t N, int64_t C, int64_t HW,
                                int elem_bytes, cudaStream_t st) {
  if (N == 0 || C == 0 || HW == 0) return cudaSuccess;
  switch (elem_bytes) {
    case 2: return run<uint16_t>(src, dst, N, C, HW, st);
    case 4: return run<uint32_t>(src, dst, N, C, HW, st);
    case 8: return run<uint64_t>(src, dst, N, C, HW, st);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_nchw_to_nhwc_if(const void* src, void* dst, int64_t N, int64_t C, int64_t HW,
                                   const int* run_if, cudaStream_t st) {
  if (N == 0 || C == 0 || HW == 0) return cudaSuccess;
  const int64_t tiles = (HW + kTile - 1) / kTile * ((C + kTile - 1) / kTile) * N;
  const unsigned blocks = unsigned(std::min<int64_t>(tiles, 1024));
  nchw_to_nhwc_if_kernel<<<blocks, 256, 0, st>>>(static_cast<const uint32_t*>(src),
                                                 static_cast<uint32_t*>(dst), N, C, HW, run_if);
  return cudaGetLastError();
}

cudaError_t fill_src_nhwc(const IgemmParams& prm, const int* run_if, cudaStream_t st) {
  if (!prm.src_nchw.ptr) return cudaSuccess;
  const Problem& p = prm.p;
  return run_if ? launch_nchw_to_nhwc_if(prm.src_nchw.ptr, prm.src.ptr, p.N, p.Cin, p.H * p.W,
                                         run_if, st)
                : launch_nchw_to_nhwc(prm.src_nchw.ptr, prm.src.ptr, p.N, p.Cin, p.H * p.W, 4, st);
}

cudaError_t launch_tap_gather(const void* gout, const int64_t (&strides)[4], void* dst,
                              const Problem& p, int64_t kgp, int elem_bytes, cudaStream_t st) {
  if (p.N == 0 || p.H == 0 || p.W == 0 || p.Cout == 0) return cudaSuccess;
  switch (elem_bytes) {
    case 2: return run_tap_gather<uint16_t>(gout, strides, dst, p, kgp, st);
    case 4: return run_tap_gather<uint32_t>(gout, strides, dst, p, kgp, st);
  }
  return cudaErrorInvalidValue;
}

// The direct tensor-core forward's weight (pack_direct_weight in kernels.h): one thread per
// packed element, the group's weight read where it lies (small: mostly L2 hits).
template <typename U>
__global__ void __launch_bounds__(256) pack_direct_weight_kernel(
    const U* __restrict__ w, U* __restrict__ out, int64_t total, int64_t Cig, int64_t Cog,
    int64_t kk, int64_t kc, int64_t ke, int64_t nch, int64_t ncob) {
  for (int64_t o = int64_t(blockIdx.x) * 256 + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * 256) {
    int64_t r = o;
    const int64_t e = r % ke; r /= ke;
    const int64_t c = r % kc; r /= kc;
    const int64_t ch = r % nch; r /= nch;
    const int64_t t = r % kk; r /= kk;
    const int64_t cb = r % ncob, g = r / ncob;
    const int64_t ci = ch * ke + e, co = cb * kc + c;
    out[o] = ci < Cig && co < Cog ? w[((g * Cig + ci) * Cog + co) * kk + t] : U(0);
  }
}

cudaError_t launch_pack_direct_weight(const void* w, void* out, int64_t G, int64_t Cig,
                                      int64_t Cog, int64_t kk, int64_t kc, int64_t ke,
                                      int elem_bytes, cudaStream_t st) {
  const int64_t nch = (Cig + ke - 1) / ke, ncob = (Cog + kc - 1) / kc;
  const int64_t total = G * ncob * kk * nch * kc * ke;
  if (total == 0) return cudaSuccess;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 4096));
  switch (elem_bytes) {
    case 2:
      pack_direct_weight_kernel<uint16_t><<<blocks, 256, 0, st>>>(
          static_cast<const uint16_t*>(w), static_cast<uint16_t*>(out), total, Cig, Cog, kk, kc,
          ke, nch, ncob);
      return cudaGetLastError();
    case 4:
      pack_direct_weight_kernel<uint32_t><<<blocks, 256, 0, st>>>(
          static_cast<const uint32_t*>(w), static_cast<uint32_t*>(out), total, Cig, Cog, kk, kc,
          ke, nch, ncob);
      return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_reverse3(const void* in, void* out, int64_t G, int64_t A, int64_t B,
                            int64_t C, int elem_bytes, cudaStream_t st) {
  if (G == 0 || A == 0 || B == 0 || C == 0) return cudaSuccess;
  switch (elem_bytes) {
    case 2: return run_reverse3<uint16_t>(in, out, G, A, B, C, st);
    case 4: return run_reverse3<uint32_t>(in, out, G, A, B, C, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace convt2d
