// Q8_0 head x Q8_0 activations with AVX2, in the float order of quant/vec_dot.cpp's dot_q8_0_q8_0
// (llama.cpp's x86 order): per 32-element block dprod = f32(w.d) * f32(a.d), then
// acc[k] = fma(dprod, float(isum[k]), acc[k]) with lane k the block's bytes 4k..4k+3; the reference
// reduction at the end. Signed x signed bytes go through maddubs as |w| x sign(a, w) (never
// saturates: 2 * 128 * 127 < 32768), then madd with ones gives the four-byte lanes.
#include <immintrin.h>

#include "cpu/kernels.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

constexpr int kBlock = 34;

// Tokens t0 .. t0+G-1 against one row of nb blocks; acts at act[g].
template <int G>
void dot_rows_q8_0(const uint8_t* row, int64_t nb, const uint8_t* const* act, float* result) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlock;
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 2));
    const __m256i wabs = _mm256_sign_epi8(w, w);
    const __m256 wd = _mm256_set1_ps(f16_at(x));
    for (int g = 0; g < G; ++g) {
      const uint8_t* y = act[g] + i * kBlock;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 2));
      const __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w)), ones);
      const __m256 dprod = _mm256_mul_ps(wd, _mm256_set1_ps(f16_at(y)));
      acc[g] = _mm256_fmadd_ps(dprod, _mm256_cvtepi32_ps(isum), acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) result[g] = reduce_lanes(acc[g]);
}

}  // namespace

void q8_0_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void*) {
  const int64_t nb = tile.hidden / 32;
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int t0 = 0; t0 < acts.tokens; t0 += 4) {
      const int g = acts.tokens - t0 < 4 ? acts.tokens - t0 : 4;
      const uint8_t* act[4];
      for (int k = 0; k < g; ++k) act[k] = acts.data + size_t(t0 + k) * acts.stride;
      float result[4];
      switch (g) {
        case 1: dot_rows_q8_0<1>(row, nb, act, result); break;
        case 2: dot_rows_q8_0<2>(row, nb, act, result); break;
        case 3: dot_rows_q8_0<3>(row, nb, act, result); break;
        default: dot_rows_q8_0<4>(row, nb, act, result); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(t0 + k) * out.stride + r] = result[k];
    }
  }
}

}  // namespace lmhead::cpu::avx2
