// llama.cpp's tiled K-quant order (route tiled, and route llamacpp where llama.cpp tiles) for Q4_K,
// Q5_K and Q6_K heads with AVX2: byte for byte quant::llamacpp_dot(LlamaCppPath::tiled_kquant).
// Per 256-element super-block, with every integer exact (so formed in any order):
//   s1 = sum over sub-blocks of scale * (levels . q8)   (Q6_K: signed levels, the 32 offset taken
//                                                        off through the bsums, as in the default route)
//   s2 = sum over j of m[j] * (bsums[2j] + bsums[2j+1])  (Q4_K / Q5_K)
//   r = fma(-dmin, float(s2), float(s1) * d)            (Q6_K: r = float(s1) * d)
//   out = fma(r, y.d, out)                               super-block after super-block.
//
// The integer work is the default route's (kquant_avx2.hpp's superblock_lanes): per super-block the
// levels are decoded into registers once and each sub-block's maddubs + madd (scale applied in
// int16 pairs) goes to eight int32 lanes for up to four tokens. Where vec_dot converts those lanes
// and accumulates them in eight float lanes, this order sums them in integer to s1 (three hadds for
// four tokens), and the four tokens' float steps run in the four lanes of one SSE vector, one
// super-block late (see TiledOrder::group).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

// Tokens 0 .. G-1 of a group (y[g]: token g's activation blocks) against one row: the tiled dots.
template <KQuant K>
struct TiledOrder {
  template <int G>
  static void group(const uint8_t* row, const uint8_t* const* y, const KTokens* tok, int64_t nb, float* result,
                    uint64_t ahead) {
    __m128 out = _mm_setzero_ps();  // token g in lane g
    // The reference's float steps for one super-block, one rounding each, token g in lane g (dd: [d,
    // dmin, ..]). Each super-block's run one iteration late, after the next one's integer work: the
    // chain from the last madd to `out` (reductions, conversions, three roundings) is then off the
    // loop's critical path. On zeros they leave out = +0, the reference's start, so the first
    // iteration finishes a zero super-block.
    __m128i prev_s1 = _mm_setzero_si128(), prev_s2 = _mm_setzero_si128();
    __m128 prev_dd = _mm_setzero_ps(), prev_yd = _mm_setzero_ps();
    auto finish = [&out](__m128i s1, [[maybe_unused]] __m128i s2, __m128 dd, __m128 yd) {
      __m128 r = _mm_mul_ps(_mm_cvtepi32_ps(s1), _mm_broadcastss_ps(dd));
      if constexpr (K != KQuant::q6_K) {
        const __m128 neg_dmin = _mm_xor_ps(_mm_permute_ps(dd, _MM_SHUFFLE(1, 1, 1, 1)), _mm_set1_ps(-0.0f));
        r = _mm_fmadd_ps(neg_dmin, _mm_cvtepi32_ps(s2), r);
      }
      out = _mm_fmadd_ps(r, yd, out);
    };
    for (int64_t i = 0; i < nb; ++i) {
      __m256i isum[G];
      const KHeader hd = superblock_lanes<K, G>(row + i * kBlockBytesOf<K>, y, size_t(i) * kQ8KBytes, isum, ahead);
      const __m128i sm = hd.sm;
      finish(prev_s1, prev_s2, prev_dd, prev_yd);

      // s1 (and s2) of token g in lane g, exact.
      __m128i s1, s2 = _mm_setzero_si128();
      if constexpr (G == 1) {
        // Shuffles and adds (single micro-ops) rather than hadds.
        const __m128i v = _mm_add_epi32(_mm256_castsi256_si128(isum[0]), _mm256_extracti128_si256(isum[0], 1));
        if constexpr (K == KQuant::q6_K) {
          const __m128i h = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
          s1 = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 1, 1, 1)));
        } else {
          const __m128i m = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), tok[i].pairs[0]);
          const __m128i h = _mm_add_epi32(_mm_unpacklo_epi64(v, m), _mm_unpackhi_epi64(v, m));  // [v02 v13 m02 m13]
          const __m128i both = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));  // [s1 s1 s2 s2]
          s1 = both;
          s2 = _mm_unpackhi_epi64(both, both);
        }
      } else {
        __m256i v[4];
        for (int g = 0; g < 4; ++g) v[g] = g < G ? isum[g] : _mm256_setzero_si256();
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
        s1 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        if constexpr (K != KQuant::q6_K) {
          const __m256i m = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
          const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);  // [t0 t2 . . | t1 t3 . .] -> [t0 t1 t2 t3]
          const __m256i m01 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[0])));
          const __m256i m23 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[2])));
          const __m256i hm = _mm256_hadd_epi32(m01, m23);
          s2 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_hadd_epi32(hm, hm), order));
        }
      }

      prev_s1 = s1;
      prev_s2 = s2;
      prev_dd = hd.dd;
      prev_yd = _mm_load_ps(tok[i].yd);
    }
    finish(prev_s1, prev_s2, prev_dd, prev_yd);
    alignas(16) float o[4];
    _mm_store_ps(o, out);
    for (int g = 0; g < G; ++g) result[g] = o[g];
  }
};

}  // namespace

void q4_K_tiled(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  k_tile<TiledOrder<KQuant::q4_K>>(tile, acts, out, scratch);
}
void q5_K_tiled(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  k_tile<TiledOrder<KQuant::q5_K>>(tile, acts, out, scratch);
}
void q6_K_tiled(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  k_tile<TiledOrder<KQuant::q6_K>>(tile, acts, out, scratch);
}

}  // namespace lmhead::cpu::avx2
