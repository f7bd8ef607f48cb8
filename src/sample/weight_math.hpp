#pragma once
// The per-id arithmetic of numerics.md §9 shared by the host sampler and the CUDA sampling kernels,
// so that both compute the same bits by construction: the logit after bias and temperature, the
// integer weight, the coarse rank bucket, the 128-bit draw and the top-p target.
//
// Why integer weights: once each kept id carries W = round(exp(z - max) * 2^40), every sum the
// sampler forms (chunk sums, the total, the top-p prefix mass, the inverse CDF's running sum) is
// an exact uint64 sum, the same in any order. Threads, blocks, shards and GPUs can add in whatever
// order suits them, and the rank-order prefix of top-p needs no sort of the whole prefix: only the
// ids of the one bucket where the mass crosses the target are ordered.
#include <cstdint>
#include <cstring>
#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "quant/blocks.hpp"  // LMHEAD_HD
#include "sample/exp.hpp"
#include "sample/philox.hpp"

namespace lmhead::sample {

// Weights are fixed point with 40 fractional bits: the maximum (w = 1) is 2^40, an id whose
// w * 2^40 rounds to 0 (w < 2^-41, i.e. 28.4 nats below the maximum) cannot be drawn. The total
// over a vocabulary of at most kMaxSampledVocab ids stays below 2^64.
constexpr int kWeightBits = 40;
constexpr int64_t kMaxSampledVocab = int64_t(1) << 23;
// Below this distance from the maximum (z - max < -29, w < 2.6e-13) every id's integer weight is
// 0 (exp(-28.42) = 2^-41 is where the rounding starts giving 1), so a sampler may skip the exp;
// SampleWeights.SkipBoundGivesWeightZero checks it against sample::exp itself.
constexpr double kZeroWeightBelow = -29.0;

// Coarse rank buckets of d = max - z >= 0: 64 per octave from 2^-20 to 2^12, the ends clamped.
// A larger d never gets a smaller bucket (the bit pattern of a non-negative double is monotone in
// its value), so every id of a lower bucket ranks before every id of a higher one.
constexpr int kRankBuckets = 64 * 32;
constexpr uint64_t kRankBaseBits = 0x3EB0000000000000ull;  // the bits of 2^-20, where bucket 1 starts

LMHEAD_HD int rank_bucket(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  if (bits <= kRankBaseBits) return 0;
  const uint64_t b = (bits - kRankBaseBits) >> 46;
  return b >= uint64_t(kRankBuckets) ? kRankBuckets - 1 : int(b);
}

// z = (logit + bias) / temperature, each a once-rounded double operation (the sum of two floats'
// values, then the division).
LMHEAD_HD double scaled_logit(float logit, float bias, double temperature) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(__dadd_rn(double(logit), double(bias)), temperature);
#else
  return (double(logit) + double(bias)) / temperature;
#endif
}

// The integer weight of an id at distance z - max <= 0: round-to-nearest-even of w * 2^40, where
// w = sample::exp(z - max). w * 2^40 is exact (a power of two); adding and removing 2^52 rounds it
// to an integer in the default rounding mode on both host and device.
LMHEAD_HD uint64_t integer_weight(double w) {
  const double scaled = exp_detail::mul(w, 0x1p40);
  const double rounded = exp_detail::add(exp_detail::add(scaled, 0x1p52), -0x1p52);
  return uint64_t(rounded);
}

// The kept test of min-p (w >= min_p) needs no division: p_i >= min_p * p_max with p_max's w = 1.
LMHEAD_HD bool passes_min_p(double w, double min_p) { return !(min_p > 0) || w >= min_p; }

// The top-p target: the prefix in rank order is the shortest whose integer mass reaches
// P = ceil(double(S) * top_p), clamped to [1, S]. Two specified roundings (S to double, the
// product) and an exact ceil.
LMHEAD_HD uint64_t top_p_target(uint64_t total, double top_p) {
#if defined(__CUDA_ARCH__)
  const double p = ceil(__dmul_rn(__ull2double_rn(total), top_p));
#else
  const double p = std::ceil(double(total) * top_p);
#endif
  if (!(p >= 1)) return 1;
  if (p >= 0x1p64) return total;
  const uint64_t q = uint64_t(p);
  return q < 1 ? 1 : (q > total ? total : q);
}

// 128 random bits of the Philox stream at (seed, position, purpose): the counter and key of
// uniform() (philox.hpp), all four output words.
struct Random128 {
  uint64_t hi, lo;
};
LMHEAD_HD Random128 random128(uint64_t seed, int64_t position, Stream stream) {
  const uint64_t pos = uint64_t(position);
  const Philox4 r = philox4x32_10(Philox4{{uint32_t(pos), uint32_t(pos >> 32), uint32_t(stream), 0u}},
                                  uint32_t(seed), uint32_t(seed >> 32));
  return Random128{(uint64_t(r.v[0]) << 32) | r.v[1], (uint64_t(r.v[2]) << 32) | r.v[3]};
}

LMHEAD_HD uint64_t mul_hi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return uint64_t((unsigned __int128)a * b >> 64);
#endif
}

// The draw's target: floor(r * S / 2^128) for the 128-bit r, a uniform integer in [0, S) up to a
// relative bias below S / 2^128 < 2^-64. The token is the first id in id order whose running
// integer sum exceeds it.
LMHEAD_HD uint64_t draw_target(Random128 r, uint64_t total) {
  const uint64_t a_hi = mul_hi64(r.hi, total), a_lo = r.hi * total;
  const uint64_t b_hi = mul_hi64(r.lo, total);
  const uint64_t low = a_lo + b_hi;
  return a_hi + (low < a_lo ? 1u : 0u);
}

// Rank order (z descending, id ascending) as one unsigned key, smaller first: the bits of -z made
// monotone, then the id. Used where the ids of one bucket are ordered.
LMHEAD_HD uint64_t descending_key(double z) {
  if (z == 0) z = 0;  // -0 ranks as +0 (they compare equal)
  uint64_t bits;
  std::memcpy(&bits, &z, 8);
  // The usual monotone map of a double's bits (negative: flip all; positive: flip the sign), then
  // complemented so that a larger z gets a smaller key.
  const uint64_t ordered = (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
  return ~ordered;
}

// The z of a key (descending_key's inverse; -0 comes back as +0): a maximum merged as the largest
// ~descending_key(z), as the max kernels do, is turned back into its z.
inline double z_of_descending_key(uint64_t key) {
  const uint64_t ordered = ~key;
  const uint64_t bits = (ordered >> 63) ? (ordered & 0x7FFFFFFFFFFFFFFFull) : ~ordered;
  double z;
  std::memcpy(&z, &bits, 8);
  return z;
}

}  // namespace lmhead::sample
