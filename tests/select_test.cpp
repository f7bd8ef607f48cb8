// Token choice (numerics.md §8): lowest index wins ties, top-k order, and summaries that merge to
// the same result however the vocabulary is split.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "select/token_summary.hpp"

namespace {

using namespace lmhead;
using select::TokenSummary;

TokenSummary whole(const std::vector<float>& v, int k) {
  TokenSummary s;
  select::summarize(v.data(), 0, int64_t(v.size()), k, s);
  return s;
}

TEST(Select, LowestIndexWinsATie) {
  std::vector<float> v = {1, 20, 3, 20, 20, -4};
  const TokenSummary s = whole(v, 3);
  EXPECT_EQ(s.argmax, 1);
  EXPECT_EQ(s.tie_count, 3);
  EXPECT_EQ(s.tied_ids, (std::vector<int32_t>{1, 3, 4}));
  ASSERT_EQ(s.top.size(), 3u);
  EXPECT_EQ(s.top[0].id, 1);
  EXPECT_EQ(s.top[1].id, 3);
  EXPECT_EQ(s.top[2].id, 4);
}

TEST(Select, TopKIsValueDescendingThenIdAscending) {
  std::vector<float> v = {0.5f, 2, 2, 7, -1, 7, 3};
  const TokenSummary s = whole(v, 5);
  std::vector<int32_t> ids;
  for (auto& c : s.top) ids.push_back(c.id);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 5, 6, 1, 2}));
}

TEST(Select, NaNNeverBeatsANumber) {
  std::vector<float> v = {NAN, -3, NAN, -1};
  const TokenSummary s = whole(v, 2);
  EXPECT_EQ(s.argmax, 3);
  EXPECT_EQ(s.max, -1);
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[1].id, 1);
}

// Any split into contiguous ranges, merged in any order, gives the whole-range summary; ties and
// sum_exp included (chunk-aligned splits for sum_exp).
TEST(Select, MergeIsIndependentOfTheSplit) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 40);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + int(rng() % 20000);
    std::vector<float> v(n);
    for (float& x : v) x = float(level(rng)) * 0.5f;  // few distinct values: many ties
    const int k = int(rng() % 9);
    const TokenSummary ref = whole(v, k);
    const int parts = 1 + int(rng() % 7);
    std::vector<int64_t> cuts = {0, n};
    for (int p = 1; p < parts; ++p) cuts.push_back(int64_t(rng() % n));
    std::sort(cuts.begin(), cuts.end());
    std::vector<TokenSummary> pieces(cuts.size() - 1);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) select::summarize(v.data(), cuts[i], cuts[i + 1], k, pieces[i]);
    TokenSummary merged;
    for (size_t i = pieces.size(); i-- > 0;) select::merge(merged, pieces[i], k);  // reverse order on purpose
    EXPECT_EQ(merged.argmax, ref.argmax);
    EXPECT_EQ(merged.max, ref.max);
    EXPECT_EQ(merged.tie_count, ref.tie_count);
    EXPECT_EQ(merged.tied_ids, ref.tied_ids);
    ASSERT_EQ(merged.top.size(), ref.top.size());
    for (size_t i = 0; i < ref.top.size(); ++i) {
      EXPECT_EQ(merged.top[i].id, ref.top[i].id);
      EXPECT_EQ(merged.top[i].logit, ref.top[i].logit);
    }
  }
}

TEST(Select, SumExpIsChunkOrdered) {
  std::vector<float> v(3 * select::kSumExpChunk + 123);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0, 4);
  for (float& x : v) x = g(rng);
  const float m = whole(v, 0).max;
  double by_chunks = 0;
  for (int64_t b = 0; b < int64_t(v.size()); b += select::kSumExpChunk)
    by_chunks += select::sum_exp_chunk(v.data(), b, std::min<int64_t>(v.size(), b + select::kSumExpChunk), m);
  EXPECT_EQ(select::sum_exp(v.data(), int64_t(v.size()), m), by_chunks);
  // log_softmax sanity against a direct double computation.
  double direct = 0;
  for (float x : v) direct += std::exp(double(x) - m);
  EXPECT_NEAR(select::logprob(m, m, by_chunks), -std::log(direct), 1e-6);
}

}  // namespace
