// Seeded sampling and speculative verification (issue 16, numerics.md §9): the counter RNG and the
// portable exp, the sampler's distribution against the exact one (chi-square), the kept sets, the
// same token for every split of the vocabulary, backend, shard count and call split, and the
// rejection rule's output distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "hardening_util.hpp"
#include "lmhead/lmhead.hpp"
#include <nlohmann/json.hpp>

#include "io/npy.hpp"
#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"
#include "sample/boundary.hpp"
#include "sample/exp.hpp"
#include "sample/row.hpp"
#include "sample/philox.hpp"
#include "sample/sampler.hpp"
#include "sample/verify.hpp"
#include "sample/weight_math.hpp"
#include "backend/backend.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

// ---- the counter RNG and the portable exp -------------------------------------------------------

TEST(SamplePhilox, KnownAnswersOfTheReferenceImplementation) {
  // Random123's kat_vectors for philox4x32_10.
  struct Kat { uint32_t ctr[4], key[2], out[4]; };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const sample::Philox4 r = sample::philox4x32_10({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]) << "word " << i;
  }
}

TEST(SamplePhilox, UniformsAreInsideTheOpenIntervalAndStreamsDiffer) {
  double lo = 1, hi = 0, sum = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = sample::uniform(42, i, sample::Stream::draw);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    ASSERT_NE(u, sample::uniform(42, i, sample::Stream::accept));
  }
  EXPECT_GT(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / n, 0.5, 4 * std::sqrt(1.0 / 12 / n));  // mean within 4 standard errors
  EXPECT_NE(sample::uniform(1, 0, sample::Stream::draw), sample::uniform(2, 0, sample::Stream::draw));
  EXPECT_NE(sample::uniform(1, int64_t(1) << 32, sample::Stream::draw), sample::uniform(1, 0, sample::Stream::draw));
}

int64_t double_ulps(double a, double b) {
  int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  if (ia < 0) ia = INT64_MIN - ia;
  if (ib < 0) ib = INT64_MIN - ib;
  return ia > ib ? ia - ib : ib - ia;
}

// Every float the sampler can hand exp (z - max is a double, but z and max come from floats; the
// sweep covers every float value, the whole float range of every sign and the special values).
TEST(SampleExp, WithinOneUlpOfTheCLibraryOnEveryFloat) {
  const int workers = 2;
  std::vector<int64_t> worst(workers, 0), differ(workers, 0);
  std::vector<uint32_t> worst_bits(workers, 0);
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (uint64_t b = uint64_t(w); b < (uint64_t(1) << 32); b += workers) {
        float f;
        const uint32_t bits = uint32_t(b);
        std::memcpy(&f, &bits, 4);
        const double x = f;
        const double got = sample::exp(x), want = std::exp(x);
        if (std::isnan(want)) {
          if (!std::isnan(got)) { worst[w] = INT64_MAX; worst_bits[w] = bits; }
          continue;
        }
        if (got == want) continue;
        ++differ[w];
        const int64_t d = double_ulps(got, want);
        if (d > worst[w]) { worst[w] = d; worst_bits[w] = bits; }
      }
    });
  for (auto& t : pool) t.join();
  const int64_t max_ulps = *std::max_element(worst.begin(), worst.end());
  const int64_t n_differ = std::accumulate(differ.begin(), differ.end(), int64_t(0));
  std::printf("[ info ] sample::exp vs the C library's exp on all 2^32 floats: %lld differ, max %lld ulp\n",
              (long long)n_differ, (long long)max_ulps);
  EXPECT_LE(max_ulps, 1) << "worst input bits 0x" << std::hex
                         << worst_bits[std::max_element(worst.begin(), worst.end()) - worst.begin()];
}

TEST(SampleExp, EdgesAndMonotoneNearZero) {
  EXPECT_EQ(sample::exp(0.0), 1.0);
  EXPECT_EQ(sample::exp(-1000.0), 0.0);
  EXPECT_TRUE(std::isinf(sample::exp(1000.0)));
  EXPECT_TRUE(std::isnan(sample::exp(NAN)));
  EXPECT_EQ(sample::exp(-INFINITY), 0.0);
  double prev = 0;
  for (double x = -50; x <= 0; x += 1.0 / 1024) {
    const double e = sample::exp(x);
    ASSERT_GE(e, prev) << x;
    prev = e;
  }
}

// The AVX2 exp must give the scalar bits lane by lane, or the token would depend on the CPU.
void expect_batch_equals_scalar(const std::vector<double>& x, const char* what) {
  if (!cpu::cpu_supports(cpu::Isa::avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<double> got(x.size()), want(x.size());
  sample::avx2::exp_batch(x.data(), got.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    want[i] = sample::exp(x[i]);
    if (x[i] < sample::kZeroWeightBelow) {  // the batch may skip these: only the weight must agree
      ASSERT_EQ(sample::integer_weight(got[i]), sample::integer_weight(want[i])) << what << " x " << x[i];
      continue;
    }
    if (std::isnan(want[i])) { ASSERT_TRUE(std::isnan(got[i])) << what << " x " << x[i]; continue; }
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 8), 0) << what << " x " << std::hexfloat << x[i] << " got " << got[i]
                                                    << " want " << want[i];
  }
}

TEST(SampleExpBatch, Avx2EqualsScalarOnEdgeCases) {
  std::vector<double> x = {0.0, -0.0, 1.0, -1.0, 0x1p-1074, -0x1p-1074, 709.782712893384, 709.7827128933841,
                           710.0, -745.2, -745.1999999999999, -745.2000000000001, -708.39, -708.4, -720.0, -740.0,
                           -744.44, 0.34657359027997264, -0.34657359027997264, 0.3465735902799727, 1e-300, -1e-300,
                           INFINITY, -INFINITY, NAN, -NAN, 1e300, -1e300, -28.0, -28.42, -29.0, -29.000000000000004};
  while (x.size() % 4 != 0) x.push_back(0.5);
  // Every lane position for each value, with neighbours that take other branches.
  std::vector<double> lanes;
  for (double v : x)
    for (int lane = 0; lane < 4; ++lane)
      for (int j = 0; j < 4; ++j) lanes.push_back(j == lane ? v : (j % 2 ? -1000.0 : 0.25));
  expect_batch_equals_scalar(lanes, "edges");
}

TEST(SampleExpBatch, Avx2EqualsScalarOnSubnormalResultsAndADenseSweep) {
  std::vector<double> x;
  for (double v = -745.3; v < -707.0; v += 1.0 / 4096) x.push_back(v);  // subnormal and near-subnormal results
  for (double v = -40; v <= 1; v += 1.0 / 65536) x.push_back(v);        // where the sampler's distances lie
  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000000; ++i) {  // random bit patterns over the whole range
    const uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, 8);
    x.push_back(v);
    x.push_back(double(rng() >> 11) * 0x1p-53 * -800.0 + 10.0);  // uniform in (-790, 10]
  }
  expect_batch_equals_scalar(x, "sweep");
}

TEST(SampleExpBatch, OddLengthsUseTheScalarTail) {
  std::vector<double> x(11), got(11);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -0.37 * double(i);
  for (int64_t n = 0; n <= 11; ++n) {
    std::fill(got.begin(), got.end(), -1.0);
    sample::exp_batch(x.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], sample::exp(x[size_t(i)])) << n << " " << i;
    for (int64_t i = n; i < 11; ++i) ASSERT_EQ(got[size_t(i)], -1.0) << "wrote past " << n;
  }
}

// The sampler's dense passes: the SIMD versions give the portable results on rows with NaN,
// infinities, exact ties, far tails (skipped exps), temperature 1 (no division) and odd lengths
// (the portable tail).
using ScaledLogits = double (*)(const float*, int64_t, double, double*);
using RowWeights = uint64_t (*)(const double*, int64_t, double, double, uint64_t*, uint16_t*);

