// LayerNorm final norms (with and without bias) and head biases against golden files made by
// ggml's CPU backend (tests/data/README.md): every stage's bytes, every token, on the scalar and
// cpu backends, through the engine with each architecture's own rule and through the backends
// with a scale and a soft cap after the bias (the order no real architecture exercises alone).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "ops/layernorm.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

struct LnSet {
  const char* stem;
  int tokens;
  const char* final_stage;  // what the architecture's own graph ends with
};
const LnSet kLnSets[] = {
    // phi2: LayerNorm + bias, Q8_0 head with output.bias, no scale, no cap.
    {"ln-phi2-q8_0-v301-h256", 3, "logits_raw"},
    // command-r: LayerNorm without bias, tied Q5_K head, logit scale multiplied, no cap.
    {"ln-command-r-q5k-v263-h256", 3, "logits_scaled"},
    // qwen2 with output.bias: RMSNorm, Q5_K head plus bias.
    {"bias-qwen2-q5k-v1031-h256", 2, "logits_raw"},
};

std::string model_of(const LnSet& s) { return data_path(std::string(s.stem) + ".gguf"); }
std::string vectors_of(const LnSet& s) { return data_path(std::string(s.stem) + ".vectors.gguf"); }

std::vector<float> rows_of(const std::vector<float>& all, const std::vector<int>& order, int64_t n) {
  std::vector<float> v;
  for (int t : order) v.insert(v.end(), all.begin() + t * n, all.begin() + (t + 1) * n);
  return v;
}

class LayerNormGolden : public ::testing::TestWithParam<int> {};

// The architecture's own rule, through the engine: hidden in, every stage out; split into shards
// (each with its slice of the head bias) where the vocabulary has whole 512-row chunks for them.
TEST_P(LayerNormGolden, EngineGivesTheGoldenBytes) {
  const LnSet& g = kLnSets[GetParam()];
  auto model = Model::open(model_of(g));
  auto vectors = gguf::File::open(vectors_of(g));
  const std::vector<float> hidden = golden_f32(*vectors, "hidden");
  const std::vector<float> final_logits = golden_f32(*vectors, g.final_stage);
  ASSERT_EQ(int64_t(hidden.size()), g.tokens * model->config().hidden);
  for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu})
    for (int shards : {1, 2}) {
      if (shards > 1 && model->config().vocab < 512 * shards) continue;
      SCOPED_TRACE(std::string(to_string(backend)) + ", " + std::to_string(shards) + " shards");
      Engine engine(model, {.backend = backend, .threads = 2, .shards = shards});
      RunOptions opts;
      opts.want_stages = true;
      opts.top_k = 3;
      const RunResult r = engine.run(hidden, g.tokens, opts);
      EXPECT_TRUE(same_bytes(r.stages.normed, golden_f32(*vectors, "normed"))) << "normed";
      EXPECT_TRUE(same_bytes(r.stages.raw, golden_f32(*vectors, "logits_raw"))) << "logits_raw";
      EXPECT_TRUE(same_bytes(r.stages.capped, final_logits)) << g.final_stage;
      const int64_t V = model->config().vocab;
      for (int t = 0; t < g.tokens; ++t) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; ++i)
          if (final_logits[t * V + i] > final_logits[t * V + best]) best = i;
        EXPECT_EQ(r.choices[size_t(t)].argmax, best) << "token " << t;
      }
    }
}

