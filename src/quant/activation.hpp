#pragma once
// Activation formats: what the head's weights are multiplied against, per head type and route.
#include <cstddef>
#include <cstdint>

#include "lmhead/lmhead.hpp"
#include "quant/blocks.hpp"

namespace lmhead::quant {

enum class ActivationFormat {
  q8_K,  // K-quant heads on the q8 route (numerics.md §4)
  q8_0,  // Q8_0 heads on the q8 route (§4, x86 AVX2 order)
  f16,   // F16 heads on the q8 route: llama.cpp's vec_dot_type for f16 is f16
  bf16,  // BF16 heads on the q8 route: likewise bf16
  f32,   // the f32 route, and F32 heads
};

ActivationFormat activation_format(TensorType head, ActivationRoute route);
// Bytes needed for n activations (n a multiple of the format's block).
size_t activation_bytes(ActivationFormat fmt, int64_t n);
// Quantizes one token's n normed activations.
void quantize_activations(ActivationFormat fmt, const float* x, int64_t n, void* dst);

// llama.cpp's nearest_int: round half to even through the 1.5 * 2^23 trick (valid for |f| < 2^22).
inline int nearest_int(float f) {
  const float v = f + 12582912.0f;
  return int(f32_bits(v) & 0x7FFFFF) - 0x400000;
}

// The scale's sign in a block where both +amax and -amax occur: quantize_row_q8_K takes the sign of
// the first element reaching amax; ggml_quantize_mat_q8_K_4x8 (x86, the repacked Q4_K gemm's whole
// groups of 4 tokens) takes it positive whenever some element equals +amax. Elsewhere they agree.
enum class Q8KScaleSign { first_reaching_amax, positive_if_any };
void quantize_q8_K(const float* x, int64_t n, block_q8_K* out,
                   Q8KScaleSign sign = Q8KScaleSign::first_reaching_amax);
void quantize_q8_0_activations(const float* x, int64_t n, block_q8_0* out);

}  // namespace lmhead::quant