void expect_row_passes_equal_portable(ScaledLogits scaled_logits, RowWeights row_weights, bool check_avx2_only_passes) {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = int64_t(rng() % 700);
    std::vector<float> x(static_cast<size_t>(n));
    const double scale = std::ldexp(1.0, int(rng() % 12) - 4);
    std::normal_distribution<double> g(0.0, scale);
    for (auto& v : x) {
      const uint64_t kind = rng() % 50;
      v = kind == 0 ? NAN : kind == 1 ? INFINITY : kind == 2 ? -INFINITY : kind < 10 ? 20.0f : float(g(rng));
    }
    const double t = trial % 4 == 0 ? 1.0 : std::ldexp(double(1 + rng() % 1000), -int(rng() % 12));
    std::vector<double> za(static_cast<size_t>(n)), zp(static_cast<size_t>(n));
    const double ma = scaled_logits(x.data(), n, t, za.data());
    const double mp = sample::portable::scaled_logits(x.data(), n, t, zp.data());
    ASSERT_EQ(ma, mp) << trial;
    ASSERT_EQ(std::memcmp(za.data(), zp.data(), size_t(n) * 8), 0) << trial;
    if (check_avx2_only_passes) {
      ASSERT_EQ(sample::avx2::max_finite(za.data(), n), mp) << trial;
    }
    if (mp == -INFINITY) continue;
    for (double min_p : {0.0, 1e-9, 0.05, 0.5, 1.0}) {
      std::vector<uint64_t> wa(static_cast<size_t>(n)), wp(static_cast<size_t>(n));
      std::vector<uint16_t> ba(static_cast<size_t>(n)), bp(static_cast<size_t>(n));
      const uint64_t sa = row_weights(za.data(), n, mp, min_p, wa.data(), ba.data());
      const uint64_t sp = sample::portable::row_weights(za.data(), n, mp, min_p, wp.data(), bp.data());
      ASSERT_EQ(sa, sp) << trial << " min-p " << min_p;
      ASSERT_EQ(wa, wp) << trial << " min-p " << min_p;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_LT(ba[size_t(i)], sample::kRankBuckets);
        if (wp[size_t(i)] != 0) { ASSERT_EQ(ba[size_t(i)], bp[size_t(i)]) << trial << " id " << i; }
      }
      ASSERT_EQ(row_weights(za.data(), n, mp, min_p, wa.data(), nullptr), sp);
      if (!check_avx2_only_passes) continue;
      // Top-p's split at a bucket that holds ids, and at one next to it.
      for (int64_t probe : {int64_t(0), n / 2}) {
        if (probe >= n) continue;
        for (int bucket : {int(bp[size_t(probe)]), int(bp[size_t(probe)]) + 1}) {
          std::vector<uint64_t> sa_w(wp), sp_w(wp), fa_w(static_cast<size_t>(n)), fp_w(static_cast<size_t>(n));
          std::vector<int32_t> fa(static_cast<size_t>(n)), fp(static_cast<size_t>(n));
          int na = -1, np = -1;
          const uint64_t ka = sample::avx2::split_at_bucket(sa_w.data(), bp.data(), n, bucket, fa.data(), fa_w.data(), &na);
          const uint64_t kp = sample::portable::split_at_bucket(sp_w.data(), bp.data(), n, bucket, fp.data(), fp_w.data(), &np);
          ASSERT_EQ(ka, kp);
          ASSERT_EQ(sa_w, sp_w);
          ASSERT_EQ(na, np);
          for (int j = 0; j < np; ++j) {
            ASSERT_EQ(fa[size_t(j)], fp[size_t(j)]);
            ASSERT_EQ(fa_w[size_t(j)], fp_w[size_t(j)]);
            ASSERT_EQ(bp[size_t(fp[size_t(j)])], bucket);
          }
        }
      }
    }
  }
}

