// Q5_K head x Q8_K activations with AVX2, in the float order of numerics.md §5 (the scalar
// reference is quant/vec_dot.cpp's dot_q5_K_q8_K). Integer lane sums are exact in any order; the
// float operations are exactly the reference's, per super-block in order:
//   dq = y.d * f32(d); dm = (-y.d) * f32(dmin)
//   summs = fma(dm, float(imin), summs); acc[k] = fma(dq, float(isum[k]), acc[k])
// and the final (h0 + h2) + (h1 + h3) + summs.
//
// Every token count takes the same path: per super-block, unpack into registers once and use it
// for up to four tokens at once (measured faster than unpacking whole rows into L1 for the batch:
// docs/performance.md, CPU).
#include <immintrin.h>

#include <cstring>

#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

constexpr int kBlockBytes = 176;

// Tokens in registers, up to four per group: each super-block is unpacked once and used at
// once for the group, sub-block by sub-block (level and scale vector, then every token's
// maddubs and madd); the four tokens' mins terms run in the lanes of one vector, summs =
// fma(dm, float(imin), summs) lane by lane. The row is re-read from L1 for each group of four.
struct GroupTokens {
  __m128i pairs[4];  // per token: bsums[2j] + bsums[2j+1], int16 x 8
  float yd[4];
  float neg_yd[4];
};

void prepare_groups(const TokenActs& acts, int64_t nb, GroupTokens* g) {
  for (int t0 = 0; t0 < acts.tokens; t0 += 4)
    for (int64_t i = 0; i < nb; ++i) {
      GroupTokens& cell = g[(t0 / 4) * nb + i];
      for (int k = 0; k < 4; ++k) {
        if (t0 + k < acts.tokens) {
          const uint8_t* y = acts.data + size_t(t0 + k) * acts.stride + i * kQ8KBytes;
          cell.pairs[k] = bsum_pairs(y);
          cell.yd[k] = q8k_d(y);
          cell.neg_yd[k] = -q8k_d(y);
        } else {
          cell.pairs[k] = _mm_setzero_si128();
          cell.yd[k] = 0.0f;
          cell.neg_yd[k] = 0.0f;
        }
      }
    }
}

template <int G>
void dot_group(const uint8_t* row, const uint8_t* const* qs8, const GroupTokens* tok, int64_t nb, float* result) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);  // [t0 t2 . . | t1 t3 . .] -> [t0 t1 t2 t3]
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  __m128 summs = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(x + kPrefetchAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + kPrefetchAhead + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + kPrefetchAhead + 128), _MM_HINT_T0);
    const __m128i sm = k_scales_mins_vec(x + 4);
    const __m256i pairs = scale_pairs(sm);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
    __m256i isum[G];
    for (int g = 0; g < G; ++g) isum[g] = _mm256_setzero_si256();
#define LMHEAD_Q5_SUB(J, NIBBLE)                                                                            \
    {                                                                                                       \
      const __m256i level = _mm256_or_si256(NIBBLE, q5_high_bit<J>(qh));                                       \
      const __m256i scale = broadcast_pair(pairs, J);                                                       \
      for (int g = 0; g < G; ++g) {                                                                         \
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs8[g] + i * kQ8KBytes + 32 * (J))); \
        isum[g] = _mm256_add_epi32(isum[g], _mm256_madd_epi16(_mm256_maddubs_epi16(level, a), scale));     \
        keep_in_register(isum[g]);                                                                          \
      }                                                                                                     \
    }
#define LMHEAD_Q5_PAIR(P)                                                                                   \
    {                                                                                                       \
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 48 + 32 * P));              \
      LMHEAD_Q5_SUB(2 * P, _mm256_and_si256(b, low4))                                                       \
      LMHEAD_Q5_SUB(2 * P + 1, _mm256_and_si256(_mm256_srli_epi16(b, 4), low4))                              \
    }
    LMHEAD_Q5_PAIR(0) LMHEAD_Q5_PAIR(1) LMHEAD_Q5_PAIR(2) LMHEAD_Q5_PAIR(3)
#undef LMHEAD_Q5_PAIR
#undef LMHEAD_Q5_SUB
    uint32_t dd_bits;
    std::memcpy(&dd_bits, x, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd_bits)));  // [d, dmin, 0, 0]
    const __m128 d = _mm_broadcastss_ps(dd), dmin = _mm_permute_ps(dd, _MM_SHUFFLE(1, 1, 1, 1));
    const __m128 dq = _mm_mul_ps(_mm_loadu_ps(tok[i].yd), d);
    for (int g = 0; g < G; ++g) {
      const __m128 dq_g = _mm_permutevar_ps(dq, _mm_set1_epi32(g));
      acc[g] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dq_g), _mm256_cvtepi32_ps(isum[g]), acc[g]);
    }
    const __m256i m = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
    const __m256i m01 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[0])));
    const __m256i m23 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[2])));
    const __m256i h = _mm256_hadd_epi32(m01, m23);
    const __m128i imin = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_hadd_epi32(h, h), order));
    summs = _mm_fmadd_ps(_mm_mul_ps(_mm_loadu_ps(tok[i].neg_yd), dmin), _mm_cvtepi32_ps(imin), summs);
  }
  alignas(16) float s[4];
  _mm_store_ps(s, summs);
  for (int g = 0; g < G; ++g) result[g] = reduce_lanes(acc[g]) + s[g];
}

}  // namespace

void q5_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  GroupTokens* tok = static_cast<GroupTokens*>(scratch);
  prepare_groups(acts, nb, tok);
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int t0 = 0; t0 < acts.tokens; t0 += 4) {
      const int g = acts.tokens - t0 < 4 ? acts.tokens - t0 : 4;
      const uint8_t* qs8[4];
      for (int k = 0; k < g; ++k) qs8[k] = acts.data + size_t(t0 + k) * acts.stride + kQ8KQsAt;
      const GroupTokens* cells = tok + (t0 / 4) * nb;
      float result[4];
      switch (g) {
        case 1: dot_group<1>(row, qs8, cells, nb, result); break;
        case 2: dot_group<2>(row, qs8, cells, nb, result); break;
        case 3: dot_group<3>(row, qs8, cells, nb, result); break;
        default: dot_group<4>(row, qs8, cells, nb, result); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(t0 + k) * out.stride + r] = result[k];
    }
  }
}

}  // namespace lmhead::cpu::avx2
