// row.hpp's scaled-logit and weight passes eight ids per 512-bit register, for CPUs with AVX-512
// F. Lane for lane the same IEEE operations in the same order as row_avx2.cpp (and so as the
// portable code): only the width differs, so the bits never depend on the CPU (SampleRow.*
// compare all three). Where a 512-bit double operation issues as fast as a 256-bit one (the Intel
// Xeon of docs/performance.md) the exp's long Horner chain costs half as much per id.
//
// Compiled for AVX-512 through a target pragma placed after every shared include, so nothing but
// this file's own functions carries AVX-512 code.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "sample/exp.hpp"
#include "sample/row.hpp"
#include "sample/weight_math.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f")
// GCC 12 reports the "undefined" upper halves inside its own 512-bit conversion, extract and
// reduction intrinsics as (maybe) uninitialized: a false positive of the headers, not of this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace lmhead::sample::avx512 {
namespace {

// 2^k for eight int32 k in [-1022, 1023], from the bits as exp_detail::pow2 builds them.
__m512d pow2(__m256i k) {
  const __m512i biased = _mm512_add_epi64(_mm512_cvtepi32_epi64(k), _mm512_set1_epi64(1023));
  return _mm512_castsi512_pd(_mm512_slli_epi64(biased, 52));
}

template <int N>
void join(__m512d (&p)[N]) {
  if constexpr (N == 1) __asm__("" : "+v"(p[0]));
  if constexpr (N == 2) __asm__("" : "+v"(p[0]), "+v"(p[1]));
  if constexpr (N == 4) __asm__("" : "+v"(p[0]), "+v"(p[1]), "+v"(p[2]), "+v"(p[3]));
}

// row_avx2.cpp's expn, eight lanes per vector; the comments there say why each step is as it is.
template <int N>
void expn(const __m512d (&x)[N], __m512d (&y)[N]) {
  // exp.hpp's constants, the same table sample::exp reads.
  const double* c = kExpConstants;
  const __m512d shifter = _mm512_set1_pd(c[15]);
  __m512d kd[N], r[N], p[N];
  for (int j = 0; j < N; ++j)
    kd[j] = _mm512_sub_pd(_mm512_add_pd(_mm512_mul_pd(x[j], _mm512_set1_pd(c[0])), shifter), shifter);
  for (int j = 0; j < N; ++j) r[j] = _mm512_sub_pd(x[j], _mm512_mul_pd(kd[j], _mm512_set1_pd(c[1])));
  for (int j = 0; j < N; ++j) r[j] = _mm512_sub_pd(r[j], _mm512_mul_pd(kd[j], _mm512_set1_pd(c[2])));
  for (int j = 0; j < N; ++j) p[j] = _mm512_set1_pd(c[3]);
  for (int i = 4; i <= 14; ++i) {
    for (int j = 0; j < N; ++j) p[j] = _mm512_add_pd(_mm512_mul_pd(p[j], r[j]), _mm512_set1_pd(c[i]));
    join(p);
  }
  for (int j = 0; j < N; ++j) {
    p[j] = _mm512_add_pd(r[j], _mm512_mul_pd(_mm512_mul_pd(p[j], r[j]), r[j]));
    p[j] = _mm512_add_pd(_mm512_set1_pd(1.0), p[j]);
    const __m256i k = _mm512_cvttpd_epi32(kd[j]);
    const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(k, _mm256_srli_epi32(k, 31)), 1);
    const __m256i k2 = _mm256_sub_epi32(k, k1);
    __m512d e = _mm512_mul_pd(_mm512_mul_pd(p[j], pow2(k1)), pow2(k2));
    e = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x[j], x[j], _CMP_UNORD_Q), e, x[j]);
    e = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x[j], _mm512_set1_pd(709.782712893384), _CMP_GT_OQ), e,
                             _mm512_set1_pd(__builtin_inf()));
    y[j] = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x[j], _mm512_set1_pd(-745.2), _CMP_LT_OQ), e, _mm512_setzero_pd());
  }
}

__mmask8 finite_mask(__m512d z) {
  const __m512d abs = _mm512_castsi512_pd(_mm512_andnot_si512(_mm512_castpd_si512(_mm512_set1_pd(-0.0)), _mm512_castpd_si512(z)));
  return _mm512_cmp_pd_mask(abs, _mm512_set1_pd(std::numeric_limits<double>::infinity()), _CMP_LT_OQ);
}

}  // namespace

