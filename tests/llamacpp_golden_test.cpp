// lmhead against llama.cpp itself, end to end: tests/data/llamacpp/ holds tiny heads, the hidden
// states that entered llama.cpp's final norm and llama.cpp's logits (its README says how they were
// made, and with which llama.cpp). Every public set (Q4_K, Q5_K, Q6_K, Q8_0, F16, BF16, F32 at T = 1, 4, 8, 16):
// - route llamacpp: llama.cpp's bytes on every set, through the API (scalar, cpu, cuda) and the CLI
//   (shards and longer rows: llamacpp_route_test.cpp);
// - the default route: llama.cpp's bytes exactly where llama.cpp's path has vec_dot's order
//   (RunResult::reproduces_llamacpp), and measurably not llama.cpp's bytes elsewhere, so the docs'
//   statement of when the two agree is checked both ways.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

struct Case {
  const char* type;
  int tokens;
};

std::string stem_of(const Case& c) { return data_path("llamacpp/muse-glimmer-" + std::string(c.type) + "-s101"); }
std::string at_t(const Case& c) { return stem_of(c) + "-t" + std::to_string(c.tokens); }

struct Golden {
  std::shared_ptr<const Model> model;
  io::HiddenStates hidden, want;
};

Golden load(const Case& c) {
  Golden g;
  g.model = Model::open(stem_of(c) + ".gguf");
  g.hidden = io::read_npy_f32(at_t(c) + ".hidden.npy");
  g.want = io::read_npy_f32(at_t(c) + ".logits.npy");
  EXPECT_EQ(g.hidden.tokens, c.tokens);
  EXPECT_EQ(g.hidden.hidden, g.model->config().hidden);
  EXPECT_EQ(g.want.tokens, c.tokens);
  EXPECT_EQ(g.want.hidden, g.model->config().vocab);
  return g;
}

RunResult run(const Golden& g, int tokens, BackendKind backend, Route route) {
  Engine engine(g.model, {.backend = backend, .threads = 2});
  RunOptions opts;
  opts.route = route;
  opts.want_logits = true;
  return engine.run(g.hidden.values, tokens, opts);
}

const Case kSets[] = {{"q4_K", 1}, {"q4_K", 4}, {"q4_K", 8}, {"q4_K", 16}, {"q5_K", 1}, {"q5_K", 4}, {"q5_K", 8},
                      {"q5_K", 16}, {"q6_K", 1}, {"q6_K", 4}, {"q6_K", 8}, {"q6_K", 16}, {"q8_0", 1}, {"q8_0", 4},
                      {"q8_0", 8}, {"q8_0", 16}, {"f16", 1}, {"f16", 4}, {"f16", 8}, {"f16", 16}, {"bf16", 1},
                      {"bf16", 4}, {"bf16", 8}, {"bf16", 16}, {"f32", 1}, {"f32", 4}, {"f32", 8}, {"f32", 16}};

std::string case_name(const Case& c) { return std::string(c.type) + "_t" + std::to_string(c.tokens); }

class LlamaCppRoute : public ::testing::TestWithParam<std::tuple<Case, BackendKind>> {};

