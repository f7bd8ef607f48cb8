#pragma once
// Shared pieces of the `lmhead` subcommands: every subcommand is a client of the public API.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lmhead/bench.hpp"
#include "lmhead/lmhead.hpp"
#include "lmhead/synthetic.hpp"

namespace lmhead::cli {

using Action = std::function<int()>;
// Each subcommand registers itself and returns the action to run when it was chosen.
Action register_info(CLI::App& app);
Action register_run(CLI::App& app);
Action register_make(CLI::App& app);
Action register_bench(CLI::App& app);
Action register_demo(CLI::App& app);
Action register_verify(CLI::App& app);
Action register_compare(CLI::App& app);
Action register_quantize(CLI::App& app);

using lmhead::with_commas;
// A single-line progress bar on stderr, redrawn at most every 1 % (and only once when not a TTY).
class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  void update(uint64_t done);
  void finish();
 private:
  std::string label_;
  uint64_t total_;
  int last_percent_ = -1;
  bool tty_;
};

// The options every backend-using command takes.
struct BackendOptions {
  std::string backend = "cpu";
  int threads = 0;
  int gpus = 1;
  int shards = 0;
  int nccl_rank = 0, nccl_ranks = 0;
  std::string nccl_id;
  bool cuda_second_layout = false;
  EngineOptions engine_options() const;
};
void add_backend_options(CLI::App& cmd, BackendOptions& o);

// --override-kv KEY=TYPE:VALUE (llama.cpp's syntax), for every command that opens a checkpoint.
struct ModelArgs {
  std::vector<std::string> override_kv;
  ModelOptions options() const;  // throws Error naming a malformed override
};
void add_model_options(CLI::App& cmd, ModelArgs& o);

// The route options `run` and `bench` share: what the input is and how the head computes it.
struct RouteArgs {
  std::string input = "hidden", activations = "q8", softcap = "nodes", route = "vec_dot";
  int top_k = 0;
  bool logprobs = false;
  RunOptions options() const;
};
void add_route_options(CLI::App& cmd, RouteArgs& o);

// Seeded sampling options (run, verify, bench): --temperature, --sample-top-k, --top-p, --min-p,
// --logit-bias ID=VALUE,..., --allowed-mask FILE, --seed, --position.
struct SampleArgs {
  float temperature = 0, top_p = 1, min_p = 0;
  int top_k = 0;
  std::string logit_bias, allowed_mask;
  uint64_t seed = 0;
  int64_t position = 0;
  bool active() const;  // anything but the greedy defaults
  SamplingOptions options() const;  // throws Error naming a malformed bias or an unreadable mask file
};
void add_sample_options(CLI::App& cmd, SampleArgs& o);
// llama.cpp's CPU path for this head by token count: ranges [first, last] of T with one path each
// (last = 0: that T and every larger one; no path changes past 8 tokens in llama.cpp 0c1e570).
struct PathRange {
  int first = 1, last = 0;
  std::string path, why;
};
std::vector<PathRange> llamacpp_path_ranges(const HeadConfig& c);

// `lmhead make`'s options: the checkpoint, its head type as spelled on the command line, the bar.
struct MakeOptions {
  SyntheticCheckpoint head;
  std::string type = "q5_K";
  bool quiet = false;
};
// Writes it with a progress bar (also used by the demo to build its cache).
void make_checkpoint(const std::string& path, const MakeOptions& o);

// The bill, what each backend moves, and the derived figures; file_bytes > 0 adds the head's share.
void print_byte_bill(const HeadConfig& c, uint64_t file_bytes = 0);
// One line of labelled stage times; `table` prints one stage per line with its share of the total.
void print_stage_times(const std::vector<StageTime>& times, bool table);

}  // namespace lmhead::cli
