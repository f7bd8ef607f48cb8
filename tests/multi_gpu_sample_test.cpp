// Sampling on the multi-GPU cuda head (issue 16, numerics.md §9): each shard runs its half of the
// rounds on its GPU and only sums, one boundary bucket's ids and the drawn chunk's 512 logits
// reach the host. The token must be the one-GPU backend's and the host sampler's (scalar backend)
// for every shard count, option, token count and position; several shards share one GPU here, which
// runs the same code as one shard per GPU. Skips with a visible message without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "hardening_util.hpp"
#include "lmhead/lmhead.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

#define SKIP_WITHOUT_GPU()                                                   \
  do {                                                                       \
    std::string why_;                                                        \
    if (!cuda_available(&why_)) GTEST_SKIP() << "no usable GPU: " << why_;   \
  } while (0)

bool has_time(const RunResult& r, const std::string& label) {
  for (const StageTime& st : r.times)
    if (st.label == label) return true;
  return false;
}

std::vector<int32_t> sampled(const RunResult& r) {
  std::vector<int32_t> v;
  for (const TokenChoice& c : r.choices) v.push_back(c.sampled);
  return v;
}

// The reference engines (host sampler on the scalar backend, the one-GPU backend) and the split ones.
struct Engines {
  Engines(const std::shared_ptr<const Model>& model, const std::vector<int>& shards)
      : scalar(model, {.backend = BackendKind::scalar}), one(model, {.backend = BackendKind::cuda}) {
    for (int s : shards) split.push_back(std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cuda, .shards = s}));
  }

  // Runs `o` on every engine and expects the scalar backend's tokens; `on_shards` says whether the
  // split engines should have sampled with the rounds (no logits gathered) or left it to the engine.
  void expect_same_tokens(const std::vector<float>& hidden, int T, const RunOptions& o, bool on_shards,
                          const std::string& what) {
    const std::vector<int32_t> ref = sampled(scalar.run(hidden, T, o));
    EXPECT_EQ(sampled(one.run(hidden, T, o)), ref) << what << ", one GPU";
    for (auto& e : split) {
      const RunResult r = e->run(hidden, T, o);
      EXPECT_EQ(sampled(r), ref) << what << ", " << e->backend_name();
      EXPECT_EQ(has_time(r, "exchange: sampling rounds over the shards"), on_shards) << what << ", " << e->backend_name();
      if (on_shards) {
        EXPECT_FALSE(has_time(r, "gather of logits (asked for)")) << what << ": logits were gathered";
      }
    }
  }

  Engine scalar, one;
  std::vector<std::unique_ptr<Engine>> split;
};

// A Q5_K head (tensor-core kernels) of 20,011 ids: the last shard ends inside a chunk. Hidden
// states scaled from nearly flat logits (top-p keeps thousands of ids) to peaked ones.
TEST(MultiGpuSample, ShardsDrawTheOneGpuAndHostSamplersTokens) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto model = Model::open(make_checkpoint(dir, "q5_K", 20011, 512, "--seed 3"));
  Engines engines(model, {2, 5});
  for (float spread : {0.05f, 1.0f, 8.0f})
    for (int T : {1, 16}) {
      std::vector<float> hidden = test_hidden(T, 512, uint64_t(T) * 5 + 2);
      for (float& x : hidden) x *= spread;
      uint64_t seed = 1;
      for (float temperature : {0.5f, 1.0f, 2.5f})
        for (float top_p : {1.0f, 0.9f, 0.5f})
          for (float min_p : {0.0f, 0.05f})
            {
              const int64_t position = seed % 2 == 0 ? 0 : 12345;
              RunOptions o;
              o.sampling.temperature = temperature;
              o.sampling.top_p = top_p;
              o.sampling.min_p = min_p;
              o.sampling.seed = seed++;
              o.sampling.position = position;
              engines.expect_same_tokens(hidden, T, o, true,
                                 "spread " + std::to_string(spread) + " T " + std::to_string(T) + " temperature " +
                                     std::to_string(temperature) + " top-p " + std::to_string(top_p) + " min-p " +
                                     std::to_string(min_p) + " position " + std::to_string(position));
            }
    }
}

// Verification at temperature 1 reads the rows' draws: the same verdict on every engine.
TEST(MultiGpuSample, VerificationGivesTheOneGpuVerdict) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto model = Model::open(make_checkpoint(dir, "q5_K", 20011, 512, "--seed 3"));
  Engines engines(model, {3});
  Engine& one = engines.one;
  const std::vector<float> hidden = test_hidden(8, 512, 9);
  RunOptions o;
  o.sampling.temperature = 1.0f;
  o.sampling.top_p = 0.9f;
  for (int64_t position = 0; position < 20; ++position) {
    o.sampling.position = position;
    const std::vector<int32_t> draft = sampled(one.run(hidden, 8, o));  // accepted up to where a draw differs
    std::vector<int32_t> seven(draft.begin(), draft.begin() + 7);
    seven[size_t(position % 7)] = (seven[size_t(position % 7)] + 1) % 20011;
    const VerifyResult a = one.verify(hidden, seven, o), b = engines.split[0]->verify(hidden, seven, o);
    EXPECT_EQ(a.accepted, b.accepted) << "position " << position;
    EXPECT_EQ(a.next, b.next) << "position " << position;
  }
}

