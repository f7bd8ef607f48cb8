// Head configuration from metadata (numerics.md §2): fail-closed scale for muse-glimmer, defaults
// marked as defaults, cap 0 = scale only, tied heads, shape agreement.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

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
  // output_norm.bias / output.bias: element count 0 means absent.
  int64_t norm_bias = 0, head_bias = 0;
  TensorType bias_type = TensorType::F32;
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
  auto add_bias = [&](const std::string& tensor, int64_t n) {
    if (n == 0) return;
    const size_t width = s.bias_type == TensorType::F32 ? 4 : 2;  // F32 or F16 (zeros either way)
    std::vector<uint8_t> b(size_t(n) * width);
    if (width == 4)
      for (int64_t i = 0; i < n; ++i) { const float v = float(i % 7) * 0.125f; std::memcpy(&b[size_t(i) * 4], &v, 4); }
    w.add_tensor(tensor, s.bias_type, {n}, b);
  };
  add_bias("output_norm.bias", s.norm_bias);
  add_bias("output.bias", s.head_bias);
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

TEST(ModelConfig, LlamaNeverScalesNorCapsWhateverTheFileSays) {
  // llama.cpp's saver writes logit_scale = 0 and final_logit_softcapping = 30 into every file;
  // llama's graph reads neither (src/models/llama.cpp), so neither is applied.
  TempDir dir;
  Spec s;
  s.arch = "llama";
  s.scale_value = 0.0f;
  s.cap_value = 30.0f;
  s.eps = false;
  auto m = Model::open(write_model(dir, s));
  const HeadConfig& c = m->config();
  EXPECT_EQ(c.logit_scale, 1.0f);
  EXPECT_EQ(c.logit_scale_from, ValueSource::not_applied);
  EXPECT_EQ(c.softcap, 0.0f);
  EXPECT_EQ(c.softcap_from, ValueSource::not_applied);
  EXPECT_EQ(c.eps, 1e-5f);
  EXPECT_TRUE(c.eps_is_default);
  EXPECT_EQ(c.rule_source, "src/models/llama.cpp");
}

// One architecture's rule applied to a file stating `scale` and `cap` (or neither when absent).
struct RuleCase {
  std::string arch;
  bool scale_present;
  float scale;
  bool cap_present;
  float cap;
  float want_scale;  // the multiplier the backends use
  float want_cap;    // 0: no cap
  ValueSource scale_from, cap_from;
};

