// The algorithms convt2d can run, by name, and the one override that forces them
// (CONVT2D_ALGO, docs/design.md "Forcing an algorithm"). Backend-neutral plain C++ (no
// torch, no CUDA): the CUDA planner (cuda/planner.cpp) and the CPU backend both read it,
// and the kernels see only the Variant it carries.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace convt2d {

// What a call computes, as the planner chooses for it. kBackward is the backward's problem
// transform (gather grad_output per tap first, or not); kCpu the CPU kernels' ISA.
enum class Pass : int { kForward = 0, kGradInput, kGradWeight, kBackward, kCpu, kCount };

// Every algorithm, each in one pass (kImplicitGemm* serve forward and grad_input). The
// names (algo_name) are what CONVT2D_ALGO, autotune's log and convt2d.last_algorithms() use.
enum class Algo : int {
  kNone = -1,
  // forward
  kNarrowOutput = 0,    // forward/narrow_output.cu: 1..8 outputs per group, CUDA cores
  kDirect,              // the direct family's own choice: direct_tensorop where it takes the shape
  kDirectTensorOp,      // forward/direct_tensor_core.cu
  kDirectSimt,          // forward/direct_cuda_core.cu
  kPatchGemm,           // forward/patch_gemm.cu: kernel == stride, one GEMM per image
  kFwdPadded,           // implicit GEMM on tensor cores, Cin/groups zero-padded to 16-byte chunks
  kFwdDepthwise,        // forward/depthwise.cu: one input channel per group, CUDA cores
  kFwdCublasGemm,       // dense-GEMM shapes (dense_gemm_shape): one cuBLAS GEMM through torch
  kFwdGemmCol2im,       // one GEMM over all taps (cuBLAS or the implicit GEMM) + col2im pass
  // forward and grad_input: implicit GEMM per stride phase (implicit_gemm/)
  kImplicitGemm,        // tensor cores, the kernel picked by the planner (igemm_kernel; below)
  kImplicitGemmMma,     // mma.sync tiles (compute capability 8.0+), no wgmma
  kImplicitGemmWgmma,   // Hopper wgmma, two blocks per SM
  kImplicitGemmWgmmaWs, // Hopper wgmma, warp-specialised 256-row tiles
  kImplicitGemmHalo,    // Hopper wgmma over one staged source halo (igemm_halo_sm90.cu)
  kImplicitGemmSimt,    // CUDA cores, any dtype (fp64)
  // grad_input only
  kDgradDirect,         // grad_input/dgrad_direct.cu: few channels per group, CUDA cores
  kDgradPadded,         // implicit GEMM on tensor cores, Cout/groups zero-padded to 16-byte chunks
  kDgradDepthwise,      // grad_input/dgrad_depthwise.cu: one input channel per group, a thread per element
  kDgradDepthwiseTiled, // grad_input/dgrad_depthwise_tiled.cu: the same, planes staged per tile
  kDgradCublasGemm,     // dense-GEMM shapes: one cuBLAS GEMM through torch
  // grad_weight
  kWgradWgmmaNchw,      // grad_weight/wgrad_nchw_sm90.cu: fp32 from the NCHW tensors
  kWgradTensorOp,       // grad_weight/wgrad_tensor_core.cu: mma.sync / wgmma tiles
  kWgradSimt,           // grad_weight/wgrad_cuda_core.cu
  kWgradDirect,         // grad_weight/wgrad_direct.cu: few weight elements, pixels split
  kWgradPadded,         // tensorop with Cin/groups and Cout/groups zero-padded to 16-byte chunks
  kWgradDepthwise,      // grad_weight/wgrad_depthwise.cu: one input channel per group, a thread per pixel
  kWgradDepthwiseTiled, // grad_weight/wgrad_depthwise_tiled.cu: the same, x and grad_output staged per tile
  kWgradCublasGemm,     // dense-GEMM shapes: one cuBLAS GEMM through torch
  // backward transform
  kTapGather,           // grad_output gathered per tap; both gradients as 1x1 problems
  kTapGatherCublas,     // the same, both gradients then one cuBLAS GEMM each
  kStrided,             // the strided problem as it is
  // CPU
  kCpuAvx2,
  kCpuBaseline,
  kCount
};

const char* algo_name(Algo a);
const char* pass_name(Pass p);

// Variants of one algorithm that the override can force; each field's default (-1 / 0)
// means "the algorithm's own choice". Kernels read them from their params struct.
struct Variant {
  int8_t loader = -1;         // Hopper ws / halo kernels, 3xFP16 weights: 1 TMA, 0 cp.async
  int8_t f16x3 = -1;          // fp32 (TF32 off) halo forward: 0 = 3xTF32 only
  int8_t f16x3_persist = -1;  // 3xFP16: 1 = the persistent kernel
  int8_t f16x3_nchw = -1;     // 3xFP16: 1 = read NCHW x wherever it can, 0 = never
  int8_t igemm_tile = -1;     // bf16 mma.sync implicit GEMM: 0 128x128x1, 1 128x64, 2 64x128
  int8_t wgrad_tile = -1;     // grad_weight tensorop tile (kWgradTileNames index)
  int8_t wgrad_x = -1;        // grad_weight tensorop: 1 read NCHW x, 0 copy it channels-last
  int8_t direct_nt = 0;       // direct tensor-core kernel: channel-tile cap (2, 4, 8)
  int8_t narrow_wp = 0;       // narrow kernel: pixel warps (1, 2, 4, 8)
  int8_t k_splits = 0;        // tensor-core implicit GEMM: split-K ranges (1 = none, 2..64)
};

// grad_weight tensorop tile names, in the kernel's TwTile order (wgrad_tensor_core.cu);
// "nowg" means: not the wgmma tiles, the heuristic among the others.
constexpr int kWgradTileCount = 10;
extern const char* const kWgradTileNames[kWgradTileCount];

// CONVT2D_ALGO, parsed. Syntax: comma-separated items, each `pass:algorithm` (pass one of
// fwd, dgrad, wgrad, bwd, cpu) or `option=value` (a Variant field). A forced algorithm
// that cannot take a problem falls back to the heuristic choice for that pass.
struct AlgoOverride {
  bool active = false;  // the variable is set and not empty: autotune is off
  Algo forced[int(Pass::kCount)] = {Algo::kNone, Algo::kNone, Algo::kNone, Algo::kNone,
                                    Algo::kNone};
  Variant var;
  Algo get(Pass p) const { return forced[int(p)]; }
};

// The current override: re-read from the environment on each call, re-parsed only when
// the string changed (per thread). Throws std::runtime_error naming an unknown pass,
// algorithm, option or value, with the valid ones.
const AlgoOverride& algo_override();

// What ran: the planner records the algorithm of each pass it ran, process-wide (the latest
// call of each pass, whichever thread made it: autograd runs the backward on its own
// thread), for convt2d.last_algorithms().
void record_algorithm(Pass p, Algo a);
std::vector<std::pair<std::string, std::string>> last_algorithms();

}  // namespace convt2d
