// Collectives of the warp-specialised wgmma kernels (sm_90a): the pieces that the implicit
// GEMM's warp-specialised kernel (implicit_gemm/igemm_tensor_core.cu) and the halo kernel
// (implicit_gemm/igemm_halo_sm90.cu) share, in the roles they share (wgmma_ktile also serves
// the implicit GEMM's two-blocks-per-SM wgmma kernel, whose warpgroups all consume). A block is three
// warpgroups: warpgroup 0 produces (a loader: cp.async from all 128 threads, or TMA from
// one), warpgroups 1 and 2 consume (wgmma on their half of the tile's rows). Producer and
// consumers hand shared-memory stages over through a StageRing; a consumer runs a stage as
// wgmma_ktile; the consumers end a tile with store_consumer_tile. Device code only.
#pragma once
#include "cuda/common/implicit_gemm_tile.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma_maps.cuh"
#include "cuda/common/wgmma.cuh"
#include <cstdint>

namespace convt2d {
namespace cuda {
namespace {

// The ring (its mbarrier wrappers) exists in sm_90a builds (CONVT2D_WGMMA); the wgmma
// templates below are instantiated only by kernels that run on sm_90a.
#if defined(CONVT2D_WGMMA)
// S shared-memory stages that a producer fills and the consumers read, each with two
// mbarriers: full (the stage's data has landed: `producers` arrivals, 1 for a TMA thread
// that sets the transaction bytes, 128 for the loader's threads: cp.async arrivals, or plain
// ones after their stores from registers) and empty (every
// consumer thread is done with it). Item i of the sequence both sides walk uses stage i % S
// in round i / S, from which each wait's phase parity follows. The barriers are 2 S 8-byte
// words from `bars` (full[S], then empty[S]).
template <int S>
struct StageRing {
  static constexpr int kBarBytes = 16 * S;
  uint32_t full, empty;
  __device__ __forceinline__ explicit StageRing(uint32_t bars) : full(bars), empty(bars + 8 * S) {}
  // One thread, before the block barrier (and the caller's fence.mbarrier_init).
  __device__ __forceinline__ void init(int producers, int consumers) const {
    for (int s = 0; s < S; ++s) {
      mbar_init(full + 8 * s, producers);
      mbar_init(empty + 8 * s, consumers);
    }
  }
  // Item i's stage and round (unsigned: no sign fix-up in the division by S).
  __device__ __forceinline__ static int stage(int i) { return int(uint32_t(i) % S); }
  __device__ __forceinline__ static uint32_t round(int i) { return uint32_t(i) / S; }
  __device__ __forceinline__ uint32_t full_bar(int i) const { return full + 8 * stage(i); }
  // Producer: wait until item i's stage is free (its item i - S released by the consumers).
  __device__ __forceinline__ void acquire(int i) const {
    if (i >= S) mbar_wait(empty + 8 * stage(i), (round(i) - 1) & 1);
  }
  // Consumer: wait until item i's stage has landed.
  __device__ __forceinline__ void wait(int i) const {
    mbar_wait(full + 8 * stage(i), round(i) & 1);
  }
  // Consumer: stage s (an item's stage(i)) is no longer read, after the wgmma reading it has
  // retired (a consumer that keeps one wgmma group in flight releases the previous item's).
  __device__ __forceinline__ void release(int s) const { mbar_arrive(empty + 8 * s); }
};

// Makes the barriers' initialisation visible before the block barrier that follows it.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// The TMA loader's tile: the phase's im2col map of the source and the weight map (both
// prefetched), and the phase's lowest tap offsets (the corner of the maps' pixel window).
struct TmaTile {
  const CUtensorMap* a;
  const CUtensorMap* b;
  int lo_y, lo_x;
};
__device__ __forceinline__ TmaTile tma_tile(const TmaArgs<true>& args, const TileGeo& t) {
  TmaTile m;
  m.a = &args.tma.a[t.ry * args.prm.phases_x + t.rx];
  m.b = &args.tma.b;
  tma_prefetch_map(m.a);
  tma_prefetch_map(m.b);
  m.lo_y = int(tap_lo(t.ia_y, t.it_y, t.ntap_y));
  m.lo_x = int(tap_lo(t.ia_x, t.it_x, t.ntap_x));
  return m;
}
#endif  // CONVT2D_WGMMA

// One k-tile of a consumer warpgroup: HV m64 blocks of A (64 rows apart, from a_tile) times
// the BN-row B tile, both K-major with 128-byte K rows in the 128-byte swizzle, as four
// 32-byte k-steps accumulated into acc, committed as one wgmma group (the caller waits for it
// with wgmma_wait).
template <typename T, int BN, int HV>
__device__ __forceinline__ void wgmma_ktile(float (&acc)[HV][BN / 8][4], uint32_t a_tile,
                                            uint32_t b_tile) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int h = 0; h < HV; ++h)
      Wgmma<T, BN>::run(&acc[h][0][0], sw128_desc(a_tile + h * 64 * 128 + 32 * ks),
                        sw128_desc(b_tile + 32 * ks));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Wait until at most N committed wgmma groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The consumers' epilogue: warpgroup cw's accumulators (HV m64 blocks from tile row row0;
// warp w holds rows 16 (w % 4) .. + 15 of each) staged as the C tile in shared memory from
// smem (over the rings: the caller has synchronised the consumers), then stored with bias by
// store_c_tile (its row table at smem + kRowTableOff) by the NT consumer threads, ctid their
// index. kVirt: the halo kernel's widened GEMM rows (store_c_tile).
template <typename TS, int BM, int BN, int LDC_M, int LDC_N, int kRowTableOff, int NT,
          bool kChanOut, bool kVirt, int HV>
__device__ __forceinline__ void store_consumer_tile(const IgemmParams& prm, unsigned char* smem,
                                                    const float (&acc)[HV][BN / 8][4], int row0,
                                                    int ctid, const TileGeo& t) {
  float* sC = reinterpret_cast<float*>(smem);
  const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int h = 0; h < HV; ++h)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
      put_acc<kChanOut, LDC_M, LDC_N>(sC, row0 + h * 64 + wq * 16 + (lane >> 2),
                                      j * 8 + 2 * (lane & 3), acc[h][j]);
  store_c_tile<TS, BM, BN, LDC_M, LDC_N, NT, kChanOut, kVirt>(
      prm, sC, reinterpret_cast<int64_t*>(smem + kRowTableOff), ctid, t);
}

}  // namespace
}  // namespace cuda
}  // namespace convt2d
