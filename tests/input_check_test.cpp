// The finite check of the hidden states, alone and fused with the copy the multi-GPU head makes:
// every position of a bad value (inside a 64-value block, on its edges, in the tail) is found, the
// first one wins, and everything before it is copied.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/input_check.hpp"

namespace lmhead {
namespace {

TEST(InputCheck, FindsTheFirstBadValueAtEveryPosition) {
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(300)}) {
    std::vector<float> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = float(i) * 0.37f - 40.0f;
    src.push_back(0.0f);  // room for a misaligned view
    std::vector<float> dst(n + 1, -1.0f);
    EXPECT_EQ(first_non_finite(src.data(), n), n);
    EXPECT_EQ(copy_checking_finite(dst.data(), src.data(), n), n);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), n * 4), 0);
    for (size_t pos = 0; pos < n; ++pos) {
      std::vector<float> s = src;
      s[pos] = bad_values[pos % 3];
      if (pos + 9 < n) s[pos + 9] = bad_values[(pos + 1) % 3];  // a later bad value never wins
      std::vector<float> d(n + 1, -1.0f);
      EXPECT_EQ(first_non_finite(s.data(), n), pos) << n;
      ASSERT_EQ(copy_checking_finite(d.data(), s.data(), n), pos) << n;
      EXPECT_EQ(std::memcmp(d.data(), s.data(), pos * 4), 0) << "prefix before " << pos << " of " << n;
      // The same from a pointer that is not 16-byte aligned.
      std::vector<float> shifted(n + 1);
      std::memcpy(shifted.data() + 1, s.data(), n * 4);
      EXPECT_EQ(first_non_finite(shifted.data() + 1, n), pos) << n;
    }
  }
}

TEST(InputCheck, ErrorNamesTokenIndexAndValue) {
  std::vector<float> h(3 * 256, 1.0f);
  h[2 * 256 + 17] = -std::numeric_limits<float>::infinity();
  const std::string m = non_finite_hidden_error(h.data(), 2 * 256 + 17, 256).what();
  EXPECT_EQ(m, "hidden state of token 2 has a non-finite value (-inf) at index 17");
}

}  // namespace
}  // namespace lmhead
