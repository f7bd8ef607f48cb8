// Bounded-logit comparison (numerics.md §9) through the library and `lmhead compare`, the f64
// oracle, and `lmhead quantize` against ggml's golden quantizer bytes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "gguf/gguf.hpp"
#include "gguf_test_builder.hpp"
#include "io/atomic_file.hpp"
#include "io/npy.hpp"
#include "lmhead/compare.hpp"
#include "quant/quantize.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

const std::string kModel = data_path("tail-q5k-v4099-h512.gguf");
const std::string kVectors = data_path("tail-q5k-v4099-h512.vectors.gguf");

TEST(Policy, ParsesEveryMetricAndOperator) {
  const Policy p = parse_policy(" max < 11 , mean|a-b|<1.25,kl<=1e-3,klmax<0.5,argmax=all,topk>=0.8,differing>0,ulp<=4");
  ASSERT_EQ(p.clauses.size(), 8u);
  EXPECT_EQ(p.clauses[0].metric, PolicyClause::Metric::max_abs);
  EXPECT_EQ(p.clauses[0].op, PolicyClause::Op::lt);
  EXPECT_EQ(p.clauses[0].bound, 11.0);
  EXPECT_EQ(p.clauses[0].text, "max<11");
  EXPECT_EQ(p.clauses[1].metric, PolicyClause::Metric::mean_abs);
  EXPECT_EQ(p.clauses[1].bound, 1.25);
  EXPECT_EQ(p.clauses[2].op, PolicyClause::Op::le);
  EXPECT_EQ(p.clauses[2].bound, 1e-3);
  EXPECT_EQ(p.clauses[3].metric, PolicyClause::Metric::kl_max);
  EXPECT_EQ(p.clauses[4].metric, PolicyClause::Metric::argmax);
  EXPECT_EQ(p.clauses[4].op, PolicyClause::Op::eq);
  EXPECT_EQ(p.clauses[4].bound, 1.0);
  EXPECT_EQ(p.clauses[5].op, PolicyClause::Op::ge);
  EXPECT_EQ(p.clauses[6].op, PolicyClause::Op::gt);
  EXPECT_EQ(p.clauses[7].metric, PolicyClause::Metric::ulp);
  EXPECT_TRUE(parse_policy("").clauses.empty());
}

TEST(Policy, MalformedClausesAreRefusedByName) {
  struct Case { const char* text; const char* says; };
  for (const Case& c : {Case{"max", "no operator"}, Case{"maxx<1", "unknown metric 'maxx'"},
                        Case{"max<", "no bound"}, Case{"max<abc", "not a finite number"},
                        Case{"max<nan", "not a finite number"}, Case{"max<1,,mean<2", "empty clause"},
                        Case{"max<1,", "empty clause"}, Case{"max=all", "only allowed as argmax=all"},
                        Case{"argmax>=all", "only allowed as argmax=all"}, Case{"max<<1", "more than one operator"},
                        Case{"max<1x", "not a finite number"}}) {
    try {
      parse_policy(c.text);
      ADD_FAILURE() << c.text << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << c.text << ": " << e.what();
    }
  }
}