// A tiny soft cap under a large scale: about half of the ids cap to exactly the maximum, one rank
// bucket. 80,000 ids over two shards: each orders ~20,000 tied ids' worth of candidates on the
// host; 160,000: each shard's ~40,000 exceed its candidate buffer and the token is drawn from the
// fetched logits. The same token either way.
TEST(MultiGpuSample, TiesAtTheTopPBoundary) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  for (int64_t V : {int64_t(80000), int64_t(160000)}) {
    const auto model = Model::open(make_checkpoint(dir, "q8_0", V, 256, "--seed 4 --logit-scale 1000 --softcap 1"));
    Engines engines(model, {2});
    const std::vector<float> hidden = test_hidden(2, 256, 11);
    for (float top_p : {0.3f, 0.999f})
      for (int64_t position = 0; position < 6; ++position) {
        RunOptions o;
        o.sampling.temperature = 1.0f;
        o.sampling.top_p = top_p;
        o.sampling.seed = 5;
        o.sampling.position = position;
        engines.expect_same_tokens(hidden, 2, o, true,
                           "V " + std::to_string(V) + " top-p " + std::to_string(top_p));
      }
  }
}

// A bias and masks (one for every token, or one per token) run on the shards too: each shard's max
// kernel first, then the rounds with its slice of the bias and of the mask rows.
TEST(MultiGpuSample, BiasAndMasksRunOnTheShards) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  constexpr int64_t V = 20011;
  const auto model = Model::open(make_checkpoint(dir, "q5_K", V, 512, "--seed 3"));
  Engines engines(model, {2, 3});
  const int T = 3;
  const size_t words = size_t((V + 31) / 32);
  const std::vector<float> hidden = test_hidden(T, 512, 4);
  RunOptions bias;
  bias.sampling.temperature = 1.0f;
  bias.sampling.logit_bias = {{7, 5.0f}, {10300, 8.0f}, {20000, 3.0f}, {12, -50.0f}};
  RunOptions mask;
  mask.sampling.temperature = 0.7f;
  mask.sampling.top_p = 0.9f;
  mask.sampling.allowed.assign(words, 0x33333333u);
  RunOptions per_token = mask;  // token t allows a different quarter of the ids, plus id 19999
  per_token.sampling.allowed.assign(size_t(T) * words, 0u);
  for (int t = 0; t < T; ++t) {
    for (size_t w = 0; w < words; ++w) per_token.sampling.allowed[size_t(t) * words + w] = 0x11111111u << t;
    per_token.sampling.allowed[size_t(t) * words + 19999 / 32] |= 1u << (19999 % 32);
  }
  RunOptions both = per_token;
  both.sampling.logit_bias = {{19999, 4.0f}, {1, 2.0f}};
  both.sampling.min_p = 0.02f;
  const std::vector<std::pair<const RunOptions*, std::string>> cases = {
      {&bias, "bias"}, {&mask, "mask"}, {&per_token, "mask per token"}, {&both, "bias + masks + top-p + min-p"}};
  for (const auto& [o, name] : cases)
    for (int64_t position : {int64_t(0), int64_t(77), int64_t(5000)}) {
      RunOptions p = *o;
      p.sampling.position = position;
      p.sampling.seed = uint64_t(position) + 3;
      engines.expect_same_tokens(hidden, T, p, true, name + " at " + std::to_string(position));
    }
}

// Top-k, and greedy with a bias, are not the shards' (nor the one-GPU backend's): the engine
// samples from the gathered logits, still the same token. A mask that allows nothing is an error.
TEST(MultiGpuSample, TopKAndGreedyWithABiasGoToTheEngine) {
  SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto model = Model::open(make_checkpoint(dir, "q5_K", 20011, 512, "--seed 3"));
  Engines engines(model, {3});
  const std::vector<float> hidden = test_hidden(3, 512, 4);
  RunOptions k;
  k.sampling.temperature = 1.0f;
  k.sampling.top_k = 40;
  RunOptions greedy;
  greedy.sampling.logit_bias = {{7, 50.0f}};
  for (const RunOptions* o : {&k, &greedy})
    for (int64_t position : {int64_t(0), int64_t(77)}) {
      RunOptions p = *o;
      p.sampling.position = position;
      engines.expect_same_tokens(hidden, 3, p, false, "gathered options");
    }
  RunOptions none;
  none.sampling.temperature = 1.0f;
  none.sampling.allowed.assign((20011 + 31) / 32, 0u);
  try {
    engines.split[0]->run(hidden, 3, none);
    ADD_FAILURE() << "a mask that allows nothing was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no token can be sampled"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engines.split[0]->run(hidden, 3, k).choices.size(), 3u);  // the engine is whole afterwards
}

}  // namespace