TEST(SampleRow, Avx2PassesEqualThePortableOnes) {
  if (!cpu::cpu_supports(cpu::Isa::avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  expect_row_passes_equal_portable(&sample::avx2::scaled_logits, &sample::avx2::row_weights, true);
}

TEST(SampleRow, Avx512PassesEqualThePortableOnes) {
  if (!cpu::cpu_supports(cpu::Isa::avx512)) GTEST_SKIP() << "no AVX-512 on this CPU: its sampler passes are not run";
  expect_row_passes_equal_portable(&sample::avx512::scaled_logits, &sample::avx512::row_weights, false);
}

TEST(SampleRow, SamplingIsRefusedAboveTheLargestVocabulary) {
  SamplingOptions o;
  o.temperature = 1;
  try {
    sample::validate(o, sample::kMaxSampledVocab + 1, 1);
    ADD_FAILURE() << "accepted a vocabulary of 2^23 + 1 ids";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 8388608 ids"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(sample::validate(o, sample::kMaxSampledVocab, 1));
  o.temperature = 0;  // greedy sums no weights
  EXPECT_NO_THROW(sample::validate(o, sample::kMaxSampledVocab + 1, 1));
}

// ---- the integer arithmetic of weight_math.hpp --------------------------------------------------

TEST(SampleWeights, IntegerWeightRoundsToNearestEven) {
  EXPECT_EQ(sample::integer_weight(1.0), uint64_t(1) << 40);
  EXPECT_EQ(sample::integer_weight(0.5), uint64_t(1) << 39);
  EXPECT_EQ(sample::integer_weight(0.0), 0u);
  EXPECT_EQ(sample::integer_weight(0x1p-41), 0u);          // half: to even, 0
  EXPECT_EQ(sample::integer_weight(0x1.000002p-41), 1u);   // just above half
  EXPECT_EQ(sample::integer_weight(1.5 * 0x1p-40), 2u);    // 1.5 to even
  EXPECT_EQ(sample::integer_weight(2.5 * 0x1p-40), 2u);    // 2.5 to even
  EXPECT_EQ(sample::integer_weight(1e-300), 0u);
  std::mt19937_64 rng(9);
  for (int i = 0; i < 1000000; ++i) {
    const double w = std::ldexp(double(rng() >> 11), -53 - int(rng() % 30));  // spread over 30 octaves below 1
    ASSERT_EQ(sample::integer_weight(w), uint64_t(std::nearbyint(std::ldexp(w, 40)))) << std::hexfloat << w;
  }
}

TEST(SampleWeights, SkipBoundGivesWeightZero) {
  // Every distance below the bound weighs 0 by the scalar exp itself; just above where weights
  // start (2^-41 = exp(-28.42)) they do not, so the bound is not needlessly loose either.
  for (double d = -745.3; d < sample::kZeroWeightBelow; d += 1.0 / 1024)
    ASSERT_EQ(sample::integer_weight(sample::exp(d)), 0u) << d;
  for (double d = -29.01; d < sample::kZeroWeightBelow; d += 1e-7)
    ASSERT_EQ(sample::integer_weight(sample::exp(d)), 0u) << d;
  EXPECT_EQ(sample::integer_weight(sample::exp(std::nextafter(sample::kZeroWeightBelow, -INFINITY))), 0u);
  EXPECT_GT(sample::integer_weight(sample::exp(-28.4)), 0u);
}

// The multi-GPU head merges the shards' maxima as the largest ~descending_key(z) and turns it back
// into z: the inverse must give the same bits (-0 as +0), and the keys must order as the values do.
TEST(SampleWeights, DescendingKeyRoundTrips) {
  std::vector<double> zs = {0.0, -0.0, 1.0, -1.0, 20.0, -20.0, 5e-324, -5e-324, 2.2250738585072014e-308,
                            1.7976931348623157e308, -1.7976931348623157e308, INFINITY, -INFINITY};
  std::mt19937_64 rng(9);
  for (int i = 0; i < 100000; ++i) {
    uint64_t bits = rng();
    double z;
    std::memcpy(&z, &bits, 8);
    if (!std::isnan(z)) zs.push_back(z);
  }
  for (size_t i = 0; i < zs.size(); ++i) {
    const double z = zs[i] == 0 ? 0.0 : zs[i];
    const double back = sample::z_of_descending_key(sample::descending_key(zs[i]));
    uint64_t got, want;
    std::memcpy(&got, &back, 8);
    std::memcpy(&want, &z, 8);
    EXPECT_EQ(got, want) << zs[i];
    if (i > 0) {  // a larger z, a smaller key; equal values, equal keys
      const double a = zs[i - 1], b = zs[i];
      const uint64_t ka = sample::descending_key(a), kb = sample::descending_key(b);
      EXPECT_EQ(a > b, ka < kb) << a << " " << b;
      EXPECT_EQ(a == b, ka == kb) << a << " " << b;
    }
  }
}

TEST(SampleWeights, TopPTargetEdges) {
  EXPECT_EQ(sample::top_p_target(10, 0.5), 5u);
  EXPECT_EQ(sample::top_p_target(10, 0.51), 6u);             // ceil
  EXPECT_EQ(sample::top_p_target(1, 1e-9), 1u);              // never below 1
  EXPECT_EQ(sample::top_p_target(3, 1e-300), 1u);
  EXPECT_EQ(sample::top_p_target(uint64_t(1) << 40, 1.0), uint64_t(1) << 40);
  // 2^53 + 3 rounds up to 2^53 + 4 as a double: the clamp brings P back to S.
  EXPECT_EQ(sample::top_p_target((uint64_t(1) << 53) + 3, 1.0), (uint64_t(1) << 53) + 3);
  const uint64_t big = (uint64_t(1) << 40) * 202048;
  EXPECT_EQ(sample::top_p_target(big, 0.5), big / 2);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t total = 1 + (rng() >> (1 + rng() % 63));
    const double p = double(float(double(rng() >> 11) / 0x1p53));
    if (p == 0) continue;
    const uint64_t t = sample::top_p_target(total, p);
    ASSERT_GE(t, 1u);
    ASSERT_LE(t, total);
    // Within one part in 2^50 of S * p, plus the ceil, when S * p is at least 1.
    const long double exact = (long double)total * (long double)p;
    if (exact >= 1) { ASSERT_LE(std::fabs((long double)t - exact), 1 + exact * 0x1p-50L) << total << " " << p; }
  }
}

// floor(r * S / 2^128) from 128-bit pieces: floor((hi S + floor(lo S / 2^64)) / 2^64), where the
// inner sum is below S 2^64 and cannot overflow.
uint64_t brute_draw_target(sample::Random128 r, uint64_t total) {
  using u128 = unsigned __int128;
  return uint64_t((u128(r.hi) * total + ((u128(r.lo) * total) >> 64)) >> 64);
}

TEST(SampleWeights, DrawTargetIsTheFloorOfRTimesSAndUniform) {
  std::mt19937_64 rng(21);
  for (int i = 0; i < 1000000; ++i) {
    const sample::Random128 r{rng(), rng()};
    const uint64_t total = 1 + (rng() >> (rng() % 64));
    const uint64_t t = sample::draw_target(r, total);
    ASSERT_LT(t, total);
    ASSERT_EQ(t, brute_draw_target(r, total)) << total;
  }
  // Exact counts: with 2^128 = q S + rem, target k is taken by the r in [ceil(k 2^128 / S),
  // ceil((k + 1) 2^128 / S)), q or q + 1 values each, so no target is more likely than another by
  // more than one part in q (about 2^128 / S).
  using u128 = unsigned __int128;
  for (uint64_t total : {1ull, 2ull, 3ull, 5ull, 7ull, 1000ull, 65537ull, (1ull << 32) - 5}) {
    const u128 all = ~u128(0);
    u128 q = all / total;
    u128 rem = all % total + 1;
    if (rem == total) { ++q; rem = 0; }
    u128 prev_first = 0;
    for (uint64_t k = 0; k < std::min<uint64_t>(total, 2000); ++k) {
      const u128 first = q * k + (rem * k + total - 1) / total;  // ceil(k 2^128 / S)
      const sample::Random128 at{uint64_t(first >> 64), uint64_t(first)};
      ASSERT_EQ(sample::draw_target(at, total), k) << total;
      if (k > 0) {
        const u128 before = first - 1;
        ASSERT_EQ(sample::draw_target(sample::Random128{uint64_t(before >> 64), uint64_t(before)}, total), k - 1);
        const u128 count = first - prev_first;
        ASSERT_TRUE(count == q || count == q + 1) << total << " " << k;
      }
      prev_first = first;
    }
  }
  const sample::Random128 top{~0ull, ~0ull};
  EXPECT_EQ(sample::draw_target(top, 5), 4u);
  EXPECT_EQ(sample::draw_target(sample::Random128{0, 0}, 5), 0u);
}

// ---- the sampler against the exact distribution -------------------------------------------------

// A token's logits over 1,300 ids (three 512-id chunks, the last partial): a few strong ids, a
// broad body and a tail, with ties, as capped logits look.
std::vector<float> test_logits(int64_t V = 1300) {
  std::vector<float> x(static_cast<size_t>(V));
  std::mt19937_64 rng(7);
  std::normal_distribution<double> n(0.0, 1.5);
  for (auto& v : x) v = float(n(rng));
  x[3] = 6.0f;
  x[700] = 5.5f;
  x[1299] = 5.5f;  // a tie with 700
  x[515] = 4.0f;
  return x;
}

// The exact distribution of numerics.md §9 in long double, written independently of the sampler:
// sort, filter, normalize.
std::vector<double> exact_distribution(const std::vector<float>& x, const SamplingOptions& o, const uint32_t* mask) {
  const int64_t V = int64_t(x.size());
  struct E { long double z; int32_t id; };
  std::vector<E> all;
  for (int64_t i = 0; i < V; ++i) {
    if (mask != nullptr && !((mask[i / 32] >> (i % 32)) & 1)) continue;
    long double v = x[size_t(i)];
    for (auto [id, b] : o.logit_bias)
      if (id == i) v += b;
    all.push_back({v / o.temperature, int32_t(i)});
  }
  std::sort(all.begin(), all.end(), [](const E& a, const E& b) { return a.z != b.z ? a.z > b.z : a.id < b.id; });
  const long double m = all[0].z;
  std::vector<E> kept;
  for (const E& e : all)
    if (std::exp(e.z - m) >= (long double)o.min_p) kept.push_back(e);
  if (o.top_k > 0 && int64_t(kept.size()) > o.top_k) kept.resize(size_t(o.top_k));
  long double s = 0;
  for (const E& e : kept) s += std::exp(e.z - m);
  if (o.top_p < 1) {
    long double c = 0;
    size_t j = 0;
    for (; j < kept.size(); ++j) {
      c += std::exp(kept[j].z - m);
      if (c >= o.top_p * s) break;
    }
    // The cut must not sit on a rounding knife edge, or the test would test rounding.
    EXPECT_GT(std::fabs(c / s - (long double)o.top_p), 1e-9L);
    kept.resize(std::min(kept.size(), j + 1));
    s = c;
  }
  std::vector<double> p(static_cast<size_t>(V), 0.0);
  for (const E& e : kept) p[size_t(e.id)] = double(std::exp(e.z - m) / s);
  return p;
}

// Pearson's chi-square of counts against p, bins with an expected count below 5 pooled; returns
// the statistic and the degrees of freedom.
std::pair<double, int> chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int bins = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    const double e = p[i] * double(n);
    if (e < 5) { pooled_e += e; pooled_o += double(counts[i]); continue; }
    stat += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++bins;
  }
  if (pooled_e > 0) { stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e; ++bins; }
  return {stat, bins - 1};
}

// The chi-square quantile at significance 1e-6 (z = 4.753) by Wilson and Hilferty's cube-root
// approximation. The draws are deterministic (fixed seeds), so a pass is a pass forever; the
// level is chosen so that a correct sampler passes for any seed with overwhelming probability,
// and the power check below shows a slightly wrong distribution still fails.
double chi_square_limit(int df) {
  const double z = 4.753, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct Tally {
  std::vector<int64_t> counts;
  int64_t n = 0;
};

Tally draw_many(const std::vector<float>& x, const SamplingOptions& o, const uint32_t* mask, int64_t n) {
  Tally t;
  t.counts.assign(x.size(), 0);
  t.n = n;
  for (int64_t pos = 0; pos < n; ++pos) ++t.counts[size_t(sample::sample_token(x.data(), int64_t(x.size()), o, mask, pos))];
  return t;
}

void expect_distribution(const Tally& t, const std::vector<double>& p, const char* what) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] == 0) { ASSERT_EQ(t.counts[i], 0) << what << ": id " << i << " is outside the kept set but was drawn"; }
  const auto [stat, df] = chi_square(t.counts, p, t.n);
  std::printf("[ info ] %s: chi-square %.1f with %d degrees of freedom (limit %.1f at 1e-6)\n", what, stat, df,
              chi_square_limit(std::max(df, 1)));
  ASSERT_GE(df, 1) << what;
  EXPECT_LT(stat, chi_square_limit(df)) << what;
}

