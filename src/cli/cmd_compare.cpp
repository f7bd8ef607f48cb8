// `lmhead compare A B`: two engines' logits under a bounded-logit policy (numerics.md §11). A thin
// client of lmhead/compare.hpp; exit 0 when the policy holds, 1 when it is violated, 2 on bad input.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "lmhead/compare.hpp"
#include "lmhead/files.hpp"

namespace lmhead::cli {
namespace {

struct CompareArgs {
  std::string a, b, policy, plot, hidden;
  int top_k = 5;
  bool json = false;
};

// One side of the comparison: logits from a file, or computed by a run named inline. The oracle
// keeps its doubles so its own rounding never enters the measurement.
struct Logits {
  std::string name;
  int64_t tokens = 0, vocab = 0;
  bool is_double = false;
  std::vector<float> f;
  std::vector<double> d;
};

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.emplace_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

// run:MODEL[:OPTION=VALUE...]. MODEL is the segments up to the first that ends in ".gguf" (so a
// path holding ':' still works when it ends in .gguf); without one, MODEL is the first segment.
Logits run_inline(const std::string& spec, const std::string& hidden_spec) {
  const std::vector<std::string> parts = split(std::string_view(spec).substr(4), ':');
  size_t model_end = 0;
  for (size_t i = 0; i < parts.size(); ++i)
    if (ends_with(parts[i], ".gguf")) { model_end = i; break; }
  std::string model_path = parts[0];
  for (size_t i = 1; i <= model_end; ++i) model_path += ":" + parts[i];
  if (model_path.empty()) throw Error("'" + spec + "': no MODEL after 'run:' (run:MODEL[:OPTION=VALUE...])");

  RouteArgs route;
  BackendOptions backend;
  std::string stage = "capped";
  bool oracle = false;
  for (size_t i = model_end + 1; i < parts.size(); ++i) {
    const std::string& opt = parts[i];
    const size_t eq = opt.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == opt.size())
      throw Error("'" + spec + "': option '" + opt + "' is not OPTION=VALUE");
    const std::string key = opt.substr(0, eq), value = opt.substr(eq + 1);
    auto integer = [&]() {
      size_t used = 0;
      int v = -1;
      try { v = std::stoi(value, &used); } catch (const std::exception&) { used = 0; }
      if (used != value.size() || v < 0 || v > 1024)
        throw Error("'" + spec + "': " + key + "=" + value + " is not an integer between 0 and 1024");
      return v;
    };
    if (key == "activations") route.activations = value;
    else if (key == "softcap") route.softcap = value;
    else if (key == "input") route.input = value;
    else if (key == "backend") {
      if (value == "oracle") oracle = true;
      else backend.backend = value;
    } else if (key == "threads") backend.threads = integer();
    else if (key == "shards") backend.shards = integer();
    else if (key == "stage") {
      if (value != "capped" && value != "scaled" && value != "raw")
        throw Error("'" + spec + "': stage=" + value + " is not one of capped, scaled, raw");
      stage = value;
    } else
      throw Error("'" + spec + "': unknown option '" + key +
                  "' (activations, softcap, input, backend (scalar, cpu, cuda, oracle), threads, shards, stage)");
  }
  if (hidden_spec.empty())
    throw Error("'" + spec + "' runs a model: give its hidden states with --hidden INPUT");
  RunOptions opts = route.options();  // names a bad activations/softcap/input value
  auto model = Model::open(model_path);
  const HeadConfig& c = model->config();
  const HiddenStates h = load_hidden_states(hidden_spec, c.hidden);

