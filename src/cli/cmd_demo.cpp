// The main job: a Muse Glimmer-shaped checkpoint (made once and cached), one deterministic hidden
// state through the whole tail, the tokens, each stage's time under its own label, and the byte bill.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common.hpp"

namespace lmhead::cli {
namespace {

struct DemoArgs {
  std::string model;
  int tokens = 1;
  BackendOptions backend;
};

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string default_cache_path() {
  std::string dir;
  if (const char* d = std::getenv("LMHEAD_CACHE_DIR")) dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME")) dir = std::string(x) + "/lmhead";
  else if (const char* h = std::getenv("HOME")) dir = std::string(h) + "/.cache/lmhead";
  else dir = ".lmhead-cache";
  // mkdir -p, one level at a time.
  for (size_t pos = 1; pos != std::string::npos; pos = dir.find('/', pos + 1)) mkdir(dir.substr(0, pos).c_str(), 0777);
  mkdir(dir.c_str(), 0777);
  return dir + "/muse-glimmer-q5k.gguf";
}

int demo(const DemoArgs& a) {
  const std::string path = a.model.empty() ? default_cache_path() : a.model;
  if (!exists(path)) {
    std::printf("creating the Muse Glimmer-shaped checkpoint once: %s\n", path.c_str());
    std::fflush(stdout);
    const MakeOptions muse;  // the defaults: the Muse Glimmer shape
    make_checkpoint(path, muse);
  } else {
    std::printf("using cached checkpoint %s\n", path.c_str());
  }
  auto model = Model::open(path);
  const HeadConfig& c = model->config();
  std::printf("head: %s %s rows x %s, %s B, logit_scale %.6g, soft cap %.6g\n",
              std::string(tensor_type_name(c.head_type)).c_str(), with_commas(c.vocab).c_str(),
              with_commas(c.hidden).c_str(), with_commas(c.head_bytes).c_str(), c.logit_scale, c.softcap);

  Engine engine(model, a.backend.engine_options());
  const std::vector<float> hidden = synthetic_hidden_states(a.tokens, c.hidden, 42);
  RunOptions ro;
  ro.top_k = 5;
  ro.logprobs = true;
  ro.stage_times = true;
  engine.run(hidden, a.tokens, ro);  // first pass pages the weights in from disk
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = engine.run(hidden, a.tokens, ro);
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::printf("backend %s, %d token(s), deterministic hidden state (seed 42)\n", r.backend.c_str(), r.tokens);
  for (int t = 0; t < r.tokens; ++t) {
    const TokenChoice& ch = r.choices[t];
    std::printf("token %d -> id %d \"%s\" (capped logit %.6g, logprob %.4f)\n", t, ch.argmax,
                std::string(model->token_text(ch.argmax)).c_str(), ch.value, ch.logprob);
    for (const Candidate& cand : ch.top)
      std::printf("    %8d %-16s %.6g  logprob %.4f\n", cand.id, std::string(model->token_text(cand.id)).c_str(),
                  cand.logit, cand.logprob);
  }
  print_stage_times(r.times, true);
  std::printf("wall time %.3f ms: %.2f GB/s of head weights\n", wall, double(c.head_bytes) / (wall * 1e-3) / 1e9);
  print_byte_bill(c);
  return 0;
}

}  // namespace

Action register_demo(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "The main job: make (once) a Muse-shaped checkpoint and run the tail on it");
  auto a = std::make_shared<DemoArgs>();
  cmd->add_option("--model", a->model, "checkpoint to use instead of the cached Muse-shaped one");
  cmd->add_option("--tokens", a->tokens, "tokens in the batch")->check(CLI::Range(1, 64))->capture_default_str();
  add_backend_options(*cmd, a->backend);
  return [a]() { return demo(*a); };
}

}  // namespace lmhead::cli
