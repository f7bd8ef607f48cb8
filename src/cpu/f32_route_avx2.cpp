// The f32 route of the quantized heads with AVX2: rows decoded to f32 exactly as
// quant::dequantize_row decodes them (every product rounded on its own, in the spec's order:
// (f32(d) * sc) * q - (f32(dmin) * m) for Q4_K / Q5_K, (f32(d) * sc) * q for Q6_K, f32(d) * q for
// Q8_0), four rows at a time into the scratch, then the float-lanes dot of float_lanes_avx2.hpp.
#include <immintrin.h>

#include "cpu/float_lanes_avx2.hpp"
#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

// 32 levels (bytes) times one scale, minus one min, into y[0..32).
template <bool Signed>
inline void decode32(__m256i levels, float scale, float min, float* y) {
  alignas(32) uint8_t bytes[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), levels);
  const __m256 s = _mm256_set1_ps(scale), m = _mm256_set1_ps(min);
  for (int k = 0; k < 4; ++k) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 8 * k));
    const __m256i q = Signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    __m256 v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(q));
    if (!Signed) v = _mm256_sub_ps(v, m);
    _mm256_storeu_ps(y + 8 * k, v);
  }
}

template <KQuant K>
void decode_row_kquant(const uint8_t* row, int64_t n, float* y) {
  for (int64_t i = 0; i < n / 256; ++i, y += 256) {
    const uint8_t* x = row + i * kBlockBytesOf<K>;
    __m256i q[8];
    if constexpr (K == KQuant::q6_K) {
      unpack_levels_q6(x, q);
      // The f32 route decodes each value as §3 does, (d * scale) * (u - 32): the offset per element.
      for (int c = 0; c < 8; ++c) q[c] = _mm256_sub_epi8(q[c], _mm256_set1_epi8(32));
      const float d = f16_at(x + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
      alignas(32) uint8_t bytes[32];
      for (int c = 0; c < 8; ++c) {
        // Elements 32c .. 32c+15 take scales[2c], the next sixteen scales[2c + 1].
        _mm256_store_si256(reinterpret_cast<__m256i*>(bytes), q[c]);
        for (int half = 0; half < 2; ++half) {
          const __m256 s = _mm256_set1_ps(d * float(sc[2 * c + half]));
          for (int k = 0; k < 2; ++k) {
            const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 16 * half + 8 * k));
            _mm256_storeu_ps(y + 32 * c + 16 * half + 8 * k, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
          }
        }
      }
    } else {
      unpack_levels_q45<K>(x, q);
      const float d = f16_at(x), dmin = f16_at(x + 2);
      alignas(16) uint8_t sm[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(sm), k_scales_mins(x + 4));
      for (int j = 0; j < 8; ++j) decode32<false>(q[j], d * float(sm[j]), dmin * float(sm[8 + j]), y + 32 * j);
    }
  }
}

void decode_row_q8_0(const uint8_t* row, int64_t n, float* y) {
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const uint8_t* x = row + i * 34;
    const __m256 d = _mm256_set1_ps(f16_at(x));
    for (int k = 0; k < 4; ++k) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 2 + 8 * k));
      _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
    }
  }
}

template <class Decode>
void decoded_tile(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch, Decode decode) {
  constexpr int kRows = 4;
  float* rows = static_cast<float*>(scratch);
  const int64_t n = tile.hidden;
  for (int64_t r = 0; r < tile.count; r += kRows) {
    const int64_t count = tile.count - r < kRows ? tile.count - r : kRows;
    for (int64_t k = 0; k < count; ++k) decode(tile.rows + (r + k) * tile.row_bytes, n, rows + k * n);
    float_tile<RowFormat::f32>(
        count, acts.tokens, n, [&](int64_t k) { return reinterpret_cast<const uint8_t*>(rows + k * n); },
        [&](int t) { return reinterpret_cast<const float*>(acts.data + size_t(t) * acts.stride); },
        RawOut{out.data + r, out.stride});
  }
}

}  // namespace

void q4_K_f32(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { decoded_tile(t, a, o, s, decode_row_kquant<KQuant::q4_K>); }
void q5_K_f32(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { decoded_tile(t, a, o, s, decode_row_kquant<KQuant::q5_K>); }
void q6_K_f32(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { decoded_tile(t, a, o, s, decode_row_kquant<KQuant::q6_K>); }
void q8_0_f32(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { decoded_tile(t, a, o, s, decode_row_q8_0); }

}  // namespace lmhead::cpu::avx2
