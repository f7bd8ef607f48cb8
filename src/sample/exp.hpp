#pragma once
// exp in double for the sampler, as a portable function: every step is one IEEE double operation
// (add, multiply, fused multiply-add) rounded to nearest, so host and device give the same bits.
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
LMHEAD_HD double fma(double a, double b, double c) { return __fma_rn(a, b, c); }
#else
// The project is compiled with -ffp-contract=off: nothing here is fused behind our back.
LMHEAD_HD double add(double a, double b) { return a + b; }
LMHEAD_HD double mul(double a, double b) { return a * b; }
LMHEAD_HD double fma(double a, double b, double c) { return std::fma(a, b, c); }
#endif

LMHEAD_HD double pow2(int k) {  // 2^k for -1022 <= k <= 1023, built from its bits (exact)
  const uint64_t bits = uint64_t(k + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

}  // namespace exp_detail

// e^x, within one double ulp of the exact value on every input the sampler can give it (the
// sweep test checks all 2^32 floats against the C library). x = k ln2 + r with |r| <= ln2/2,
// e^r by its Taylor polynomial to degree 13 (truncation below 2^-60 relative), then 2^k applied
// as two exact-or-once-rounded multiplications so results in the subnormal range round once.
LMHEAD_HD double exp(double x) {
  using namespace exp_detail;
  if (!(x == x)) return x;                 // NaN
  if (x > 709.782712893384) return mul(pow2(1023), 2.0);  // overflows to +inf
  if (x < -745.2) return 0.0;              // below half the smallest subnormal
  const double shifter = 0x1.8p52;         // adding it rounds to an integer (|x / ln2| < 2^51)
  const double kd = add(fma(x, 0x1.71547652b82fep+0, shifter), -shifter);
  double r = fma(-kd, 0x1.62e42fee00000p-1, x);  // ln2's high part has 11 zero low bits: exact
  r = fma(-kd, 0x1.a39ef35793c76p-33, r);
  double p = 0x1.6124613a86d09p-33;        // 1/13!
  p = fma(p, r, 0x1.1eed8eff8d898p-29);
  p = fma(p, r, 0x1.ae64567f544e4p-26);
  p = fma(p, r, 0x1.27e4fb7789f5cp-22);
  p = fma(p, r, 0x1.71de3a556c734p-19);
  p = fma(p, r, 0x1.a01a01a01a01ap-16);
  p = fma(p, r, 0x1.a01a01a01a01ap-13);
  p = fma(p, r, 0x1.6c16c16c16c17p-10);
  p = fma(p, r, 0x1.1111111111111p-7);
  p = fma(p, r, 0x1.5555555555555p-5);
  p = fma(p, r, 0x1.5555555555555p-3);
  p = fma(p, r, 0.5);
  p = fma(p, r, 1.0);
  p = fma(p, r, 1.0);
  const int k = int(kd);
  const int k1 = k / 2, k2 = k - k1;       // each within [-538, 513]: both factors are normal
  return mul(mul(p, pow2(k1)), pow2(k2));
}

}  // namespace lmhead::sample