TEST(ModelConfig, ArchitectureRules) {
  using V = ValueSource;
  const RuleCase cases[] = {
      {"llama", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      {"mistral3", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      {"qwen2", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      {"qwen3", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      {"gemma3", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      {"phi3", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      {"deepseek2", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      {"olmo2", true, 0.0f, true, 30.0f, 1.0f, 0.0f, V::not_applied, V::not_applied},
      // gemma2: the cap always, 30 when absent; a saver's logit_scale = 0 is ignored.
      {"gemma2", true, 0.0f, true, 30.0f, 1.0f, 30.0f, V::not_applied, V::file},
      {"gemma2", false, 0.0f, false, 0.0f, 1.0f, 30.0f, V::not_applied, V::arch_default},
      {"gemma2", false, 0.0f, true, 50.0f, 1.0f, 50.0f, V::not_applied, V::file},
      // gemma4: the cap when nonzero, 30 when absent.
      {"gemma4", false, 0.0f, false, 0.0f, 1.0f, 30.0f, V::not_applied, V::arch_default},
      {"gemma4", false, 0.0f, true, 0.0f, 1.0f, 0.0f, V::not_applied, V::file},
      // grok: scale multiplied always (1/sqrt(3) when absent), cap when nonzero (none when absent).
      {"grok", false, 0.0f, false, 0.0f, 0.5773502691896257f, 0.0f, V::arch_default, V::arch_default},
      {"grok", true, 0.5f, true, 30.0f, 0.5f, 30.0f, V::file, V::file},
      // granite: divided by the scale.
      {"granite", true, 8.0f, true, 30.0f, 1.0f / 8.0f, 0.0f, V::file, V::not_applied},
      {"granitemoe", true, 6.0f, false, 0.0f, 1.0f / 6.0f, 0.0f, V::file, V::not_applied},
      // muse-glimmer: scale required, cap 30 by default, 0 = none.
      {"muse-glimmer", true, 0.25f, false, 0.0f, 0.25f, 30.0f, V::file, V::arch_default},
      {"muse-glimmer", true, 0.25f, true, 0.0f, 0.25f, 0.0f, V::file, V::file},
  };
  TempDir dir;
  int n = 0;
  for (const RuleCase& rc : cases) {
    SCOPED_TRACE(rc.arch + " case " + std::to_string(n));
    Spec s;
    s.arch = rc.arch;
    s.logit_scale = rc.scale_present;
    s.scale_value = rc.scale;
    s.softcap = rc.cap_present;
    s.cap_value = rc.cap;
    auto m = Model::open(write_model(dir, s, std::string("r") + std::to_string(n++) + ".gguf"));
    const HeadConfig& c = m->config();
    EXPECT_EQ(c.logit_scale, rc.want_scale);
    EXPECT_EQ(c.softcap, rc.want_cap);
    EXPECT_EQ(c.logit_scale_from, rc.scale_from);
    EXPECT_EQ(c.softcap_from, rc.cap_from);
    EXPECT_EQ(c.final_norm, "rmsnorm");
    EXPECT_FALSE(c.rule_source.empty());
  }
}

TEST(ModelConfig, AppliedScaleThatIsZeroNegativeOrNotFiniteIsRefused) {
  TempDir dir;
  int n = 0;
  for (const char* arch : {"grok", "granite", "muse-glimmer"})
    for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      Spec s;
      s.arch = arch;
      s.scale_value = bad;
      const std::string err = open_error(write_model(dir, s, std::string("b") + std::to_string(n++) + ".gguf"));
      SCOPED_TRACE(err);
      EXPECT_NE(err.find(std::string(arch) + ".logit_scale"), std::string::npos);
      EXPECT_NE(err.find("refuses a zero, negative or non-finite scale"), std::string::npos);
    }
  // Where the scale is never applied the same values are ignored.
  for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    Spec s;
    s.arch = "gemma2";
    s.scale_value = bad;
    EXPECT_EQ(Model::open(write_model(dir, s, std::string("i") + std::to_string(n++) + ".gguf"))->config().logit_scale, 1.0f);
  }
}

TEST(ModelConfig, RequiredScaleMissingIsRefusedNamingTheKey) {
  TempDir dir;
  Spec s;
  s.arch = "granite";
  s.logit_scale = false;
  EXPECT_NE(open_error(write_model(dir, s)).find("'granite.logit_scale' is missing"), std::string::npos);
}

TEST(ModelConfig, Gemma2CapOfZeroIsRefused) {
  TempDir dir;
  Spec s;
  s.arch = "gemma2";
  s.cap_value = 0.0f;
  EXPECT_NE(open_error(write_model(dir, s)).find("gemma2.final_logit_softcapping"), std::string::npos);
}

TEST(ModelConfig, UnknownArchitectureIsRefusedNamingItAndTheOverrides) {
  TempDir dir;
  Spec s;
  s.arch = "mystery";
  const std::string path = write_model(dir, s);
  const std::string err = open_error(path);
  EXPECT_NE(err.find("architecture 'mystery' has no rule"), std::string::npos) << err;
  EXPECT_NE(err.find("--override-kv mystery.logit_scale=float:"), std::string::npos) << err;
  EXPECT_NE(err.find("general.architecture=str:"), std::string::npos) << err;
  EXPECT_NE(err.find("ModelOptions::overrides"), std::string::npos) << err;
  // Stating both values by override gives the stated rule; the file's own values are not trusted.
  ModelOptions o;
  o.overrides.push_back(MetadataOverride::parse("mystery.logit_scale=float:0.5"));
  o.overrides.push_back(MetadataOverride::parse("mystery.final_logit_softcapping=float:0"));
  auto m = Model::open(path, o);
  EXPECT_EQ(m->config().logit_scale, 0.5f);
  EXPECT_EQ(m->config().logit_scale_from, ValueSource::override_kv);
  EXPECT_EQ(m->config().softcap, 0.0f);
  // Or borrow a known architecture's rule.
  ModelOptions borrow;
  borrow.overrides.push_back(MetadataOverride::parse("general.architecture=str:llama"));
  auto l = Model::open(path, borrow);
  EXPECT_EQ(l->config().architecture, "llama");
  EXPECT_EQ(l->config().softcap, 0.0f);
}

TEST(ModelConfig, OverridesReplaceFileValues) {
  TempDir dir;
  Spec s;  // muse-glimmer, scale 0.25, cap 20
  const std::string path = write_model(dir, s);
  ModelOptions o;
  o.overrides.push_back(MetadataOverride::parse("muse-glimmer.logit_scale=float:0.5"));
  o.overrides.push_back(MetadataOverride::parse("muse-glimmer.final_logit_softcapping=float:10"));
  auto m = Model::open(path, o);
  EXPECT_EQ(m->config().logit_scale, 0.5f);
  EXPECT_EQ(m->config().logit_scale_from, ValueSource::override_kv);
  EXPECT_EQ(m->config().softcap, 10.0f);
  EXPECT_EQ(m->config().eps_from, ValueSource::file);
  ASSERT_EQ(m->config().overrides.size(), 2u);
  // A negative scale by override is refused like one in the file.
  ModelOptions neg;
  neg.overrides.push_back(MetadataOverride::parse("muse-glimmer.logit_scale=float:-1"));
  EXPECT_THROW(Model::open(path, neg), Error);
  // llama.cpp's types: a float key needs float:.
  ModelOptions wrong;
  wrong.overrides.push_back(MetadataOverride::parse("muse-glimmer.logit_scale=int:1"));
  EXPECT_THROW(Model::open(path, wrong), Error);
}

TEST(ModelConfig, OverrideSyntax) {
  EXPECT_EQ(MetadataOverride::parse("a.b=float:0.5").f, 0.5);
  EXPECT_EQ(MetadataOverride::parse("a.b=int:-3").i, -3);
  EXPECT_TRUE(MetadataOverride::parse("a.b=bool:true").b);
  EXPECT_EQ(MetadataOverride::parse("general.architecture=str:llama").s, "llama");
  EXPECT_EQ(MetadataOverride::parse("a.b=float:0.5").text(), "a.b=float:0.5");
  for (const char* bad : {"a.b", "=float:1", "a.b=float", "a.b=double:1", "a.b=float:x", "a.b=int:1.5", "a.b=bool:yes"})
    EXPECT_THROW(MetadataOverride::parse(bad), Error) << bad;
}

std::string run_error(const std::shared_ptr<const Model>& m, BackendKind backend) {
  try {
    Engine e(m, {.backend = backend});
    std::vector<float> h(size_t(m->config().hidden), 1.0f);
    e.run(h, 1);
  } catch (const Error& err) {
    return err.what();
  }
  return "";
}

// The LayerNorm and head-bias architectures run on the CPU backends; their numbers are checked
// byte for byte against ggml in tests/layernorm_golden_test.cpp. Here: the tensors each rule needs,
// refused by name when missing or malformed.
TEST(ModelConfig, LayerNormAndHeadBiasArchitecturesRunAndTheirTensorsAreChecked) {
  TempDir dir;
  {
    Spec s;
    s.arch = "command-r";
    s.head_name = "token_embd.weight";
    auto m = Model::open(write_model(dir, s, "cr.gguf"));
    EXPECT_EQ(m->config().final_norm, "layernorm");
    EXPECT_EQ(m->config().logit_scale, 0.25f);
    EXPECT_FALSE(m->config().has_norm_bias);
    EXPECT_EQ(m->norm_bias(), nullptr);
    for (BackendKind b : {BackendKind::scalar, BackendKind::cpu}) EXPECT_EQ(run_error(m, b), "");
  }
  {
    Spec s;
    s.arch = "command-r";
    s.scale_value = 0.0f;  // `if (f_logit_scale)`: 0 means no scaling
    s.head_name = "token_embd.weight";
    EXPECT_EQ(Model::open(write_model(dir, s, "cr0.gguf"))->config().logit_scale, 1.0f);
  }
  {
    Spec s;
    s.arch = "gpt2";  // LayerNorm + bias: output_norm.bias required
    EXPECT_NE(open_error(write_model(dir, s, "gpt2-nob.gguf")).find("'output_norm.bias' (the final LayerNorm's bias) is missing"),
              std::string::npos);
    s.norm_bias = s.hidden - 1;
    EXPECT_NE(open_error(write_model(dir, s, "gpt2-short.gguf")).find("'output_norm.bias' (the final LayerNorm's bias) has 255 elements"),
              std::string::npos);
    s.norm_bias = s.hidden;
    s.bias_type = TensorType::F16;
    EXPECT_NE(open_error(write_model(dir, s, "gpt2-f16.gguf")).find("'output_norm.bias' (the final LayerNorm's bias) must be f32, found f16"),
              std::string::npos) << open_error(dir.file("gpt2-f16.gguf"));
    s.bias_type = TensorType::F32;
    auto m = Model::open(write_model(dir, s, "gpt2.gguf"));
    EXPECT_EQ(m->config().final_norm, "layernorm+bias");
    EXPECT_TRUE(m->config().has_norm_bias);
    ASSERT_NE(m->norm_bias(), nullptr);
    EXPECT_EQ(m->norm_bias()[3], 0.375f);
    EXPECT_FALSE(m->config().has_head_bias);
    for (BackendKind b : {BackendKind::scalar, BackendKind::cpu}) EXPECT_EQ(run_error(m, b), "");
  }
  {
    Spec s;
    s.arch = "phi2";  // output_norm.bias and output.bias required
    s.norm_bias = s.hidden;
    EXPECT_NE(open_error(write_model(dir, s, "phi2.gguf")).find("'output.bias' (the head's bias) is missing"), std::string::npos);
    s.head_bias = s.vocab + 1;
    EXPECT_NE(open_error(write_model(dir, s, "phi2-long.gguf")).find("'output.bias' (the head's bias) has 301 elements, the head's vocabulary is 300"),
              std::string::npos);
    s.head_bias = s.vocab;
    auto m = Model::open(write_model(dir, s, "phi2-ok.gguf"));
    EXPECT_TRUE(m->config().has_head_bias);
    ASSERT_NE(m->head_bias(), nullptr);
    EXPECT_EQ(m->head_bias()[299], float(299 % 7) * 0.125f);
    for (BackendKind b : {BackendKind::scalar, BackendKind::cpu}) EXPECT_EQ(run_error(m, b), "");
  }
  {
    Spec s;
    s.arch = "qwen2";  // output.bias optional: used when present
    auto m = Model::open(write_model(dir, s, "qwen2.gguf"));
    EXPECT_FALSE(m->config().has_head_bias);
    s.head_bias = s.vocab;
    m = Model::open(write_model(dir, s, "qwen2-b.gguf"));
    EXPECT_TRUE(m->config().has_head_bias);
    EXPECT_EQ(m->config().final_norm, "rmsnorm");
    EXPECT_EQ(run_error(m, BackendKind::cpu), "");
  }
  {
    Spec s;  // an architecture without a head bias in its graph ignores an output.bias in the file
    s.arch = "llama";
    s.head_bias = s.vocab;
    EXPECT_FALSE(Model::open(write_model(dir, s, "llama-b.gguf"))->config().has_head_bias);
  }
}

TEST(ModelConfig, GemmaAlwaysUsesTheTokenEmbedding) {
  TempDir dir;
  Spec s;
  s.arch = "gemma";
  s.head_name = "token_embd.weight";
  auto m = Model::open(write_model(dir, s));
  EXPECT_TRUE(m->config().tied);
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

// The byte bill (numerics.md §10) on the golden Q5_K head: each stage's bytes, the derived figures,
// and what each backend moves per argmax-only token.
TEST(ByteBill, StagesDerivedFiguresAndWhatEachBackendMoves) {
  auto model = Model::open(data_path("tail-q5k-v4099-h512.gguf"));
  const HeadConfig& c = model->config();
  const uint64_t V = uint64_t(c.vocab), H = uint64_t(c.hidden), logits = V * 4;
  const ByteBill b = byte_bill(c);
  EXPECT_EQ(b.weights, V * (H / 256) * 176);  // Q5_K: 176 B per 256 weights
  EXPECT_EQ(b.normed, H * 4);
  EXPECT_EQ(b.softcap_nodes, 8 * logits);
  EXPECT_DOUBLE_EQ(b.bits_per_weight, 5.5);
  EXPECT_EQ(b.q4_k_weights, V * (H / 256) * 144);  // Q4_K: 144 B per 256 weights
  EXPECT_EQ(b.head_bias, 0u);
  const ByteBill scalar = byte_bill(c, BackendKind::scalar, SoftcapRoute::nodes);
  EXPECT_EQ(scalar.moved, b.weights + b.normed + logits + 8 * logits + logits);
  EXPECT_EQ(byte_bill(c, BackendKind::scalar, SoftcapRoute::fused).moved, b.weights + b.normed + logits + 2 * logits + logits);
  EXPECT_EQ(byte_bill(c, BackendKind::cpu).moved, b.weights + b.normed);  // the fused epilogue keeps no logits
  EXPECT_EQ(byte_bill(c, BackendKind::cuda).moved, b.weights + b.normed + logits);
  EXPECT_TRUE(scalar.cap_passes);
  EXPECT_FALSE(byte_bill(c, BackendKind::cuda).cap_passes);
}
