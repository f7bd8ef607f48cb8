#pragma once
// exp in double for the sampler, as a portable function: every step is one IEEE double operation
// (add, multiply) rounded to nearest, so host and device give the same bits.
// The C library's exp and CUDA's exp are different functions and may differ in the last bit,
// which could move a token across a cumulative-sum boundary; this one cannot differ anywhere.
// The sampler needs no log: min-p compares probabilities (exp(z - max) >= min_p) and every draw
// is an inverse CDF or a comparison u * q < p (numerics.md §9).
#include <cstdint>
#include <cstring>

#include "quant/blocks.hpp"  // LMHEAD_HD

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace lmhead::sample {
namespace exp_detail {

#if defined(__CUDA_ARCH__)
LMHEAD_HD double add(double a, double b) { return __dadd_rn(a, b); }
LMHEAD_HD double mul(double a, double b) { return __dmul_rn(a, b); }
#else
// The project is compiled with -ffp-contract=off: nothing here is fused behind our back.
LMHEAD_HD double add(double a, double b) { return a + b; }
LMHEAD_HD double mul(double a, double b) { return a * b; }
#endif

LMHEAD_HD double pow2(int k) {  // 2^k for -1022 <= k <= 1023, built from its bits (exact)
  const uint64_t bits = uint64_t(k + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

}  // namespace exp_detail

// e^x, within a few double ulps of the exact value on every input the sampler can give it (the
// sweep test checks all 2^32 floats against the C library). x = k ln2 + r with |r| <= ln2/2,
// e^r by its Taylor polynomial to degree 13 (truncation below 2^-57 relative), then 2^k applied
// as an exact and a once-rounded multiplication so results in the subnormal range round once.
LMHEAD_HD double exp(double x) {
  using namespace exp_detail;
  if (!(x == x)) return x;                 // NaN
  if (x > 709.782712893384) return mul(pow2(1023), 2.0);  // overflows to +inf
  if (x < -745.2) return 0.0;              // below half the smallest subnormal
  const double shifter = 0x1.8p52;         // adding it rounds to an integer (|x / ln2| < 2^51)
  const double kd = add(add(mul(x, 0x1.71547652b82fep+0), shifter), -shifter);
  // kd * ln2_hi is exact (ln2_hi has 21 zero low bits, |kd| < 1100) and x - kd * ln2_hi is exact
  // by Sterbenz's lemma, so only the low part's product and difference round.
  double r = add(x, -mul(kd, 0x1.62e42fee00000p-1));
  r = add(r, -mul(kd, 0x1.a39ef35793c76p-33));
  // Horner with separate multiply and add: no FMA, so a CPU without one (or a build without
  // -mfma, where std::fma is a library call) runs it at full speed with the same bits.
  double p = 0x1.6124613a86d09p-33;        // 1/13!
  p = add(mul(p, r), 0x1.1eed8eff8d898p-29);
  p = add(mul(p, r), 0x1.ae64567f544e4p-26);
  p = add(mul(p, r), 0x1.27e4fb7789f5cp-22);
  p = add(mul(p, r), 0x1.71de3a556c734p-19);
  p = add(mul(p, r), 0x1.a01a01a01a01ap-16);
  p = add(mul(p, r), 0x1.a01a01a01a01ap-13);
  p = add(mul(p, r), 0x1.6c16c16c16c17p-10);
  p = add(mul(p, r), 0x1.1111111111111p-7);
  p = add(mul(p, r), 0x1.5555555555555p-5);
  p = add(mul(p, r), 0x1.5555555555555p-3);
  p = add(mul(p, r), 0.5);
  // e^r = 1 + r + r^2 * q(r): the last two steps keep the small terms apart so the final add
  // rounds once.
  p = add(r, mul(mul(p, r), r));
  p = add(1.0, p);
  const int k = int(kd);
  const int k1 = k / 2, k2 = k - k1;       // each within [-538, 513]: both factors are normal
  return mul(mul(p, pow2(k1)), pow2(k2));
}

}  // namespace lmhead::sample
