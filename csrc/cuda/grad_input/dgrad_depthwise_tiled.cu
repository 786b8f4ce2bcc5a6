// Depthwise grad_input on the tiled kernel (dgrad:depthwise_tiled): one input channel per group (Cin == groups, m = Cout/groups outputs per
// input channel).
//   gi[n, c, iy, ix] = sum over j < m, (ky, kx) of
//       go[n, c*m + j, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw] * w[c*m + j, ky, kx]
// m x kh x kw products per element, bound by reading grad_output: the tiled kernel of
// common/depthwise.cuh (each of the m planes' region staged in shared memory in turn, the
// sums kept in registers).
#include "cuda/common/depthwise.cuh"
#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {

bool dgrad_depthwise_tiled_supported(const Problem& p, DType dt, bool chan_last) {
  DwArgs a;
  DwLaunch l;
  return dw_plan(p, false, chan_last, dt == DType::kDouble ? 8 : 4, a, l);
}

cudaError_t launch_dgrad_depthwise_tiled(const DirectGradParams& prm, bool chan_last, DType dt,
                                   cudaStream_t st) {
  DwArgs a;
  DwLaunch l;
  if (!dw_plan(prm.p, false, chan_last, dt == DType::kDouble ? 8 : 4, a, l))
    return cudaErrorInvalidValue;
  a.in = prm.gout;
  a.out = prm.gin;
  a.w = prm.w;
  return launch_dw_tiled(a, l, dt, st);
}

}  // namespace cuda
}  // namespace convt2d