TEST(Compare, MeasuresAHandMadeCase) {
  // Token 0: one value one ulp apart, one 0.5 apart; same argmax. Token 1: argmax moves.
  const float up = std::nextafter(2.0f, 3.0f);
  const std::vector<float> a = {1.0f, 2.0f, 0.0f, 0.5f, 3.0f, 0.0f, 1.0f, 2.5f};
  const std::vector<float> b = {1.0f, up, 0.5f, 0.5f, 3.0f, 0.0f, 1.0f, 3.5f};
  CompareOptions o;
  o.top_k = 1;
  o.policy = parse_policy("max<1.5,argmax=all");
  const Comparison c = compare(std::span<const float>(a), std::span<const float>(b), 2, 4, o);
  EXPECT_DOUBLE_EQ(c.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(c.mean_abs, (double(up) - 2.0 + 0.5 + 1.0) / 8.0);
  EXPECT_EQ(c.differing, 3);
  EXPECT_EQ(c.max_ulp, int64_t(bits_of(0.5f)));  // 0 vs 0.5: the distance from +0
  EXPECT_EQ(c.per_token[1].max_ulp, int64_t(bits_of(3.5f)) - int64_t(bits_of(2.5f)));
  EXPECT_EQ(c.argmax_agree, 1);
  EXPECT_EQ(c.per_token[1].argmax_a, 0);
  EXPECT_EQ(c.per_token[1].argmax_b, 3);
  EXPECT_DOUBLE_EQ(c.topk_overlap, 0.5);
  // KL(softmax(A) || softmax(B)) for token 1, written out directly.
  double za = 0, zb = 0;
  for (int i = 4; i < 8; ++i) { za += std::exp(double(a[i])); zb += std::exp(double(b[i])); }
  double kl = 0;
  for (int i = 4; i < 8; ++i) {
    const double p = std::exp(double(a[i])) / za, q = std::exp(double(b[i])) / zb;
    kl += p * std::log(p / q);
  }
  EXPECT_NEAR(c.per_token[1].kl, kl, 1e-12);
  EXPECT_GT(c.per_token[0].kl, 0.0);
  EXPECT_NEAR(c.kl_mean, (c.per_token[0].kl + c.per_token[1].kl) / 2, 1e-15);
  ASSERT_EQ(c.policy.size(), 2u);
  EXPECT_TRUE(c.policy[0].holds);
  EXPECT_DOUBLE_EQ(c.policy[0].measured, 1.0);
  EXPECT_FALSE(c.policy[1].holds);
  EXPECT_DOUBLE_EQ(c.policy[1].measured, 0.5);
  EXPECT_FALSE(c.policy_holds);
}

TEST(Compare, TiesGoToTheLowestIdAndLargeLogitsDoNotOverflowTheKl) {
  const std::vector<float> a = {20.0f, 20.0f, 1000.0f, 999.0f};
  const std::vector<float> b = {19.0f, 20.0f, 1000.0f, 999.0f};
  const Comparison c = compare(std::span<const float>(a), std::span<const float>(b), 2, 2);
  EXPECT_EQ(c.per_token[0].argmax_a, 0);  // the tie in A goes to id 0
  EXPECT_EQ(c.per_token[0].argmax_b, 1);
  EXPECT_TRUE(std::isfinite(c.per_token[1].kl));
  EXPECT_EQ(c.per_token[1].kl, 0.0);
}

TEST(Compare, IdenticalInputsHoldEveryPolicy) {
  std::vector<float> a(3 * 100);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i));
  CompareOptions o;
  o.policy = parse_policy("max<1e-30,differing=0,ulp=0,kl<=0,argmax=all,topk>=1");
  const Comparison c = compare(std::span<const float>(a), std::span<const float>(a), 3, 100, o);
  EXPECT_EQ(c.max_abs, 0.0);
  EXPECT_TRUE(c.policy_holds);
}

