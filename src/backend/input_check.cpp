#include "backend/input_check.hpp"

#include <string>

#include "backend/input_check_impl.hpp"

namespace lmhead {

namespace input_check_avx2 {
size_t first_non_finite(const float* x, size_t n);
size_t copy_checking_finite(float* dst, const float* src, size_t n);
}  // namespace input_check_avx2

namespace {
bool use_avx2() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return avx2;
}
}  // namespace

size_t first_non_finite(const float* x, size_t n) {
  return use_avx2() ? input_check_avx2::first_non_finite(x, n) : input_check_impl::first_non_finite(x, n);
}

size_t copy_checking_finite(float* dst, const float* src, size_t n) {
  return use_avx2() ? input_check_avx2::copy_checking_finite(dst, src, n)
                    : input_check_impl::copy_checking_finite(dst, src, n);
}

InputError non_finite_hidden_error(const float* hidden, size_t index, int64_t hidden_size) {
  const size_t H = static_cast<size_t>(hidden_size);
  return InputError("hidden state of token " + std::to_string(index / H) + " has a non-finite value (" +
               std::to_string(hidden[index]) + ") at index " + std::to_string(index % H));
}

}  // namespace lmhead
