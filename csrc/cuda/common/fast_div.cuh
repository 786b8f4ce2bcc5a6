// Division of non-negative 31-bit integers by a divisor fixed for a launch, as a multiply-high,
// an add and a shift (Hacker's Delight, 10-9): the element-wise kernels' index arithmetic,
// where a hardware-free 32-bit division costs about twenty instructions.
#pragma once
#include <cstdint>

namespace convt2d {
namespace cuda {

struct FastDiv {
  uint32_t d = 1, m = 1, s = 0;
  FastDiv() = default;
  // d >= 1. l = ceil(log2 d); m = floor(2^32 * (2^l - d) / d) + 1.
  explicit FastDiv(uint32_t div) : d(div) {
    uint32_t l = 0;
    while ((uint64_t(1) << l) < div) ++l;
    s = l;
    m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << l) - div)) / div + 1);
  }
  // n / d for 0 <= n < 2^31 (then __umulhi(m, n) < n and the sum fits in 32 bits).
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(m, n) + n) >> s; }
  // q = n / d, r = n - q * d.
  __device__ __forceinline__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * d;
  }
};

}  // namespace cuda
}  // namespace convt2d
