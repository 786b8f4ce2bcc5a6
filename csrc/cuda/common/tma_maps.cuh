// TMA tensor maps of the Hopper implicit-GEMM kernels (implicit_gemm/igemm_tensor_core.cu's warp-specialised
// kernel, implicit_gemm/igemm_halo_sm90.cu's halo kernel): the host-side encoding and the kernel-parameter
// block that carries the maps (__grid_constant__, so the TMA instructions can name
// them by address).
//
// A (the channels-last source, dims C, W, H, N) is read with im2col copies: for one
// stride phase, tap j of GEMM row q reads source pixel q * im + ia + j * it per
// dimension (Geo, common/mma_core.cuh). With lo = the smallest tap offset, the rows are base
// pixels q * im + lo walked through a pixel window (the map's corners) in steps of im,
// and the tap is the copy's im2col offset ia + j * it - lo >= 0. Rows past an image
// continue in the next image; pixels outside the tensor are zero-filled. The windows
// differ between phases: one map per phase. The halo kernel widens the W window by
// the tap columns' reach xt (its GEMM rows are nqx + xt wide) and copies BM + xt rows
// at W offset 0.
// B (the packed weight [G * kh * kw * Nc rows][Kc]) is read with tiled 2-D copies of
// BN rows x one 128-byte channel tile; rows past Nc belong to the next tap and only
// feed output columns that are not stored.
// Both land in the 128-byte swizzle the wgmma descriptors read.
#pragma once
#include <cuda.h>  // CUtensorMap and the encoders' types (called through the runtime)
#include <cuda_runtime.h>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"

namespace convt2d {
namespace cuda {
namespace {

constexpr int kTmaMaxPhases = 16;
struct TmaMaps {
  CUtensorMap b;                 // wpk as [G*kh*kw*Nc rows][Kc] (3xFP16: w16_hi)
  CUtensorMap b_lo;              // 3xFP16 only: w16_lo, as b
  CUtensorMap a[kTmaMaxPhases];  // src (C, W, H, N), per phase ry * phases_x + rx
};
// A kernel's parameter block: the problem, and with kTma the maps.
template <bool kTma>
struct TmaArgs {
  IgemmParams prm;
};
template <>
struct TmaArgs<true> {
  TmaMaps tma;
  IgemmParams prm;
};

// Lowest source offset over a phase's taps (the pixel window's lower corner).
__host__ __device__ __forceinline__ int64_t tap_lo(int64_t ia, int64_t it, int64_t ntap) {
  return it < 0 ? ia + (ntap - 1) * it : ia;
}

// Driver entry points through the runtime (no link against libcuda).
template <class Fn>
Fn driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess)
    return nullptr;
#else
  if (cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q) != cudaSuccess) return nullptr;
#endif
  return q == cudaDriverEntryPointSuccess ? reinterpret_cast<Fn>(fn) : nullptr;
}
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
using EncodeIm2colFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                    const cuuint64_t*, const cuuint64_t*, const int*, const int*,
                                    cuuint32_t, cuuint32_t, const cuuint32_t*,
                                    CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// Encodes the maps of one launch (BK: channels per 128-byte tile; BN: weight rows per
