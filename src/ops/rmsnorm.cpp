#include "ops/rmsnorm.hpp"

#include <cmath>

namespace lmhead::ops {

float rms_scale(const float* x, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / std::sqrt(mean + eps);
}

void rmsnorm(const float* x, const float* gamma, int64_t n, float eps, float* normed, float* unscaled) {
  const float scale = rms_scale(x, n, eps);
  for (int64_t i = 0; i < n; ++i) {
    const float y = x[i] * scale;
    if (unscaled) unscaled[i] = y;
    normed[i] = y * gamma[i];
  }
}

}  // namespace lmhead::ops
