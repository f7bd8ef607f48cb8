#pragma once
// Portable reference dot products: one weight row against one token's activations, in the exact
// float order that every fast kernel (AVX2, CUDA) must reproduce byte for byte.
#include <cstdint>
#include "lmhead/tensor_type.hpp"
#include "quant/activation.hpp"

namespace lmhead::quant {

// q8 route: row in `head`'s format, act in activation_format(head, q8). n elements.
// Q5_K follows numerics.md §5 (llama.cpp AVX2 order); the others document their order in
// vec_dot.cpp and docs/quantization.md. Note Q4_K: its mins accumulate in four lanes, as in
// llama.cpp's AVX2 kernel, not in Q5_K's single scalar.
float vec_dot_q8_route(TensorType head, const void* row, const void* act, int64_t n);

// f32 route: the row dequantized (per §3 rounding) times f32 activations, accumulated in eight
// lanes with FMA (lane k holds elements 8i+k, in element order), reduced as
// h = [a0+a4, a1+a5, a2+a6, a3+a7]; (h0+h2)+(h1+h3). `scratch` holds n floats.
float vec_dot_f32_route(TensorType head, const void* row, const float* x, int64_t n, float* scratch);

}  // namespace lmhead::quant