// The backends with the file's scale and cap after the bias (raw + bias, then scale, 1/cap, tanh,
// cap): every instruction-set level, 1 to 3 threads, batches of 1 to 17 tokens.
TEST_P(LayerNormGolden, BiasThenScaleAndCapOnEveryIsaThreadCountAndBatch) {
  const LnSet& g = kLnSets[GetParam()];
  auto model = Model::open(model_of(g));
  auto vectors = gguf::File::open(vectors_of(g));
  const int64_t H = model->config().hidden, V = model->config().vocab;
  HeadView view = head_view(*model);
  view.logit_scale = float(vectors->find("tail.logit_scale")->as_number("tail.logit_scale"));
  view.softcap = float(vectors->find("tail.softcap")->as_number("tail.softcap"));
  ASSERT_GT(view.softcap, 0.0f);
  const std::vector<float> hidden = golden_f32(*vectors, "hidden");
  const char* stages[] = {"logits_raw", "logits_scaled", "logits_div", "logits_tanh", "logits_capped"};
  std::vector<std::vector<float>> want;
  for (const char* s : stages) want.push_back(golden_f32(*vectors, s));
  for (int tokens : {1, 2, 3, 5, 16, 17}) {
    std::vector<int> order(static_cast<size_t>(tokens));
    for (int t = 0; t < tokens; ++t) order[size_t(t)] = (t * 2 + tokens) % g.tokens;
    const std::vector<float> in = rows_of(hidden, order, H);
    ForwardRequest req;
    req.want_stages = true;
    auto check = [&](const ForwardOutput& out) {
      EXPECT_TRUE(same_bytes(out.stages.normed, rows_of(golden_f32(*vectors, "normed"), order, H))) << "normed";
      const std::vector<float>* got[] = {&out.stages.raw, &out.stages.scaled, &out.stages.div, &out.stages.tanh,
                                         &out.stages.capped};
      for (size_t s = 0; s < 5; ++s) EXPECT_TRUE(same_bytes(*got[s], rows_of(want[s], order, V))) << stages[s];
    };
    {
      SCOPED_TRACE(std::to_string(tokens) + " tokens, scalar backend");
      ForwardOutput out;
      make_scalar_backend(view)->forward(in.data(), tokens, req, out);
      check(out);
    }
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    for_each_cpu_isa(view, {1, 2, 3}, [&](Backend& backend, const std::string&) {
      ForwardOutput out;
      backend.forward(in.data(), tokens, req, out);
      check(out);
    });
  }
}

// --input normed: the golden `normed` in, the golden logits out (still quantized on the q8 route).
TEST_P(LayerNormGolden, NormedInputGivesTheGoldenLogits) {
  const LnSet& g = kLnSets[GetParam()];
  auto model = Model::open(model_of(g));
  auto vectors = gguf::File::open(vectors_of(g));
  const std::vector<float> normed = golden_f32(*vectors, "normed");
  for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu}) {
    Engine engine(model, {.backend = backend, .threads = 2});
    RunOptions opts;
    opts.input = InputKind::normed;
    opts.want_stages = true;
    const RunResult r = engine.run(normed, g.tokens, opts);
    EXPECT_TRUE(same_bytes(r.stages.normed, normed));
    EXPECT_TRUE(same_bytes(r.stages.raw, golden_f32(*vectors, "logits_raw"))) << "logits_raw";
    EXPECT_TRUE(same_bytes(r.stages.capped, golden_f32(*vectors, g.final_stage))) << g.final_stage;
  }
  TempDir dir;
  const std::string cmd = cli() + " run " + model_of(g) + " --hidden " + vectors_of(g) + ":normed --input normed --out " +
                          dir.file("out.npy");
  const CommandResult res = run_command(cmd);
  ASSERT_EQ(res.status, 0) << res.output;
  EXPECT_TRUE(same_bytes(io::read_npy_f32(dir.file("out.npy")).values, golden_f32(*vectors, g.final_stage)));
}

INSTANTIATE_TEST_SUITE_P(Sets, LayerNormGolden, ::testing::Values(0, 1, 2), [](const auto& info) {
  std::string n = kLnSets[info.param].stem;
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
});

