// Depthwise forward: one input channel per group (Cin == groups; Cout/groups = m outputs per
// input channel, m = 1 for a plain depthwise layer), as CenterNet-style upsampling and
// MobileNet-style decoders use. Each output has at most ceil(kh/sh) x ceil(kw/sw) taps of one
// channel plane: the tiled kernel of common/depthwise.cuh (the plane's region staged in shared
// memory, several outputs per thread), whose floor is the bytes moved.
#include "cuda/common/depthwise.cuh"
#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {

bool depthwise_forward_supported(const Problem& p, DType dt, bool chan_last) {
  DwArgs a;
  DwLaunch l;
  return dw_plan(p, true, chan_last, dt == DType::kDouble ? 8 : 4, a, l);
}

cudaError_t launch_depthwise_forward(const DirectParams& prm, bool chan_last, DType dt,
                                     cudaStream_t st) {
  DwArgs a;
  DwLaunch l;
  if (!dw_plan(prm.p, true, chan_last, dt == DType::kDouble ? 8 : 4, a, l))
    return cudaErrorInvalidValue;
  a.in = prm.x;
  a.out = prm.out;
  a.w = prm.w;
  a.bias = prm.bias;
  return launch_dw_tiled(a, l, dt, st);
}

}  // namespace cuda
}  // namespace convt2d
