// The portable tanh (numerics.md §7b) must be the C library's tanhf, bit for bit, on every float.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "ops/tanh.hpp"

namespace {

using lmhead::ops::portable_tanhf;
using lmhead::quant::bits_f32;
using lmhead::quant::f32_bits;

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;  // NaN payloads are not part of the contract
  return f32_bits(a) == f32_bits(b);
}

TEST(PortableTanh, SpecialValues) {
  const float inf = INFINITY;
  EXPECT_EQ(portable_tanhf(inf), 1.0f);
  EXPECT_EQ(portable_tanhf(-inf), -1.0f);
  EXPECT_TRUE(std::isnan(portable_tanhf(NAN)));
  EXPECT_EQ(f32_bits(portable_tanhf(-0.0f)), f32_bits(-0.0f));
  EXPECT_EQ(f32_bits(portable_tanhf(0.0f)), 0u);
  EXPECT_EQ(portable_tanhf(22.0f), 1.0f);
  EXPECT_EQ(portable_tanhf(-100.0f), -1.0f);
}

// Every float, compared with the C library this machine links (glibc; the golden bytes came from
// glibc 2.36's tanhf). LMHEAD_TANH_STRIDE=k checks every k-th bit pattern instead (sanitizer runs).
TEST(PortableTanh, EqualsCLibraryTanhfOnEveryFloat) {
  uint64_t stride = 1;
  if (const char* s = std::getenv("LMHEAD_TANH_STRIDE")) stride = std::max<uint64_t>(1, std::strtoull(s, nullptr, 10));
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<uint64_t> mismatches{0}, checked{0};
  std::atomic<uint32_t> first_bad{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      uint64_t bad = 0, n = 0;
      for (uint64_t u = uint64_t(w) * stride; u <= 0xFFFFFFFFull; u += uint64_t(workers) * stride) {
        const float x = bits_f32(uint32_t(u));
        ++n;
        if (!same_bits(portable_tanhf(x), ::tanhf(x))) {
          if (bad++ == 0) first_bad = uint32_t(u);
        }
      }
      mismatches += bad;
      checked += n;
    });
  }
  for (auto& t : pool) t.join();
  std::printf("[ info ] portable tanh vs C library tanhf: %llu floats checked (stride %llu), %llu differ\n",
              (unsigned long long)checked.load(), (unsigned long long)stride, (unsigned long long)mismatches.load());
  EXPECT_EQ(mismatches.load(), 0u) << "first differing input bits 0x" << std::hex << first_bad.load();
}

}  // namespace
