#pragma once
#include <cstdint>

namespace lmhead::ops {

// RMSNorm in llama.cpp's order (numerics.md §6): the sum of squares is a sequential double sum of
// f32-rounded squares, the mean is rounded to f32 before eps is added, and the two multiplies
// (by the scale, then by gamma) are separate f32 roundings. `unscaled` (optional) receives
// x * scale before gamma, the golden files' `rms_norm` stage.
float rms_scale(const float* x, int64_t n, float eps);
void rmsnorm(const float* x, const float* gamma, int64_t n, float eps, float* normed,
             float* unscaled = nullptr);

}  // namespace lmhead::ops
