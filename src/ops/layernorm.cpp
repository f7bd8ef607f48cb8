#include "ops/layernorm.hpp"

#include <cmath>

namespace lmhead::ops {

float layer_mean(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  // ggml rounds the sum to f32 and divides in f32 (an f32 sum over an integer count).
  return static_cast<float>(sum) / static_cast<float>(n);
}

double layer_variance(const float* x, int64_t n, float mean) {
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 15 < n; i += 16) {
    float sq[16];
    for (int j = 0; j < 16; ++j) {
      const float d = x[i + j] - mean;
      sq[j] = d * d;
    }
    // The 512-bit horizontal add's pairing: each level adds the upper half to the lower half.
    float h8[8], h4[4];
    for (int j = 0; j < 8; ++j) h8[j] = sq[j + 8] + sq[j];
    for (int j = 0; j < 4; ++j) h4[j] = h8[j + 4] + h8[j];
    const float group = (h4[0] + h4[2]) + (h4[1] + h4[3]);
    sum += static_cast<double>(group);
  }
  for (; i < n; ++i) {
    const float d = x[i] - mean;
    sum += static_cast<double>(d * d);
  }
  return sum / static_cast<double>(n);
}

void layernorm(const float* x, const float* gamma, const float* beta, int64_t n, float eps, float* normed,
               float* unscaled) {
  const float mean = layer_mean(x, n);
  const float variance = static_cast<float>(layer_variance(x, n, mean));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float y = (x[i] - mean) * scale;
    if (unscaled) unscaled[i] = y;
    const float g = y * gamma[i];
    normed[i] = beta ? g + beta[i] : g;
  }
}

}  // namespace lmhead::ops
