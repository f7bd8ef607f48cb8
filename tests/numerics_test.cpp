// Routes measured against each other and against an f64 oracle (numerics.md §7, §8, §9):
// fused vs node soft cap, the f32 route's error, other head types on the q8 route, and the argmax
// moved by f32 saturation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/head_math.hpp"
#include "lmhead/lmhead.hpp"
#include "quant/activation.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"
#include "select/token_summary.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

const char* kModel = "tail-q5k-v4099-h512.gguf";
const char* kVectors = "tail-q5k-v4099-h512.vectors.gguf";

struct Diff {
  double max_abs = 0, mean_abs = 0;
  int64_t max_ulp = 0, differ = 0;
};
Diff compare(const std::vector<float>& a, const std::vector<double>& oracle) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(double(a[i]) - oracle[i]);
    d.max_abs = std::max(d.max_abs, e);
    d.mean_abs += e;
    const int64_t u = ulp_distance(a[i], float(oracle[i]));
    d.max_ulp = std::max(d.max_ulp, u);
    d.differ += u != 0;
  }
  d.mean_abs /= double(a.size());
  return d;
}

int64_t argmax_of(const double* v, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i) if (v[i] > v[b]) b = i;
  return b;
}

// Oracle logits in f64: dequantized weights times the given activations, then scale and cap.
std::vector<double> oracle_capped(const Model& m, const std::vector<float>& acts, int tokens) {
  const HeadConfig& c = m.config();
  std::vector<double> out(size_t(tokens) * c.vocab);
  std::vector<float> w(c.hidden);
  for (int64_t r = 0; r < c.vocab; ++r) {
    quant::dequantize_row(c.head_type, m.head_weights() + r * c.row_bytes, w.data(), c.hidden);
    for (int t = 0; t < tokens; ++t) {
      double s = 0;
      for (int64_t i = 0; i < c.hidden; ++i) s += double(w[i]) * double(acts[t * c.hidden + i]);
      const double v = s * double(c.logit_scale);
      out[t * c.vocab + r] = c.softcap > 0 ? double(c.softcap) * std::tanh(v / double(c.softcap)) : v;
    }
  }
  return out;
}

// The activations the q8 route actually multiplies, dequantized (Q8_K or Q8_0 blocks).
std::vector<float> q8_activations(const Model& m, const std::vector<float>& normed, int tokens) {
  const HeadConfig& c = m.config();
  const auto fmt = quant::activation_format(c.head_type, ActivationRoute::q8);
  std::vector<uint8_t> buf(quant::activation_bytes(fmt, c.hidden));
  std::vector<float> out(normed.size());
  for (int t = 0; t < tokens; ++t) {
    quant::quantize_activations(fmt, normed.data() + t * c.hidden, c.hidden, buf.data());
    float* o = out.data() + t * c.hidden;
    if (fmt == quant::ActivationFormat::q8_K) {
      const auto* b = reinterpret_cast<const quant::block_q8_K*>(buf.data());
      for (int64_t i = 0; i < c.hidden; ++i) o[i] = b[i / 256].d * float(b[i / 256].qs[i % 256]);
    } else {
      const auto* b = reinterpret_cast<const quant::block_q8_0*>(buf.data());
      for (int64_t i = 0; i < c.hidden; ++i) o[i] = quant::f16_to_f32(b[i / 32].d) * float(b[i / 32].qs[i % 32]);
    }
  }
  return out;
}

TEST(Numerics, FusedVersusNodeSoftCap) {
  int64_t checked = 0, differ = 0, max_ulp = 0;
  auto measure = [&](float raw, float scale, float cap) {
    CapParams nodes{scale, cap, 1.0f / cap, SoftcapRoute::nodes};
    CapParams fused{scale, cap, 1.0f / cap, SoftcapRoute::fused};
    const float a = cap_logit(raw, nodes), b = cap_logit(raw, fused);
    ++checked;
    const int64_t u = ulp_distance(a, b);
    differ += u != 0;
    max_ulp = std::max(max_ulp, u);
  };
  auto vectors = gguf::File::open(data_path(kVectors));
  for (float raw : golden_f32(*vectors, "logits_raw")) measure(raw, 0.196116f, 20.0f);
  const int64_t golden_checked = checked, golden_differ = differ, golden_ulp = max_ulp;
  for (int i = 0; i <= 2000000; ++i) measure(-500.0f + float(i) * 0.0005f, 0.196116f, 20.0f);
  std::printf("[ info ] fused vs nodes soft cap: golden raw logits %lld checked, %lld differ, max %lld ulp; "
              "sweep of raw in [-500, 500]: %lld checked, %lld differ, max %lld ulp\n",
              (long long)golden_checked, (long long)golden_differ, (long long)golden_ulp,
              (long long)(checked - golden_checked), (long long)(differ - golden_differ), (long long)max_ulp);
  EXPECT_GT(differ, 0) << "the two expression trees are expected to differ somewhere";
  // Near zero an ulp is tiny, so the sweep's worst case (6 ulp when measured) sits there.
  EXPECT_LE(max_ulp, 8);
}