TEST(Compare, RefusesNonFiniteValuesAndWrongSizes) {
  std::vector<float> a(8, 1.0f), b(8, 1.0f);
  b[6] = std::nanf("");
  try {
    compare(std::span<const float>(a), std::span<const float>(b), 2, 4);
    ADD_FAILURE() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("B token 1, index 2 is NaN"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare(std::span<const float>(a), std::span<const float>(a.data(), 7), 2, 4), Error);
  EXPECT_THROW(compare(std::span<const float>(a), std::span<const float>(a), 3, 4), Error);
}

// The oracle through the API: the f32 route sits within numerics.md's measured few 1e-6 of it on the
// golden head, and the default q8 route within its 0.16 (activation quantization).
TEST(Oracle, RoutesThroughTheApiAgainstTheF64Oracle) {
  auto model = Model::open(kModel);
  auto vectors = gguf::File::open(kVectors);
  const std::vector<float> hidden = golden_f32(*vectors, "hidden");
  const int T = int(hidden.size() / model->config().hidden);
  const std::vector<double> oracle = oracle_logits(*model, hidden, T);
  Engine engine(model, {.backend = BackendKind::scalar, .threads = 1});
  RunOptions f32{.activations = ActivationRoute::f32, .want_logits = true};
  RunOptions q8{.want_logits = true};
  const RunResult rf = engine.run(hidden, T, f32), rq = engine.run(hidden, T, q8);
  CompareOptions o;
  o.policy = parse_policy("max<1e-5,argmax=all,topk>=1");
  const Comparison cf = compare(std::span<const double>(oracle), std::span<const float>(rf.logits), T,
                                model->config().vocab, o);
  EXPECT_TRUE(cf.policy_holds) << "max " << cf.max_abs;
  EXPECT_GT(cf.max_abs, 0.0);  // f32 arithmetic is not exact: the oracle must see that
  o.policy = parse_policy("max<0.3,mean<0.05,argmax=all");
  const Comparison cq = compare(std::span<const double>(oracle), std::span<const float>(rq.logits), T,
                                model->config().vocab, o);
  EXPECT_TRUE(cq.policy_holds) << "max " << cq.max_abs << " mean " << cq.mean_abs;
  EXPECT_GT(cq.max_abs, cf.max_abs * 100);  // q8 activations cost far more than f32 rounding
  // The raw stage is the plain dot: scale and cap applied to it give the capped oracle.
  const std::vector<double> raw = oracle_logits(*model, hidden, T, InputKind::hidden, OracleStage::raw, 2);
  const double s = model->config().logit_scale, cap = model->config().softcap;
  for (size_t i = 0; i < raw.size(); i += 97) EXPECT_EQ(cap * std::tanh(raw[i] * s / cap), oracle[i]);
}

std::string write_npy(const TempDir& dir, const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  io::write_npy_f32(dir.file(name), shape, v.data());
  return dir.file(name);
}

TEST(CompareCli, HelpStatesTheGrammarAndTheExitStatus) {
  const CommandResult c = run_command(cli() + " compare --help");
  EXPECT_EQ(c.status, 0);
  EXPECT_NE(c.output.find("argmax=all"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("1 when it is violated, 2 on bad input"), std::string::npos) << c.output;
  const CommandResult q = run_command(cli() + " quantize --help");
  EXPECT_EQ(q.status, 0);
  EXPECT_NE(q.output.find("Usage"), std::string::npos) << q.output;
}

TEST(CompareCli, ExitStatusFollowsThePolicyAndBadInputIsTwo) {
  TempDir dir;
  std::vector<float> a(2 * 50), b;
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::cos(float(i));
  b = a;
  b[3] += 0.25f;  // cos(3) is near -1: the argmax (id 0) stays
  const std::string fa = write_npy(dir, "a.npy", {2, 50}, a), fb = write_npy(dir, "b.npy", {2, 50}, b);
  const std::string base = cli() + " compare " + fa + " " + fb;
  EXPECT_EQ(run_command(base + " --policy 'max<0.3,argmax=all'").status, 0);
  const CommandResult violated = run_command(base + " --policy 'max<0.2'");
  EXPECT_EQ(violated.status, 1) << violated.output;
  EXPECT_NE(violated.output.find("VIOLATED"), std::string::npos) << violated.output;
  const CommandResult bad = run_command(base + " --policy 'max<<1'");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("more than one operator"), std::string::npos) << bad.output;

  const std::string fc = write_npy(dir, "c.npy", {50}, std::vector<float>(a.begin(), a.begin() + 50));
  const CommandResult shapes = run_command(cli() + " compare " + fa + " " + fc);
  EXPECT_EQ(shapes.status, 2);
  EXPECT_NE(shapes.output.find("shapes disagree"), std::string::npos) << shapes.output;
  std::vector<float> n = a;
  n[60] = std::nanf("");
  const std::string fn = write_npy(dir, "n.npy", {2, 50}, n);
  const CommandResult nan = run_command(cli() + " compare " + fa + " " + fn);
  EXPECT_EQ(nan.status, 2);
  EXPECT_NE(nan.output.find("NaN"), std::string::npos) << nan.output;
  const CommandResult missing = run_command(cli() + " compare " + fa + " " + dir.file("absent.npy"));
  EXPECT_EQ(missing.status, 2) << missing.output;
  const CommandResult no_hidden = run_command(cli() + " compare run:" + kModel + " " + fa);
  EXPECT_EQ(no_hidden.status, 2);
  EXPECT_NE(no_hidden.output.find("--hidden"), std::string::npos) << no_hidden.output;
  const CommandResult bad_option = run_command(cli() + " compare run:" + kModel + ":colour=red " + fa + " --hidden " + fa);
  EXPECT_EQ(bad_option.status, 2);
  EXPECT_NE(bad_option.output.find("unknown option 'colour'"), std::string::npos) << bad_option.output;

  const CommandResult j = run_command(base + " --json --top-k 3 --policy 'mean<1'", false);
  ASSERT_EQ(j.status, 0) << j.output;
  const auto js = nlohmann::json::parse(j.output);
  for (const char* key : {"max_abs", "mean_abs", "differing", "max_ulp", "argmax_agree", "topk_overlap", "kl_mean",
                          "tokens", "policy"})
    EXPECT_TRUE(js.contains(key)) << key;
  EXPECT_EQ(js["differing"], 1);
  EXPECT_NEAR(js["max_abs"].get<double>(), 0.25, 1e-6);
  EXPECT_EQ(js["tokens"].size(), 2u);
  EXPECT_EQ(js["tokens"][1]["differing"], 0);
  EXPECT_EQ(js["policy"][0]["clause"], "mean<1");
  EXPECT_EQ(js["policy"][0]["holds"], true);
}

TEST(CompareCli, InlineRunsNeedNoFilesAndThePlotIsAnSvg) {
  TempDir dir;
  const std::string hidden = kVectors + ":hidden";
  // f32 activations against the default q8 route: activation quantization, below 0.3 (numerics.md).
  const CommandResult r = run_command(cli() + " compare run:" + kModel + ":activations=f32:backend=scalar run:" + kModel +
                                          " --hidden " + hidden + " --policy 'max<0.3,argmax=all' --json --plot " +
                                          dir.file("d.svg"), false);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto js = nlohmann::json::parse(r.output);
  EXPECT_GT(js["max_abs"].get<double>(), 0.0);
  EXPECT_EQ(js["argmax_agree"], 3);
  std::ifstream svg(dir.file("d.svg"));
  std::stringstream text;
  text << svg.rdbuf();
  EXPECT_EQ(text.str().rfind("<?xml", 0), 0u);
  EXPECT_NE(text.str().find("histogram of |a - b|"), std::string::npos);
  EXPECT_NE(text.str().find("</svg>"), std::string::npos);
  EXPECT_TRUE(dir.entries("d.svg.tmp").empty());
  // The oracle inline, against the golden file's own capped logits (llama.cpp's bytes).
  const CommandResult o = run_command(cli() + " compare run:" + kModel + ":backend=oracle " + kVectors +
                                          ":logits_capped --hidden " + hidden + " --policy 'max<0.3,argmax=all' --json", false);
  ASSERT_EQ(o.status, 0) << o.output;
  EXPECT_GT(nlohmann::json::parse(o.output)["max_abs"].get<double>(), 0.0);
  // The same run on both sides gives the same bytes.
  const CommandResult same = run_command(cli() + " compare run:" + kModel + " run:" + kModel + ":backend=scalar:threads=1" +
                                             " --hidden " + hidden + " --policy differing=0");
  EXPECT_EQ(same.status, 0) << same.output;
}

// `lmhead quantize` of the golden source gives ggml's bytes for every type it has golden blocks of.
TEST(QuantizeCli, ReproducesTheGoldenQuantizerBytes) {
  TempDir dir;
  const std::string golden = data_path("quantize-r64-n512.gguf");
  auto g = gguf::File::open(golden);
  for (const char* type : {"q4_K", "q5_K", "q6_K", "q8_0"}) {
    const std::string out = dir.file(std::string(type) + ".gguf");
    const CommandResult r = run_command(cli() + " quantize " + golden + ":source " + out + " --type " + type + " --json", false);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output)["to_type"], type);
    auto q = gguf::File::open(out);
    ASSERT_EQ(q->tensors().size(), 1u);
    const gguf::TensorInfo* t = q->find_tensor("source");
    const gguf::TensorInfo* want = g->find_tensor(type);
    ASSERT_NE(t, nullptr);
    ASSERT_NE(want, nullptr);
    EXPECT_EQ(tensor_type_name(t->type), type);
    EXPECT_EQ(t->dims[0], want->dims[0]);
    EXPECT_EQ(t->dims[1], want->dims[1]);
    ASSERT_EQ(t->nbytes, want->nbytes);
    EXPECT_EQ(std::memcmp(t->data, want->data, t->nbytes), 0) << type << " differs from ggml's bytes";
  }
  EXPECT_EQ(run_command(cli() + " quantize " + golden + ":q4_K " + dir.file("x.gguf") + " --type q8_0").status, 2);
  EXPECT_EQ(run_command(cli() + " quantize " + golden + ":nope " + dir.file("x.gguf") + " --type q8_0").status, 2);
  EXPECT_EQ(run_command(cli() + " quantize " + golden + ":source " + dir.file("x.gguf") + " --type iq2_xxs").status, 2);
  EXPECT_TRUE(dir.entries("x.gguf").empty());
}

