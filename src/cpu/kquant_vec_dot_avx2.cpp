// Q4_K, Q5_K and Q6_K heads x Q8_K activations with AVX2, in the float order of quant/vec_dot.cpp's
// dot_q4_K_q8_K, dot_q5_K_q8_K and dot_q6_K_q8_K (numerics.md §5, §5b: llama.cpp's x86 vec_dot).
// The integer lanes come from kquant_avx2.hpp's superblock_lanes; per super-block, in order:
//   dq = y.d * f32(d);  acc[k] = fma(dq, float(isum[k]), acc[k])          (eight lanes, all types)
//   Q5_K: summs = fma((-y.d) * f32(dmin), float(sum_j m[j] pair[j]), summs)
//   Q4_K: acc_m[t] = fma((-y.d) * f32(dmin), float(m[2t] pair[2t] + m[2t+1] pair[2t+1]), acc_m[t])
// and at the end reduce_lanes(acc) (+ summs | + (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])),
// with pair[j] = bsums[2j] + bsums[2j + 1].
#include <immintrin.h>

#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

// Lane g of v in every lane.
inline __m128 lane_to_all4(__m128 v, int g) { return _mm_permutevar_ps(v, _mm_set1_epi32(g)); }

template <KQuant K>
struct VecDotOrder {
  template <int G>
  static void group(const uint8_t* row, const uint8_t* const* y, const KTokens* tok, int64_t nb, float* result,
                    uint64_t ahead) {
    __m256 acc[G];
    [[maybe_unused]] __m128 acc_m[G];                  // Q4_K: token g's four mins chains
    [[maybe_unused]] __m128 summs = _mm_setzero_ps();  // Q5_K: token g's mins chain in lane g
    for (int g = 0; g < G; ++g) {
      acc[g] = _mm256_setzero_ps();
      acc_m[g] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
      __m256i isum[G];
      const KHeader h = superblock_lanes<K, G>(row + i * kBlockBytesOf<K>, y, size_t(i) * kQ8KBytes, isum, ahead);
      const __m128 dq = _mm_mul_ps(_mm_load_ps(tok[i].yd), _mm_broadcastss_ps(h.dd));
      for (int g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(_mm256_broadcastss_ps(lane_to_all4(dq, g)), _mm256_cvtepi32_ps(isum[g]), acc[g]);
      if constexpr (K != KQuant::q6_K) {
        const __m128 dm = _mm_mul_ps(_mm_load_ps(tok[i].neg_yd), _mm_permute_ps(h.dd, _MM_SHUFFLE(1, 1, 1, 1)));
        const __m128i m = _mm_cvtepu8_epi16(_mm_srli_si128(h.sm, 8));
        if constexpr (K == KQuant::q5_K) {
          // The four tokens' totals in the lanes of one vector: [t0 t2 . . | t1 t3 . .] -> [t0 t1 t2 t3].
          const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);
          const __m256i m2 = _mm256_broadcastsi128_si256(m);
          const __m256i m01 = _mm256_madd_epi16(m2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[0])));
          const __m256i m23 = _mm256_madd_epi16(m2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[2])));
          const __m256i hm = _mm256_hadd_epi32(m01, m23);
          const __m128i imin = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_hadd_epi32(hm, hm), order));
          summs = _mm_fmadd_ps(dm, _mm_cvtepi32_ps(imin), summs);
        } else {
          for (int g = 0; g < G; ++g)
            acc_m[g] = _mm_fmadd_ps(lane_to_all4(dm, g), _mm_cvtepi32_ps(_mm_madd_epi16(m, tok[i].pairs[g])), acc_m[g]);
        }
      }
    }
    alignas(16) float s[4];
    _mm_store_ps(s, summs);
    for (int g = 0; g < G; ++g) {
      result[g] = reduce_lanes(acc[g]);
      if constexpr (K == KQuant::q5_K) result[g] += s[g];
      if constexpr (K == KQuant::q4_K) result[g] += reduce_lanes4(acc_m[g]);
    }
  }
};

}  // namespace

void q4_K_q8(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { k_tile<VecDotOrder<KQuant::q4_K>>(t, a, o, s); }
void q5_K_q8(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { k_tile<VecDotOrder<KQuant::q5_K>>(t, a, o, s); }
void q6_K_q8(const HeadTile& t, const TokenActs& a, const RawOut& o, void* s) { k_tile<VecDotOrder<KQuant::q6_K>>(t, a, o, s); }

}  // namespace lmhead::cpu::avx2
