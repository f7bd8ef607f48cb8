#pragma once
// The llama.cpp route (RunOptions::route = Route::llamacpp): which code path llama.cpp's x86 CPU
// backend (commit 0c1e570, native build on Zen 4: AVX-512 VNNI and BF16) takes for a head of a given type at T tokens
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
  vec_dot_bf16,     // ggml_vec_dot_bf16, AVX512-BF16: two vdpbf16ps accumulators, their sums in double
  sgemm_bf16,       // llamafile's tinyBLAS<32, __m512, __m512bh> for BF16 x BF16 (vdpbf16ps)
  vec_dot_f32,      // ggml_vec_dot_f32, AVX-512: four 16-lane accumulators, GCC's vectorized tail
  sgemm_f32,        // llamafile's tinyBLAS<16, __m512> for F32 x F32
  unsupported,      // a path lmhead does not reproduce (named in the error)
};

std::string_view path_name(LlamaCppPath);

// The path llama.cpp takes for a head of `type` with `vocab` rows and `hidden` columns at `tokens`
// tokens per matmul. `why` (optional) receives the source condition that chose it.
LlamaCppPath llamacpp_path(TensorType type, int64_t vocab, int64_t hidden, int tokens, std::string_view* why = nullptr);

// The activation format the path multiplies against (q8_K, q8_0, f16, bf16 or f32).
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
// as bytes with their per-sub-block scales, mins and factors, or F16 / BF16 / F32 weights as f32
// (exact). Same integers and the same float operations in the same order as llamacpp_dot, so the
// same bytes.
size_t llamacpp_unpacked_bytes(int64_t n);
void llamacpp_unpack_row(TensorType type, const void* row, int64_t n, void* unpacked);
float llamacpp_dot_unpacked(LlamaCppPath path, TensorType type, const void* unpacked, const void* act, int64_t n,
                            bool grouped);

// One step of VDPBF16PS in one lane, as AMD Zen 4 computes it (measured against the instruction on
// 25.6 million lanes, numerics.md "The llama.cpp route"): acc + w * a as one fused multiply-add
// rounded to nearest even, with subnormal inputs (w, a and acc) read as zeros of their sign and a
// result below FLT_MIN after rounding to 24 bits flushed to a zero of its sign (DAZ, FTZ, tininess
// after rounding; MXCSR is not consulted). The instruction does two steps per lane, the pair's odd
// element first: acc = step(step(acc, w[2l+1], a[2l+1]), w[2l], a[2l]). w and a are bf16 values
// widened to f32.
float vdpbf16ps_step(float acc, float w, float a);

}  // namespace lmhead::quant
