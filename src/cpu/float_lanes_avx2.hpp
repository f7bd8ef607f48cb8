#pragma once
// Float-format dot products with AVX2 (quant/vec_dot.cpp's dot_float_lanes order): element e feeds
// lane e % 8 in element order, acc = fma(w, a, acc) per eight elements, then the reference
// reduction. Used by the F16 / BF16 / F32 heads on both routes and by the f32 route of the
// quantized heads (rows decoded to f32 first, exactly as quant::dequantize_row decodes them).
//
// Each (row, token) pair is one chain of dependent FMAs, so the kernel keeps R rows x G tokens
// chains in flight (8 of them: two FMA pipes times four cycles of latency). Include only from
// *_avx2.cpp files.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

enum class RowFormat { f32, f16, bf16 };

template <RowFormat F>
inline __m256 load8(const uint8_t* row, int64_t e) {
  if constexpr (F == RowFormat::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
  } else if constexpr (F == RowFormat::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * e)));
  } else {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * e)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

// The last n % 8 elements, zero-padded: fma(0, 0, acc) leaves every lane as it is (a lane is never
// -0: it starts at +0 and a sum that cancels rounds to +0), so the tail costs no exactness.
template <RowFormat F>
inline __m256 load_tail(const uint8_t* row, int64_t e, int64_t left) {
  constexpr int kBytes = F == RowFormat::f32 ? 4 : 2;
  alignas(32) uint8_t tmp[32] = {};
  std::memcpy(tmp, row + kBytes * e, size_t(left) * kBytes);
  return load8<F>(tmp, 0);
}

// R rows (row r at rows[r]) times G tokens (x[g], f32), n elements.
template <RowFormat F, int R, int G>
inline void float_dots(const uint8_t* const* rows, const float* const* x, int64_t n, float* out, size_t out_stride,
                       int64_t r0) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  const int64_t whole = n / 8 * 8;
  for (int64_t e = 0; e < whole; e += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = load8<F>(rows[r], e);
    for (int g = 0; g < G; ++g) {
      const __m256 a = _mm256_loadu_ps(x[g] + e);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm256_fmadd_ps(w[r], a, acc[r][g]);
    }
  }
  if (whole < n) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = load_tail<F>(rows[r], whole, n - whole);
    for (int g = 0; g < G; ++g) {
      const __m256 a = load_tail<RowFormat::f32>(reinterpret_cast<const uint8_t*>(x[g]), whole, n - whole);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm256_fmadd_ps(w[r], a, acc[r][g]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) out[size_t(g) * out_stride + size_t(r0 + r)] = reduce_lanes(acc[r][g]);
}

// Rows [0, count) x all tokens for rows already in memory in format F (row r at row(r)).
// Tokens' f32 activations at x_of(t).
template <RowFormat F, class RowAt, class TokenAt>
void float_tile(int64_t count, int tokens, int64_t n, RowAt row_at, TokenAt x_at, const RawOut& out) {
  constexpr int kRows = 4;
  int64_t r = 0;
  for (; r + kRows <= count; r += kRows) {
    const uint8_t* rows[kRows];
    for (int k = 0; k < kRows; ++k) rows[k] = row_at(r + k);
    int t = 0;
    for (; t + 2 <= tokens; t += 2) {
      const float* x[2] = {x_at(t), x_at(t + 1)};
      float_dots<F, kRows, 2>(rows, x, n, out.data + size_t(t) * out.stride, out.stride, r);
    }
    if (t < tokens) {
      const float* x[1] = {x_at(t)};
      float_dots<F, kRows, 1>(rows, x, n, out.data + size_t(t) * out.stride, out.stride, r);
    }
  }
  for (; r < count; ++r) {
    const uint8_t* rows[1] = {row_at(r)};
    int t = 0;
    for (; t + 4 <= tokens; t += 4) {
      const float* x[4] = {x_at(t), x_at(t + 1), x_at(t + 2), x_at(t + 3)};
      float_dots<F, 1, 4>(rows, x, n, out.data + size_t(t) * out.stride, out.stride, r);
    }
    for (; t < tokens; ++t) {
      const float* x[1] = {x_at(t)};
      float_dots<F, 1, 1>(rows, x, n, out.data + size_t(t) * out.stride, out.stride, r);
    }
  }
}

// Activations of the call as f32: the f32 route's own rows, or f16 / bf16 ones converted exactly
// into `scratch` (both conversions are exact, so the values are the reference's).
template <RowFormat A>
const float* token_f32(const TokenActs& acts, int t, int64_t n, float* scratch) {
  const uint8_t* src = acts.data + size_t(t) * acts.stride;
  if constexpr (A == RowFormat::f32) {
    (void)n;
    (void)scratch;
    return reinterpret_cast<const float*>(src);
  } else {
    float* dst = scratch + size_t(t) * size_t(n);
    int64_t e = 0;
    for (; e + 8 <= n; e += 8) _mm256_storeu_ps(dst + e, load8<A>(src, e));
    if (e < n) {
      alignas(32) float tail[8];
      _mm256_store_ps(tail, load_tail<A>(src, e, n - e));
      std::memcpy(dst + e, tail, size_t(n - e) * 4);
    }
    return dst;
  }
}

}  // namespace
}  // namespace lmhead::cpu::avx2
