// Direct CUDA-core forward for shapes with few channels per group, which are
// bounded by writing the output: one thread per output column, kDirectRows rows per block (consecutive
// threads take consecutive ox, so every store is a coalesced row segment),
// COB output channels per thread in registers, the block's weights staged in
// shared memory. Each pixel computes its stride phase once and then visits
// only the taps that reach it (problem.h): no per-tap modulo in the loops.
#include "cuda/kernels.h"
#include "cuda/mma_core.cuh"

namespace convt2d {
namespace cuda {

constexpr int kDirectThreads = 128;
constexpr int kDirectRows = 8;  // output rows per block: the staged weights serve 8x128 pixels

// kCOB output channels per thread: 16, or 64 when a group has more than 32, so
// that each gathered input value serves more outputs (fewer re-reads of x).
template <typename T, int kCOB>
__global__ void __launch_bounds__(kDirectThreads) direct_fwd_kernel(const DirectParams prm) {
  using Acc = typename AccOf<T>::type;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* sw = reinterpret_cast<Acc*>(smem_raw);  // [Cig][kh][kw][kCOB]

  const Problem& p = prm.p;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g();
  const int64_t ncob = (Cog + kCOB - 1) / kCOB;
  const int64_t ntx = (p.Wo + kDirectThreads - 1) / kDirectThreads;
  const int64_t oy_begin = (blockIdx.x / ntx) * kDirectRows;
  const int64_t oy_end = oy_begin + kDirectRows < p.Ho ? oy_begin + kDirectRows : p.Ho;
  const int64_t ox = (blockIdx.x % ntx) * kDirectThreads + threadIdx.x;
  const int64_t kk = p.kh * p.kw;
  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ w = static_cast<const T*>(prm.w);
  const T* __restrict__ bias = static_cast<const T*>(prm.bias);
  T* __restrict__ out = static_cast<T*>(prm.out.ptr);

  // Column phase: per thread, the same for every row of the block.
  const int64_t rx = (ox + p.pw) % p.sw, Qx = (ox + p.pw) / p.sw;
  const PhaseDim dx = make_phase_dim(rx, p.sw, p.pw, p.dw, p.kw, p.Wo);

  // Row phases of the block's rows, computed once (uniform over the block).
  struct RowInfo { int64_t Qy, k0, kstep, ntap, koff0, koff_step; };
  __shared__ RowInfo rows[kDirectRows];
  if (threadIdx.x < kDirectRows) {
    const int64_t oy = oy_begin + threadIdx.x;
    const int64_t ry = (oy + p.ph) % p.sh;
    const PhaseDim d = make_phase_dim(ry, p.sh, p.ph, p.dh, p.kh, p.Ho);
    rows[threadIdx.x] = RowInfo{(oy + p.ph) / p.sh, d.k0, d.kstep, d.ntap, d.koff0, d.koff_step};
  }

  const int64_t nz = p.N * p.groups * ncob;
  for (int64_t z = blockIdx.y; z < nz; z += gridDim.y) {
    const int64_t cob = z % ncob;
    const int64_t g = (z / ncob) % p.groups;
    const int64_t n = z / (ncob * p.groups);
    const int64_t co0 = cob * kCOB;
    __syncthreads();  // previous iteration's readers are done with sw
    for (int64_t i = threadIdx.x; i < Cig * kk * kCOB; i += kDirectThreads) {
      const int64_t co = i % kCOB, t = (i / kCOB) % kk, ci = i / (kCOB * kk);
      sw[i] = (co0 + co < Cog) ? Cvt<T>::to_acc(w[((g * Cig + ci) * Cog + co0 + co) * kk + t])
                               : Acc(0);
    }
    __syncthreads();
    if (ox >= p.Wo) continue;
    const T* xn = x + n * prm.x.sn + g * Cig * prm.x.sc;
    for (int64_t oy = oy_begin; oy < oy_end; ++oy) {
      const RowInfo dy = rows[oy - oy_begin];
      const int64_t Qy = dy.Qy;
      Acc acc[kCOB];
#pragma unroll
      for (int c = 0; c < kCOB; ++c) acc[c] = Acc(0);
      for (int64_t jy = 0; jy < dy.ntap; ++jy) {
        const int64_t iy = Qy - dy.koff0 - jy * dy.koff_step;
        if (iy < 0) break;  // iy decreases with jy
        if (iy >= p.H) continue;
        const int64_t ky = dy.k0 + jy * dy.kstep;
        for (int64_t jx = 0; jx < dx.ntap; ++jx) {
          const int64_t ix = Qx - dx.koff0 - jx * dx.koff_step;
          if (ix < 0) break;
          if (ix >= p.W) continue;
          const int64_t kx = dx.k0 + jx * dx.kstep;
          const T* xp = xn + iy * prm.x.sh + ix * prm.x.sw;
          const Acc* wp = sw + (ky * p.kw + kx) * kCOB;
          const int cig = int(Cig);
          int ci = 0;
          for (; ci + 4 <= cig; ci += 4) {  // four loads in flight before their use
            Acc xv[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) xv[u] = Cvt<T>::to_acc(xp[(ci + u) * prm.x.sc]);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              const Acc* wr = wp + (ci + u) * kk * kCOB;
#pragma unroll
              for (int c = 0; c < kCOB; ++c) acc[c] = fma(xv[u], wr[c], acc[c]);
            }
          }
          for (; ci < cig; ++ci) {
            const Acc xv = Cvt<T>::to_acc(xp[ci * prm.x.sc]);
            const Acc* wr = wp + ci * kk * kCOB;
#pragma unroll
            for (int c = 0; c < kCOB; ++c) acc[c] = fma(xv, wr[c], acc[c]);
          }
        }
      }
      T* op = out + n * prm.out.sn + oy * prm.out.sh + ox * prm.out.sw;
#pragma unroll
      for (int c = 0; c < kCOB; ++c) {
        const int64_t co = g * Cog + co0 + c;
        if (co0 + c < Cog) {
          Acc v = acc[c];
          if (bias) v += Cvt<T>::to_acc(bias[co]);
          __stcs(op + co * prm.out.sc, Cvt<T>::from_acc(v));  // streaming: keep x in L2
        }
      }
    }
  }
}

static int cob_for(const Problem& p) { return p.cout_g() > 32 ? 64 : 16; }

static int64_t direct_smem_bytes(const Problem& p, DType dt) {
  return p.cin_g() * p.kh * p.kw * cob_for(p) * (dt == DType::kDouble ? 8 : 4);
}

bool direct_forward_fits(const Problem& p, DType dt) {
  return direct_smem_bytes(p, dt) <= 160 * 1024;
}

template <typename T, int kCOB>
static cudaError_t run_cob(const DirectParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t gx = ((p.Wo + kDirectThreads - 1) / kDirectThreads) *
                     ((p.Ho + kDirectRows - 1) / kDirectRows);
  const int64_t nz = p.N * p.groups * ((p.cout_g() + kCOB - 1) / kCOB);
  if (gx > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  const unsigned gy = unsigned(nz < 65535 ? nz : 65535);
  const size_t smem = size_t(p.cin_g() * p.kh * p.kw * kCOB) * sizeof(typename AccOf<T>::type);
  auto kern = direct_fwd_kernel<T, kCOB>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  kern<<<dim3(unsigned(gx), gy), kDirectThreads, smem, st>>>(prm);
  return cudaGetLastError();
}

template <typename T>
static cudaError_t run(const DirectParams& prm, cudaStream_t st) {
  return cob_for(prm.p) == 64 ? run_cob<T, 64>(prm, st) : run_cob<T, 16>(prm, st);
}

cudaError_t launch_direct_forward(const DirectParams& prm, DType dt, cudaStream_t st) {
  switch (dt) {
    case DType::kFloat: return run<float>(prm, st);
    case DType::kDouble: return run<double>(prm, st);
    case DType::kHalf: return run<__half>(prm, st);
    case DType::kBFloat16: return run<__nv_bfloat16>(prm, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace convt2d