// copy; BM: GEMM rows per tile; halo: the halo kernel's widened rows), or returns
// false where TMA does not apply (the kernels then load with cp.async): channels-last
// source with 16-byte aligned pixel strides, at most kTmaMaxPhases phases, a channel
// tile that stays inside its group (one group, or Kc a multiple of BK: TMA zero-fills
// only outside the tensor), pixel-window corners within the 4-D im2col range
// [-128, 127], tap reaches (im2col offsets) <= 255, traversal strides <= 8, at most
// 1024 rows per copy, and the driver's encoders accepting the maps.
template <typename T>
bool make_tma_maps(const IgemmParams& prm, int BK, int BN, int BM, bool halo, TmaMaps& m) {
  const Problem& p = prm.p;
  const int64_t es = sizeof(T);
  if (prm.phases_y * prm.phases_x > kTmaMaxPhases || prm.src.sc != 1) return false;
  if (p.groups > 1 && prm.Kc % BK != 0) return false;
  if ((prm.Kc * es) % 16 != 0) return false;
  const auto al16 = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  if (!al16(prm.src.ptr) || !al16(prm.wpk)) return false;
  const int64_t str[3] = {prm.src.sw * es, prm.src.sh * es, prm.src.sn * es};
  for (int64_t v : str)
    if (v <= 0 || v % 16 != 0 || v >= (int64_t(1) << 40)) return false;
  static const EncodeTiledFn enc_tiled = driver_fn<EncodeTiledFn>("cuTensorMapEncodeTiled");
  static const EncodeIm2colFn enc_im2col = driver_fn<EncodeIm2colFn>("cuTensorMapEncodeIm2col");
  if (!enc_tiled || !enc_im2col) return false;
  const CUtensorMapDataType dt = std::is_same<T, float>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                 : std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                  : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  {
    const cuuint64_t dim[2] = {cuuint64_t(prm.Kc), cuuint64_t(p.groups * p.kh * p.kw * prm.Nc)};
    const cuuint64_t stride[1] = {cuuint64_t(prm.Kc * es)};
    const cuuint32_t box[2] = {cuuint32_t(BK), cuuint32_t(BN)};
    const cuuint32_t estr[2] = {1, 1};
    if (enc_tiled(&m.b, dt, 2, const_cast<void*>(prm.wpk), dim, stride, box, estr,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  }
  const cuuint64_t dim[4] = {cuuint64_t(p.groups * prm.Kc), cuuint64_t(prm.Ws), cuuint64_t(prm.Hs),
                             cuuint64_t(p.N)};
  const cuuint64_t stride[3] = {cuuint64_t(str[0]), cuuint64_t(str[1]), cuuint64_t(str[2])};
  for (int64_t ry = 0; ry < prm.phases_y; ++ry)
    for (int64_t rx = 0; rx < prm.phases_x; ++rx) {
      CUtensorMap& a = m.a[ry * prm.phases_x + rx];
      const Geo gy = make_geo(prm.mode, ry, p.sh, p.ph, p.dh, p.kh, prm.Hd);
      const Geo gx = make_geo(prm.mode, rx, p.sw, p.pw, p.dw, p.kw, prm.Wd);
      if (gy.nq == 0 || gx.nq == 0 || gy.ntap == 0 || gx.ntap == 0) {
        std::memset(&a, 0, sizeof(a));  // no loads: the phase's tiles only store bias / zeros
        continue;
      }
      if (gy.im > 8 || gx.im > 8 || (halo && gx.im != 1)) return false;
      // Pixel window at offset 0: base q * im + lo for q in [0, nq) (halo: nq + xt
      // along W), i.e. corners lo and lo + (nq - 1) * im - (size - 1); index 0 is W.
      const int64_t xt = (gx.ntap - 1) * (gx.it < 0 ? -gx.it : gx.it);
      const int64_t yt = (gy.ntap - 1) * (gy.it < 0 ? -gy.it : gy.it);
      const int64_t nqx = gx.nq + (halo ? xt : 0);
      const int64_t lo[2] = {tap_lo(gx.ia, gx.it, gx.ntap), tap_lo(gy.ia, gy.it, gy.ntap)};
      const int64_t hi[2] = {lo[0] + (nqx - 1) * gx.im - (prm.Ws - 1),
                             lo[1] + (gy.nq - 1) * gy.im - (prm.Hs - 1)};
      for (int d = 0; d < 2; ++d)
        if (lo[d] < -128 || lo[d] > 127 || hi[d] < -128 || hi[d] > 127) return false;
      // The im2col offsets of a 4-D copy are 8-bit ([0, 255], PTX ISA im2col mode);
      // larger tap reaches (dilation >= 128) must not be issued: they would wrap.
      if (xt > 255 || yt > 255) return false;
      const int64_t rows = BM + (halo ? xt : 0);
      if (rows > 1024) return false;
      const int lower[2] = {int(lo[0]), int(lo[1])}, upper[2] = {int(hi[0]), int(hi[1])};
      const cuuint32_t estr[4] = {1, cuuint32_t(gx.im), cuuint32_t(gy.im), 1};
      if (enc_im2col(&a, dt, 4, prm.src.ptr, dim, stride, lower, upper, cuuint32_t(BK),
                     cuuint32_t(rows), estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return false;
    }
  return true;
}

// 3xFP16 (implicit_gemm/igemm_halo_sm90.cu): only the weights through TMA, the big and small fp16 halves
// (w16_hi / w16_lo, laid out as wpk) as [G*kh*kw*Nc rows][Kc] maps of BK x BN boxes in the
// 128-byte swizzle. A box's rows past Nc are the next tap's (their columns are dropped),
// its channels past Kc zeros (TMA fills outside the tensor). False where the encoder or
// the alignment does not allow it (the kernel then copies the weights with cp.async).
inline bool make_f16x3_wmaps(const IgemmParams& prm, int BK, int BN, TmaMaps& m) {
  const Problem& p = prm.p;
  if ((prm.Kc * 2) % 16 != 0) return false;
  const auto al16 = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  if (!al16(prm.w16_hi) || !al16(prm.w16_lo)) return false;
  const int64_t rows = p.groups * p.kh * p.kw * prm.Nc;
  if (rows >= (int64_t(1) << 31)) return false;
  static const EncodeTiledFn enc_tiled = driver_fn<EncodeTiledFn>("cuTensorMapEncodeTiled");
  if (!enc_tiled) return false;
  const cuuint64_t dim[2] = {cuuint64_t(prm.Kc), cuuint64_t(rows)};
  const cuuint64_t stride[1] = {cuuint64_t(prm.Kc * 2)};
  const cuuint32_t box[2] = {cuuint32_t(BK), cuuint32_t(BN)};
  const cuuint32_t estr[2] = {1, 1};
  CUtensorMap* maps[2] = {&m.b, &m.b_lo};
  const void* src[2] = {prm.w16_hi, prm.w16_lo};
  for (int i = 0; i < 2; ++i)
    if (enc_tiled(maps[i], CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(src[i]), dim,
                  stride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  return true;
}

// Launches one CTA per output tile of a Hopper GEMM kernel (tc_ws_kernel, tc_halo_kernel):
// the opt-in shared memory first, then the grid (at most 2^31 - 1 tiles).
template <class Tr, class Kern, class Args>
cudaError_t launch_tile_grid(Kern kern, int64_t blocks, const Args& args, cudaStream_t st) {
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  cudaError_t e =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  kern<<<unsigned(blocks), Tr::kThreads, Tr::kSmemBytes, st>>>(args);
  return cudaGetLastError();
}

}  // namespace
}  // namespace cuda
}  // namespace convt2d