TEST_P(LlamaCppRoute, LogitsAreLlamaCppBytes) {
  const Case c = std::get<0>(GetParam());
  std::string why;
  if (std::get<1>(GetParam()) == BackendKind::cuda && !cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const Golden g = load(c);
  const RunResult r = run(g, c.tokens, std::get<1>(GetParam()), Route::llamacpp);
  EXPECT_TRUE(r.reproduces_llamacpp);
  EXPECT_TRUE(same_bytes(r.logits, g.want.values)) << c.type << " at T = " << c.tokens << " (" << r.llamacpp_path << ")";
}

INSTANTIATE_TEST_SUITE_P(EverySet, LlamaCppRoute,
                         ::testing::Combine(::testing::ValuesIn(kSets),
                                            ::testing::Values(BackendKind::scalar, BackendKind::cpu, BackendKind::cuda)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param)) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

class LlamaCppDefaultRoute : public ::testing::TestWithParam<std::tuple<Case, BackendKind>> {};

// The default route is llama.cpp's bytes where llama.cpp takes a vec_dot-ordered path, and it says
// so; where llama.cpp takes another path the default route says it does not reproduce it, and the
// bytes indeed differ on these sets.
TEST_P(LlamaCppDefaultRoute, EqualsLlamaCppExactlyWhereItSaysSo) {
  const Case c = std::get<0>(GetParam());
  std::string why;
  if (std::get<1>(GetParam()) == BackendKind::cuda && !cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const Golden g = load(c);
  const RunResult r = run(g, c.tokens, std::get<1>(GetParam()), Route::vec_dot);
  if (r.reproduces_llamacpp)
    EXPECT_TRUE(same_bytes(r.logits, g.want.values)) << c.type << " at T = " << c.tokens;
  else
    EXPECT_FALSE(same_bytes(r.logits, g.want.values)) << c.type << " at T = " << c.tokens << ": the default route "
                                                      << "equals llama.cpp's " << r.llamacpp_path << " here";
}

INSTANTIATE_TEST_SUITE_P(EverySet, LlamaCppDefaultRoute,
                         ::testing::Combine(::testing::ValuesIn(kSets),
                                            ::testing::Values(BackendKind::scalar, BackendKind::cpu, BackendKind::cuda)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param)) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

class LlamaCppTiledRoute : public ::testing::TestWithParam<std::tuple<Case, BackendKind>> {};

// Route tiled (llama.cpp's tiled K-quant order at every T) is llama.cpp's bytes where llama.cpp
// takes the tiled path (Q5_K, Q6_K from 8 tokens) and says so exactly there; a head type without a
// tiled order keeps the default route's bytes.
TEST_P(LlamaCppTiledRoute, EqualsLlamaCppWhereLlamaCppTiles) {
  const Case c = std::get<0>(GetParam());
  std::string why;
  if (std::get<1>(GetParam()) == BackendKind::cuda && !cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  const Golden g = load(c);
  const RunResult r = run(g, c.tokens, std::get<1>(GetParam()), Route::tiled);
  const std::string type = c.type;
  if (type == "q4_K" || type == "q5_K" || type == "q6_K") {
    EXPECT_EQ(r.reproduces_llamacpp, r.llamacpp_path == "tiled_kquant") << type << " at T = " << c.tokens;
    if (r.reproduces_llamacpp) {
      EXPECT_TRUE(same_bytes(r.logits, g.want.values)) << type << " at T = " << c.tokens;
    }
  } else {
    const RunResult d = run(g, c.tokens, std::get<1>(GetParam()), Route::vec_dot);
    EXPECT_TRUE(same_bytes(r.logits, d.logits)) << type << " at T = " << c.tokens;
    EXPECT_EQ(r.reproduces_llamacpp, d.reproduces_llamacpp);
  }
}

INSTANTIATE_TEST_SUITE_P(EverySet, LlamaCppTiledRoute,
                         ::testing::Combine(::testing::ValuesIn(kSets),
                                            ::testing::Values(BackendKind::scalar, BackendKind::cpu, BackendKind::cuda)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param)) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

TEST(LlamaCppRoutePaths, NamedPerHeadTypeAndTokenCount) {
  auto path = [](const char* type, int t) {
    return llamacpp_path(Model::open(stem_of({type, 1}) + ".gguf")->config(), t);
  };
  EXPECT_EQ(path("q4_K", 1), "repack_q4_K_8x8");
  EXPECT_EQ(path("q4_K", 16), "repack_q4_K_8x8");
  EXPECT_EQ(path("q5_K", 7), "vec_dot");
  EXPECT_EQ(path("q5_K", 8), "tiled_kquant");
  EXPECT_EQ(path("q6_K", 4), "vec_dot");
  EXPECT_EQ(path("q6_K", 16), "tiled_kquant");
  EXPECT_EQ(path("q8_0", 1), "vec_dot");
  EXPECT_EQ(path("q8_0", 2), "llamafile_sgemm_q8_0");
  EXPECT_EQ(path("f16", 1), "vec_dot_f16");
  EXPECT_EQ(path("f16", 2), "llamafile_sgemm_f16");
  EXPECT_EQ(path("bf16", 1), "vec_dot_bf16");
  EXPECT_EQ(path("bf16", 2), "llamafile_sgemm_bf16");
  EXPECT_EQ(path("f32", 1), "vec_dot_f32");
  EXPECT_EQ(path("f32", 2), "llamafile_sgemm_f32");
}

TEST(LlamaCppRoutePaths, RefusesF32Activations) {
  const Golden g = load({"q5_K", 1});
  Engine engine(g.model, {.backend = BackendKind::scalar});
  RunOptions opts;
  opts.route = Route::llamacpp;
  opts.activations = ActivationRoute::f32;
  EXPECT_THROW(engine.run(g.hidden.values, 1, opts), Error);
}

class LlamaCppCli : public ::testing::TestWithParam<Case> {};

// Through the tool: `run --route llamacpp --out` writes llama.cpp's logits, and --json names the path.
TEST_P(LlamaCppCli, RunWritesLlamaCppBytesAndNamesThePath) {
  const Case c = GetParam();
  TempDir dir;
  const CommandResult r = run_command(cli() + " run " + stem_of(c) + ".gguf --hidden " + at_t(c) +
                                          ".hidden.npy --route llamacpp --threads 2 --out " + dir.file("l.npy") +
                                          " --json",
                                      false);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["route"], "llamacpp");
  EXPECT_EQ(j["llamacpp"]["reproduced"], true);
  EXPECT_EQ(j["llamacpp"]["path"], llamacpp_path(Model::open(stem_of(c) + ".gguf")->config(), c.tokens));
  EXPECT_TRUE(same_bytes(io::read_npy_f32(dir.file("l.npy")).values, io::read_npy_f32(at_t(c) + ".logits.npy").values));
}

INSTANTIATE_TEST_SUITE_P(EverySet, LlamaCppCli, ::testing::ValuesIn(kSets),
                         [](const auto& info) { return case_name(info.param); });

TEST(LlamaCppCliInfo, NamesThePathsByTokenCount) {
  const CommandResult r = run_command(cli() + " info " + stem_of({"q5_K", 1}) + ".gguf --json", false);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["llamacpp"]["paths"].size(), 2u);
  EXPECT_EQ(j["llamacpp"]["paths"][0]["path"], "vec_dot");
  EXPECT_EQ(j["llamacpp"]["paths"][0]["last_tokens"], 7);
  EXPECT_EQ(j["llamacpp"]["paths"][1]["path"], "tiled_kquant");
  EXPECT_EQ(j["llamacpp"]["paths"][1]["first_tokens"], 8);
  EXPECT_TRUE(j["llamacpp"]["paths"][1]["last_tokens"].is_null());
}

}  // namespace

namespace {

// The cpu backend's portable llama.cpp kernels (CPUs without AVX2) and its AVX2 ones, held to the
// public sets directly at each instruction-set level.
TEST(LlamaCppRouteIsa, EveryLevelGivesLlamaCppBytes) {
  for (const Case& c : kSets) {
    const Golden g = load(c);
    const HeadConfig& hc = g.model->config();
    ForwardRequest req;
    req.route = Route::llamacpp;
    req.llamacpp_path = quant::llamacpp_path(hc.head_type, hc.vocab, hc.hidden, c.tokens);
    req.want_logits = true;
    for_each_cpu_isa(head_view(*g.model), {2}, [&](Backend& backend, const std::string& label) {
      ForwardOutput out;
      backend.forward(g.hidden.values.data(), c.tokens, req, out);
      EXPECT_TRUE(same_bytes(out.logits, g.want.values)) << case_name(c) << " at " << label;
    });
  }
}

}  // namespace
