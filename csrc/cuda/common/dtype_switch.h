// A DType as a template parameter (flash-attention's FP16_SWITCH, for the four dtypes the
// kernels compute in): DTYPE_SWITCH(dt, T, [&] { return run<T>(args); }) runs the lambda with
// T the element type and returns its cudaError_t (cudaErrorInvalidValue for no DType). For
// .cu files: T may be __half or __nv_bfloat16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "cuda/common/kernels.h"

#define DTYPE_SWITCH(DT, T, ...)                                                    \
  [&]() -> cudaError_t {                                                            \
    switch (DT) {                                                                   \
      case ::convt2d::cuda::DType::kFloat: { using T = float; return __VA_ARGS__(); }          \
      case ::convt2d::cuda::DType::kDouble: { using T = double; return __VA_ARGS__(); }        \
      case ::convt2d::cuda::DType::kHalf: { using T = __half; return __VA_ARGS__(); }          \
      case ::convt2d::cuda::DType::kBFloat16: { using T = __nv_bfloat16; return __VA_ARGS__(); } \
    }                                                                               \
    return cudaErrorInvalidValue;                                                   \
  }()
