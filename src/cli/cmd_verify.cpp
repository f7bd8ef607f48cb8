// `lmhead verify`: speculative verification of draft tokens against the head (numerics.md §9b).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "lmhead/files.hpp"

namespace lmhead::cli {
namespace {

struct VerifyArgs {
  std::string model, hidden, draft, draft_probs;
  bool json = false;
  RouteArgs route;
  SampleArgs sample;
  ModelArgs model_args;
  BackendOptions backend;
};

std::vector<int32_t> parse_draft(const std::string& list) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    try {
      size_t used = 0;
      const long long id = std::stoll(item, &used);
      if (used != item.size() || id < INT32_MIN || id > INT32_MAX) throw std::invalid_argument(item);
      out.push_back(int32_t(id));
    } catch (const std::exception&) {
      throw Error("--draft takes token ids separated by commas (e.g. 17,4,903), got '" + item + "'");
    }
    start = end + 1;
  }
  return out;
}

int verify(const VerifyArgs& a) {
  RunOptions opts = a.route.options();
  opts.sampling = a.sample.options();
  auto model = Model::open(a.model, a.model_args.options());
  const HeadConfig& c = model->config();
  const HiddenStates hidden = load_hidden_states(a.hidden);
  if (hidden.hidden != c.hidden)
    throw Error("hidden state '" + a.hidden + "' has " + std::to_string(hidden.hidden) +
                " values per token, the model's hidden size is " + std::to_string(c.hidden));
  const std::vector<int32_t> draft = parse_draft(a.draft);
  if (hidden.tokens != int64_t(draft.size()) + 1)
    throw Error("hidden state '" + a.hidden + "' has " + std::to_string(hidden.tokens) + " rows; " +
                std::to_string(draft.size()) + " draft tokens need " + std::to_string(draft.size() + 1) +
                " (the state before each draft token and the one after the last)");
  std::vector<float> q;
  if (!a.draft_probs.empty()) {
    const HiddenStates p = read_npy_f32(a.draft_probs);
    if (p.tokens != int64_t(draft.size()) || p.hidden != c.vocab)
      throw Error("draft probabilities '" + a.draft_probs + "' are [" + std::to_string(p.tokens) + ", " +
                  std::to_string(p.hidden) + "], expected [" + std::to_string(draft.size()) + ", " +
                  std::to_string(c.vocab) + "] (drafts x vocabulary)");
    q = p.values;
  }
  opts.top_k = static_cast<int>(std::min<int64_t>(opts.top_k, c.vocab));
  Engine engine(model, a.backend.engine_options());
  const VerifyResult v = engine.verify(hidden.values, draft, opts, q);
  if (a.json) {
    nlohmann::json j = {{"accepted", v.accepted},
                        {"next", v.next},
                        {"next_text", std::string(model->token_text(v.next))},
                        {"drafts", draft.size()},
                        {"target", v.target},
                        {"rule", q.empty() ? (opts.sampling.temperature == 0 ? "greedy" : "target draw")
                                           : "rejection (min(1, p/q), residual max(0, p - q))"},
                        {"position", opts.sampling.position},
                        {"backend", v.run.backend}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %zu draft token(s), accepted %d, next %d \"%s\" (backend %s)\n", a.model.c_str(), draft.size(),
              v.accepted, v.next, std::string(model->token_text(v.next)).c_str(), v.run.backend.c_str());
  return 0;
}

}  // namespace

Action register_verify(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "Speculative verification: how many draft tokens the head accepts, and the next token");
  auto a = std::make_shared<VerifyArgs>();
  cmd->add_option("MODEL", a->model, "GGUF checkpoint")->required();
  cmd->add_option("--hidden", a->hidden,
                  "INPUT: drafts + 1 rows (.npy f32 [T, H] or FILE.gguf:TENSOR): the state before each draft token "
                  "and the one after the last")->required();
  cmd->add_option("--draft", a->draft, "ID,ID,...: the draft tokens")->required();
  cmd->add_option("--draft-probs", a->draft_probs, "Q.npy: the draft model's probabilities, f32 [drafts, V] (rejection rule)");
  add_route_options(*cmd, a->route);
  add_sample_options(*cmd, a->sample);
  add_model_options(*cmd, a->model_args);
  cmd->add_flag("--json", a->json, "print one JSON object");
  add_backend_options(*cmd, a->backend);
  return [a]() { return verify(*a); };
}

}  // namespace lmhead::cli