struct Config { const char* name; SamplingOptions o; };

std::vector<Config> configs() {
  auto make = [](float t, int k, float p, float min_p) {
    SamplingOptions o;
    o.temperature = t;
    o.top_k = k;
    o.top_p = p;
    o.min_p = min_p;
    o.seed = 1234;
    return o;
  };
  return {
      {"temperature 1", make(1.0f, 0, 1, 0)},
      {"temperature 0.7", make(0.7f, 0, 1, 0)},
      {"temperature 2.5", make(2.5f, 0, 1, 0)},
      {"top-k 20", make(1.0f, 20, 1, 0)},
      {"top-p 0.9", make(1.0f, 0, 0.9f, 0)},
      {"top-p 0.5 at T 1.5", make(1.5f, 0, 0.5f, 0)},
      {"min-p 0.05", make(1.0f, 0, 1, 0.05f)},
      {"top-k 50, top-p 0.8, min-p 0.02, T 0.8", make(0.8f, 50, 0.8f, 0.02f)},
  };
}

TEST(SampleDistribution, ChiSquareAgainstTheExactDistribution) {
  const std::vector<float> x = test_logits();
  for (const Config& c : configs()) {
    const Tally t = draw_many(x, c.o, nullptr, 60000);
    expect_distribution(t, exact_distribution(x, c.o, nullptr), c.name);
  }
}

TEST(SampleDistribution, BiasAndMaskWithTopP) {
  const std::vector<float> x = test_logits();
  SamplingOptions o;
  o.temperature = 1.2f;
  o.top_p = 0.95f;
  o.seed = 99;
  o.logit_bias = {{3, -100.0f}, {40, 6.5f}, {1200, 3.0f}};
  std::vector<uint32_t> mask((x.size() + 31) / 32, 0xffffffffu);
  for (int id : {700, 1299, 515, 5, 6, 7}) mask[size_t(id / 32)] &= ~(1u << (id % 32));
  const Tally t = draw_many(x, o, mask.data(), 60000);
  const std::vector<double> p = exact_distribution(x, o, mask.data());
  for (int id : {700, 1299, 515, 5, 6, 7, 3}) EXPECT_EQ(t.counts[size_t(id)], 0) << id;
  EXPECT_GT(t.counts[40], 0);
  expect_distribution(t, p, "bias + mask + top-p 0.95, T 1.2");
}

// The chi-square test has power: the same draws fail against a neighbouring distribution.
TEST(SampleDistribution, ChiSquareRejectsAWrongTemperature) {
  const std::vector<float> x = test_logits();
  SamplingOptions o = configs()[0].o;
  const Tally t = draw_many(x, o, nullptr, 60000);
  SamplingOptions wrong = o;
  wrong.temperature = 1.1f;
  const auto [stat, df] = chi_square(t.counts, exact_distribution(x, wrong, nullptr), t.n);
  std::printf("[ info ] draws at T 1 against T 1.1: chi-square %.1f with %d degrees of freedom\n", stat, df);
  EXPECT_GT(stat, chi_square_limit(df));
}

TEST(SampleKeptSet, TopKTopPMinPNeverDrawOutside) {
  const std::vector<float> x = test_logits();
  for (const Config& c : configs()) {
    const std::vector<double> p = exact_distribution(x, c.o, nullptr);
    const Tally t = draw_many(x, c.o, nullptr, 5000);
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] == 0) { ASSERT_EQ(t.counts[i], 0) << c.name << " drew id " << i; }
    // The kept set the verifier sees is the exact one.
    const sample::Weights w = sample::kept_weights(x.data(), int64_t(x.size()), c.o, nullptr);
    for (size_t i = 0; i < p.size(); ++i) {
      ASSERT_EQ(w.weight[i] > 0, p[i] > 0) << c.name << " id " << i;
      if (p[i] > 0) { EXPECT_NEAR(w.weight[i] / w.total, p[i], 1e-12) << c.name << " id " << i; }
    }
  }
  SamplingOptions one;
  one.temperature = 1;
  one.top_k = 1;
  for (int pos = 0; pos < 100; ++pos) ASSERT_EQ(sample::sample_token(x.data(), 1300, one, nullptr, pos), 3);
  one.top_k = 0;
  one.min_p = 1;  // only the maximum
  for (int pos = 0; pos < 100; ++pos) ASSERT_EQ(sample::sample_token(x.data(), 1300, one, nullptr, pos), 3);
}

TEST(SampleGreedy, TemperatureZeroIsTheArgmaxOfTheBiasedAllowedLogits) {
  const std::vector<float> x = test_logits();
  SamplingOptions o;
  EXPECT_EQ(sample::sample_token(x.data(), 1300, o, nullptr, 0), 3);
  o.logit_bias = {{3, -1.0f}};
  EXPECT_EQ(sample::sample_token(x.data(), 1300, o, nullptr, 0), 700);  // 5.5 tie: lowest id
  std::vector<uint32_t> mask(41, 0);
  mask[1299 / 32] = 1u << (1299 % 32);
  mask[0] = 1u << 9;
  o.logit_bias.clear();
  EXPECT_EQ(sample::sample_token(x.data(), 1300, o, mask.data(), 0), 1299);
  std::fill(mask.begin(), mask.end(), 0u);
  EXPECT_THROW(sample::sample_token(x.data(), 1300, o, mask.data(), 0), Error);
}

// ---- the same token for every split -------------------------------------------------------------

TEST(SampleSplit, EverySplitDrawsTheSameToken) {
  const std::vector<float> x = test_logits();
  // Chunk-aligned splits as shards are planned, and unaligned ones (a chunk's sum then comes in
  // parts from two ranges): integer sums make both exact.
  const std::vector<std::vector<int64_t>> splits = {{0, 1300},      {0, 512, 1300},      {0, 1024, 1300},
                                                    {0, 512, 1024, 1300}, {0, 1, 1300}, {0, 700, 701, 1299, 1300},
                                                    {0, 100, 333, 900, 1030, 1300}};
  for (const Config& c : configs())
    for (int64_t pos = 0; pos < 400; ++pos) {
      const int32_t whole = sample::sample_token(x.data(), 1300, c.o, nullptr, pos);
      for (const auto& b : splits) ASSERT_EQ(sample::sample_token(x.data(), 1300, c.o, nullptr, pos, b), whole) << c.name;
    }
  const int64_t bad[] = {0, 700, 600, 1300};
  EXPECT_THROW(sample::sample_token(x.data(), 1300, configs()[0].o, nullptr, 0, bad), Error);
}

// Ranges held apart, as shards hold them: each range's logits copied into a buffer of its own,
// so nothing but the round summaries can pass between them.
TEST(SampleSplit, RangesHeldApartDrawTheContiguousToken) {
  const std::vector<float> x = test_logits();
  const std::vector<std::vector<int64_t>> splits = {{0, 1300}, {0, 512, 1024, 1300}, {0, 1, 1300}, {0, 100, 333, 900, 1030, 1300}};
  for (const auto& b : splits) {
    std::vector<std::vector<float>> own;
    std::vector<sample::RangeLogits> ranges;
    for (size_t r = 0; r + 1 < b.size(); ++r) own.emplace_back(x.begin() + b[r], x.begin() + b[r + 1]);
    for (size_t r = 0; r + 1 < b.size(); ++r) ranges.push_back({own[r].data(), b[r], b[r + 1]});
    for (const Config& c : configs())
      for (int64_t pos = 0; pos < 100; ++pos)
        ASSERT_EQ(sample::sample_token_in_ranges(ranges, 1300, c.o, nullptr, pos),
                  sample::sample_token(x.data(), 1300, c.o, nullptr, pos))
            << c.name << ", " << b.size() - 1 << " ranges";
  }
  const sample::RangeLogits gap[] = {{x.data(), 0, 600}, {x.data() + 700, 700, 1300}};
  EXPECT_THROW(sample::sample_token_in_ranges(gap, 1300, configs()[0].o, nullptr, 0), Error);
  const sample::RangeLogits short_of_v[] = {{x.data(), 0, 1200}};
  EXPECT_THROW(sample::sample_token_in_ranges(short_of_v, 1300, configs()[0].o, nullptr, 0), Error);
  EXPECT_THROW(sample::sample_token_in_ranges({}, 1300, configs()[0].o, nullptr, 0), Error);
}

