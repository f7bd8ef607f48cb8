#pragma once
#include <cstdint>

namespace lmhead::ops {

// LayerNorm in the order of ggml's CPU `ggml_norm` followed by llama.cpp's separate `ggml_mul`
// (gamma) and `ggml_add` (beta) nodes (numerics.md §6b):
//   mean: a sequential double sum of the inputs, rounded to f32, divided by n in f32;
//   d[i] = x[i] - mean in f32;
//   variance: d[i]^2 rounded to f32, summed in groups of 16 consecutive elements in f32 by the
//   halving tree of a 512-bit horizontal add ((j, j+8), then (j, j+4), then (0, 2)+(1, 3)), each
//   group's sum added to a double accumulator in order, the leftover n % 16 squares added to it one
//   by one; the double divided by n, then rounded to f32;
//   scale = 1 / sqrtf(variance + eps); normed = ((d * scale) * gamma) + beta, three f32 roundings.
// The groups of 16 are those of ggml built for AVX-512 (F and DQ), as on the reference machine;
// ggml built for AVX2 only groups by 8 and can differ in the last bit of the variance.
// `unscaled` (optional) receives d * scale, the graph's `norm` node before gamma. beta may be null.
float layer_mean(const float* x, int64_t n);
double layer_variance(const float* x, int64_t n, float mean);
void layernorm(const float* x, const float* gamma, const float* beta, int64_t n, float eps, float* normed,
               float* unscaled = nullptr);

}  // namespace lmhead::ops
