#include "sample/exp_batch.hpp"

#include "cpu/kernels.hpp"
#include "sample/exp.hpp"
#include "sample/weight_math.hpp"

namespace lmhead::sample {

void exp_batch_scalar(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < kZeroWeightBelow ? 0.0 : sample::exp(x[i]);
}

void exp_batch(const double* x, double* y, int64_t n) {
  static const bool simd = cpu::cpu_supports(cpu::Isa::avx2);
  if (simd) avx2::exp_batch(x, y, n);
  else exp_batch_scalar(x, y, n);
}

}  // namespace lmhead::sample
