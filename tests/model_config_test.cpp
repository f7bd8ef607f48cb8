// Head configuration from metadata (numerics.md §2): fail-closed scale for muse-glimmer, defaults
// marked as defaults, cap 0 = scale only, tied heads, shape agreement.
#include <gtest/gtest.h>

#include <cstring>

#include "lmhead/lmhead.hpp"
#include "quant/quantize.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

struct Spec {
  std::string arch = "muse-glimmer";
  int64_t vocab = 300, hidden = 256;
  bool logit_scale = true, softcap = true, eps = true, tokens = true, norm = true;
  float scale_value = 0.25f, cap_value = 20.0f;
  std::string head_name = "output.weight";
  TensorType type = TensorType::Q5_K;
  int64_t declared_hidden = 0;  // embedding_length when nonzero
  bool scale_as_string = false;
};

std::string write_model(const TempDir& dir, const Spec& s, const std::string& name = "m.gguf") {
  gguf::Writer w;
  w.add_string("general.architecture", s.arch);
  if (s.logit_scale) {
    if (s.scale_as_string) w.add_string(s.arch + ".logit_scale", "0.25");
    else w.add_f32(s.arch + ".logit_scale", s.scale_value);
  }
  if (s.softcap) w.add_f32(s.arch + ".final_logit_softcapping", s.cap_value);
  if (s.eps) w.add_f32(s.arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (s.declared_hidden) w.add_u32(s.arch + ".embedding_length", uint32_t(s.declared_hidden));
  if (s.tokens) {
    std::vector<std::string> t;
    for (int64_t i = 0; i < s.vocab; ++i) t.push_back("t" + std::to_string(i));
    w.add_string_array("tokenizer.ggml.tokens", t);
  }
  if (s.norm) {
    std::vector<uint8_t> g(s.hidden * 4);
    for (int64_t i = 0; i < s.hidden; ++i) { const float one = 1.0f; std::memcpy(&g[i * 4], &one, 4); }
    w.add_tensor("output_norm.weight", TensorType::F32, {s.hidden}, g);
  }
  const TensorTypeInfo* info = tensor_type_info(s.type);
  std::vector<float> values(s.hidden);
  std::vector<uint8_t> head(size_t(s.vocab) * (s.hidden / info->block_elems) * info->block_bytes);
  const size_t row = head.size() / s.vocab;
  for (int64_t r = 0; r < s.vocab; ++r) {
    for (int64_t i = 0; i < s.hidden; ++i) values[i] = float(((r * 131 + i * 71) % 97) - 48) / 40.0f;
    quant::quantize_row(s.type, values.data(), head.data() + r * row, s.hidden);
  }
  w.add_tensor(s.head_name, s.type, {s.hidden, s.vocab}, head);
  w.write(dir.file(name));
  return dir.file(name);
}

std::string open_error(const std::string& path) {
  try {
    Model::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ReadsEveryKey) {
  TempDir dir;
  auto m = Model::open(write_model(dir, {}));
  const HeadConfig& c = m->config();
  EXPECT_EQ(c.architecture, "muse-glimmer");
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.head_type, TensorType::Q5_K);
  EXPECT_EQ(c.logit_scale, 0.25f);
  EXPECT_FALSE(c.logit_scale_is_default);
  EXPECT_EQ(c.softcap, 20.0f);
  EXPECT_EQ(c.eps, 1e-6f);
  EXPECT_FALSE(c.tied);
  EXPECT_EQ(c.row_bytes, 176u);
  EXPECT_EQ(m->token_text(299), "t299");
}

TEST(ModelConfig, MuseGlimmerWithoutLogitScaleIsRefusedNamingTheKey) {
  TempDir dir;
  Spec s;
  s.logit_scale = false;
  EXPECT_NE(open_error(write_model(dir, s)).find("muse-glimmer.logit_scale"), std::string::npos);
}

TEST(ModelConfig, OtherArchitecturesDefaultTheScaleTheCapAndEps) {
  TempDir dir;
  Spec s;
  s.arch = "llama";
  s.logit_scale = s.softcap = s.eps = false;
  auto m = Model::open(write_model(dir, s));
  EXPECT_EQ(m->config().logit_scale, 1.0f);
  EXPECT_TRUE(m->config().logit_scale_is_default);
  EXPECT_EQ(m->config().softcap, 30.0f);
  EXPECT_TRUE(m->config().softcap_is_default);
  EXPECT_EQ(m->config().eps, 1e-5f);
  EXPECT_TRUE(m->config().eps_is_default);
}

TEST(ModelConfig, CapZeroMeansScaleOnly) {
  TempDir dir;
  Spec s;
  s.cap_value = 0;
  auto m = Model::open(write_model(dir, s));
  EXPECT_EQ(m->config().softcap, 0.0f);
  Engine e(m, {.backend = BackendKind::scalar});
  std::vector<float> h(256);
  for (int i = 0; i < 256; ++i) h[i] = float(i % 17) - 8.0f;
  const RunResult r = e.run(h, 1, {.want_stages = true});
  ASSERT_EQ(r.stages.capped.size(), 300u);
  EXPECT_TRUE(r.stages.div.empty());
  for (size_t i = 0; i < r.stages.capped.size(); ++i) EXPECT_EQ(r.stages.capped[i], r.stages.raw[i] * 0.25f);
}

TEST(ModelConfig, TiedHeadUsesTokenEmbeddings) {
  TempDir dir;
  Spec s;
  s.head_name = "token_embd.weight";
  auto m = Model::open(write_model(dir, s));
  EXPECT_TRUE(m->config().tied);
  EXPECT_EQ(m->config().head_tensor, "token_embd.weight");
}

TEST(ModelConfig, Refusals) {
  TempDir dir;
  {
    Spec s;
    s.declared_hidden = 512;
    EXPECT_NE(open_error(write_model(dir, s, "a.gguf")).find("embedding_length"), std::string::npos);
  }
  {
    Spec s;
    s.scale_as_string = true;
    EXPECT_NE(open_error(write_model(dir, s, "b.gguf")).find("logit_scale"), std::string::npos);
  }
  {
    Spec s;
    s.norm = false;
    EXPECT_NE(open_error(write_model(dir, s, "c.gguf")).find("output_norm.weight"), std::string::npos);
  }
  {
    Spec s;
    s.head_name = "something.else";
    EXPECT_NE(open_error(write_model(dir, s, "d.gguf")).find("output.weight"), std::string::npos);
  }
  EXPECT_NE(open_error(dir.file("missing.gguf")).find("missing.gguf"), std::string::npos);
}

TEST(ModelConfig, EveryHeadTypeRunsOnBothRoutes) {
  TempDir dir;
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::F16,
                          TensorType::BF16, TensorType::F32}) {
    Spec s;
    s.type = type;
    auto m = Model::open(write_model(dir, s, std::string(tensor_type_name(type)) + ".gguf"));
    Engine e(m, {.backend = BackendKind::scalar});
    std::vector<float> h(256);
    for (int i = 0; i < 256; ++i) h[i] = float((i * 7) % 13) - 6.0f;
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32}) {
      const RunResult r = e.run(h, 1, {.activations = route, .want_logits = true});
      ASSERT_EQ(r.logits.size(), 300u);
      for (float v : r.logits) ASSERT_TRUE(std::isfinite(v)) << tensor_type_name(type);
      EXPECT_LE(std::abs(r.choices[0].value), 20.0f);
    }
  }
}

}  // namespace