TEST(SampleSplit, PositionAndSeedAloneKeyTheDraw) {
  const std::vector<float> x = test_logits();
  SamplingOptions o = configs()[0].o;
  std::vector<int32_t> a, b;
  for (int pos = 0; pos < 64; ++pos) a.push_back(sample::sample_token(x.data(), 1300, o, nullptr, pos));
  for (int pos = 0; pos < 64; ++pos) b.push_back(sample::sample_token(x.data(), 1300, o, nullptr, pos));
  EXPECT_EQ(a, b);
  o.seed += 1;
  std::vector<int32_t> c;
  for (int pos = 0; pos < 64; ++pos) c.push_back(sample::sample_token(x.data(), 1300, o, nullptr, pos));
  EXPECT_NE(a, c);
}

// ---- the same tokens on threads ------------------------------------------------------------------

// The configs above plus bias, per-token masks and a saturated top-p tie, for T tokens of V ids.
std::vector<Config> threaded_configs(int64_t V, int tokens, std::vector<uint32_t>& mask_store) {
  std::vector<Config> v = configs();
  SamplingOptions b = v[4].o;  // top-p 0.9
  b.logit_bias = {{0, 4.0f}, {int32_t(V / 2), -30.0f}, {int32_t(V - 1), 2.5f}};
  const size_t words = size_t((V + 31) / 32);
  mask_store.assign(words * size_t(tokens), 0xffffffffu);
  for (int t = 0; t < tokens; ++t)
    for (size_t w = size_t(t) % 7; w < words; w += 7) mask_store[size_t(t) * words + w] = 0x0f0f0f0fu;
  b.allowed = mask_store;
  b.position = 4321;
  v.push_back({"bias, per-token masks, top-p 0.9", b});
  SamplingOptions one_mask = v[7].o;  // top-k, top-p and min-p together
  one_mask.allowed.assign(words, 0xffff0000u);
  v.push_back({"one mask for every token, top-k 50, top-p 0.8, min-p 0.02", one_mask});
  SamplingOptions greedy;
  greedy.logit_bias = {{3, 1.0f}};
  v.push_back({"greedy with a bias", greedy});
  return v;
}

TEST(SampleThreads, ThreadedSamplerDrawsTheSerialTokensFor1To8Threads) {
  const int64_t V = 5000;  // 10 chunks: up to 8 ranges of the vocabulary, one per worker
  const int T = 20;
  std::vector<float> x;
  for (int t = 0; t < T; ++t) {
    const std::vector<float> row = test_logits(V);
    // Rows differ (a rotation per token), so a token sampled from the wrong row would show.
    x.insert(x.end(), row.begin() + t * 37, row.end());
    x.insert(x.end(), row.begin(), row.begin() + t * 37);
  }
  std::vector<uint32_t> masks;
  for (const Config& c : threaded_configs(V, T, masks)) {
    std::vector<int32_t> serial(T);
    for (int t = 0; t < T; ++t)
      serial[size_t(t)] = sample::sample_token(x.data() + size_t(t) * size_t(V), V, c.o, sample::mask_row(c.o, V, t),
                                               c.o.position + t);
    for (int threads = 1; threads <= 8; ++threads) {
      cpu::ThreadPool pool(threads);
      sample::Workers workers{pool.size(), [&](const std::function<void(int)>& task) { pool.run(task); }};
      // T = 20: whole tokens on the workers, the remainder split over the vocabulary; T = 1: split.
      std::vector<int32_t> got(T, -1);
      sample::sample_tokens(x.data(), V, T, c.o, 0, got.data(), &workers);
      EXPECT_EQ(got, serial) << c.name << ", " << threads << " threads, T " << T;
      for (int t : {0, 13}) {
        int32_t one = -1;
        sample::sample_tokens(x.data() + size_t(t) * size_t(V), V, 1, c.o, t, &one, &workers);
        EXPECT_EQ(one, serial[size_t(t)]) << c.name << ", " << threads << " threads, T 1, token " << t;
      }
      // Explicit ranges, more than workers (a worker takes several), chunk-unaligned.
      const int64_t b[] = {0, 1, 700, 1999, 2500, 2501, 3333, 4000, 4999, V};
      EXPECT_EQ(sample::sample_token(x.data(), V, c.o, sample::mask_row(c.o, V, 0), c.o.position, b, &workers),
                serial[0])
          << c.name << ", " << threads << " threads, explicit ranges";
    }
  }
}

TEST(SampleThreads, AnExcludedRowIsRefusedOnThreads) {
  const int64_t V = 5000;
  const std::vector<float> x = test_logits(V);
  SamplingOptions o = configs()[4].o;
  o.allowed.assign(size_t((V + 31) / 32), 0u);
  cpu::ThreadPool pool(3);
  sample::Workers workers{pool.size(), [&](const std::function<void(int)>& task) { pool.run(task); }};
  int32_t out = -1;
  try {
    sample::sample_tokens(x.data(), V, 1, o, 0, &out, &workers);
    FAIL() << "a row with every id masked out was sampled: " << out;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no token can be sampled"), std::string::npos) << e.what();
  }
  // Whole tokens on the workers (T = 3 on 3 threads): the worker's error comes back here.
  std::vector<float> rows;
  for (int t = 0; t < 3; ++t) rows.insert(rows.end(), x.begin(), x.end());
  std::vector<int32_t> three(3, -1);
  EXPECT_THROW(sample::sample_tokens(rows.data(), V, 3, o, 0, three.data(), &workers), Error);
}

// ---- the top-p boundary's selection ---------------------------------------------------------------

// The reference: sort, then add in rank order.
size_t boundary_by_sort(std::vector<sample::Boundary> c, uint64_t before, uint64_t target, sample::Boundary& at) {
  std::sort(c.begin(), c.end(), sample::boundary_before);
  for (size_t j = 0; j < c.size(); ++j)
    if ((before += c[j].w) >= target) { at = c[j]; return j; }
  return c.size();
}

TEST(SampleBoundarySelect, EqualsTheSortOnOrdersThatDefeatPivots) {
  std::mt19937_64 rng(16);
  for (size_t n : {size_t(1), size_t(2), size_t(17), size_t(1000), size_t(50000)}) {
    std::vector<sample::Boundary> base(n);
    for (size_t i = 0; i < n; ++i)
      base[i] = {uint64_t(rng() % (n / 3 + 1)), int32_t(i), 1 + rng() % 1000};  // repeated keys: ties cut by id
    std::vector<std::pair<std::string, std::vector<sample::Boundary>>> orders;
    auto sorted = base;
    std::sort(sorted.begin(), sorted.end(), sample::boundary_before);
    orders.push_back({"sorted", sorted});
    orders.push_back({"reversed", {sorted.rbegin(), sorted.rend()}});
    std::vector<sample::Boundary> organ;  // up then down: median-of-3 pivots stay near the ends
    for (size_t i = 0; i < n; i += 2) organ.push_back(sorted[i]);
    for (size_t i = n - 1 - (n % 2 == 0 ? 0 : 1); i < n; i -= 2) organ.push_back(sorted[i]);
    orders.push_back({"organ pipe", organ});
    auto shuffled = base;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    orders.push_back({"shuffled", shuffled});
    uint64_t total = 0;
    for (const auto& b : base) total += b.w;
    for (auto& [name, c] : orders) {
      ASSERT_EQ(c.size(), n) << name;
      for (uint64_t before : {uint64_t(0), uint64_t(12345)})
        for (double f : {1e-9, 0.3, 0.5, 0.9, 1.0}) {
          const uint64_t target = before + std::max<uint64_t>(1, uint64_t(f * double(total)));
          sample::Boundary want{};
          const size_t rank = boundary_by_sort(c, before, target, want);
          auto work = c;
          uint64_t reached = 0;
          const size_t at = sample::select_boundary(work, before, target, reached);
          ASSERT_EQ(at, rank) << name << " n " << n;
          ASSERT_EQ(work[at].id, want.id) << name << " n " << n;
          uint64_t mass = before;
          for (size_t j = 0; j <= at; ++j) {
            ASSERT_FALSE(sample::boundary_before(want, work[j])) << name << ": a later candidate is in front";
            mass += work[j].w;
          }
          ASSERT_EQ(reached, mass) << name;
        }
    }
  }
}

