#pragma once
#include <cstdint>
#include "lmhead/tensor_type.hpp"

namespace lmhead::quant {

// Decodes n elements (a whole number of blocks) of a row stored in `type` into f32, with the
// per-element rounding of numerics.md §3. Throws Error for a type that is not a head type.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

}  // namespace lmhead::quant
