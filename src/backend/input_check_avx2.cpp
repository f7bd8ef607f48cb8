// backend/input_check_impl.hpp's loops compiled with AVX2 (this file gets -mavx2 from CMake).
#include <cstddef>

#include "backend/input_check_impl.hpp"

namespace lmhead::input_check_avx2 {

size_t first_non_finite(const float* x, size_t n) { return input_check_impl::first_non_finite(x, n); }
size_t copy_checking_finite(float* dst, const float* src, size_t n) {
  return input_check_impl::copy_checking_finite(dst, src, n);
}

}  // namespace lmhead::input_check_avx2
