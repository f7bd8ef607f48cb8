// The whole tail against the golden files made by llama.cpp's CPU backend: every stage's bytes,
// every token, through the library (scalar and cpu backends) and through `lmhead run --dump`.
#include <gtest/gtest.h>

#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "ops/rmsnorm.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

struct GoldenSet {
  const char* model;
  const char* vectors;
  int tokens;
};
const GoldenSet kSets[] = {
    {"tail-q5k-v4099-h512.gguf", "tail-q5k-v4099-h512.vectors.gguf", 3},
    {"tail-q5k-v4096-h256.gguf", "tail-q5k-v4096-h256.vectors.gguf", 1},
};

class GoldenTail : public ::testing::TestWithParam<std::tuple<int, BackendKind>> {};

TEST_P(GoldenTail, EveryStageIsByteIdentical) {
  const GoldenSet& g = kSets[std::get<0>(GetParam())];
  auto model = Model::open(data_path(g.model));
  auto vectors = gguf::File::open(data_path(g.vectors));
  const std::vector<float> hidden = golden_f32(*vectors, "hidden");
  ASSERT_EQ(int64_t(hidden.size()), g.tokens * model->config().hidden);

  Engine engine(model, {.backend = std::get<1>(GetParam()), .threads = 2});
  RunOptions opts;
  opts.want_stages = true;
  opts.top_k = 3;
  const RunResult r = engine.run(hidden, g.tokens, opts);
  EXPECT_TRUE(same_bytes(r.stages.normed, golden_f32(*vectors, "normed"))) << "normed";
  EXPECT_TRUE(same_bytes(r.stages.raw, golden_f32(*vectors, "logits_raw"))) << "logits_raw";
  EXPECT_TRUE(same_bytes(r.stages.scaled, golden_f32(*vectors, "logits_scaled"))) << "logits_scaled";
  EXPECT_TRUE(same_bytes(r.stages.div, golden_f32(*vectors, "logits_div"))) << "logits_div";
  EXPECT_TRUE(same_bytes(r.stages.tanh, golden_f32(*vectors, "logits_tanh"))) << "logits_tanh";
  EXPECT_TRUE(same_bytes(r.stages.capped, golden_f32(*vectors, "logits_capped"))) << "logits_capped";

  // The argmax agrees with the golden capped logits (lowest index on ties).
  const std::vector<float> capped = golden_f32(*vectors, "logits_capped");
  const int64_t V = model->config().vocab;
  for (int t = 0; t < g.tokens; ++t) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (capped[t * V + i] > capped[t * V + best]) best = i;
    EXPECT_EQ(r.choices[t].argmax, best) << "token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Sets, GoldenTail,
                         ::testing::Combine(::testing::Values(0, 1),
                                            ::testing::Values(BackendKind::scalar, BackendKind::cpu)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == 0 ? "v4099_h512_" : "v4096_h256_") +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

// The golden files' `rms_norm` tensor (the stage before gamma) holds only zeros: the capture did not
// keep that node's output (docs/numerics.md). What can be checked is the order of §6 itself: the
// unscaled y = x * scale, then y * gamma as a separate rounding, gives the golden `normed` bytes.
TEST(GoldenTail, RmsNormThenGammaIsByteIdentical) {
  for (const GoldenSet& g : kSets) {
    auto model = Model::open(data_path(g.model));
    auto vectors = gguf::File::open(data_path(g.vectors));
    const std::vector<float> hidden = golden_f32(*vectors, "hidden");
    const int64_t H = model->config().hidden;
    std::vector<float> normed(hidden.size()), unscaled(hidden.size()), regated(hidden.size());
    for (int t = 0; t < g.tokens; ++t)
      ops::rmsnorm(hidden.data() + t * H, model->norm_weight(), H, model->config().eps, normed.data() + t * H,
                   unscaled.data() + t * H);
    for (size_t i = 0; i < hidden.size(); ++i) regated[i] = unscaled[i] * model->norm_weight()[i % H];
    EXPECT_TRUE(same_bytes(regated, golden_f32(*vectors, "normed"))) << g.model;
    EXPECT_TRUE(same_bytes(normed, golden_f32(*vectors, "normed"))) << g.model;
  }
}

// Golden token 0 of the 4,099-row set saturates at exactly 20.0 on rows 0, 7 and 14: a three-way
// tie that must go to the lowest index, and be reported.
TEST(GoldenTail, ThreeWayTieGoesToTheLowestIndex) {
  auto model = Model::open(data_path(kSets[0].model));
  auto vectors = gguf::File::open(data_path(kSets[0].vectors));
  Engine engine(model, {.backend = BackendKind::scalar});
  const RunResult r = engine.run(golden_f32(*vectors, "hidden"), 3, {.top_k = 4});
  const TokenChoice& c = r.choices[0];
  EXPECT_EQ(c.argmax, 0);
  EXPECT_EQ(c.value, 20.0f);
  EXPECT_EQ(c.tie_count, 3);
  EXPECT_EQ(c.tied_ids, (std::vector<int32_t>{0, 7, 14}));
  ASSERT_GE(c.top.size(), 3u);
  EXPECT_EQ(c.top[0].id, 0);
  EXPECT_EQ(c.top[1].id, 7);
  EXPECT_EQ(c.top[2].id, 14);
}

// The CLI route of the "done means": lmhead run MODEL --hidden VECTORS:hidden --dump DIR.
TEST(GoldenTail, CliDumpEqualsGoldenTensors) {
  for (const GoldenSet& g : kSets) {
    TempDir dir;
    const std::string cmd = cli() + " run " + data_path(g.model) + " --hidden " + data_path(g.vectors) +
                            ":hidden --dump " + dir.path() + " --out " + dir.file("out.npy");
    const CommandResult res = run_command(cmd);
    ASSERT_EQ(res.status, 0) << res.output;
    auto vectors = gguf::File::open(data_path(g.vectors));
    const std::pair<const char*, const char*> stages[] = {
        {"normed.npy", "normed"},         {"logits_raw.npy", "logits_raw"},   {"logits_scaled.npy", "logits_scaled"},
        {"logits_div.npy", "logits_div"}, {"logits_tanh.npy", "logits_tanh"}, {"logits_capped.npy", "logits_capped"}};
    for (const auto& [file, tensor] : stages) {
      const io::HiddenStates dumped = io::read_npy_f32(dir.file(file));
      EXPECT_EQ(dumped.tokens, g.tokens) << file;
      EXPECT_TRUE(same_bytes(dumped.values, golden_f32(*vectors, tensor))) << g.model << " " << file;
    }
    EXPECT_TRUE(same_bytes(io::read_npy_f32(dir.file("out.npy")).values, golden_f32(*vectors, "logits_capped")));
  }
}

// --input normed: the golden `normed` tensor in, the golden logits out, byte for byte, on both
// routes' byte-exact q8 route (the normed vector is still quantized as llama.cpp does), through
// the library on both CPU backends and through the CLI.
TEST(GoldenTail, NormedInputGivesTheGoldenLogits) {
  for (const GoldenSet& g : kSets) {
    auto model = Model::open(data_path(g.model));
    auto vectors = gguf::File::open(data_path(g.vectors));
    const std::vector<float> normed = golden_f32(*vectors, "normed");
    for (BackendKind kind : {BackendKind::scalar, BackendKind::cpu}) {
      Engine engine(model, {.backend = kind, .threads = 2});
      RunOptions opts;
      opts.input = InputKind::normed;
      opts.want_stages = true;
      const RunResult r = engine.run(normed, g.tokens, opts);
      EXPECT_TRUE(same_bytes(r.stages.normed, normed)) << g.model;
      EXPECT_TRUE(same_bytes(r.stages.raw, golden_f32(*vectors, "logits_raw"))) << g.model << " raw";
      EXPECT_TRUE(same_bytes(r.stages.capped, golden_f32(*vectors, "logits_capped"))) << g.model << " capped";
    }
    TempDir dir;
    const std::string cmd = cli() + " run " + data_path(g.model) + " --hidden " + data_path(g.vectors) +
                            ":normed --input normed --out " + dir.file("out.npy");
    const CommandResult res = run_command(cmd);
    ASSERT_EQ(res.status, 0) << res.output;
    EXPECT_TRUE(same_bytes(io::read_npy_f32(dir.file("out.npy")).values, golden_f32(*vectors, "logits_capped")))
        << g.model;
  }
}

}  // namespace
