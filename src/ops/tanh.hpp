#pragma once
// The C library's tanhf (the classic float tanh through expm1, numerics.md §7b) as a portable
// function: every step is one IEEE f32 operation rounded to nearest and nothing is contracted into
// an FMA, so the CPU and the GPU produce the bytes llama.cpp's CPU soft cap produces. On the device
// the operations go through the explicitly rounded intrinsics, which nvcc never fuses; on the host
// the project is compiled with -ffp-contract=off.
#include <cstdint>

#include "quant/host_device.hpp"

namespace lmhead::ops {
namespace tanh_detail {

using quant::bits_f32;
using quant::f32_bits;

#if defined(__CUDA_ARCH__)
LMHEAD_HD float add(float a, float b) { return __fadd_rn(a, b); }
LMHEAD_HD float sub(float a, float b) { return __fsub_rn(a, b); }
LMHEAD_HD float mul(float a, float b) { return __fmul_rn(a, b); }
LMHEAD_HD float div(float a, float b) { return __fdiv_rn(a, b); }
#else
LMHEAD_HD float add(float a, float b) { return a + b; }
LMHEAD_HD float sub(float a, float b) { return a - b; }
LMHEAD_HD float mul(float a, float b) { return a * b; }
LMHEAD_HD float div(float a, float b) { return a / b; }
#endif

// Adds k to the exponent field of y (y is normal and the result stays finite).
LMHEAD_HD float scale_exponent(float y, int k) {
  return bits_f32(uint32_t(int32_t(f32_bits(y)) + (k << 23)));
}

// e^x - 1 for the |x| < 44 that tanh needs (step 1 of §7b never decides a tanh value, but is kept
// so the function is the whole em1 and can be checked on its own).
LMHEAD_HD float em1(float x) {
  const float ln2_hi = bits_f32(0x3f317180u);
  const float ln2_lo = bits_f32(0x3717f7d1u);
  const float invln2 = bits_f32(0x3fb8aa3bu);
  const float Q1 = bits_f32(0xbd088889u), Q2 = bits_f32(0x3ad00d01u), Q3 = bits_f32(0xb8a670cdu),
              Q4 = bits_f32(0x36867e54u), Q5 = bits_f32(0xb457edbbu);
  const uint32_t bits = f32_bits(x);
  const uint32_t h = bits & 0x7fffffffu;
  const bool negative = (bits >> 31) != 0;

  if (h >= 0x4195b844u) {  // |x| >= 27 ln2
    if (h >= 0x42b17218u) {
      if (h > 0x7f800000u) return add(x, x);  // NaN
      if (h == 0x7f800000u) return negative ? -1.0f : x;
      if (!negative && h > 0x42b17180u) return bits_f32(0x7f800000u);  // overflow
    }
    if (negative) return sub(1e-30f, 1.0f);
  }

  float hi = 0.0f, lo = 0.0f, c = 0.0f;
  int k;
  if (h > 0x3eb17218u) {  // |x| > 0.5 ln2: reduce by k ln2
    if (h < 0x3F851592u) {
      if (!negative) { hi = sub(x, ln2_hi); lo = ln2_lo; k = 1; }
      else { hi = add(x, ln2_hi); lo = -ln2_lo; k = -1; }
    } else {
      k = int(add(mul(invln2, x), negative ? -0.5f : 0.5f));
      const float t = float(k);
      hi = sub(x, mul(t, ln2_hi));
      lo = mul(t, ln2_lo);
    }
    x = sub(hi, lo);
    c = sub(sub(hi, x), lo);
  } else if (h < 0x33000000u) {
    return x;  // |x| < 2^-25: e^x - 1 rounds to x
  } else {
    k = 0;
  }

  const float hfx = mul(0.5f, x);
  const float hxs = mul(x, hfx);
  const float r1 = add(1.0f, mul(hxs, add(Q1, mul(hxs, add(Q2, mul(hxs, add(Q3, mul(hxs, add(Q4, mul(hxs, Q5))))))))));
  float t = sub(3.0f, mul(r1, hfx));
  float e = mul(hxs, div(sub(r1, t), sub(6.0f, mul(x, t))));
  if (k == 0) return sub(x, sub(mul(x, e), hxs));
  e = sub(mul(x, sub(e, c)), c);
  e = sub(e, hxs);
  if (k == -1) return sub(mul(0.5f, sub(x, e)), 0.5f);
  if (k == 1) {
    if (x < -0.25f) return mul(-2.0f, sub(e, add(x, 0.5f)));
    return add(1.0f, mul(2.0f, sub(x, e)));
  }
  if (k <= -2 || k > 56) {
    const float y = sub(1.0f, sub(e, x));
    return sub(scale_exponent(y, k), 1.0f);
  }
  if (k < 23) {
    t = bits_f32(0x3f800000u - (0x1000000u >> k));
    return scale_exponent(sub(t, sub(e, x)), k);
  }
  t = bits_f32(uint32_t(0x7f - k) << 23);
  float y = sub(x, add(e, t));
  y = add(y, 1.0f);
  return scale_exponent(y, k);
}

}  // namespace tanh_detail

LMHEAD_HD float portable_tanhf(float x) {
  using namespace tanh_detail;
  using quant::bits_f32;
  using quant::f32_bits;
  const uint32_t bits = f32_bits(x);
  const uint32_t a_bits = bits & 0x7fffffffu;
  const bool negative = (bits >> 31) != 0;
  if (a_bits >= 0x7f800000u) {
    if (a_bits > 0x7f800000u) return add(x, x);  // NaN stays NaN
    return negative ? -1.0f : 1.0f;
  }
  float z;
  if (a_bits >= 0x41b00000u) {  // |x| >= 22: tanh rounds to 1
    z = sub(1.0f, 1e-30f);
  } else {
    if (a_bits == 0) return x;                               // keeps the sign of zero
    if (a_bits < 0x24000000u) return mul(x, add(1.0f, x));   // |x| < 2^-55
    const float a = bits_f32(a_bits);
    if (a_bits >= 0x3f800000u) {  // |x| >= 1
      const float t = em1(add(a, a));
      z = sub(1.0f, div(2.0f, add(t, 2.0f)));
    } else {
      const float t = em1(mul(-2.0f, a));
      z = div(-t, add(t, 2.0f));
    }
  }
  return negative ? -z : z;
}

}  // namespace lmhead::ops
