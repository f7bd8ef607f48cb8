// The soft cap eight logits at a time: ops::portable_tanhf (numerics.md §7b, the C library's tanhf)
// with every branch computed in every lane and the lane's own branch selected at the end. Each
// step is the scalar code's IEEE f32 operation in the same order (no FMA: the project builds with
// -ffp-contract=off), so each lane holds exactly the scalar function's bytes; a test compares the
// two over a dense sweep of the float line, and the whole line was compared once (docs).
#include <immintrin.h>

#include <cstdint>

#include "cpu/softcap_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

inline __m256 f32_const(uint32_t bits) { return _mm256_castsi256_ps(_mm256_set1_epi32(int(bits))); }
inline __m256 select(__m256 if_false, __m256 if_true, __m256i mask) {
  return _mm256_blendv_ps(if_false, if_true, _mm256_castsi256_ps(mask));
}
inline __m256 scale_exponent(__m256 y, __m256i k) {
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(k, 23)));
}
inline __m256i greater_u32(__m256i a, uint32_t b) {  // a > b as unsigned, for values below 2^31
  return _mm256_cmpgt_epi32(a, _mm256_set1_epi32(int(b)));
}

// e^x - 1 for the arguments tanh gives it (|x| < 44; step 1 of §7b never decides those).
__m256 em1(__m256 x) {
  const __m256 ln2_hi = f32_const(0x3f317180u), ln2_lo = f32_const(0x3717f7d1u), invln2 = f32_const(0x3fb8aa3bu);
  const __m256 Q1 = f32_const(0xbd088889u), Q2 = f32_const(0x3ad00d01u), Q3 = f32_const(0xb8a670cdu),
               Q4 = f32_const(0x36867e54u), Q5 = f32_const(0xb457edbbu);
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i h = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i negative = _mm256_srai_epi32(bits, 31);  // all ones where x < 0

  // Step 2: k = +-1 just above 0.5 ln2, else the rounded multiple of ln2; no reduction below.
  const __m256i reduce = greater_u32(h, 0x3eb17218u);
  const __m256i near = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3F851592), h);
  const __m256 bias = select(half, _mm256_set1_ps(-0.5f), negative);
  const __m256i k_far = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(invln2, x), bias));
  const __m256i k_near = _mm256_or_si256(negative, _mm256_set1_epi32(1));  // -1 or +1
  const __m256i k = _mm256_and_si256(reduce, _mm256_blendv_epi8(k_far, k_near, near));
  // hi = x - k ln2_hi, lo = k ln2_lo: for k = +-1 the products are exact, which makes these the
  // scalar code's x -+ ln2_hi and +-ln2_lo.
  const __m256 tk = _mm256_cvtepi32_ps(k);
  const __m256 hi = _mm256_sub_ps(x, _mm256_mul_ps(tk, ln2_hi));
  const __m256 lo = _mm256_mul_ps(tk, ln2_lo);
  const __m256 reduced = _mm256_sub_ps(hi, lo);
  const __m256 c_reduced = _mm256_sub_ps(_mm256_sub_ps(hi, reduced), lo);
  const __m256 r = select(x, reduced, reduce);
  const __m256 c = select(_mm256_setzero_ps(), c_reduced, reduce);
  const __m256i tiny = _mm256_andnot_si256(reduce, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x33000000), h));

  // Step 3.
  const __m256 hfx = _mm256_mul_ps(half, r);
  const __m256 hxs = _mm256_mul_ps(r, hfx);
  __m256 poly = _mm256_add_ps(Q4, _mm256_mul_ps(hxs, Q5));
  poly = _mm256_add_ps(Q3, _mm256_mul_ps(hxs, poly));
  poly = _mm256_add_ps(Q2, _mm256_mul_ps(hxs, poly));
  poly = _mm256_add_ps(Q1, _mm256_mul_ps(hxs, poly));
  const __m256 r1 = _mm256_add_ps(one, _mm256_mul_ps(hxs, poly));
  const __m256 t = _mm256_sub_ps(_mm256_set1_ps(3.0f), _mm256_mul_ps(r1, hfx));
  const __m256 e = _mm256_mul_ps(hxs, _mm256_div_ps(_mm256_sub_ps(r1, t), _mm256_sub_ps(_mm256_set1_ps(6.0f), _mm256_mul_ps(r, t))));

  // Step 4 (k == 0).
  const __m256 res_k0 = _mm256_sub_ps(r, _mm256_sub_ps(_mm256_mul_ps(r, e), hxs));
  // Step 5.
  const __m256 e2 = _mm256_sub_ps(_mm256_sub_ps(_mm256_mul_ps(r, _mm256_sub_ps(e, c)), c), hxs);
  // Step 6.
  const __m256 res_km1 = _mm256_sub_ps(_mm256_mul_ps(half, _mm256_sub_ps(r, e2)), half);
  const __m256 res_k1_low = _mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_sub_ps(e2, _mm256_add_ps(r, half)));
  const __m256 res_k1_high = _mm256_add_ps(one, _mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_sub_ps(r, e2)));
  const __m256 res_k1 = _mm256_blendv_ps(res_k1_high, res_k1_low, _mm256_cmp_ps(r, _mm256_set1_ps(-0.25f), _CMP_LT_OQ));
  // Step 7 (k <= -2 or k > 56).
  const __m256 y7 = _mm256_sub_ps(one, _mm256_sub_ps(e2, r));
  const __m256 res_k7 = _mm256_sub_ps(scale_exponent(y7, k), one);
  // Step 8 (k < 23).
  const __m256 t8 = _mm256_castsi256_ps(
      _mm256_sub_epi32(_mm256_set1_epi32(0x3f800000), _mm256_srlv_epi32(_mm256_set1_epi32(0x1000000), k)));
  const __m256 res_k8 = scale_exponent(_mm256_sub_ps(t8, _mm256_sub_ps(e2, r)), k);
  // Step 9.
  const __m256 t9 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(0x7f), k), 23));
  const __m256 res_k9 = scale_exponent(_mm256_add_ps(_mm256_sub_ps(r, _mm256_add_ps(e2, t9)), one), k);

  const __m256i k_lt23 = _mm256_cmpgt_epi32(_mm256_set1_epi32(23), k);
  const __m256i k_far_out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(-1), k),
                                            _mm256_cmpgt_epi32(k, _mm256_set1_epi32(56)));
  __m256 res = select(res_k9, res_k8, k_lt23);
  res = select(res, res_k7, k_far_out);
  res = select(res, res_k1, _mm256_cmpeq_epi32(k, _mm256_set1_epi32(1)));
  res = select(res, res_km1, _mm256_cmpeq_epi32(k, _mm256_set1_epi32(-1)));
  res = select(res, res_k0, _mm256_cmpeq_epi32(k, _mm256_setzero_si256()));
  return select(res, x, tiny);
}

}  // namespace

