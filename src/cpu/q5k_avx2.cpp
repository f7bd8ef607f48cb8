// Q5_K head x Q8_K activations with AVX2, in the float order of numerics.md §5 (the scalar
// reference is quant/vec_dot.cpp's dot_q5_K_q8_K). Integer lane sums are exact in any order; the
// float operations are exactly the reference's, per super-block in order:
//   dq = y.d * f32(d); dm = (-y.d) * f32(dmin)
//   summs = fma(dm, float(imin), summs); acc[k] = fma(dq, float(isum[k]), acc[k])
// and the final (h0 + h2) + (h1 + h3) + summs.
//
// One token: each super-block is unpacked into registers and used at once. Several tokens: the
// batch path of kquant_avx2.hpp (each row unpacked once into L1, every token streams over it).
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

constexpr int kBlockBytes = 176;

// One token's contribution of one super-block: the exact lane sums isum[k] (the 8 int32 lanes).
inline __m256i lane_sums(const __m256i q[8], const __m256i sc_pairs, const uint8_t* q8) {
  __m256i isum = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * j));
    const __m256i p16 = _mm256_maddubs_epi16(q[j], a);
    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, broadcast_pair(sc_pairs, j)));
    keep_in_register(isum);
  }
  return isum;
}

// The single-token path. Token-side values are prepared once per call (per super-block: the bsum
// pairs and [y.d, -y.d]); each super-block is unpacked into registers and used at once, two per
// iteration so their mins terms share one madd and one reduction before they feed the
// reference's sequential summs = fma(dm, float(imin), summs) chain in order.
struct SingleToken {
  __m128i pairs;   // bsums[2j] + bsums[2j+1], int16 x 8
  float yd, neg_yd;
  float pad[2];
};

void prepare_single(const uint8_t* act, int64_t nb, SingleToken* t) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* y = act + i * kQ8KBytes;
    t[i].pairs = bsum_pairs(y);
    t[i].yd = q8k_d(y);
    t[i].neg_yd = -q8k_d(y);
  }
}

inline __m256i block_lane_sums(const uint8_t* x, const uint8_t* a, __m128i sm) {
  __m256i q[8];
  unpack_levels_q45<KQuant::q5_K>(x, q);
  return lane_sums(q, scale_pairs(sm), a);
}

float dot_row(const uint8_t* row, const uint8_t* qs, const SingleToken* tok, int64_t nb, uint64_t prefetch_ahead = kPrefetchAhead) {
  __m256 acc = _mm256_setzero_ps();
  __m128 summs = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const uint8_t* x0 = row + i * kBlockBytes;
    const uint8_t* x1 = x0 + kBlockBytes;
    for (int k = 0; k < 6; ++k) _mm_prefetch(reinterpret_cast<const char*>(x0 + prefetch_ahead + 64 * k), _MM_HINT_T0);
    uint32_t dd0, dd1;
    std::memcpy(&dd0, x0, 4);
    std::memcpy(&dd1, x1, 4);
    // [dq0, dm0, dq1, dm1]: [d, dmin] of each block times [y.d, -y.d], one f32 multiply each.
    const __m128 dd = _mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128(int(dd0)), _mm_cvtsi32_si128(int(dd1))));
    const __m128 yy = _mm_castsi128_ps(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&tok[i].yd)),
                                                          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&tok[i + 1].yd))));
    const __m128 f = _mm_mul_ps(dd, yy);
    const __m128i sm0 = k_scales_mins_vec(x0 + 4), sm1 = k_scales_mins_vec(x1 + 4);
    const __m256i m01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm0, 8))),
                                                _mm_cvtepu8_epi16(_mm_srli_si128(sm1, 8)), 1);
    const __m256i p01 = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(&tok[i + 1].pairs),
                                            reinterpret_cast<const __m128i*>(&tok[i].pairs));
    const __m256i part = _mm256_madd_epi16(m01, p01);
    const __m128i both = _mm_hadd_epi32(_mm256_castsi256_si128(part), _mm256_extracti128_si256(part, 1));
    const __m128 imin = _mm_cvtepi32_ps(_mm_hadd_epi32(both, both));  // [imin0, imin1, ..], exact
    summs = _mm_fmadd_ss(_mm_movehdup_ps(f), imin, summs);
    summs = _mm_fmadd_ss(_mm_shuffle_ps(f, f, _MM_SHUFFLE(3, 3, 3, 3)), _mm_movehdup_ps(imin), summs);
    const __m256i isum0 = block_lane_sums(x0, qs + i * kQ8KBytes, sm0);
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), _mm256_cvtepi32_ps(isum0), acc);
    const __m256i isum1 = block_lane_sums(x1, qs + (i + 1) * kQ8KBytes, sm1);
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehl_ps(f, f)), _mm256_cvtepi32_ps(isum1), acc);
  }
  for (; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    const float dq = tok[i].yd * f16_at(x);
    const float dm = tok[i].neg_yd * f16_at(x + 2);
    const __m128i sm = k_scales_mins_vec(x + 4);
    const int32_t imin = hsum_epi32(_mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), tok[i].pairs));
    summs = _mm_fmadd_ss(_mm_set_ss(dm), _mm_set_ss(float(imin)), summs);
    const __m256i isum = block_lane_sums(x, qs + i * kQ8KBytes, sm);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dq), _mm256_cvtepi32_ps(isum), acc);
  }
  return reduce_lanes(acc) + _mm_cvtss_f32(summs);
}

}  // namespace

void q5_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  if (acts.tokens == 1) {
    const int64_t nb = tile.hidden / 256;
    SingleToken* tok = static_cast<SingleToken*>(scratch);
    prepare_single(acts.data, nb, tok);
    for (int64_t r = 0; r < tile.count; ++r)
      out.data[r] = dot_row(tile.rows + r * tile.row_bytes, acts.data + kQ8KQsAt, tok, nb);
    return;
  }
  kquant_tile<KQuant::q5_K>(tile, acts, out, scratch);
}

}  // namespace lmhead::cpu::avx2
