#pragma once
// The llama.cpp route (RunOptions::route = Route::llamacpp): which code path llama.cpp's x86 CPU
// backend (commit 0c1e570, AVX-512 VNNI native build) takes for a head of a given type at T tokens
// per matmul, and that path's float order, one (row, token) dot at a time. Every path here keeps
// each output in its own accumulators, so thread count, tiling and row split never change a value;
// only the head type, T (the whole call's token count, not a pass's) and the vocabulary size
// choose the path. Derivations: docs/numerics.md, "The llama.cpp route".
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lmhead/lmhead.hpp"
#include "quant/activation.hpp"

namespace lmhead::quant {

enum class LlamaCppPath {
  vec_dot,          // ggml's vec_dot for the type (numerics.md §5, §5b; Q8_0's §4 order)
  sgemm_q8_0,       // llamafile's tinyBLAS_Q0_AVX for Q8_0 x Q8_0: per output the vec_dot order
  tiled_kquant,     // ggml-cpu/tiled (Q5_K, Q6_K, Q4_K when not repacked) from 8 tokens on
  repack_q4_K_8x8,  // Q4_K repacked at load into q4_K_8x8 (gemv below 4 tokens, gemm per 4)
  vec_dot_f16,      // ggml_vec_dot_f16, AVX-512: four 16-lane accumulators
  sgemm_f16,        // llamafile's tinyBLAS<16, __m512> for F16 x F16
  unsupported,      // a path lmhead does not reproduce (named in the error)
};

std::string_view path_name(LlamaCppPath);

// The path llama.cpp takes for a head of `type` with `vocab` rows and `hidden` columns at `tokens`
// tokens per matmul. `why` (optional) receives the source condition that chose it.
LlamaCppPath llamacpp_path(TensorType type, int64_t vocab, int64_t hidden, int tokens, std::string_view* why = nullptr);

// The activation format the path multiplies against (q8_K, q8_0 or f16).
ActivationFormat llamacpp_activation_format(LlamaCppPath path, TensorType type);

// Token `t` of `tokens` in the path's activation format. The repacked Q4_K path quantizes whole
// groups of 4 tokens with another scale-sign rule than the remaining tokens (see the .cpp).
void quantize_llamacpp_activations(LlamaCppPath path, TensorType type, const float* x, int64_t n, int t, int tokens,
                                   void* dst);

// Whether token t of `tokens` is in one of the whole groups of 4 that the repacked Q4_K path
// quantizes and multiplies together (its gemm); the other tokens take its gemv, another order.
bool in_group_of_4(LlamaCppPath path, int t, int tokens);

// One row against one token's activations in the path's order; `grouped` is in_group_of_4 for the token.
float llamacpp_dot(LlamaCppPath path, TensorType type, const void* row, const void* act, int64_t n, bool grouped);

// The same dots with a row unpacked once for all tokens (the cpu backend's kernels): K-quant levels
// as bytes with their per-sub-block scales, mins and factors, or F16 weights widened to f32. Same
// integers and the same float operations in the same order as llamacpp_dot, so the same bytes.
size_t llamacpp_unpacked_bytes(int64_t n);
void llamacpp_unpack_row(TensorType type, const void* row, int64_t n, void* unpacked);
float llamacpp_dot_unpacked(LlamaCppPath path, TensorType type, const void* unpacked, const void* act, int64_t n,
                            bool grouped);

}  // namespace lmhead::quant
