// NCHW -> NHWC copy for the tensor-core kernels' channels-last operand:
// 64 pixels x 64 channels per block through shared memory, so both the reads
// (along pixels) and the writes (along channels) are coalesced. When C and
// H*W are multiples of 4 (and the pointers aligned), each thread moves 4
// elements per access (8- or 16-byte vectors): the scalar version was
// issue-bound at ~1.1 TB/s (seedA bf16: 0.46 ms for 0.52 GB).
#include "cuda/kernels.h"
#include "cuda/ptx.cuh"
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

template <typename U> struct Vec4;
template <> struct Vec4<uint16_t> { using type = uint2; };
template <> struct Vec4<uint32_t> { using type = uint4; };

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
#pragma unroll
  for (int it = 0; it < kTile * VPR / 256; ++it) {
    const int i = threadIdx.x + it * 256;
    const int q = i / VPR, c = (i % VPR) * 4;  // lanes along channels
    if (c < cr && q < pr) {
      union { V v; U e[4]; } u;
#pragma unroll
      for (int j = 0; j < 4; ++j) u.e[j] = tile[c + j][q];
      *reinterpret_cast<V*>(d + q * C + c) = u.v;
    }
  }
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
  }
  nchw_to_nhwc_kernel<U><<<grid, 256, 0, st>>>(static_cast<const U*>(src), static_cast<U*>(dst),
                                               C, HW);
  return cudaGetLastError();
}

// 3xTF32 weight halves for the halo kernel (tc_halo.cu), and the flag that sends
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

}  // namespace

cudaError_t launch_split_tf32(const float* src, float* hi, float* lo, int64_t n, int* flag,
                              cudaStream_t st) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 1024);
  split_tf32_kernel<<<unsigned(blocks), 256, 0, st>>>(src, hi, lo, n, flag);
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

}  // namespace cuda
}  // namespace convt2d
