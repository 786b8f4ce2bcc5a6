// PTX primitives shared by the mma.sync kernels (implicit_gemm/igemm_tensor_core.cu, grad_weight/wgrad_tensor_core.cu):
// cp.async, ldmatrix, tf32 rounding / 3xTF32 split, accumulator zeroing and one m16n8 mma step.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace convt2d {
namespace cuda {

// True in the host pass and in the sm_90a device pass: the passes in which the Hopper
// kernels (wgmma, TMA, mbarrier transaction counts) compile. In every other device pass
// (a multi-target build, e.g. the wheels' 8.0 ... 12.0) their bodies are discarded by
// `if constexpr (!kSm90aPass<...>) { __trap(); } else { ... }`, so such a build neither
// fails on sm_90a-only instructions nor carries dead copies of those kernels; the host
// launches them only on a 9.0 device of an sm_90a build (wgmma_device()). A template, so
// that the discarded branch of a kernel template is not instantiated.
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <class...>
inline constexpr bool kSm90aPass = true;
#else
template <class...>
inline constexpr bool kSm90aPass = false;
#endif

namespace {

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Four 8x8 b16 matrices, transposed: for a tile stored [k][m] (m contiguous)
// this gives the row-major fragment of [m][k] (mma A) or the col fragment of
// [k][n] (mma B).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void lds64(uint32_t& a, uint32_t& b, uint32_t addr) {
  asm volatile("ld.shared.v2.b32 {%0,%1}, [%2];\n" : "=r"(a), "=r"(b) : "r"(addr));
}
__device__ __forceinline__ void sts128(uint32_t addr, const uint32_t (&v)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]),
               "r"(v[2]), "r"(v[3])
               : "memory");
}
__device__ __forceinline__ uint32_t to_tf32(uint32_t x) {
  uint32_t y;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(__uint_as_float(x)));
  return y;
}

// x -> (big, small), both tf32, x ~= big + small (3xTF32).
__device__ __forceinline__ void split_tf32(uint32_t& x, uint32_t& small) {
  uint32_t big = to_tf32(x);
  // A finite x that rounds up to inf (|x| > 2^128 - 2^116) is split with a
  // truncated big part instead; inf / NaN has no small part (inf - inf = NaN).
  if (!isfinite(__uint_as_float(big)) && isfinite(__uint_as_float(x))) big = x & 0xffffe000u;
  small = isfinite(__uint_as_float(big))
              ? to_tf32(__float_as_uint(__uint_as_float(x) - __uint_as_float(big)))
              : 0u;
  x = big;
}

// x -> (big, small) with big = x truncated to TF32, so big + small == x exactly and small
// needs no rounding (the tensor core truncates its low bits: 2^-21 of x at most). Cheaper
// than split_tf32 (no cvt), and big never overflows. A value that is not finite keeps
// itself as big (a NaN with its quiet bit set: truncating the payload of a signalling NaN
// could make it inf) and has no small half. Returns whether x was finite.
__device__ __forceinline__ bool split_tf32_trunc(uint32_t& x, uint32_t& small) {
  const bool fin = (x & 0x7f800000u) != 0x7f800000u;
  small = fin ? __float_as_uint(__uint_as_float(x) - __uint_as_float(x & 0xffffe000u)) : 0u;
  x = fin ? (x & 0xffffe000u) : (x & 0x007fffffu) ? (x | 0x00400000u) : x;
  return fin;
}

// 3xFP16 scaling: for a tile whose largest |value| has the bits maxbits (a float's bits
// without its sign), the power-of-two exponent s that puts that value in [2^14, 2^15),
// so v * 2^s splits into fp16 halves with no overflow and with normal big halves for
// values down to 2^-28 of the maximum. bad: the maximum is not finite or its exponent is
// outside [-46, 74] (s outside [-60, 60]); s is then 0. An all-zero tile gets s = 0.
__device__ __forceinline__ int f16x3_scale(uint32_t maxbits, bool& bad) {
  if (maxbits == 0) return 0;
  const int e = int(maxbits >> 23) - 127;
  if (maxbits >= 0x7f800000u || e < -46 || e > 74) {
    bad = true;
    return 0;
  }
  return 14 - e;
}

// 2^s as a float for s in [-126, 127].
__device__ __forceinline__ float exp2i(int s) { return __int_as_float((127 + s) << 23); }

// The mma accumulators of a warp tile (any [A][B][4] float array) set to zero.
template <int A, int B>
__device__ __forceinline__ void zero_acc(float (&acc)[A][B][4]) {
#pragma unroll
  for (int i = 0; i < A; ++i)
#pragma unroll
    for (int j = 0; j < B; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// D += A * B for one m16n8 tile and one 32-byte k-step.
template <typename T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Mma<float> {  // tf32 operands: fp32 bits, the low 13 mantissa bits ignored
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};


// 3xTF32 bookkeeping of the mma.sync main loops (implicit_gemm/igemm_tensor_core.cu forward / grad_input,
// grad_weight/wgrad_tensor_core.cu grad_weight). Without kSplit: plain tf32 / 16-bit mma into the
// running accumulator. With kSplit (fp32, TF32 off) every operand is split into
// big + small tf32 halves; each k-tile sums big*big into `part` and the two cross
// terms into `cross`, both fresh per k-tile, and end_tile adds them to the total
// with IEEE fp32 adds, so the tensor core's own accumulation spans one k-tile.
template <typename T, bool kSplit, int MI, int NI>
struct SplitMma {
  float part[kSplit ? MI : 1][kSplit ? NI : 1][4], cross[kSplit ? MI : 1][kSplit ? NI : 1][4];

  __device__ __forceinline__ void begin_tile() {
    if constexpr (kSplit) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int t = 0; t < 4; ++t) part[i][j][t] = cross[i][j][t] = 0.f;
    }
  }
  // One raw fragment register (fp32 bits for tf32): split into big (in place) and
  // small for 3xTF32; otherwise passed unchanged: 16-bit fragments, and fp32 bits, which
  // the tensor core truncates to TF32 (it ignores the low 13 mantissa bits), as the
  // wgmma kernels' fp32 operands in shared memory are. Rounding each fragment
  // (cvt.rna: a finite test and an add per element, 48 of ~100 instructions per k-step
  // of a warp) made the issue-bound patch GEMM slower (fp32, k=2 stride 2, ncu: IPC 2.48).
  static __device__ __forceinline__ void operand(uint32_t& x, uint32_t& small) {
    if constexpr (kSplit) split_tf32_trunc(x, small);
  }
  __device__ __forceinline__ void mma(float (&acc)[MI][NI][4], int i, int j, const uint32_t (&a)[4],
                                      const uint32_t (&as)[4], const uint32_t (&b)[2],
                                      const uint32_t (&bs)[2]) {
    if constexpr (kSplit) {
      Mma<T>::run(cross[i][j], as, b);
      Mma<T>::run(cross[i][j], a, bs);
      Mma<T>::run(part[i][j], a, b);
    } else {
      Mma<T>::run(acc[i][j], a, b);
    }
  }
  __device__ __forceinline__ void end_tile(float (&acc)[MI][NI][4]) {
    if constexpr (kSplit) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int t = 0; t < 4; ++t)
            // An infinite big*big sum (an inf operand) makes the cross terms
            // inf*small: possibly of the other sign, so NaN. Drop them there.
            acc[i][j][t] += isfinite(part[i][j][t]) ? part[i][j][t] + cross[i][j][t] : part[i][j][t];
    }
  }
};

}  // namespace
}  // namespace cuda
}  // namespace convt2d
