// Vocabulary-parallel heads: any number of shards gives the bytes of one (argmax, ties, top-k,
// logprobs, logits, every stage), ties across shard boundaries included.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/sharding.hpp"
#include "lmhead/lmhead.hpp"
#include "sample/sampler.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

TEST(Sharding, PlanIsContiguousAlignedAndBalanced) {
  const auto b = plan_shards(202048, 3);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), 202048);
  for (size_t i = 1; i + 1 < b.size(); ++i) EXPECT_EQ(b[i] % select::kSumExpChunk, 0);
  for (size_t i = 0; i + 1 < b.size(); ++i)
    EXPECT_NEAR(double(b[i + 1] - b[i]), 202048.0 / 3, double(select::kSumExpChunk));
  // Two GPUs wait for the larger shard: at the Muse shape it is within 0.25 % of half the rows.
  const auto two = plan_shards(202048, 2);
  EXPECT_LE(double(std::max(two[1], two[2] - two[1])), 202048.0 / 2 * 1.0025);
  EXPECT_THROW(plan_shards(2 * select::kSumExpChunk, 3), Error);
  EXPECT_EQ(plan_shards(10, 3, 1), (std::vector<int64_t>{0, 3, 6, 10}));
}

void expect_same(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.choices.size(), b.choices.size());
  for (size_t t = 0; t < a.choices.size(); ++t) {
    const TokenChoice &x = a.choices[t], &y = b.choices[t];
    EXPECT_EQ(x.argmax, y.argmax) << what;
    EXPECT_EQ(bits_of(x.value), bits_of(y.value)) << what;
    EXPECT_EQ(bits_of(x.logprob), bits_of(y.logprob)) << what;
    EXPECT_EQ(x.tie_count, y.tie_count) << what;
    EXPECT_EQ(x.tied_ids, y.tied_ids) << what;
    ASSERT_EQ(x.top.size(), y.top.size()) << what;
    for (size_t i = 0; i < x.top.size(); ++i) {
      EXPECT_EQ(x.top[i].id, y.top[i].id) << what;
      EXPECT_EQ(bits_of(x.top[i].logprob), bits_of(y.top[i].logprob)) << what;
    }
  }
  EXPECT_TRUE(same_bytes(a.logits, b.logits)) << what;
  EXPECT_TRUE(same_bytes(a.stages.raw, b.stages.raw)) << what;
  EXPECT_TRUE(same_bytes(a.stages.capped, b.stages.capped)) << what;
  EXPECT_TRUE(same_bytes(a.stages.normed, b.stages.normed)) << what;
}

TEST(Sharding, AnyShardCountGivesTheSameBytes) {
  TempDir dir;
  const std::string m = dir.file("m.gguf");
  ASSERT_EQ(run_command(cli() + " make " + m + " --vocab 20011 --hidden 512 --quiet").status, 0);
  auto model = Model::open(m);
  std::vector<float> hidden(4 * 512);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(int(i * 37 % 101) - 50) / 7.0f;
  for (BackendKind kind : {BackendKind::scalar, BackendKind::cpu}) {
    Engine one(model, {.backend = kind, .threads = 2});
    const RunOptions opts{.top_k = 7, .logprobs = true, .want_logits = true, .want_stages = true};
    const RunResult ref = one.run(hidden, 4, opts);
    for (int shards : {2, 3, 4}) {
      Engine split(model, {.backend = kind, .threads = 2, .shards = shards});
      expect_same(split.run(hidden, 4, opts), ref, std::string(to_string(kind)) + " x" + std::to_string(shards));
    }
  }
}

// The golden three-way tie (ids 0, 7, 14) split over shards of 5 rows: each shard holds one of the
// tied ids, and the merge must still pick id 0 and count three.
TEST(Sharding, TiesAcrossShardBoundaries) {
  auto model = Model::open(data_path("tail-q5k-v4099-h512.gguf"));
  auto vectors = gguf::File::open(data_path("tail-q5k-v4099-h512.vectors.gguf"));
  const std::vector<float> hidden = golden_f32(*vectors, "hidden");
  const HeadView head = head_view(*model);
  auto split = make_sharded_backend(head, 3, [](const HeadView& h, int) { return make_scalar_backend(h); }, 5);
  // 820 shards of 5 rows put ids 0, 7 and 14 in three different shards; 3 shards of whole 5-row
  // units keep them in one. Both must report the same tie.
  auto fine = make_sharded_backend(head, 820, [](const HeadView& h, int) { return make_scalar_backend(h); }, 5);
  ForwardRequest req;
  req.top_k = 4;
  ForwardOutput a, b;
  fine->forward(hidden.data(), 3, req, a);
  split->forward(hidden.data(), 3, req, b);
  for (const ForwardOutput* o : {&a, &b}) {
    EXPECT_EQ(o->summaries[0].argmax, 0);
    EXPECT_EQ(o->summaries[0].tie_count, 3);
    EXPECT_EQ(o->summaries[0].tied_ids, (std::vector<int32_t>{0, 7, 14}));
  }
}

// Sampling inside the sharded backend: each shard keeps its logits, the tokens are the host
// sampler's on the whole row, and no [T, V] array comes back unless asked for.
TEST(Sharding, SamplingKeepsEachShardsLogits) {
  auto model = Model::open(data_path("tail-q5k-v4099-h512.gguf"));
  auto vectors = gguf::File::open(data_path("tail-q5k-v4099-h512.vectors.gguf"));
  const std::vector<float> hidden = golden_f32(*vectors, "hidden");
  const HeadView head = head_view(*model);
  const int64_t V = head.vocab;
  const int T = 3;
  auto one = make_scalar_backend(head);
  ForwardRequest plain;
  plain.want_logits = true;
  ForwardOutput whole;
  one->forward(hidden.data(), T, plain, whole);

  SamplingOptions o;
  o.temperature = 1.5f;
  o.top_p = 0.8f;
  o.min_p = 0.01f;
  o.seed = 9;
  o.logit_bias = {{1, 3.0f}, {int32_t(V - 1), 2.0f}};
  const size_t words = size_t((V + 31) / 32);
  std::vector<uint32_t> masks(words * T, 0xffffffffu);
  for (int t = 0; t < T; ++t) masks[size_t(t) * words + size_t(t)] = 0x00ff00ffu;  // per-token rows
  for (int shards : {2, 5}) {
    auto split = make_sharded_backend(head, shards, [](const HeadView& h, int) { return make_scalar_backend(h); }, 64);
    ASSERT_TRUE(split->samples(o));
    ForwardRequest req;
    req.sampling = &o;
    req.sample_position = 40;
    req.sample_mask = masks.data();
    req.sample_mask_stride = words;
    ForwardOutput out;
    split->forward(hidden.data(), T, req, out);
    EXPECT_TRUE(out.logits.empty()) << shards << " shards returned logits nobody asked for";
    ASSERT_EQ(out.sampled.size(), size_t(T));
    for (int t = 0; t < T; ++t)
      EXPECT_EQ(out.sampled[size_t(t)], sample::sample_token(whole.logits.data() + size_t(t) * size_t(V), V, o,
                                                             masks.data() + size_t(t) * words, 40 + t))
          << shards << " shards, token " << t;
  }
}

}  // namespace
