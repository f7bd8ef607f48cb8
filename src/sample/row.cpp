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

uint64_t split_at_bucket(uint64_t* w, const uint16_t* rank, int64_t n, int bucket, int32_t* found, uint64_t* found_w,
                         int* n_found) {
  // Branch-free: which side of the bucket an id falls on is as unpredictable as its logit, so the
  // slot is always written and the count advances only for a candidate.
  int k = 0;
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t W = w[i];
    found[k] = int32_t(i);
    found_w[k] = W;
    k += int(rank[i] == bucket) & int(W != 0);
    const uint64_t stays = W & (uint64_t(0) - uint64_t(rank[i] < bucket));
    w[i] = stays;
    sum += stays;
  }
  *n_found = k;
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
bool wide() {
  static const bool has = cpu::cpu_supports(cpu::Isa::avx512);
  return has;
}
}  // namespace

double scaled_logits(const float* x, int64_t n, double t, double* z) {
  return wide() ? avx512::scaled_logits(x, n, t, z)
         : simd() ? avx2::scaled_logits(x, n, t, z)
                  : portable::scaled_logits(x, n, t, z);
}
double max_finite(const double* z, int64_t n) { return simd() ? avx2::max_finite(z, n) : portable::max_finite(z, n); }
uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket) {
  return wide() ? avx512::row_weights(z, n, m, min_p, w, bucket)
         : simd() ? avx2::row_weights(z, n, m, min_p, w, bucket)
                  : portable::row_weights(z, n, m, min_p, w, bucket);
}
uint64_t split_at_bucket(uint64_t* w, const uint16_t* rank, int64_t n, int bucket, int32_t* found, uint64_t* found_w,
                         int* n_found) {
  return simd() ? avx2::split_at_bucket(w, rank, n, bucket, found, found_w, n_found)
                : portable::split_at_bucket(w, rank, n, bucket, found, found_w, n_found);
}

void exp_batch(const double* x, double* y, int64_t n) {
  if (simd()) avx2::exp_batch(x, y, n);
  else portable::exp_batch(x, y, n);
}

}  // namespace lmhead::sample