TEST(QuantizeCli, RequantizesACheckpointsHeadAndCopiesEverythingElse) {
  TempDir dir;
  const std::string f32 = dir.file("f32.gguf"), q6 = dir.file("q6.gguf");
  ASSERT_EQ(run_command(cli() + " make " + f32 + " --vocab 300 --hidden 512 --type f32 --seed 4 --quiet").status, 0);
  const CommandResult r = run_command(cli() + " quantize " + f32 + " " + q6 + " --type q6_K --threads 2");
  ASSERT_EQ(r.status, 0) << r.output;
  auto src = Model::open(f32), dst = Model::open(q6);
  EXPECT_EQ(dst->config().head_type, TensorType::Q6_K);
  EXPECT_EQ(dst->config().vocab, 300);
  EXPECT_EQ(dst->config().softcap, src->config().softcap);
  EXPECT_EQ(dst->config().logit_scale, src->config().logit_scale);
  EXPECT_EQ(dst->token_text(5), src->token_text(5));
  EXPECT_EQ(std::memcmp(dst->norm_weight(), src->norm_weight(), 512 * sizeof(float)), 0);
  std::vector<uint8_t> row(dst->config().row_bytes);
  for (int64_t r2 : {0, 150, 299}) {
    quant::quantize_row(TensorType::Q6_K, reinterpret_cast<const float*>(src->head_weights() + r2 * src->config().row_bytes),
                        row.data(), 512);
    EXPECT_EQ(std::memcmp(row.data(), dst->head_weights() + r2 * dst->config().row_bytes, row.size()), 0) << "row " << r2;
  }
  auto a = gguf::File::open(f32), b = gguf::File::open(q6);
  ASSERT_EQ(a->metadata().size(), b->metadata().size());
  for (size_t i = 0; i < a->metadata().size(); ++i) EXPECT_EQ(a->metadata()[i].key, b->metadata()[i].key);
  // A quantized head is only requantized when asked.
  const CommandResult again = run_command(cli() + " quantize " + q6 + " " + dir.file("q4.gguf") + " --type q4_K");
  EXPECT_EQ(again.status, 2);
  EXPECT_NE(again.output.find("--allow-requantize"), std::string::npos) << again.output;
  EXPECT_EQ(run_command(cli() + " quantize " + q6 + " " + dir.file("q4.gguf") + " --type q4_K --allow-requantize --quiet").status, 0);
  EXPECT_EQ(Model::open(dir.file("q4.gguf"))->config().head_type, TensorType::Q4_K);
}

