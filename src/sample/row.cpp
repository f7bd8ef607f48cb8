#include "sample/row.hpp"

#include <cmath>
#include <limits>

#include "cpu/kernels.hpp"
#include "sample/exp.hpp"
#include "sample/weight_math.hpp"

namespace lmhead::sample {
namespace portable {

double scaled_logits(const float* x, int64_t n, double t, double* z) {
  for (int64_t i = 0; i < n; ++i) z[i] = scaled_logit(x[i], 0.0f, t);
  return max_finite(z, n);
}

double max_finite(const double* z, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(z[i]) && z[i] > m) m = z[i];
  return m;
}

uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = 0;
    if (bucket != nullptr) bucket[i] = 0;
    if (!std::isfinite(z[i])) continue;
    const double d = z[i] - m;
    if (d < kZeroWeightBelow) continue;
    const double e = sample::exp(d);
    if (!passes_min_p(e, min_p)) continue;
    w[i] = integer_weight(e);
    sum += w[i];
    if (bucket != nullptr) bucket[i] = uint16_t(rank_bucket(m - z[i]));
  }
  return sum;
}

void exp_batch(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < kZeroWeightBelow ? 0.0 : sample::exp(x[i]);
}

}  // namespace portable

namespace {
bool simd() {
  static const bool has = cpu::cpu_supports(cpu::Isa::avx2);
  return has;
}
}  // namespace

double scaled_logits(const float* x, int64_t n, double t, double* z) {
  return simd() ? avx2::scaled_logits(x, n, t, z) : portable::scaled_logits(x, n, t, z);
}
double max_finite(const double* z, int64_t n) { return simd() ? avx2::max_finite(z, n) : portable::max_finite(z, n); }
uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket) {
  return simd() ? avx2::row_weights(z, n, m, min_p, w, bucket) : portable::row_weights(z, n, m, min_p, w, bucket);
}
void exp_batch(const double* x, double* y, int64_t n) {
  if (simd()) avx2::exp_batch(x, y, n);
  else portable::exp_batch(x, y, n);
}

}  // namespace lmhead::sample
