#pragma once
// Block layouts of the weight and activation formats (numerics.md §3), shared by host and device
// code. Plain structs of bytes, no padding: sizeof is checked against the spec below.
#include <cstdint>
#include <cstring>

#include "quant/host_device.hpp"

namespace lmhead::quant {

constexpr int kSuperBlock = 256;  // elements per K-quant super-block
constexpr int kQ8_0Block = 32;

struct block_q4_K {
  uint16_t d, dmin;      // f16
  uint8_t scales[12];    // 6-bit scales and mins, packed
  uint8_t qs[128];
};
struct block_q5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct block_q6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct block_q8_0 {
  uint16_t d;
  int8_t qs[32];
};
// Activations of the CPU q8 route for K-quant heads.
struct block_q8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // bsums[k] = sum of qs[16k .. 16k+15]
};

static_assert(sizeof(block_q4_K) == 144);
static_assert(sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q8_K) == 292);

// IEEE binary16 -> f32, exact for every input (subnormals, inf). A NaN keeps its sign and payload
// and comes back quiet, as F16C's vcvtph2ps does: all 65,536 inputs match it bit for bit
// (tests/quant_float_conversion_test.cpp).
LMHEAD_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (mant != 0 ? 0x400000u : 0u) | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // Subnormal: normalise the mantissa.
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400) == 0);
    mant &= 0x3FF;
    return bits_f32(sign | uint32_t(127 - 15 - e) << 23 | (mant << 13));
  }
  return bits_f32(sign | (exp + (127 - 15)) << 23 | (mant << 13));
}

// f32 -> binary16, round to nearest even, overflow to inf. A NaN comes back quiet with the top 10
// bits of its payload, as F16C's vcvtps2ph does: every f32 input matches it bit for bit
// (tests/quant_float_conversion_test.cpp).
LMHEAD_HD uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return uint16_t(sign | 0x7E00 | ((ax >> 13) & 0x3FF));  // NaN
  if (ax >= 0x477FF000u) return uint16_t(sign | 0x7C00); // rounds to inf (>= 65520)
  if (ax < 0x38800000u) {                                 // result is subnormal or zero
    if (ax < 0x33000000u) return sign;                    // < 2^-25 rounds to 0 (ties at 2^-25 go to even 0)
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;                       // 14 + (112 - e) + 1 ... keeps 10 bits
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t r = ax - 0x38000000u;  // rebias exponent (127 -> 15)
  const uint32_t rem = r & 0x1FFF;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

LMHEAD_HD float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }
// f32 -> bfloat16, round to nearest even (no flush of subnormals), NaN made quiet: ggml's
// GGML_FP32_TO_BF16.
LMHEAD_HD uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40);  // quiet NaN
  x += 0x7FFF + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block (numerics.md §3).
LMHEAD_HD void k_scale_min(const uint8_t* scales, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = uint8_t((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    m = uint8_t((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// 4-bit value (0..15) of element e (0..255) of a Q4_K block: sub-block j = e / 32 sits in the low
// nibbles (j even) or high nibbles (j odd) of qs[32 * (j / 2) ..].
LMHEAD_HD int q4k_level(const block_q4_K& b, int e) {
  const int p = e / 64, h = (e / 32) & 1, l = e % 32;
  return h ? (b.qs[32 * p + l] >> 4) : (b.qs[32 * p + l] & 0x0F);
}

// 5-bit value (0..31) of element e (0..255) of a Q5_K block.
LMHEAD_HD int q5k_level(const block_q5_K& b, int e) {
  const int p = e / 64, h = (e / 32) & 1, l = e % 32;
  const int low = h ? (b.qs[32 * p + l] >> 4) : (b.qs[32 * p + l] & 0x0F);
  const int high = (b.qh[l] >> (2 * p + h)) & 1;
  return low + 16 * high;
}

// Signed 6-bit value (-32..31) of element e (0..255) of a Q6_K block (numerics.md §3): in half n,
// quarter c of 32 elements takes its low 4 bits from ql[64n + 32 * (c & 1) + l] (low nibble for
// c < 2, high nibble otherwise) and its top 2 bits from bits 2c..2c+1 of qh[32n + l].
LMHEAD_HD int q6k_level(const block_q6_K& b, int e) {
  const int n = e / 128, c = (e % 128) / 32, l = e % 32;
  const uint8_t low_byte = b.ql[64 * n + 32 * (c & 1) + l];
  const int low = c < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
  const int high = (b.qh[32 * n + l] >> (2 * c)) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace lmhead::quant
