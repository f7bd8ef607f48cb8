// row.hpp's passes four ids at a time. exp4 mirrors exp.hpp line by line with the same IEEE
// operation per lane (vaddpd/vsubpd/vmulpd round once and are not fused: -ffp-contract=off), the
// integer weight and rank bucket mirror weight_math.hpp, so every lane has the portable bits.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "sample/exp.hpp"
#include "sample/row.hpp"
#include "sample/weight_math.hpp"

namespace lmhead::sample::avx2 {
namespace {

// 2^k for four int32 k in [-1022, 1023], from the bits as exp_detail::pow2 builds them.
__m256d pow2(__m128i k) {
  const __m256i biased = _mm256_add_epi64(_mm256_cvtepi32_epi64(k), _mm256_set1_epi64x(1023));
  return _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52));
}

// An empty asm reading and writing all N chains at once: the compiler cannot finish one chain
// before starting the next across it (GCC otherwise emits the chains one after the other).
template <int N>
void join(__m256d (&p)[N]) {
  if constexpr (N == 1) __asm__("" : "+x"(p[0]));
  if constexpr (N == 2) __asm__("" : "+x"(p[0]), "+x"(p[1]));
  if constexpr (N == 4) __asm__("" : "+x"(p[0]), "+x"(p[1]), "+x"(p[2]), "+x"(p[3]));
}

// N independent vectors in lock step: the Horner chain is a long run of dependent operations, and
// interleaving N of them in program order keeps the FP pipes busy where one chain would wait.
template <int N>
void expn(const __m256d (&x)[N], __m256d (&y)[N]) {
  // exp.hpp's constants, the same table sample::exp reads.
  const double* c = kExpConstants;
  const __m256d shifter = _mm256_set1_pd(c[15]);
  __m256d kd[N], r[N], p[N];
  for (int j = 0; j < N; ++j)
    kd[j] = _mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(x[j], _mm256_set1_pd(c[0])), shifter), shifter);
  for (int j = 0; j < N; ++j) r[j] = _mm256_sub_pd(x[j], _mm256_mul_pd(kd[j], _mm256_set1_pd(c[1])));
  for (int j = 0; j < N; ++j) r[j] = _mm256_sub_pd(r[j], _mm256_mul_pd(kd[j], _mm256_set1_pd(c[2])));
  for (int j = 0; j < N; ++j) p[j] = _mm256_set1_pd(c[3]);
  // One coefficient at a time for all N chains.
  for (int i = 4; i <= 14; ++i) {
    for (int j = 0; j < N; ++j) p[j] = _mm256_add_pd(_mm256_mul_pd(p[j], r[j]), _mm256_set1_pd(c[i]));
    join(p);
  }
  for (int j = 0; j < N; ++j) {
    p[j] = _mm256_add_pd(r[j], _mm256_mul_pd(_mm256_mul_pd(p[j], r[j]), r[j]));
    p[j] = _mm256_add_pd(_mm256_set1_pd(1.0), p[j]);
    // int(kd) is exact (kd is an integer); k / 2 rounds toward zero as C++'s division does. Lanes
    // outside the range get garbage here and are replaced below, as the scalar code returns early.
    const __m128i k = _mm256_cvttpd_epi32(kd[j]);
    const __m128i k1 = _mm_srai_epi32(_mm_add_epi32(k, _mm_srli_epi32(k, 31)), 1);
    const __m128i k2 = _mm_sub_epi32(k, k1);
    __m256d e = _mm256_mul_pd(_mm256_mul_pd(p[j], pow2(k1)), pow2(k2));
    e = _mm256_blendv_pd(e, x[j], _mm256_cmp_pd(x[j], x[j], _CMP_UNORD_Q));
    e = _mm256_blendv_pd(e, _mm256_set1_pd(__builtin_inf()), _mm256_cmp_pd(x[j], _mm256_set1_pd(709.782712893384), _CMP_GT_OQ));
    y[j] = _mm256_blendv_pd(e, _mm256_setzero_pd(), _mm256_cmp_pd(x[j], _mm256_set1_pd(-745.2), _CMP_LT_OQ));
  }
}

__m256d exp4(__m256d x) {
  const __m256d in[1] = {x};
  __m256d out[1];
  expn<1>(in, out);
  return out[0];
}

__m256d finite_mask(__m256d z) {
  const __m256d abs = _mm256_andnot_pd(_mm256_set1_pd(-0.0), z);
  return _mm256_cmp_pd(abs, _mm256_set1_pd(std::numeric_limits<double>::infinity()), _CMP_LT_OQ);
}

double hmax(__m256d v) {
  alignas(32) double l[4];
  _mm256_store_pd(l, v);
  return std::max(std::max(l[0], l[1]), std::max(l[2], l[3]));
}

uint64_t hsum(__m256i v) {
  alignas(32) uint64_t l[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), v);
  return l[0] + l[1] + l[2] + l[3];
}

}  // namespace

double scaled_logits(const float* x, int64_t n, double t, double* z) {
  const __m256d neg_inf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
  const __m256d vt = _mm256_set1_pd(t);
  // v / 1 is v for every double, so temperature 1 skips the division (the slowest step here).
  const bool divide = t != 1.0;
  __m256d m = neg_inf;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    // (double(x) + double(0.0f)) / t: the conversion is exact, the add and the division round once.
    const __m256d v = _mm256_add_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), _mm256_setzero_pd());
    const __m256d zi = divide ? _mm256_div_pd(v, vt) : v;
    _mm256_storeu_pd(z + i, zi);
    m = _mm256_max_pd(m, _mm256_blendv_pd(neg_inf, zi, finite_mask(zi)));
  }
  return std::max(hmax(m), portable::scaled_logits(x + i, n - i, t, z + i));
}