// ---- the fast sampler against a brute-force reading of numerics.md §9 ----------------------------

// The spec computed the naive way, sharing only weight_math.hpp's per-id functions: every included
// id sorted in rank order, the prefix found by adding in that order; no buckets, chunks or skip.
struct Brute {
  int32_t token = -1;
  std::vector<uint64_t> w;  // the final set's integer weights
  uint64_t total = 0;
};

// The draw over a final set: the first id in id order whose running weight exceeds the target.
int32_t brute_draw(const Brute& r, const SamplingOptions& o, int64_t position) {
  const uint64_t t = sample::draw_target(sample::random128(o.seed, position, sample::Stream::draw), r.total);
  uint64_t run = 0;
  for (size_t i = 0; i < r.w.size(); ++i)
    if ((run += r.w[i]) > t) return int32_t(i);
  return -1;
}

Brute brute_sample(const std::vector<float>& x, const SamplingOptions& o, const uint32_t* mask, int64_t position) {
  const int64_t V = int64_t(x.size());
  struct E { double z; int32_t id; };
  std::vector<E> inc;
  for (int64_t i = 0; i < V; ++i) {
    if (mask != nullptr && !((mask[i / 32] >> (i % 32)) & 1)) continue;
    float b = 0;
    for (auto [id, v] : o.logit_bias)
      if (id == i) b = v;
    const double z = sample::scaled_logit(x[size_t(i)], b, double(o.temperature));
    if (std::isfinite(z)) inc.push_back({z, int32_t(i)});
  }
  std::sort(inc.begin(), inc.end(), [](const E& a, const E& b) { return a.z != b.z ? a.z > b.z : a.id < b.id; });
  Brute r;
  r.w.assign(size_t(V), 0);
  const double m = inc.at(0).z;
  for (size_t j = 0; j < inc.size() && (o.top_k == 0 || j < size_t(o.top_k)); ++j) {
    const double w = sample::exp(inc[j].z - m);
    if (sample::passes_min_p(w, double(o.min_p))) r.w[size_t(inc[j].id)] = sample::integer_weight(w);
  }
  for (uint64_t w : r.w) r.total += w;
  if (o.top_p < 1) {
    const uint64_t target = sample::top_p_target(r.total, double(o.top_p));
    uint64_t reached = 0;
    size_t j = 0;
    while ((reached += r.w[size_t(inc[j].id)]) < target) ++j;
    for (++j; j < inc.size(); ++j) r.w[size_t(inc[j].id)] = 0;
    r.total = reached;
  }
  r.token = brute_draw(r, o, position);
  return r;
}

void expect_same_as_brute(const std::vector<float>& x, const SamplingOptions& o, const uint32_t* mask,
                          int64_t position, std::span<const int64_t> bounds, const Brute& ref, const std::string& what) {
  ASSERT_EQ(sample::sample_token(x.data(), int64_t(x.size()), o, mask, position, bounds), brute_draw(ref, o, position))
      << what;
}

// A saturated cap puts many logits at exactly the cap: the top-p boundary then falls inside a run
// of equal z, cut by id.
TEST(SampleBrute, TopPBoundaryInsideAnExactTieOfSaturatedLogits) {
  const int64_t V = 5000;
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<float> below(15.0f, 19.99f);
  std::vector<float> x(static_cast<size_t>(V));
  for (auto& v : x) v = (rng() % 5 < 3) ? 20.0f : below(rng);
  const int64_t split[] = {0, 1234, 2500, 4999, V};
  for (float top_p : {0.05f, 0.3f, 0.5f, 0.77f, 0.9f, 0.999f}) {
    SamplingOptions o;
    o.temperature = 1.0f;
    o.top_p = top_p;
    for (uint64_t seed : {1ull, 2ull, 0xdeadbeefull}) {
      o.seed = seed;
      const Brute ref = brute_sample(x, o, nullptr, 0);
      // The tied ids kept are the lowest ones: the cut inside the tie is by id.
      int64_t last_kept = -1, first_out = V;
      for (int64_t i = 0; i < V; ++i) {
        if (x[size_t(i)] != 20.0f) continue;
        if (ref.w[size_t(i)] != 0) last_kept = i;
        else first_out = std::min(first_out, i);
      }
      if (first_out < V) { EXPECT_LT(last_kept, first_out) << top_p; }
      const sample::Weights kw = sample::kept_weights(x.data(), V, o, nullptr);
      ASSERT_EQ(kw.total, double(ref.total)) << top_p;
      for (int64_t i = 0; i < V; ++i) ASSERT_EQ(kw.weight[size_t(i)], double(ref.w[size_t(i)])) << top_p << " id " << i;
      for (int64_t pos = 0; pos < 300; ++pos) {
        expect_same_as_brute(x, o, nullptr, pos, {}, ref, "saturated top-p " + std::to_string(top_p));
        expect_same_as_brute(x, o, nullptr, pos, split, ref, "saturated top-p, split");
      }
    }
  }
}

TEST(SampleBrute, RandomLogitsOptionsAndPositionsDrawTheBruteForceToken) {
  std::mt19937_64 rng(2026);
  auto pick = [&](std::initializer_list<double> v) { return *(v.begin() + rng() % v.size()); };
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t V = 1 + int64_t(rng() % 3000);
    std::vector<float> x(static_cast<size_t>(V));
    const double scale = pick({0.01, 0.3, 1.0, 3.0, 20.0});
    std::normal_distribution<double> n(0.0, scale);
    const int levels = int(rng() % 4);  // 0: continuous; otherwise few distinct values, many ties
    for (auto& v : x) v = levels ? float(int(rng() % (levels * 3)) * scale) : float(n(rng));
    if (rng() % 4 == 0) x[rng() % size_t(V)] = NAN;
    if (rng() % 8 == 0) x[rng() % size_t(V)] = -INFINITY;
    SamplingOptions o;
    o.temperature = float(pick({0.05, 0.5, 1.0, 1.7, 4.0}));
    o.top_k = int(pick({0, 0, 1, 3, 40, 5000}));
    o.top_p = float(pick({1.0, 1.0, 0.999, 0.9, 0.5, 0.1, 1e-6}));
    o.min_p = float(pick({0.0, 0.0, 1e-12, 0.01, 0.3, 1.0}));
    o.seed = rng();
    if (rng() % 3 == 0)
      for (int j = 0; j < 3; ++j) o.logit_bias.push_back({int32_t(rng() % size_t(V)), float(pick({-50.0, 1.5, 30.0}))});
    std::sort(o.logit_bias.begin(), o.logit_bias.end());
    o.logit_bias.erase(std::unique(o.logit_bias.begin(), o.logit_bias.end(),
                                   [](const auto& a, const auto& b) { return a.first == b.first; }),
                       o.logit_bias.end());
    std::vector<uint32_t> mask;
    if (rng() % 3 == 0) {
      mask.assign(size_t((V + 31) / 32), 0);
      for (auto& w : mask) w = uint32_t(rng()) | uint32_t(rng());
      mask[0] |= 1u;  // id 0 is always allowed, so some id is included unless its logit is NaN
    }
    if (std::isnan(x[0]) || x[0] == -INFINITY) x[0] = 0.0f;
    std::vector<int64_t> bounds = {0};
    for (int64_t b = 1 + int64_t(rng() % 700); b < V; b += 1 + int64_t(rng() % 900)) bounds.push_back(b);
    bounds.push_back(V);
    const uint32_t* m = mask.empty() ? nullptr : mask.data();
    const Brute ref = brute_sample(x, o, m, 0);
    for (int j = 0; j < 8; ++j) {
      const int64_t position = int64_t(rng() % 100000);
      const std::string what = "trial " + std::to_string(trial) + " V " + std::to_string(V) + " position " +
                               std::to_string(position);
      expect_same_as_brute(x, o, m, position, {}, ref, what);
      expect_same_as_brute(x, o, m, position, bounds, ref, what + " split");
    }
    const sample::Weights kw = sample::kept_weights(x.data(), V, o, m);
    ASSERT_EQ(kw.total, double(ref.total)) << trial;
    for (int64_t i = 0; i < V; ++i) ASSERT_EQ(kw.weight[size_t(i)], double(ref.w[size_t(i)])) << trial << " id " << i;
  }
}

// ---- through the engine: every backend, shard count and call split -------------------------------

