// Route tiled: llama.cpp's tiled K-quant order (one float chain per output, the integers of each
// super-block exact) at every token count, for Q4_K, Q5_K and Q6_K heads; other head types keep
// vec_dot's order. What must hold:
// - batch invariance: a token's logits are the same bytes whether it runs alone or with 1 to 20
//   others, on every backend (scalar, cpu, cpu in shards, cuda, cuda in shards);
// - every backend gives the scalar backend's bytes, and those are quant::llamacpp_dot's tiled dots;
// - where llama.cpp takes the tiled path itself (Q5_K, Q6_K from 8 tokens) the route says so and
//   equals route llamacpp byte for byte (the public sets against llama.cpp's own bytes:
//   llamacpp_golden_test.cpp);
// - a head type without a tiled order gives route vec_dot's bytes; f32 activations are refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "ops/rmsnorm.hpp"
#include "quant/llamacpp_route.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

std::vector<float> hidden_states(int tokens, int64_t H, uint64_t seed) {
  return varied_hidden_states(tokens, H, seed, 7, 7);
}

// Not gtest's skip marker: ctest would report the whole test as skipped, hiding the CPU half.
void note_no_gpu(const std::string& why) { std::printf("[ no GPU   ] the cuda half of this test did not run: %s\n", why.c_str()); }

std::vector<float> token_row(const std::vector<float>& all, int t, int64_t V) {
  return std::vector<float>(all.begin() + t * V, all.begin() + (t + 1) * V);
}

class TiledRoute : public ::testing::TestWithParam<const char*> {};

TEST_P(TiledRoute, BatchInvariantAndTheSameBytesOnEveryBackend) {
  const std::string type = GetParam();
  TempDir dir;
  const std::string m = dir.file("h.gguf");
  // 1,544 rows x 4 super-blocks, odd enough that shards end off the 16-row tiles.
  const CommandResult made = run_command(cli() + " make " + m + " --vocab 1544 --hidden 1024 --type " + type + " --seed 11");
  ASSERT_EQ(made.status, 0) << made.output;
  auto model = Model::open(m);
  const HeadConfig& c = model->config();
  const bool kquant = c.head_type == TensorType::Q4_K || c.head_type == TensorType::Q5_K || c.head_type == TensorType::Q6_K;
  std::vector<std::pair<std::string, std::unique_ptr<Engine>>> engines;
  engines.emplace_back("cpu", std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cpu, .threads = 2}));
  engines.emplace_back("cpu, 3 shards",
                       std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cpu, .threads = 2, .shards = 3}));
  std::string why;
  if (cuda_available(&why)) {
    engines.emplace_back("cuda", std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cuda}));
    engines.emplace_back("cuda, 3 shards",
                         std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cuda, .shards = 3}));
    // Q5_K with both stream layouts: the tiled order from the lanes layout (K = one sub-block).
    EngineOptions both{.backend = BackendKind::cuda};
    both.cuda_second_layout = true;
    engines.emplace_back("cuda, both layouts", std::make_unique<Engine>(model, both));
  } else {
    note_no_gpu(why);
  }
  Engine scalar(model, {.backend = BackendKind::scalar});

  const int kMax = 21;
  const std::vector<float> h = hidden_states(kMax, c.hidden, 3);
  RunOptions tiled;
  tiled.route = Route::tiled;
  tiled.want_logits = true;
  tiled.want_stages = true;
  // Each token alone: the reference bytes, recomputed from the tiled dots for the K-quant heads.
  std::vector<std::vector<float>> alone(kMax);
  for (int t = 0; t < kMax; ++t) {
    const std::vector<float> one(h.begin() + t * c.hidden, h.begin() + (t + 1) * c.hidden);
    const RunResult r = scalar.run(one, 1, tiled);
    alone[size_t(t)] = r.logits;
    if (kquant && t < 3) {
      std::vector<float> normed(c.hidden);
      ops::rmsnorm(one.data(), model->norm_weight(), c.hidden, c.eps, normed.data());
      const auto path = quant::LlamaCppPath::tiled_kquant;
      std::vector<uint8_t> act(quant::activation_bytes(quant::llamacpp_activation_format(path, c.head_type), c.hidden));
      quant::quantize_llamacpp_activations(path, c.head_type, normed.data(), c.hidden, 0, 1, act.data());
      std::vector<float> raw(c.vocab);
      for (int64_t row = 0; row < c.vocab; ++row)
        raw[size_t(row)] = quant::llamacpp_dot(path, c.head_type, model->head_weights() + row * c.row_bytes, act.data(),
                                               c.hidden, false);
      EXPECT_TRUE(same_bytes(r.stages.raw, raw)) << type << " token " << t << ": not the tiled dots";
    }
  }
  for (int T : {1, 2, 5, 8, 13, 16, 21}) {
    const std::vector<float> hh(h.begin(), h.begin() + T * c.hidden);
    const RunResult want = scalar.run(hh, T, tiled);
    for (int t = 0; t < T; ++t)
      EXPECT_TRUE(same_bytes(token_row(want.logits, t, c.vocab), alone[size_t(t)])) << type << " T = " << T << " token " << t;
    for (auto& [name, engine] : engines)
      EXPECT_TRUE(same_bytes(engine->run(hh, T, tiled).logits, want.logits)) << type << " T = " << T << ", " << name;

    RunOptions other = tiled;
    other.route = kquant ? Route::llamacpp : Route::vec_dot;
    const RunResult o = scalar.run(hh, T, other);
    const bool llamacpp_tiled = o.llamacpp_path == "tiled_kquant";
    if (!kquant || llamacpp_tiled) {
      // Q8_0: vec_dot's order; Q5_K, Q6_K from 8 tokens: llama.cpp's own path is this order.
      EXPECT_TRUE(same_bytes(o.logits, want.logits)) << type << " T = " << T;
    }
    if (kquant) {
      EXPECT_EQ(want.reproduces_llamacpp, llamacpp_tiled) << type << " T = " << T << " (" << o.llamacpp_path << ")";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadTypes, TiledRoute, ::testing::Values("q4_K", "q5_K", "q6_K", "q8_0"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

TEST(TiledRouteOptions, NeedsQuantizedActivationsAndParsesByName) {
  TempDir dir;
  const std::string m = dir.file("h.gguf");
  ASSERT_EQ(run_command(cli() + " make " + m + " --vocab 64 --hidden 256 --type q5_K --seed 1").status, 0);
  Engine e(Model::open(m), {.backend = BackendKind::scalar});
  RunOptions opts;
  opts.route = Route::tiled;
  opts.activations = ActivationRoute::f32;
  try {
    e.run(hidden_states(1, 256, 1), 1, opts);
    ADD_FAILURE() << "route tiled with f32 activations ran";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("route tiled"), std::string::npos) << err.what();
  }
  Route r = Route::vec_dot;
  ASSERT_TRUE(parse("tiled", r));
  EXPECT_EQ(r, Route::tiled);
  EXPECT_EQ(to_string(Route::tiled), "tiled");

  // Through the CLI: `run --route tiled --json` names the route and llama.cpp's path for the call.
  const std::string hidden = dir.file("h.npy");
  const std::vector<float> h8 = hidden_states(8, 256, 2);
  io::write_npy_f32(hidden, {8, 256}, h8.data());
  const CommandResult run =
      run_command(cli() + " run " + m + " --hidden " + hidden + " --route tiled --backend scalar --json");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("\"route\": \"tiled\""), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\"reproduced\": true"), std::string::npos) << run.output;
}

}  // namespace