double max_finite(const double* z, int64_t n) {
  const __m256d neg_inf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
  __m256d m = neg_inf;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d zi = _mm256_loadu_pd(z + i);
    m = _mm256_max_pd(m, _mm256_blendv_pd(neg_inf, zi, finite_mask(zi)));
  }
  return std::max(hmax(m), portable::max_finite(z + i, n - i));
}

uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket) {
  const __m256d vm = _mm256_set1_pd(m);
  const __m256d neg_inf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
  const __m256d skip_below = _mm256_set1_pd(kZeroWeightBelow);
  const __m256d vmin_p = _mm256_set1_pd(min_p);
  const bool use_min_p = min_p > 0;  // passes_min_p: everything passes when min_p is 0
  const __m256d two40 = _mm256_set1_pd(0x1p40), two52 = _mm256_set1_pd(0x1p52);
  const __m256i two52_bits = _mm256_castpd_si256(two52);
  const __m256i base = _mm256_set1_epi64x(static_cast<long long>(kRankBaseBits));
  const __m256i last = _mm256_set1_epi64x(kRankBuckets - 1);
  constexpr int kVectors = 2;  // ids per step: 8
  __m256i sum = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 4 * kVectors <= n; i += 4 * kVectors) {
    __m256d zi[kVectors], d[kVectors], e[kVectors];
    int below = 0;
    for (int j = 0; j < kVectors; ++j) {
      zi[j] = _mm256_loadu_pd(z + i + 4 * j);
      d[j] = _mm256_blendv_pd(neg_inf, _mm256_sub_pd(zi[j], vm), finite_mask(zi[j]));
      below += __builtin_popcount(unsigned(_mm256_movemask_pd(_mm256_cmp_pd(d[j], skip_below, _CMP_LT_OQ))));
    }
    if (below == 4 * kVectors) {  // all far below the maximum: weight 0 without an exp
      for (int j = 0; j < kVectors; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i + 4 * j), _mm256_setzero_si256());
      if (bucket != nullptr) std::fill(bucket + i, bucket + i + 4 * kVectors, uint16_t(0));
      continue;
    }
    expn<kVectors>(d, e);
    for (int j = 0; j < kVectors; ++j) {
      // integer_weight: e * 2^40 is exact; adding 2^52 rounds it to an integer that is the low
      // bits of the sum (e <= 1, so the sum is below 2^53), as adding and removing 2^52 does.
      const __m256i rounded =
          _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(_mm256_mul_pd(e[j], two40), two52)), two52_bits);
      const __m256i keep =
          use_min_p ? _mm256_castpd_si256(_mm256_cmp_pd(e[j], vmin_p, _CMP_GE_OQ)) : _mm256_set1_epi64x(-1);
      const __m256i wi = _mm256_and_si256(rounded, keep);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i + 4 * j), wi);
      sum = _mm256_add_epi64(sum, wi);
      if (bucket != nullptr) {
        // rank_bucket(m - z): 0 up to the bits of 2^-20, then 64 per octave, clamped at the end.
        const __m256i bits = _mm256_castpd_si256(_mm256_sub_pd(vm, zi[j]));
        __m256i b = _mm256_srli_epi64(_mm256_sub_epi64(bits, base), 46);
        b = _mm256_blendv_epi8(b, last, _mm256_cmpgt_epi64(b, last));
        b = _mm256_and_si256(b, _mm256_cmpgt_epi64(bits, base));
        // The four low 32-bit halves to the bottom, then to 16 bits (every bucket is below 2^11).
        const __m128i low = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(bucket + i + 4 * j), _mm_packus_epi32(low, low));
      }
    }
  }
  return hsum(sum) + portable::row_weights(z + i, n - i, m, min_p, w + i, bucket + (bucket != nullptr ? i : 0));
}

uint64_t split_at_bucket(uint64_t* w, const uint16_t* rank, int64_t n, int bucket, int32_t* found, uint64_t* found_w,
                         int* n_found) {
  const __m256i vb = _mm256_set1_epi64x(bucket);
  const __m256i zero = _mm256_setzero_si256();
  __m256i sum = zero;
  int k = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i r = _mm256_cvtepu16_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rank + i)));
    const __m256i wi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i));
    // A candidate is rare (one bucket of 2,048): test four ids at once, look closer only then.
    const __m256i cand = _mm256_andnot_si256(_mm256_cmpeq_epi64(wi, zero), _mm256_cmpeq_epi64(r, vb));
    if (int mask = _mm256_movemask_pd(_mm256_castsi256_pd(cand))) {
      for (int j = 0; j < 4; ++j)
        if (mask & (1 << j)) {
          found[k] = int32_t(i + j);
          found_w[k++] = w[i + j];
        }
    }
    const __m256i stays = _mm256_and_si256(wi, _mm256_cmpgt_epi64(vb, r));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i), stays);
    sum = _mm256_add_epi64(sum, stays);
  }
  int tail = 0;
  const uint64_t rest = portable::split_at_bucket(w + i, rank + i, n - i, bucket, found + k, found_w + k, &tail);
  for (int j = 0; j < tail; ++j) found[k + j] += int32_t(i);
  *n_found = k + tail;
  return hsum(sum) + rest;
}

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
  portable::exp_batch(x + i, y + i, n - i);
}

}  // namespace lmhead::sample::avx2
