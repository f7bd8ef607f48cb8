// The AVX2 soft cap against the scalar one (ops::portable_tanhf through cap_logit), bit for bit:
// tanh alone over a strided sweep of the whole float line plus every float near each branch
// boundary of §7b, and the three epilogue routes on realistic logits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/head_math.hpp"
#include "cpu/kernels.hpp"
#include "cpu/softcap_avx2.hpp"
#include "ops/tanh.hpp"

namespace lmhead::cpu {
namespace {

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// tanh of every input through the AVX2 path (scale 1, cap 1: capped = tanh(x) exactly), compared
// with ops::portable_tanhf; returns the number of differing inputs and reports the first few.
int64_t compare_tanh(const std::vector<float>& x) {
  std::vector<float> got(x.size());
  const SoftcapArgs unit{1.0f, 1.0f, 1.0f, false};
  avx2::cap_tile(x.data(), int64_t(x.size()), unit, got.data());
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = ops::portable_tanhf(x[i]);
    if (bits(got[i]) != bits(want) && differ++ < 5)
      ADD_FAILURE() << "tanh(" << x[i] << " = 0x" << std::hex << bits(x[i]) << "): got 0x" << bits(got[i])
                    << " want 0x" << bits(want);
  }
  return differ;
}

class CpuSoftcap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_supports(Isa::avx2)) GTEST_SKIP() << "no AVX2 on this CPU: the scalar soft cap is the only one";
  }
};

TEST_F(CpuSoftcap, TanhMatchesPortableTanhOnAStridedSweep) {
  // Every 256th bit pattern of the whole line (both signs, NaNs, infinities, subnormals).
  std::vector<float> x;
  x.reserve(size_t(1) << 24);
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 256) x.push_back(from_bits(uint32_t(b + (b >> 8) % 256)));
  EXPECT_EQ(compare_tanh(x), 0);
}

TEST_F(CpuSoftcap, TanhMatchesPortableTanhAtEveryBranchBoundary) {
  // Thresholds of §7b on |x| and on the em1 argument 2|x| (as |x| = arg / 2), 4,096 floats either side.
  const uint32_t edges[] = {0x24000000u, 0x3f800000u, 0x41b00000u, 0x7f800000u,
                            0x3eb17218u - (1u << 23), 0x3F851592u - (1u << 23), 0x4195b844u - (1u << 23),
                            0x33000000u - (1u << 23), 0x3e800000u};
  std::vector<float> x;
  for (uint32_t e : edges)
    for (uint32_t d = 0; d < 8192; ++d) {
      const uint32_t b = e - 4096 + d;
      x.push_back(from_bits(b));
      x.push_back(from_bits(b | 0x80000000u));
    }
  // Where k of the reduction changes (multiples of ln2 / 2 up to |x| = 22).
  for (int k = 1; k <= 64; ++k) {
    const uint32_t b = bits(float(k) * 0.34657359f);
    for (uint32_t d = 0; d < 512; ++d) x.push_back(from_bits(b - 256 + d));
  }
  EXPECT_EQ(compare_tanh(x), 0);
}

TEST_F(CpuSoftcap, EveryRouteMatchesTheScalarEpilogue) {
  std::mt19937 rng{3};
  std::normal_distribution<float> normal(0.0f, 60.0f);
  std::vector<float> raw(10007);  // not a multiple of 8: the tail path runs too
  for (float& v : raw) v = normal(rng);
  raw[0] = 0.0f;
  raw[1] = -0.0f;
  raw[2] = 1e30f;
  raw[3] = -1e-30f;
  for (float cap : {20.0f, 30.0f, 0.0f})
    for (SoftcapRoute route : {SoftcapRoute::nodes, SoftcapRoute::fused}) {
      CapParams p;
      p.logit_scale = 0.196116f;
      p.cap = cap;
      p.inv_cap = cap != 0.0f ? 1.0f / cap : 0.0f;
      p.route = route;
      const SoftcapArgs args{p.logit_scale, p.cap, p.inv_cap, route == SoftcapRoute::fused};
      std::vector<float> got(raw.size() + 1, 123.0f);
      avx2::cap_tile(raw.data(), int64_t(raw.size()), args, got.data());
      for (size_t i = 0; i < raw.size(); ++i)
        ASSERT_EQ(bits(got[i]), bits(cap_logit(raw[i], p))) << "cap " << cap << " route " << int(route) << " at " << i;
      EXPECT_EQ(got.back(), 123.0f) << "wrote past the end";
    }
}

// All 2^32 inputs: about a minute on two cores, so it runs only when asked
// (LMHEAD_EXHAUSTIVE_TANH=1); its outcome is recorded in docs/performance.md.
TEST_F(CpuSoftcap, TanhMatchesPortableTanhOnEveryFloatWhenAsked) {
  if (std::getenv("LMHEAD_EXHAUSTIVE_TANH") == nullptr) GTEST_SKIP() << "set LMHEAD_EXHAUSTIVE_TANH=1 to run";
  const size_t chunk = size_t(1) << 24;
  std::vector<float> x(chunk);
  int64_t differ = 0;
  for (uint64_t base = 0; base < (uint64_t(1) << 32); base += chunk) {
    for (size_t i = 0; i < chunk; ++i) x[i] = from_bits(uint32_t(base + i));
    differ += compare_tanh(x);
  }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace lmhead::cpu