__m256 tanh8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i abits = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i sign = _mm256_andnot_si256(_mm256_set1_epi32(0x7fffffff), bits);
  const __m256 a = _mm256_castsi256_ps(abits);

  const __m256i at_least_1 = _mm256_cmpgt_epi32(abits, _mm256_set1_epi32(0x3f7fffff));
  const __m256 arg = select(_mm256_mul_ps(_mm256_set1_ps(-2.0f), a), _mm256_add_ps(a, a), at_least_1);
  const __m256 t = em1(arg);
  const __m256 t2 = _mm256_add_ps(t, _mm256_set1_ps(2.0f));
  const __m256 z_high = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), t2));
  const __m256 z_low = _mm256_div_ps(_mm256_xor_ps(t, _mm256_set1_ps(-0.0f)), t2);
  __m256 z = select(z_low, z_high, at_least_1);
  // |x| >= 22: 1 - 1e-30, which rounds to 1.
  z = select(z, _mm256_sub_ps(one, _mm256_set1_ps(1e-30f)), _mm256_cmpgt_epi32(abits, _mm256_set1_epi32(0x41afffff)));
  z = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(z), sign));
  // |x| < 2^-55 (zero included: x * (1 + x) keeps the signed zero): x * (1 + x).
  z = select(z, _mm256_mul_ps(x, _mm256_add_ps(one, x)), _mm256_cmpgt_epi32(_mm256_set1_epi32(0x24000000), abits));
  // Infinities give +-1, NaN stays NaN (x + x).
  z = select(z, _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(one), sign)),
             _mm256_cmpeq_epi32(abits, _mm256_set1_epi32(0x7f800000)));
  return select(z, _mm256_add_ps(x, x), _mm256_cmpgt_epi32(abits, _mm256_set1_epi32(0x7f800000)));
}

void cap_tile(const float* raw, int64_t n, const SoftcapArgs& cap, float* capped) {
  const __m256 scale = _mm256_set1_ps(cap.logit_scale), c = _mm256_set1_ps(cap.cap), inv = _mm256_set1_ps(cap.inv_cap);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(raw + i), scale);
    __m256 out;
    if (cap.cap == 0.0f)
      out = scaled;
    else if (cap.fused)
      out = _mm256_mul_ps(c, tanh8(_mm256_div_ps(scaled, c)));
    else
      out = _mm256_mul_ps(tanh8(_mm256_mul_ps(scaled, inv)), c);
    _mm256_storeu_ps(capped + i, out);
  }
  if (i < n) {
    alignas(32) float in[8] = {}, out[8];
    for (int64_t k = i; k < n; ++k) in[k - i] = raw[k];
    cap_tile(in, 8, cap, out);
    for (int64_t k = i; k < n; ++k) capped[k] = out[k - i];
  }
}

}  // namespace lmhead::cpu::avx2
