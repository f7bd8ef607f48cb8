#include <sys/stat.h>

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "lmhead/files.hpp"

namespace lmhead::cli {
namespace {

struct RunArgs {
  std::string model, hidden, out, dump;
  bool json = false, profile = false;
  RouteArgs route;
  SampleArgs sample;
  ModelArgs model_args;
  BackendOptions backend;
};

// Token text for a terminal: control characters and quotes escaped, UTF-8 kept as is.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '\r') out += "\\r";
    else if (ch == '"' || ch == '\\') { out += '\\'; out += char(ch); }
    else if (ch < 0x20 || ch == 0x7f) { char buf[8]; std::snprintf(buf, sizeof buf, "\\x%02x", ch); out += buf; }
    else out += char(ch);
  }
  return out;
}

void make_directory(const std::string& dir) {
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw Error("cannot create dump directory '" + dir + "': " + std::strerror(errno));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw Error("'" + dir + "' is not a directory");
}

void dump_stages(const std::string& dir, const RunResult& r, const HeadConfig& c) {
  make_directory(dir);
  const int64_t T = r.tokens;
  auto write = [&](const char* name, const std::vector<float>& v, int64_t width) {
    if (v.empty()) return;
    write_npy_f32(dir + "/" + name, {T, width}, v.data());
  };
  write("normed.npy", r.stages.normed, c.hidden);
  write("logits_raw.npy", r.stages.raw, c.vocab);
  write("logits_scaled.npy", r.stages.scaled, c.vocab);
  write("logits_div.npy", r.stages.div, c.vocab);
  write("logits_tanh.npy", r.stages.tanh, c.vocab);
  write("logits_capped.npy", r.stages.capped, c.vocab);
}

