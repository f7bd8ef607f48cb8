#pragma once
#include <cstddef>
#include <cstdint>
#include "lmhead/tensor_type.hpp"

namespace lmhead::quant {

// llama.cpp's reference quantizers without an importance matrix (numerics.md §3b), plus plain
// conversions for F16 / BF16 / F32. n is a whole number of blocks. Returns bytes written.
size_t quantize_row(TensorType type, const float* src, void* dst, int64_t n);

}  // namespace lmhead::quant