double scaled_logits(const float* x, int64_t n, double t, double* z) {
  const __m512d neg_inf = _mm512_set1_pd(-std::numeric_limits<double>::infinity());
  const __m512d vt = _mm512_set1_pd(t);
  // v / 1 is v for every double, so temperature 1 skips the division (the slowest step here).
  const bool divide = t != 1.0;
  __m512d m = neg_inf;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_add_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), _mm512_setzero_pd());
    const __m512d zi = divide ? _mm512_div_pd(v, vt) : v;
    _mm512_storeu_pd(z + i, zi);
    m = _mm512_max_pd(m, _mm512_mask_blend_pd(finite_mask(zi), neg_inf, zi));
  }
  return std::max(_mm512_reduce_max_pd(m), portable::scaled_logits(x + i, n - i, t, z + i));
}

uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket) {
  const __m512d vm = _mm512_set1_pd(m);
  const __m512d neg_inf = _mm512_set1_pd(-std::numeric_limits<double>::infinity());
  const __m512d skip_below = _mm512_set1_pd(kZeroWeightBelow);
  const __m512d vmin_p = _mm512_set1_pd(min_p);
  const bool use_min_p = min_p > 0;
  const __m512d two40 = _mm512_set1_pd(0x1p40), two52 = _mm512_set1_pd(0x1p52);
  const __m512i two52_bits = _mm512_castpd_si512(two52);
  const __m512i base = _mm512_set1_epi64(static_cast<long long>(kRankBaseBits));
  const __m512i last = _mm512_set1_epi64(kRankBuckets - 1);
  constexpr int kVectors = 4;  // ids per step: 32
  __m512i sum = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 8 * kVectors <= n; i += 8 * kVectors) {
    __m512d zi[kVectors], d[kVectors], e[kVectors];
    int below = 0;
    for (int j = 0; j < kVectors; ++j) {
      zi[j] = _mm512_loadu_pd(z + i + 8 * j);
      d[j] = _mm512_mask_blend_pd(finite_mask(zi[j]), neg_inf, _mm512_sub_pd(zi[j], vm));
      below += __builtin_popcount(unsigned(_mm512_cmp_pd_mask(d[j], skip_below, _CMP_LT_OQ)));
    }
    if (below == 8 * kVectors) {  // all far below the maximum: weight 0 without an exp
      for (int j = 0; j < kVectors; ++j) _mm512_storeu_si512(w + i + 8 * j, _mm512_setzero_si512());
      if (bucket != nullptr) std::fill(bucket + i, bucket + i + 8 * kVectors, uint16_t(0));
      continue;
    }
    expn<kVectors>(d, e);
    for (int j = 0; j < kVectors; ++j) {
      const __m512i rounded =
          _mm512_sub_epi64(_mm512_castpd_si512(_mm512_add_pd(_mm512_mul_pd(e[j], two40), two52)), two52_bits);
      const __mmask8 keep = use_min_p ? _mm512_cmp_pd_mask(e[j], vmin_p, _CMP_GE_OQ) : __mmask8(0xff);
      const __m512i wi = _mm512_maskz_mov_epi64(keep, rounded);
      _mm512_storeu_si512(w + i + 8 * j, wi);
      sum = _mm512_add_epi64(sum, wi);
      if (bucket != nullptr) {
        const __m512i bits = _mm512_castpd_si512(_mm512_sub_pd(vm, zi[j]));
        __m512i b = _mm512_srli_epi64(_mm512_sub_epi64(bits, base), 46);
        b = _mm512_mask_blend_epi64(_mm512_cmpgt_epi64_mask(b, last), b, last);
        b = _mm512_maskz_mov_epi64(_mm512_cmpgt_epi64_mask(bits, base), b);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(bucket + i + 8 * j), _mm512_cvtepi64_epi16(b));
      }
    }
  }
  return uint64_t(_mm512_reduce_add_epi64(sum)) +
         portable::row_weights(z + i, n - i, m, min_p, w + i, bucket + (bucket != nullptr ? i : 0));
}

}  // namespace lmhead::sample::avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options
