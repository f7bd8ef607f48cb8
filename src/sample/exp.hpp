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

// The constants of exp_in_range: ln2's inverse, its two parts, then 1/13! .. 1/2 for Horner.
// On the device they live in constant memory, so each multiply or add reads its operand straight
// from the constant bank: as literals, every use costs two moves of the 64-bit value into uniform
// registers (measured: about 30 of the weights kernel's instructions per id; performance.md).
#define LMHEAD_EXP_CONSTANTS                                                                            \
  {0x1.71547652b82fep+0, 0x1.62e42fee00000p-1, 0x1.a39ef35793c76p-33, 0x1.6124613a86d09p-33,          \
   0x1.1eed8eff8d898p-29, 0x1.ae64567f544e4p-26, 0x1.27e4fb7789f5cp-22, 0x1.71de3a556c734p-19,        \
   0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-13, 0x1.6c16c16c16c17p-10, 0x1.1111111111111p-7,         \
   0x1.5555555555555p-5,  0x1.5555555555555p-3, 0.5, 0x1.8p52}
#if defined(__CUDA_ARCH__)
static __constant__ double kExpConstants[16] = LMHEAD_EXP_CONSTANTS;
#else
inline constexpr double kExpConstants[16] = LMHEAD_EXP_CONSTANTS;
#endif
#undef LMHEAD_EXP_CONSTANTS

// e^x[j] for each -745.2 <= x[j] <= 709.78 (no guards: the caller keeps x there), in place, the
// same bits as exp(). x = k ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial to degree 13
// (truncation below 2^-57 relative), then 2^k applied as an exact and a once-rounded
// multiplication so results in the subnormal range round once. N values go through each step
// together: on the device one constant load serves N operations and the N chains interleave.
template <int N>
LMHEAD_HD void exp_in_range(double (&x)[N]) {
  using namespace exp_detail;
  const double* c = kExpConstants;
  const double shifter = c[15];            // adding it rounds to an integer (|x / ln2| < 2^51)
  double kd[N], r[N], p[N];
  for (int j = 0; j < N; ++j) kd[j] = add(add(mul(x[j], c[0]), shifter), -shifter);
  // kd * ln2_hi is exact (ln2_hi has 21 zero low bits, |kd| < 1100) and x - kd * ln2_hi is exact
  // by Sterbenz's lemma, so only the low part's product and difference round.
  for (int j = 0; j < N; ++j) r[j] = add(x[j], -mul(kd[j], c[1]));
  for (int j = 0; j < N; ++j) r[j] = add(r[j], -mul(kd[j], c[2]));
  // Horner with separate multiply and add: no FMA, so a CPU without one (or a build without
  // -mfma, where std::fma is a library call) runs it at full speed with the same bits.
  for (int j = 0; j < N; ++j) p[j] = c[3];  // 1/13!
  for (int i = 4; i <= 14; ++i) {
    const double ci = c[i];
    for (int j = 0; j < N; ++j) p[j] = add(mul(p[j], r[j]), ci);
  }
  // e^r = 1 + r + r^2 * q(r): the last two steps keep the small terms apart so the final add
  // rounds once.
  for (int j = 0; j < N; ++j) {
    p[j] = add(r[j], mul(mul(p[j], r[j]), r[j]));
    p[j] = add(1.0, p[j]);
    const int k = int(kd[j]);
    const int k1 = k / 2, k2 = k - k1;     // each within [-538, 513]: both factors are normal
    x[j] = mul(mul(p[j], pow2(k1)), pow2(k2));
  }
}

// e^x, within a few double ulps of the exact value on every input the sampler can give it (the
// sweep test checks all 2^32 floats against the C library).
LMHEAD_HD double exp(double x) {
  using namespace exp_detail;
  if (!(x == x)) return x;                 // NaN
  if (x > 709.782712893384) return mul(pow2(1023), 2.0);  // overflows to +inf
  if (x < -745.2) return 0.0;              // below half the smallest subnormal
  double v[1] = {x};
  exp_in_range(v);
  return v[0];
}

}  // namespace lmhead::sample