struct SampleModel {
  TempDir dir;
  std::shared_ptr<const Model> model;
  SampleModel() : model(Model::open(make_checkpoint(dir, "q5_K", 1600, 256, "--seed 5"))) {}
};
const SampleModel& sample_model() {
  static const SampleModel m;
  return m;
}

std::vector<int32_t> sampled_tokens(const std::shared_ptr<const Model>& model, const EngineOptions& e,
                                    const std::vector<float>& hidden, int tokens, const SamplingOptions& s,
                                    int per_call) {
  Engine engine(model, e);
  const int64_t H = model->config().hidden;
  std::vector<int32_t> out;
  for (int first = 0; first < tokens; first += per_call) {
    const int n = std::min(per_call, tokens - first);
    RunOptions o;
    o.sampling = s;
    o.sampling.position = s.position + first;
    if (!s.allowed.empty() && int64_t(s.allowed.size()) > (model->config().vocab + 31) / 32) {
      const size_t words = size_t((model->config().vocab + 31) / 32);
      o.sampling.allowed.assign(s.allowed.begin() + first * words, s.allowed.begin() + (first + n) * words);
    }
    const RunResult r = engine.run(std::span<const float>(hidden.data() + size_t(first) * size_t(H), size_t(n) * size_t(H)), n, o);
    for (const TokenChoice& c : r.choices) out.push_back(c.sampled);
  }
  return out;
}

std::vector<SamplingOptions> engine_configs(int64_t V, int tokens) {
  std::vector<SamplingOptions> v;
  for (const Config& c : configs()) v.push_back(c.o);
  SamplingOptions biased;
  biased.temperature = 1.0f;
  biased.top_p = 0.9f;
  biased.seed = 77;
  biased.position = 1000;
  biased.logit_bias = {{5, 2.5f}, {int32_t(V - 1), 3.0f}};
  const size_t words = size_t((V + 31) / 32);
  biased.allowed.assign(words * size_t(tokens), 0xffffffffu);
  for (int t = 0; t < tokens; ++t) biased.allowed[size_t(t) * words + size_t(t)] = 0x0000ffffu;  // per-token masks
  v.push_back(biased);
  SamplingOptions greedy_biased;
  greedy_biased.logit_bias = {{9, 50.0f}};
  v.push_back(greedy_biased);
  return v;
}

TEST(SampleEngine, SameTokensOnEveryCpuBackendShardCountAndCallSplit) {
  const auto& m = sample_model();
  const int T = 20;  // more than one 16-token pass
  const std::vector<float> hidden = test_hidden(T, 256, 31);
  const int64_t V = m.model->config().vocab;
  for (const SamplingOptions& s : engine_configs(V, T)) {
    const std::vector<int32_t> ref = sampled_tokens(m.model, {.backend = BackendKind::scalar, .threads = 1}, hidden, T, s, T);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cpu, .threads = 2}, hidden, T, s, T), ref);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cpu, .threads = 1}, hidden, T, s, 1), ref);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cpu, .threads = 2, .shards = 3}, hidden, T, s, 7), ref);
    // The engine's sampling threads: whole tokens (20 per call) and one token split over ranges.
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cpu, .threads = 3}, hidden, T, s, T), ref);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cpu, .threads = 4}, hidden, T, s, 1), ref);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::scalar, .threads = 1, .shards = 2}, hidden, T, s, 3), ref);
  }
}

TEST(SampleEngine, TemperatureZeroSamplesTheArgmax) {
  const auto& m = sample_model();
  const std::vector<float> hidden = test_hidden(5, 256, 3);
  Engine engine(m.model, {.backend = BackendKind::cpu});
  const RunResult r = engine.run(hidden, 5, {});
  for (const TokenChoice& c : r.choices) EXPECT_EQ(c.sampled, c.argmax);
  RunOptions o;
  o.sampling.temperature = 0.8f;
  o.sampling.seed = 4;
  const RunResult s = engine.run(hidden, 5, o);
  for (int t = 0; t < 5; ++t) EXPECT_EQ(s.choices[size_t(t)].argmax, r.choices[size_t(t)].argmax);
  EXPECT_TRUE(s.logits.empty());  // fetched for the sampler only
}

TEST(SampleEngine, BadOptionsAreRefusedByName) {
  const auto& m = sample_model();
  const std::vector<float> hidden = test_hidden(2, 256, 3);
  Engine engine(m.model, {.backend = BackendKind::scalar});
  struct Case { SamplingOptions o; const char* mention; };
  std::vector<Case> cases;
  auto add = [&](auto f, const char* mention) { SamplingOptions o; f(o); cases.push_back({o, mention}); };
  add([](SamplingOptions& o) { o.temperature = -1; }, "temperature");
  add([](SamplingOptions& o) { o.temperature = NAN; }, "temperature");
  add([](SamplingOptions& o) { o.top_p = 0; }, "top-p must be in (0, 1]");
  add([](SamplingOptions& o) { o.top_p = 1.5f; }, "top-p must be in (0, 1]");
  add([](SamplingOptions& o) { o.min_p = -0.1f; }, "min-p");
  add([](SamplingOptions& o) { o.top_k = -3; }, "top-k");
  add([](SamplingOptions& o) { o.logit_bias = {{1600, 1.0f}}; }, "logit bias id 1600 is outside the vocabulary");
  add([](SamplingOptions& o) { o.logit_bias = {{-1, 1.0f}}; }, "logit bias id -1");
  add([](SamplingOptions& o) { o.logit_bias = {{4, 1.0f}, {4, 2.0f}}; }, "given twice");
  add([](SamplingOptions& o) { o.logit_bias = {{4, INFINITY}}; }, "not finite");
  add([](SamplingOptions& o) { o.allowed.assign(49, ~0u); }, "allowed-token mask has 49 32-bit words");
  for (const Case& c : cases) {
    RunOptions o;
    o.sampling = c.o;
    try {
      engine.run(hidden, 2, o);
      ADD_FAILURE() << "accepted: " << c.mention;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.mention), std::string::npos) << e.what();
    }
  }
}

// ---- speculative verification --------------------------------------------------------------------

TEST(SampleVerify, GreedyAcceptsWhileTheDraftIsTheArgmax) {
  const auto& m = sample_model();
  const std::vector<float> hidden = test_hidden(5, 256, 8);
  Engine engine(m.model, {.backend = BackendKind::cpu});
  const RunResult r = engine.run(hidden, 5, {});
  std::vector<int32_t> draft;
  for (int t = 0; t < 4; ++t) draft.push_back(r.choices[size_t(t)].argmax);
  VerifyResult all = engine.verify(hidden, draft);
  EXPECT_EQ(all.accepted, 4);
  EXPECT_EQ(all.next, r.choices[4].argmax);  // the bonus token
  draft[2] = (draft[2] + 1) % 1600;
  VerifyResult some = engine.verify(hidden, draft);
  EXPECT_EQ(some.accepted, 2);
  EXPECT_EQ(some.next, r.choices[2].argmax);
  ASSERT_EQ(some.target.size(), 3u);
  EXPECT_THROW(engine.verify(std::span<const float>(hidden.data(), 4 * 256), draft), Error);  // needs 5 rows
}

TEST(SampleVerify, SamplingWithoutDraftProbsAcceptsWhileTheDrawIsTheDraft) {
  const auto& m = sample_model();
  const std::vector<float> hidden = test_hidden(5, 256, 8);
  Engine engine(m.model, {.backend = BackendKind::cpu});
  RunOptions o;
  o.sampling.temperature = 1.0f;
  o.sampling.top_p = 0.9f;
  o.sampling.seed = 3;
  o.sampling.position = 50;
  const RunResult r = engine.run(hidden, 5, o);
  std::vector<int32_t> draft = {r.choices[0].sampled, r.choices[1].sampled, (r.choices[2].sampled + 1) % 1600, 0};
  const VerifyResult v = engine.verify(hidden, draft, o);
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.next, r.choices[2].sampled);
}