int run(const RunArgs& a) {
  RunOptions opts = a.route.options();
  opts.want_logits = !a.out.empty();
  opts.want_stages = !a.dump.empty();
  opts.stage_times = a.profile;
  opts.sampling = a.sample.options();

  auto model = Model::open(a.model, a.model_args.options());
  const HeadConfig& c = model->config();
  const HiddenStates hidden = load_hidden_states(a.hidden);
  if (hidden.hidden != c.hidden)
    throw Error("hidden state '" + a.hidden + "' has " + std::to_string(hidden.hidden) +
                " values per token, the model's hidden size is " + std::to_string(c.hidden));
  // The default top-k of 5 shrinks to fit a smaller vocabulary.
  opts.top_k = static_cast<int>(std::min<int64_t>(opts.top_k, c.vocab));
  Engine engine(model, a.backend.engine_options());
  const RunResult r = engine.run(hidden.values, int(hidden.tokens), opts);

  if (!a.out.empty()) write_npy_f32(a.out, {r.tokens, c.vocab}, r.logits.data());
  if (!a.dump.empty()) dump_stages(a.dump, r, c);

  if (a.json) {
    nlohmann::json j;
    j["backend"] = r.backend;
    j["input"] = a.route.input;
    j["activations"] = a.route.activations;
    j["softcap"] = a.route.softcap;
    j["route"] = a.route.route;
    j["llamacpp"] = {{"path", r.llamacpp_path}, {"reproduced", r.reproduces_llamacpp}, {"version", "0c1e570"}};
    j["tied_head"] = c.tied;
    j["tokens"] = nlohmann::json::array();
    for (int t = 0; t < r.tokens; ++t) {
      const TokenChoice& ch = r.choices[t];
      nlohmann::json tok = {{"token", t}, {"argmax", ch.argmax}, {"text", std::string(model->token_text(ch.argmax))},
                            {"logit", ch.value}, {"sampled", ch.sampled},
                            {"position", opts.sampling.position + t}};
      if (a.route.logprobs) tok["logprob"] = ch.logprob;
      tok["ties"] = {{"count", ch.tie_count}, {"ids", ch.tied_ids}, {"decided_token", ch.tie_count > 1}};
      nlohmann::json top = nlohmann::json::array();
      for (const Candidate& cand : ch.top) {
        nlohmann::json e = {{"id", cand.id}, {"text", std::string(model->token_text(cand.id))}, {"logit", cand.logit}};
        if (a.route.logprobs) e["logprob"] = cand.logprob;
        top.push_back(e);
      }
      tok["top_k"] = top;
      j["tokens"].push_back(tok);
    }
    nlohmann::json times = nlohmann::json::object();
    for (const StageTime& s : r.times) times[s.label] = s.ms;
    j["times_ms"] = times;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("%s: %d token(s), backend %s, activations %s, soft cap %s, route %s\n", a.model.c_str(), r.tokens,
              r.backend.c_str(), a.route.activations.c_str(), c.softcap == 0 ? "off (scale only)" : a.route.softcap.c_str(),
              a.route.route.c_str());
  std::printf("llama.cpp 0c1e570 path at %d token(s): %s (%s)\n", r.tokens, r.llamacpp_path.c_str(),
              r.reproduces_llamacpp ? "reproduced" : "not reproduced by this route");
  if (opts.input == InputKind::normed) std::printf("input: already normed (the final norm was skipped)\n");
  if (c.tied) std::printf("tied head: no 'output.weight' in the file, using 'token_embd.weight'\n");
  for (int t = 0; t < r.tokens; ++t) {
    const TokenChoice& ch = r.choices[t];
    std::printf("token %d: argmax %d \"%s\" logit %.9g", t, ch.argmax,
                printable(model->token_text(ch.argmax)).c_str(), ch.value);
    if (a.route.logprobs) std::printf(" logprob %.6f", ch.logprob);
    if (a.sample.active())
      std::printf(" | sampled %d \"%s\" at position %lld", ch.sampled, printable(model->token_text(ch.sampled)).c_str(),
                  static_cast<long long>(opts.sampling.position + t));
    std::printf("\n");
    if (ch.tie_count > 1) {
      std::printf("  tie decided the token: %lld ids share the maximum %.9g, lowest id wins:",
                  static_cast<long long>(ch.tie_count), ch.value);
      for (int32_t id : ch.tied_ids) std::printf(" %d", id);
      if (ch.tie_count > static_cast<int64_t>(ch.tied_ids.size())) std::printf(" ...");
      std::printf("\n");
    }
    for (size_t i = 0; i < ch.top.size(); ++i) {
      const Candidate& cand = ch.top[i];
      std::printf("  %2zu. %8d %-24s %.9g", i + 1, cand.id,
                  ("\"" + printable(model->token_text(cand.id)) + "\"").c_str(), cand.logit);
      if (a.route.logprobs) std::printf("  logprob %.6f", cand.logprob);
      std::printf("\n");
    }
  }
  print_stage_times(r.times, a.profile);
  if (!a.out.empty()) std::printf("wrote capped logits [%d, %lld] to %s\n", r.tokens, static_cast<long long>(c.vocab), a.out.c_str());
  if (!a.dump.empty()) std::printf("wrote every stage to %s/\n", a.dump.c_str());
  return 0;
}

}  // namespace

Action register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run hidden states through the tail and choose tokens");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("MODEL", a->model, "GGUF checkpoint")->required();
  cmd->add_option("--hidden", a->hidden, "INPUT: a .npy (f32 [H] or [T, H]) or FILE.gguf:TENSOR (F32, ggml dims [H, T])")->required();
  a->route.top_k = 5;
  add_route_options(*cmd, a->route);
  add_sample_options(*cmd, a->sample);
  add_model_options(*cmd, a->model_args);
  cmd->add_option("--out", a->out, "write the capped logits as f32 .npy [T, V]");
  cmd->add_option("--dump", a->dump, "write every stage as DIR/<stage>.npy");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->add_flag("--profile", a->profile, "print each stage's time");
  add_backend_options(*cmd, a->backend);
  return [a]() { return run(*a); };
}

}  // namespace lmhead::cli
