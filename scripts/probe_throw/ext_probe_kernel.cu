// A real kernel for the CUDA probe module (no torch headers: the .cu side only has to put
// nvcc-compiled host code and the CUDA runtime into the module, like csrc/cuda/*.cu).
#include <cuda_runtime.h>

__global__ void probe_fill_kernel(float* p, long long n, float v) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int probe_launch_fill(float* p, long long n, float v) {
  if (n <= 0) return 0;
  int threads = 256;
  long long blocks = (n + threads - 1) / threads;
  probe_fill_kernel<<<(unsigned)blocks, threads>>>(p, n, v);
  return (int)cudaGetLastError();
}