// The rejection rule's first output token, over many positions with drafts drawn from q, is
// distributed as the target's p (Leviathan et al., Chen et al.): chi-square as above.
TEST(SampleVerify, RejectionSamplingOutputIsTheTargetDistribution) {
  const std::vector<float> x = test_logits();
  const int64_t V = int64_t(x.size());
  for (const Config& c : {configs()[0], configs()[7]}) {
    const std::vector<double> p = exact_distribution(x, c.o, nullptr);
    // A draft model that is close but wrong: the target's logits with noise, at another temperature.
    std::vector<float> q(static_cast<size_t>(V));
    std::mt19937_64 rng(11);
    std::normal_distribution<double> noise(0.0, 0.7);
    double qs = 0;
    for (int64_t i = 0; i < V; ++i) qs += (q[size_t(i)] = float(std::exp((x[size_t(i)] + noise(rng)) / 1.3)));
    for (float& v : q) v = float(v / qs);
    std::discrete_distribution<int> draft_model(q.begin(), q.end());
    std::vector<float> rows(x);
    rows.insert(rows.end(), x.begin(), x.end());  // the bonus row
    Tally t;
    t.counts.assign(size_t(V), 0);
    t.n = 60000;
    int64_t accepted = 0;
    for (int64_t pos = 0; pos < t.n; ++pos) {
      SamplingOptions o = c.o;
      o.position = pos * 2;
      const int32_t d = draft_model(rng);
      const sample::Verdict v = sample::verify(rows.data(), V, std::span<const int32_t>(&d, 1), o, q);
      accepted += v.accepted;
      ++t.counts[size_t(v.target[0])];
    }
    std::printf("[ info ] rejection sampling (%s): %.1f %% of the drafts accepted\n", c.name,
                100.0 * double(accepted) / double(t.n));
    expect_distribution(t, p, "rejection sampling output");
  }
}

TEST(SampleVerify, BadDraftsAreRefusedByName) {
  const std::vector<float> x = test_logits();
  std::vector<float> rows(x);
  rows.insert(rows.end(), x.begin(), x.end());
  SamplingOptions o;
  o.temperature = 1;
  const int32_t bad = 1300;
  EXPECT_THROW(sample::verify(rows.data(), 1300, std::span<const int32_t>(&bad, 1), o, {}), Error);
  const int32_t good = 3;
  std::vector<float> q(1300, 1.0f / 1300);
  q[7] = -0.5f;
  try {
    sample::verify(rows.data(), 1300, std::span<const int32_t>(&good, 1), o, q);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 7"), std::string::npos) << e.what();
  }
  q.resize(12);
  EXPECT_THROW(sample::verify(rows.data(), 1300, std::span<const int32_t>(&good, 1), o, q), Error);
}

// ---- the tool ------------------------------------------------------------------------------------

TEST(SampleCli, RunAndVerifyJson) {
  const auto& m = sample_model();
  const std::string model = m.model->path();
  TempDir dir;
  const std::vector<float> hidden = test_hidden(4, 256, 12);
  io::write_npy_f32(dir.file("h.npy"), {4, 256}, hidden.data());
  const std::string base = cli() + " run " + model + " --hidden " + dir.file("h.npy") + " --json";
  const auto plain = nlohmann::json::parse(run_command(base, false).output);
  for (const auto& t : plain["tokens"]) EXPECT_EQ(t["sampled"], t["argmax"]);

  const CommandResult r = run_command(base + " --temperature 0.9 --top-p 0.9 --min-p 0.01 --sample-top-k 100 "
                                             "--logit-bias 5=1.5,77=-2 --seed 8 --position 30", false);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  Engine engine(m.model, {.backend = BackendKind::cpu});
  RunOptions o;
  o.sampling.temperature = 0.9f;
  o.sampling.top_p = 0.9f;
  o.sampling.min_p = 0.01f;
  o.sampling.top_k = 100;
  o.sampling.logit_bias = {{5, 1.5f}, {77, -2.0f}};
  o.sampling.seed = 8;
  o.sampling.position = 30;
  const RunResult api = engine.run(hidden, 4, o);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(j["tokens"][t]["sampled"], api.choices[size_t(t)].sampled);
    EXPECT_EQ(j["tokens"][t]["position"], 30 + t);
  }

  std::vector<int32_t> draft = {plain["tokens"][0]["argmax"], plain["tokens"][1]["argmax"], 0};
  if (draft[2] == plain["tokens"][2]["argmax"]) draft[2] = 1;
  const std::string drafts = std::to_string(draft[0]) + "," + std::to_string(draft[1]) + "," + std::to_string(draft[2]);
  const CommandResult v = run_command(cli() + " verify " + model + " --hidden " + dir.file("h.npy") + " --draft " + drafts +
                                      " --json", false);
  ASSERT_EQ(v.status, 0) << v.output;
  const auto vj = nlohmann::json::parse(v.output);
  EXPECT_EQ(vj["accepted"], 2);
  EXPECT_EQ(vj["next"], plain["tokens"][2]["argmax"]);

  std::vector<float> q(3 * 1600, 1.0f / 1600);
  io::write_npy_f32(dir.file("q.npy"), {3, 1600}, q.data());
  const std::string verify_q = cli() + " verify " + model + " --hidden " + dir.file("h.npy") + " --draft " + drafts +
                               " --draft-probs " + dir.file("q.npy") + " --temperature 1 --seed 2 --json";
  const CommandResult vq = run_command(verify_q, false);
  ASSERT_EQ(vq.status, 0) << vq.output;
  const auto vqj = nlohmann::json::parse(vq.output);
  const VerifyResult api_v = engine.verify(hidden, draft, [] { RunOptions r; r.sampling.temperature = 1; r.sampling.seed = 2; return r; }(), q);
  EXPECT_EQ(vqj["accepted"], api_v.accepted);
  EXPECT_EQ(vqj["next"], api_v.next);
}

TEST(SampleCli, BadSamplingInputIsRefusedByName) {
  const auto& m = sample_model();
  const std::string model = m.model->path();
  TempDir dir;
  const std::vector<float> hidden = test_hidden(2, 256, 12);
  io::write_npy_f32(dir.file("h.npy"), {2, 256}, hidden.data());
  std::vector<uint8_t> mask(4 * 10, 0xff);  // 10 words; 1,600 ids need 50
  write_bytes(dir.file("mask.bin"), mask);
  std::vector<float> q(5, 0.2f);
  io::write_npy_f32(dir.file("q.npy"), {5}, q.data());
  const std::string run = " run " + model + " --hidden " + dir.file("h.npy");
  const std::string verify = " verify " + model + " --hidden " + dir.file("h.npy");
  struct Case { std::string args, mention; };
  const Case cases[] = {
      {run + " --temperature -1", "temperature"},
      {run + " --top-p 1.5", "top-p must be in (0, 1]"},
      {run + " --top-p 0", "top-p must be in (0, 1]"},
      {run + " --min-p 2", "min-p"},
      {run + " --logit-bias 99999=1", "logit bias id 99999 is outside the vocabulary"},
      {run + " --logit-bias 5:1", "--logit-bias takes ID=VALUE"},
      {run + " --allowed-mask " + dir.file("mask.bin"), "allowed-token mask has 10 32-bit words"},
      {run + " --allowed-mask " + dir.file("absent.bin"), "absent.bin"},
      {verify + " --draft 1,2", "2 draft tokens need 3"},
      {verify + " --draft 1600", "outside the vocabulary"},
      {verify + " --draft x", "--draft takes token ids"},
      {verify + " --draft 4 --draft-probs " + dir.file("q.npy"), "expected [1, 1600]"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run_command(cli() + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_LT(r.status, 128) << "crashed: " << c.args;
    EXPECT_NE(r.output.find(c.mention), std::string::npos) << c.args << " -> " << r.output;
  }
}

// ---- CUDA: the same tokens as the CPU (run on a GPU machine) -------------------------------------

TEST(SampleEngine, CudaDrawsTheCpuTokens) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const auto& m = sample_model();
  const int T = 9;
  const std::vector<float> hidden = test_hidden(T, 256, 17);
  const int64_t V = m.model->config().vocab;
  for (const SamplingOptions& s : engine_configs(V, T)) {
    const std::vector<int32_t> ref = sampled_tokens(m.model, {.backend = BackendKind::cpu}, hidden, T, s, T);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cuda}, hidden, T, s, T), ref);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cuda}, hidden, T, s, 2), ref);
    EXPECT_EQ(sampled_tokens(m.model, {.backend = BackendKind::cuda, .shards = 3}, hidden, T, s, T), ref);
  }
}

}  // namespace