TEST(Numerics, F32RouteAgainstF64Oracle) {
  auto model = Model::open(data_path(kModel));
  auto vectors = gguf::File::open(data_path(kVectors));
  Engine engine(model, {.backend = BackendKind::scalar});
  const RunResult f32 = engine.run(golden_f32(*vectors, "hidden"), 3,
                                   {.activations = ActivationRoute::f32, .want_stages = true});
  const RunResult q8 = engine.run(golden_f32(*vectors, "hidden"), 3, {.want_stages = true});
  const std::vector<double> oracle = oracle_capped(*model, f32.stages.normed, 3);
  const Diff df = compare(f32.stages.capped, oracle), dq = compare(q8.stages.capped, oracle);
  std::printf("[ info ] f32 route vs f64 oracle (capped): max|d| %.3g mean|d| %.3g, %lld differ, max %lld ulp\n",
              df.max_abs, df.mean_abs, (long long)df.differ, (long long)df.max_ulp);
  std::printf("[ info ] q8 route (llama.cpp bytes) vs f64 oracle of f32 activations: max|d| %.3g mean|d| %.3g\n",
              dq.max_abs, dq.mean_abs);
  EXPECT_LT(df.max_abs, 1e-4);
  EXPECT_LT(df.max_abs, dq.max_abs) << "the f32 route should be the more accurate one";
  const int64_t V = model->config().vocab;
  for (int t = 0; t < 3; ++t) {
    // Argmax agreement, allowing the saturated three-way tie of token 0 (all exactly 20 in f32).
    const int64_t best = argmax_of(oracle.data() + t * V, V);
    EXPECT_EQ(f32.stages.capped[t * V + best], f32.choices[t].value) << "token " << t;
  }
}

// Q4_K, Q6_K and Q8_0 heads made from the golden Q5_K head's values: on the q8 route their logits
// agree with an f64 oracle of the same quantized activations within 1e-3, and on the argmax.
TEST(Numerics, OtherHeadTypesOnTheQ8Route) {
  auto golden = Model::open(data_path(kModel));
  auto vectors = gguf::File::open(data_path(kVectors));
  const HeadConfig& g = golden->config();
  std::vector<float> values(size_t(g.vocab) * g.hidden);
  for (int64_t r = 0; r < g.vocab; ++r)
    quant::dequantize_row(g.head_type, golden->head_weights() + r * g.row_bytes, values.data() + r * g.hidden, g.hidden);
  TempDir dir;
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::Q5_K}) {
    const TensorTypeInfo* info = tensor_type_info(type);
    const size_t row = size_t(g.hidden / info->block_elems * info->block_bytes);
    std::vector<uint8_t> head(row * g.vocab);
    for (int64_t r = 0; r < g.vocab; ++r) quant::quantize_row(type, values.data() + r * g.hidden, head.data() + r * row, g.hidden);
    gguf::Writer w;
    w.add_string("general.architecture", "muse-glimmer");
    w.add_f32("muse-glimmer.logit_scale", g.logit_scale);
    w.add_f32("muse-glimmer.final_logit_softcapping", g.softcap);
    std::vector<uint8_t> gamma(g.hidden * 4);
    std::memcpy(gamma.data(), golden->norm_weight(), gamma.size());
    w.add_tensor("output_norm.weight", TensorType::F32, {g.hidden}, gamma);
    w.add_tensor("output.weight", type, {g.hidden, g.vocab}, head);
    const std::string path = dir.file(std::string(info->name) + ".gguf");
    w.write(path);

    auto m = Model::open(path);
    Engine e(m, {.backend = BackendKind::scalar});
    // The default order and route tiled (llama.cpp's tiled K-quant order at every T; Q8_0 keeps vec_dot's).
    for (Route route : {Route::vec_dot, Route::tiled}) {
      RunOptions opts;
      opts.want_stages = true;
      opts.route = route;
      const RunResult r = e.run(golden_f32(*vectors, "hidden"), 3, opts);
      const std::vector<double> oracle = oracle_capped(*m, q8_activations(*m, r.stages.normed, 3), 3);
      const Diff d = compare(r.stages.capped, oracle);
      std::printf("[ info ] %s head, q8 route, %s order, vs f64 oracle of the same activations: max|d| %.3g mean|d| %.3g "
                  "max %lld ulp\n",
                  std::string(info->name).c_str(), std::string(to_string(route)).c_str(), d.max_abs, d.mean_abs,
                  (long long)d.max_ulp);
      EXPECT_LT(d.max_abs, 1e-3) << info->name << " " << to_string(route);
      for (int t = 0; t < 3; ++t) {
        const int64_t best = argmax_of(oracle.data() + t * g.vocab, g.vocab);
        EXPECT_EQ(r.stages.capped[t * g.vocab + best], r.choices[t].value) << info->name << " token " << t;
      }
    }
  }
}

// tanh is monotone in exact math, but in f32 every scaled logit above about 9 * cap rounds to cap:
// two different raw logits become a tie and the lower index wins, whatever the raw order was.
TEST(Numerics, SaturationCanMoveTheArgmax) {
  const CapParams p{1.0f, 20.0f, 1.0f / 20.0f, SoftcapRoute::nodes};
  const std::vector<float> raw = {190.0f, 200.0f, 150.0f};  // raw argmax: id 1
  std::vector<float> capped;
  for (float r : raw) capped.push_back(cap_logit(r, p));
  EXPECT_LT(std::tanh(190.0 / 20.0), std::tanh(200.0 / 20.0)) << "distinct in exact (double) arithmetic";
  EXPECT_EQ(capped[0], 20.0f);
  EXPECT_EQ(capped[1], 20.0f);
  select::TokenSummary raw_s, capped_s;
  select::summarize(raw.data(), 0, 3, 0, raw_s);
  select::summarize(capped.data(), 0, 3, 0, capped_s);
  EXPECT_EQ(raw_s.argmax, 1);
  EXPECT_EQ(capped_s.argmax, 0);
  EXPECT_EQ(capped_s.tie_count, 2);
}

}  // namespace