// What pins the order (numerics.md §6b): ggml_norm alone on 128 rows of 72 values (four groups of
// 16 and a leftover of 8) with means and spreads over a wide range, plus the golden sets' rows.
// lmhead's order gives every row's bytes; the variance summed as ggml's AVX2 build would (groups
// of 8), as one sequential double sum of the squares, or with the mean summed in f32 does not.
TEST(LayerNormGolden, TheNormNodeAndTheOrderTheFilesPin) {
  struct Rows { std::vector<float> hidden, norm; int64_t H; const char* what; };
  std::vector<Rows> all;
  {
    auto v = gguf::File::open(data_path("ln-norm-h72-t128.vectors.gguf"));
    all.push_back({golden_f32(*v, "hidden"), golden_f32(*v, "norm"), 72, "ln-norm-h72-t128"});
  }
  for (const LnSet& g : kLnSets) {
    auto model = Model::open(model_of(g));
    if (model->config().final_norm == "rmsnorm") continue;  // the fused rms_norm node is not stored
    auto v = gguf::File::open(vectors_of(g));
    all.push_back({golden_f32(*v, "hidden"), golden_f32(*v, "norm"), model->config().hidden, g.stem});
    // normed = (norm * gamma) + beta through the model's own tensors and eps.
    std::vector<float> normed(all.back().hidden.size());
    const int64_t H = model->config().hidden;
    for (size_t t = 0; t < normed.size() / size_t(H); ++t)
      ops::layernorm(all.back().hidden.data() + t * H, model->norm_weight(), model->norm_bias(), H, model->config().eps,
                     normed.data() + t * H);
    EXPECT_TRUE(same_bytes(normed, golden_f32(*v, "normed"))) << g.stem;
  }
  const float eps = 1e-5f;
  auto finish = [&](const float* x, int64_t H, float mean, double sum, std::vector<float>& out) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / double(H)) + eps);
    for (int64_t i = 0; i < H; ++i) out[size_t(i)] = (x[i] - mean) * scale;
  };
  auto tree = [](float* v, int n) {  // halving tree: upper half onto lower half
    for (; n > 1; n /= 2)
      for (int j = 0; j < n / 2; ++j) v[j] = v[j + n / 2] + v[j];
    return v[0];
  };
  int64_t rows = 0, differ8 = 0, differ_seq = 0, differ_fmean = 0;
  for (const Rows& r : all) {
    std::vector<float> mine(r.hidden.size());
    std::vector<float> alt(size_t(r.H));
    for (size_t t = 0; t < r.hidden.size() / size_t(r.H); ++t) {
      const float* x = r.hidden.data() + t * r.H;
      const std::vector<float> want(r.norm.begin() + t * r.H, r.norm.begin() + (t + 1) * r.H);
      std::vector<float> gamma1(size_t(r.H), 1.0f), got(size_t(r.H));
      ops::layernorm(x, gamma1.data(), nullptr, r.H, eps, got.data(), mine.data() + t * r.H);
      const float mean = ops::layer_mean(x, r.H);
      auto squares_from = [&](float m, int64_t i) { const float d = x[i] - m; return d * d; };
      double by8 = 0.0, seq = 0.0, fm = 0.0;
      int64_t i = 0;
      for (; i + 8 <= r.H; i += 8) {
        float g[8];
        for (int j = 0; j < 8; ++j) g[j] = squares_from(mean, i + j);
        by8 += double(tree(g, 8));
      }
      for (; i < r.H; ++i) by8 += double(squares_from(mean, i));
      for (i = 0; i < r.H; ++i) seq += double(squares_from(mean, i));
      float fsum = 0.0f;
      for (i = 0; i < r.H; ++i) fsum += x[i];
      const float fmean = fsum / float(r.H);
      for (i = 0; i + 16 <= r.H; i += 16) {
        float g[16];
        for (int j = 0; j < 16; ++j) g[j] = squares_from(fmean, i + j);
        fm += double(tree(g, 16));
      }
      for (; i < r.H; ++i) fm += double(squares_from(fmean, i));
      finish(x, r.H, mean, by8, alt);
      differ8 += !same_bytes(alt, want);
      finish(x, r.H, mean, seq, alt);
      differ_seq += !same_bytes(alt, want);
      finish(x, r.H, fmean, fm, alt);
      differ_fmean += !same_bytes(alt, want);
      ++rows;
    }
    EXPECT_TRUE(same_bytes(mine, r.norm)) << r.what;
  }
  std::printf("[ info ] ggml_norm on %lld golden rows: lmhead's order gives all; groups of 8 differ on %lld, a "
              "sequential double variance on %lld, an f32 mean on %lld\n",
              (long long)rows, (long long)differ8, (long long)differ_seq, (long long)differ_fmean);
  // The alternatives are what the files rule out: were they all equal, the files would not pin the order.
  EXPECT_GT(differ8, 0);
  EXPECT_GT(differ_seq, 0);
  EXPECT_GT(differ_fmean, 0);
}

}  // namespace