  Logits out;
  out.name = spec;
  out.tokens = h.tokens;
  out.vocab = c.vocab;
  if (oracle) {
    const OracleStage st = stage == "raw" ? OracleStage::raw : stage == "scaled" ? OracleStage::scaled : OracleStage::capped;
    out.is_double = true;
    out.d = oracle_logits(*model, h.values, int(h.tokens), opts.input, st, backend.threads);
    return out;
  }
  opts.want_logits = stage == "capped";
  opts.want_stages = stage != "capped";
  Engine engine(model, backend.engine_options());
  RunResult r = engine.run(h.values, int(h.tokens), opts);
  if (stage == "capped") out.f = std::move(r.logits);
  else if (stage == "scaled") out.f = std::move(r.stages.scaled);
  else out.f = std::move(r.stages.raw);
  return out;
}

Logits load_logits(const std::string& spec, const std::string& hidden_spec) {
  if (spec.rfind("run:", 0) == 0) return run_inline(spec, hidden_spec);
  LogitsFile file = read_logits(spec);
  Logits out;
  out.name = spec;
  out.tokens = file.tokens;
  out.vocab = file.vocab;
  out.f = std::move(file.values);
  return out;
}

Comparison compare_logits(const Logits& a, const Logits& b, const CompareOptions& o) {
  const int64_t T = a.tokens, V = a.vocab;
  if (a.is_double && b.is_double) return compare(std::span<const double>(a.d), std::span<const double>(b.d), T, V, o);
  if (a.is_double) return compare(std::span<const double>(a.d), std::span<const float>(b.f), T, V, o);
  if (b.is_double) return compare(std::span<const float>(a.f), std::span<const double>(b.d), T, V, o);
  return compare(std::span<const float>(a.f), std::span<const float>(b.f), T, V, o);
}

std::vector<double> as_double(const Logits& l) {
  return l.is_double ? l.d : std::vector<double>(l.f.begin(), l.f.end());
}

int run_compare(const CompareArgs& args) {
  CompareOptions o;
  o.top_k = args.top_k;
  o.policy = parse_policy(args.policy);  // before any work: a malformed policy costs nothing
  const Logits a = load_logits(args.a, args.hidden);
  const Logits b = load_logits(args.b, args.hidden);
  if (a.tokens != b.tokens || a.vocab != b.vocab)
    throw Error("shapes disagree: A (" + args.a + ") is [" + std::to_string(a.tokens) + ", " + std::to_string(a.vocab) +
                "], B (" + args.b + ") is [" + std::to_string(b.tokens) + ", " + std::to_string(b.vocab) + "]");
  const Comparison c = compare_logits(a, b, o);

  if (!args.plot.empty()) {
    write_file_atomically(args.plot, comparison_svg(as_double(a), as_double(b), "A: " + args.a + "   B: " + args.b));
  }

  if (args.json) {
    nlohmann::json j;
    j["a"] = args.a;
    j["b"] = args.b;
    j["shape"] = {c.tokens, c.vocab};
    j["top_k"] = c.top_k;
    j["max_abs"] = c.max_abs;
    j["mean_abs"] = c.mean_abs;
    j["differing"] = c.differing;
    j["values"] = c.tokens * c.vocab;
    j["max_ulp"] = c.max_ulp;
    j["argmax_agree"] = c.argmax_agree;
    j["topk_overlap"] = c.topk_overlap;
    j["kl_mean"] = c.kl_mean;
    j["kl_max"] = c.kl_max;
    nlohmann::json toks = nlohmann::json::array();
    for (size_t t = 0; t < c.per_token.size(); ++t) {
      const TokenComparison& tc = c.per_token[t];
      toks.push_back({{"token", t}, {"max_abs", tc.max_abs}, {"mean_abs", tc.mean_abs}, {"differing", tc.differing},
                      {"max_ulp", tc.max_ulp}, {"argmax_a", tc.argmax_a}, {"argmax_b", tc.argmax_b},
                      {"argmax_agree", tc.argmax_agree}, {"topk_overlap", tc.topk_overlap}, {"kl", tc.kl}});
    }
    j["tokens"] = toks;
    nlohmann::json pol = nlohmann::json::array();
    for (const ClauseResult& r : c.policy)
      pol.push_back({{"clause", r.clause.text}, {"measured", r.measured}, {"bound", r.clause.bound},
                     {"op", std::string(to_string(r.clause.op))}, {"holds", r.holds}});
    j["policy"] = pol;
    j["policy_text"] = o.policy.text;
    j["policy_holds"] = c.policy_holds;
    if (!args.plot.empty()) j["plot"] = args.plot;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("A: %s\nB: %s\n", args.a.c_str(), args.b.c_str());
    std::printf("%lld token(s) x %s logits\n", static_cast<long long>(c.tokens), with_commas(uint64_t(c.vocab)).c_str());
    std::printf("  max |a-b|        %.6g\n  mean |a-b|       %.6g\n", c.max_abs, c.mean_abs);
    std::printf("  differing        %s of %s\n", with_commas(uint64_t(c.differing)).c_str(),
                with_commas(uint64_t(c.tokens * c.vocab)).c_str());
    std::printf("  max ulp          %lld\n", static_cast<long long>(c.max_ulp));
    std::printf("  argmax agrees    %lld of %lld tokens\n", static_cast<long long>(c.argmax_agree),
                static_cast<long long>(c.tokens));
    std::printf("  top-%d overlap    %.4f (mean)\n", c.top_k, c.topk_overlap);
    std::printf("  KL(A||B)         mean %.6g, max %.6g\n", c.kl_mean, c.kl_max);
    constexpr size_t kShown = 32;
    for (size_t t = 0; t < c.per_token.size() && t < kShown; ++t) {
      const TokenComparison& tc = c.per_token[t];
      std::printf("  token %zu: max %.4g mean %.4g, %lld differ, max %lld ulp, argmax %d/%d%s, top-k %.2f, KL %.4g\n", t,
                  tc.max_abs, tc.mean_abs, static_cast<long long>(tc.differing), static_cast<long long>(tc.max_ulp),
                  tc.argmax_a, tc.argmax_b, tc.argmax_agree ? "" : " (differ)", tc.topk_overlap, tc.kl);
    }
    if (c.per_token.size() > kShown) std::printf("  ... %zu more tokens in --json\n", c.per_token.size() - kShown);
    for (const ClauseResult& r : c.policy)
      std::printf("policy %-16s measured %.6g: %s\n", r.clause.text.c_str(), r.measured, r.holds ? "holds" : "VIOLATED");
    if (!c.policy.empty()) std::printf("policy %s\n", c.policy_holds ? "holds" : "violated");
    if (!args.plot.empty()) std::printf("wrote %s\n", args.plot.c_str());
  }
  return c.policy_holds ? 0 : 1;
}

}  // namespace