// quantize copies a checkpoint's metadata through Writer::add_value: every value type, arrays
// included, comes out as the same bytes it went in as.
TEST(WriterAddValue, CopiesEveryValueTypeByteForByte) {
  GgufBytes g;
  g.header(0, 18)
      .kv_u32("general.alignment", 64);
  g.str("k.u8").i32(0).u8(200);
  g.str("k.i8").i32(1).le<int8_t>(-5);
  g.str("k.u16").i32(2).le<uint16_t>(60000);
  g.str("k.i16").i32(3).le<int16_t>(-30000);
  g.kv_u32("k.u32", 4000000000u).kv_i32("k.i32", -7).kv_f32("k.f32", 0.1f).kv_bool("k.bool", 1);
  g.kv_str("k.str", "t\xC3\xA9xt");
  g.kv_u64("k.u64", ~uint64_t(0));
  g.str("k.i64").i32(11).i64(-1234567890123);
  g.str("k.f64").i32(12).le<double>(0.1);
  g.kv_str_array("k.strs", {"a", "", "\xE6\x97\xA5"});
  g.kv_u32_array("k.u32s", {1, 2, 3});
  g.str("k.i16s").i32(9).i32(3).u64(2).le<int16_t>(-1).le<int16_t>(7);
  g.str("k.f64s").i32(9).i32(12).u64(1).le<double>(-2.5);
  g.str("k.empty").i32(9).i32(0).u64(0);
  const size_t kv_end = g.size();
  g.pad_to(64);
  auto in = gguf::File::from_bytes(g.span());
  gguf::Writer w;
  for (const gguf::KeyValue& kv : in->metadata()) w.add_value(std::string(kv.key), kv.value);
  TempDir dir;
  w.write(dir.file("copy.gguf"));
  auto out = gguf::File::open(dir.file("copy.gguf"));
  EXPECT_EQ(out->alignment(), 64u);
  ASSERT_GE(out->bytes().size(), kv_end);
  EXPECT_EQ(std::memcmp(out->bytes().data(), g.bytes.data(), kv_end), 0);
}

}  // namespace
