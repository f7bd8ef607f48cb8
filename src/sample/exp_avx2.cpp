// sample::exp four lanes at a time. Every line mirrors one line of exp.hpp with the same IEEE
// operation per lane (vaddpd/vsubpd/vmulpd round once; the build's -ffp-contract=off keeps them
// from being fused although this file is compiled with -mfma), so each lane has the scalar bits.
#include <immintrin.h>

#include "sample/exp.hpp"
#include "sample/exp_batch.hpp"
#include "sample/weight_math.hpp"

namespace lmhead::sample::avx2 {
namespace {

// 2^k for four int32 k in [-1022, 1023], from the bits as exp_detail::pow2 builds them.
__m256d pow2(__m128i k) {
  const __m256i biased = _mm256_add_epi64(_mm256_cvtepi32_epi64(k), _mm256_set1_epi64x(1023));
  return _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52));
}

__m256d exp4(__m256d x) {
  const __m256d shifter = _mm256_set1_pd(0x1.8p52);
  const __m256d kd = _mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(0x1.71547652b82fep+0)), shifter), shifter);
  __m256d r = _mm256_sub_pd(x, _mm256_mul_pd(kd, _mm256_set1_pd(0x1.62e42fee00000p-1)));
  r = _mm256_sub_pd(r, _mm256_mul_pd(kd, _mm256_set1_pd(0x1.a39ef35793c76p-33)));
  __m256d p = _mm256_set1_pd(0x1.6124613a86d09p-33);
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.1eed8eff8d898p-29));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.ae64567f544e4p-26));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.27e4fb7789f5cp-22));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.71de3a556c734p-19));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.a01a01a01a01ap-16));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.a01a01a01a01ap-13));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.6c16c16c16c17p-10));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.1111111111111p-7));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.5555555555555p-5));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0x1.5555555555555p-3));
  p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(0.5));
  p = _mm256_add_pd(r, _mm256_mul_pd(_mm256_mul_pd(p, r), r));
  p = _mm256_add_pd(_mm256_set1_pd(1.0), p);
  // int(kd) is exact (kd is an integer); k / 2 rounds toward zero as C++'s division does. Lanes
  // outside the range get garbage here and are replaced below, as the scalar code returns early.
  const __m128i k = _mm256_cvttpd_epi32(kd);
  const __m128i k1 = _mm_srai_epi32(_mm_add_epi32(k, _mm_srli_epi32(k, 31)), 1);
  const __m128i k2 = _mm_sub_epi32(k, k1);
  __m256d y = _mm256_mul_pd(_mm256_mul_pd(p, pow2(k1)), pow2(k2));
  const __m256d inf = _mm256_set1_pd(__builtin_inf());
  y = _mm256_blendv_pd(y, x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
  y = _mm256_blendv_pd(y, inf, _mm256_cmp_pd(x, _mm256_set1_pd(709.782712893384), _CMP_GT_OQ));
  y = _mm256_blendv_pd(y, _mm256_setzero_pd(), _mm256_cmp_pd(x, _mm256_set1_pd(-745.2), _CMP_LT_OQ));
  return y;
}

}  // namespace

void exp_batch(const double* x, double* y, int64_t n) {
  const __m256d skip_below = _mm256_set1_pd(kZeroWeightBelow);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_loadu_pd(x + i);
    // Four ids far below the maximum weigh 0 whatever exp gives: no exp needed.
    if (_mm256_movemask_pd(_mm256_cmp_pd(v, skip_below, _CMP_LT_OQ)) == 0xf) {
      _mm256_storeu_pd(y + i, _mm256_setzero_pd());
      continue;
    }
    _mm256_storeu_pd(y + i, exp4(v));
  }
  exp_batch_scalar(x + i, y + i, n - i);
}

}  // namespace lmhead::sample::avx2