Action register_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare two sets of logits under a bounded-logit policy (numerics.md §11): exit 0 when the policy holds, "
      "1 when it is violated, 2 on bad input");
  auto a = std::make_shared<CompareArgs>();
  const std::string source_help =
      ": logits as .npy f32 [T, V] or [V], FILE.gguf:TENSOR (F32, ggml dims [V, T]), or a run named inline, "
      "run:MODEL[:OPTION=VALUE...] with options activations=q8|f32, softcap=nodes|fused, input=hidden|normed, "
      "backend=scalar|cpu|cuda|oracle (oracle: the f64 oracle of this checkpoint), threads=N, shards=N, "
      "stage=capped|scaled|raw";
  cmd->add_option("A", a->a, "first" + source_help)->required();
  cmd->add_option("B", a->b, "second" + source_help)->required();
  cmd->add_option("--policy", a->policy, std::string("bounded-logit policy, e.g. 'max<11,mean<1.25,argmax=all'.\n") +
                                             std::string(policy_grammar()));
  cmd->add_option("--top-k", a->top_k, "k of the top-k overlap")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--hidden", a->hidden, "hidden states for run: sources (.npy or FILE.gguf:TENSOR)");
  cmd->add_option("--plot", a->plot, "write an SVG: histograms of |a-b| and of the ulp distance, |a-b| against B's value");
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a]() {
    try {
      return run_compare(*a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lmhead compare: error: %s\n", e.what());
      return 2;
    }
  };
}

}  // namespace lmhead::cli
