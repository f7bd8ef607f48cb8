// The whole tail against the golden files made by llama.cpp's CPU backend: every stage's bytes,
// every token, through the library (scalar and cpu backends) and through `lmhead run --dump`.
#include <gtest/gtest.h>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
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
  const char* name;
  bool tie;  // token 0 saturates at the cap on rows 0, 7 and 14
};
const GoldenSet kSets[] = {
    {"tail-q5k-v4099-h512.gguf", "tail-q5k-v4099-h512.vectors.gguf", 3, "v4099_h512", true},
    {"tail-q5k-v4096-h256.gguf", "tail-q5k-v4096-h256.vectors.gguf", 1, "v4096_h256", false},
    // Q6_K (numerics.md §5b): the head llama.cpp's Q4_K_M and Q5_K_M mixes give output.weight.
    {"tail-q6k-v4101-h768.gguf", "tail-q6k-v4101-h768.vectors.gguf", 3, "q6k_v4101_h768", true},
};
constexpr int kQ6KSet = 2;

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
                         ::testing::Combine(::testing::Values(0, 1, kQ6KSet),
                                            ::testing::Values(BackendKind::scalar, BackendKind::cpu)),
                         [](const auto& info) {
                           return std::string(kSets[std::get<0>(info.param)].name) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

// The Q6_K set's tokens alone and repeated into batches of up to 17 (past the kernels' 16-token
// slices), on every instruction-set level this CPU runs and at several thread counts: every
// token's raw and capped logits are the file's. Then through the engine at several shard counts.
TEST(GoldenTail, Q6KEveryIsaThreadCountAndBatch) {
  const GoldenSet& g = kSets[kQ6KSet];
  auto model = Model::open(data_path(g.model));
  auto vectors = gguf::File::open(data_path(g.vectors));
  const int64_t H = model->config().hidden, V = model->config().vocab;
  const std::vector<float> hidden = golden_f32(*vectors, "hidden");
  const std::vector<float> raw = golden_f32(*vectors, "logits_raw");
  const std::vector<float> capped = golden_f32(*vectors, "logits_capped");
  auto rows_of = [&](const std::vector<float>& all, const std::vector<int>& order, int64_t n) {
    std::vector<float> v;
    for (int t : order) v.insert(v.end(), all.begin() + t * n, all.begin() + (t + 1) * n);
    return v;
  };
  const HeadView view = head_view(*model);
  for (int tokens : {1, 2, 3, 4, 5, 8, 16, 17}) {
    std::vector<int> order(static_cast<size_t>(tokens));
    for (int t = 0; t < tokens; ++t) order[size_t(t)] = (t * 2 + tokens) % g.tokens;
    const std::vector<float> in = rows_of(hidden, order, H);
    ForwardRequest req;
    req.want_stages = true;
    {
      SCOPED_TRACE(std::to_string(tokens) + " tokens");
      for_each_cpu_isa(view, {1, 2, 3}, [&](Backend& backend, const std::string&) {
        ForwardOutput out;
        backend.forward(in.data(), tokens, req, out);
        EXPECT_TRUE(same_bytes(out.stages.raw, rows_of(raw, order, V))) << "logits_raw";
        EXPECT_TRUE(same_bytes(out.logits, rows_of(capped, order, V))) << "logits_capped";
      });
    }
    for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu})
      for (int shards : {1, 2, 3}) {
        SCOPED_TRACE(std::to_string(tokens) + " tokens, " + std::string(to_string(backend)) + ", " + std::to_string(shards) +
                     " shards");
        Engine engine(model, {.backend = backend, .threads = 2, .shards = shards});
        RunOptions opts;
        opts.want_logits = true;
        const RunResult r = engine.run(in, tokens, opts);
        EXPECT_TRUE(same_bytes(r.logits, rows_of(capped, order, V))) << "logits_capped";
      }
  }
}

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

// Golden token 0 of the 4,099-row Q5_K and 4,101-row Q6_K sets saturates at exactly 20.0 on rows
// 0, 7 and 14: a three-way tie that must go to the lowest index, and be reported.
TEST(GoldenTail, ThreeWayTieGoesToTheLowestIndex) {
  for (const GoldenSet& g : kSets) {
    if (!g.tie) continue;
    SCOPED_TRACE(g.model);
    auto model = Model::open(data_path(g.model));
    auto vectors = gguf::File::open(data_path(g.vectors));
    Engine engine(model, {.backend = BackendKind::scalar});
    const RunResult r = engine.run(golden_f32(*vectors, "hidden"), g.tokens, {.top_k = 4});
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
