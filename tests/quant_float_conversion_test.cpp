// blocks.hpp's portable f16 / bf16 conversions against outside references: the F16C instructions
// (what llama.cpp's x86 build converts with) for binary16, and an exact nearest-even computation
// in double for bfloat16.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "quant/blocks.hpp"

namespace lmhead::quant {
namespace {

bool have_f16c() { return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"); }

// Counts inputs in [first, last] (f32 bit patterns, stepping by 8) where f32_to_f16 differs from
// vcvtps2ph; prints the first few.
__attribute__((target("avx,f16c"))) uint64_t f32_to_f16_mismatches(uint64_t first, uint64_t last) {
  uint64_t bad = 0;
  for (uint64_t base = first; base <= last; base += 8) {
    alignas(32) uint32_t in[8];
    for (int k = 0; k < 8; ++k) in[k] = uint32_t(base + uint64_t(k));
    alignas(16) uint16_t ref[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(ref),
                    _mm256_cvtps_ph(_mm256_load_ps(reinterpret_cast<const float*>(in)), _MM_FROUND_TO_NEAREST_INT));
    for (int k = 0; k < 8; ++k) {
      const uint16_t ours = f32_to_f16(bits_f32(in[k]));
      if (ours != ref[k] && ++bad <= 3)
        ADD_FAILURE() << std::hex << "f32 0x" << in[k] << ": ours 0x" << ours << ", F16C 0x" << ref[k];
    }
  }
  return bad;
}

__attribute__((target("avx,f16c"))) float f16c_to_f32(uint16_t h) { return _cvtsh_ss(h); }

TEST(FloatConversion, F16ToF32MatchesF16cOnAllHalves) {
  if (!have_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(f32_bits(f16_to_f32(uint16_t(h))), f32_bits(f16c_to_f32(uint16_t(h)))) << std::hex << "half 0x" << h;
}

// Every f32 whose binary16 result is neither zero nor infinite (magnitudes 2^-25 .. 65520, both
// signs: 0.69e9 inputs), plus every 4,099th pattern elsewhere and the neighbourhoods of the
// boundaries. LMHEAD_EXHAUSTIVE=1 runs all 2^32 inputs instead (about 10 s).
TEST(FloatConversion, F32ToF16MatchesF16c) {
  if (!have_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  const char* exhaustive = std::getenv("LMHEAD_EXHAUSTIVE");
  if (exhaustive != nullptr && std::string(exhaustive) == "1") {
    EXPECT_EQ(f32_to_f16_mismatches(0, 0xFFFFFFFFull - 7), 0u);
    std::printf("[ quant    ] f32_to_f16 equals F16C on all 2^32 inputs\n");
    return;
  }
  uint64_t checked = 0, bad = 0;
  for (uint64_t sign : {0ull, 0x80000000ull}) {
    const uint64_t lo = sign | 0x32FFFFF8ull, hi = sign | 0x47800008ull;  // just below 2^-25 .. just above 65536
    bad += f32_to_f16_mismatches(lo, hi);
    checked += hi - lo + 8;
  }
  for (uint64_t base = 0; base + 8 <= 0x100000000ull; base += 4099ull * 8) {
    bad += f32_to_f16_mismatches(base, base);
    checked += 8;
  }
  for (uint64_t edge : {0x00000000ull, 0x007FFFF8ull, 0x7F7FFFF8ull, 0x7F800000ull, 0x7FC00000ull, 0x7FFFFFF8ull,
                        0x80000000ull, 0xFF800000ull, 0xFFFFFFF8ull}) {
    bad += f32_to_f16_mismatches(edge, edge);
    checked += 8;
  }
  EXPECT_EQ(bad, 0u);
  std::printf("[ quant    ] f32_to_f16 vs F16C: %llu inputs, %llu differ\n", (unsigned long long)checked,
              (unsigned long long)bad);
}

// bfloat16 nearest-even from first principles: the two neighbours by truncation, the nearer one
// in exact (double) arithmetic, the even one on a tie. Inf and NaN are handled as ggml does.
uint16_t bf16_oracle(uint32_t x) {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40);
  const uint32_t down = x & 0xFFFF0000u;
  if (down == x) return uint16_t(x >> 16);
  const uint32_t up = down + 0x10000u;  // next magnitude; 0x7F7F.. + 1 step is inf, as it must be
  const double v = std::fabs(double(bits_f32(x)));
  const double dv = std::fabs(double(bits_f32(down)));
  const double uv = (up & 0x7FFFFFFFu) == 0x7F800000u ? std::ldexp(1.0, 128) : std::fabs(double(bits_f32(up)));
  const double below = v - dv, above = uv - v;
  if (below < above) return uint16_t(down >> 16);
  if (above < below) return uint16_t(up >> 16);
  return ((down >> 16) & 1) ? uint16_t(up >> 16) : uint16_t(down >> 16);
}

TEST(FloatConversion, Bf16RoundsToNearestEven) {
  // All 65,536 low halves under 1,040 upper halves: every 64th, plus zero, subnormal, the largest
  // finite, inf and NaN neighbourhoods of both signs.
  std::vector<uint32_t> uppers;
  for (uint32_t u = 0; u < 65536; u += 64) uppers.push_back(u);
  for (uint32_t u : {0x0000u, 0x0001u, 0x007Fu, 0x0080u, 0x7F7Fu, 0x7F80u, 0x7FC0u, 0x7FFFu}) {
    uppers.push_back(u);
    uppers.push_back(u | 0x8000u);
  }
  uint64_t bad = 0;
  for (uint32_t upper : uppers)
    for (uint32_t low = 0; low < 65536; ++low) {
      const uint32_t x = upper << 16 | low;
      if (f32_to_bf16(bits_f32(x)) != bf16_oracle(x) && ++bad <= 3)
        ADD_FAILURE() << std::hex << "f32 0x" << x << ": ours 0x" << f32_to_bf16(bits_f32(x)) << ", oracle 0x"
                      << bf16_oracle(x);
    }
  EXPECT_EQ(bad, 0u);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    ASSERT_EQ(f32_bits(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
    }
  }
}

}  // namespace
}  // namespace lmhead::quant
