#pragma once
// lmhead public API: open a GGUF checkpoint's head, run T hidden states through
// RMSNorm -> quantized LM head -> logit scale -> soft cap, and choose tokens.
//
//   auto model = lmhead::Model::open("muse.gguf");
//   lmhead::Engine engine(model, {.backend = lmhead::BackendKind::cpu});
//   lmhead::RunResult r = engine.run(hidden, /*tokens=*/1, {.top_k = 5});
//   r.tokens[0].argmax ...
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmhead/error.hpp"
#include "lmhead/tensor_type.hpp"

namespace lmhead {

// How the activations meet the weights (numerics.md §4/§5).
enum class ActivationRoute {
  q8,   // llama.cpp's CPU route: Q8_K (K-quant heads) / Q8_0 (Q8_0 heads); byte-exact for Q5_K
  f32,  // no activation quantization: dequantized weights times f32 activations
};

// Which expression tree computes the soft cap (numerics.md §7).
enum class SoftcapRoute {
  nodes,  // a*s, *(1/cap), tanhf, *cap: llama.cpp's graph, byte-exact
  fused,  // cap * tanhf(v / cap): one formula, differs in the last ulp for some inputs
};

enum class BackendKind {
  scalar,  // the portable reference: every fast path is tested against it byte for byte
  cpu,     // the best CPU kernels for this machine (falls back to scalar)
  cuda,    // NVIDIA GPU
};

std::string_view to_string(ActivationRoute);
std::string_view to_string(SoftcapRoute);
std::string_view to_string(BackendKind);
bool parse(std::string_view, ActivationRoute&);
bool parse(std::string_view, SoftcapRoute&);
bool parse(std::string_view, BackendKind&);

// The head's configuration as read from metadata (numerics.md §2); *_is_default marks values that
// were absent from the file and filled in by the rules there.
struct HeadConfig {
  std::string architecture;
  int64_t hidden = 0;
  int64_t vocab = 0;
  TensorType head_type = TensorType::F32;
  std::string head_tensor;         // "output.weight", or "token_embd.weight" for a tied head
  bool tied = false;
  float logit_scale = 1.0f;
  bool logit_scale_is_default = false;
  float softcap = 30.0f;           // 0: scale only
  bool softcap_is_default = false;
  float eps = 1e-5f;
  bool eps_is_default = false;
  uint64_t head_bytes = 0;         // bytes of the head's weight tensor
  uint64_t row_bytes = 0;
};

// A checkpoint's head: the mapped file plus the configuration. Immutable after open, so one
// Model can be shared by any number of engines and threads.
class Model {
 public:
  static std::shared_ptr<const Model> open(const std::string& path);
  ~Model();

  const HeadConfig& config() const;
  const std::string& path() const;
  const uint8_t* head_weights() const;  // vocab rows of row_bytes, in the mapped file
  const float* norm_weight() const;     // gamma, hidden f32 (aligned copy if the file's is not)
  bool has_token_texts() const;
  std::string_view token_text(int64_t id) const;  // "" when the file has no token table

  struct Impl;
  explicit Model(std::unique_ptr<Impl>);
 private:
  std::unique_ptr<Impl> impl_;
};

struct EngineOptions {
  BackendKind backend = BackendKind::cpu;
  int threads = 0;  // 0: all hardware threads
  int gpus = 1;
  // Vocabulary-parallel split: the rows go to this many shards, each its own backend instance,
  // merged by exchanging per-token summaries. 0: one shard per GPU for cuda, one for the CPU.
  // Any value gives the same bytes.
  int shards = 0;
  // One process per GPU (cuda only): this process is rank nccl_rank of nccl_ranks (> 1), runs only
  // its shard, and the ranks exchange per-token summaries through NCCL; they meet through NCCL's
  // unique id, which rank 0 writes atomically to nccl_id_file. 0 ranks: one process.
  int nccl_rank = 0;
  int nccl_ranks = 0;
  std::string nccl_id_file{};
};

struct RunOptions {
  ActivationRoute activations = ActivationRoute::q8;
  SoftcapRoute softcap = SoftcapRoute::nodes;
  int top_k = 0;             // 0: argmax only
  bool logprobs = false;     // log_softmax for the argmax and the top-k
  bool want_logits = false;  // return the capped logits [T, V]
  bool want_stages = false;  // return every intermediate stage (for --dump)
  bool stage_times = false;  // time each stage apart (CUDA: event nodes between the stages, a few
                             // microseconds per call); otherwise RunResult::times holds one total
};

struct Candidate {
  int32_t id = 0;
  float logit = 0;     // capped logit
  float logprob = 0;   // only when RunOptions::logprobs
};

struct TokenChoice {
  int32_t argmax = 0;
  float value = 0;
  float logprob = 0;                 // only when RunOptions::logprobs
  int64_t tie_count = 1;             // how many ids share the maximum value
  std::vector<int32_t> tied_ids;     // the first few of them, ascending (only when tie_count > 1)
  std::vector<Candidate> top;        // top-k: value descending, id ascending
};

// Every intermediate stage, row-major [T, H] or [T, V].
struct Stages {
  std::vector<float> normed, raw, scaled, div, tanh, capped;
};

// Wall time of one labelled stage of one run. The head's time is booked under "head" (or a
// fused label naming the head) and never under the soft cap.
struct StageTime {
  std::string label;
  double ms = 0;
};

struct RunResult {
  int tokens = 0;
  std::vector<TokenChoice> choices;  // one per token
  std::vector<float> logits;         // [T, V] capped, when want_logits
  Stages stages;                     // when want_stages
  std::vector<StageTime> times;
  std::string backend;               // name of the backend that ran
};

class Backend;

class Engine {
 public:
  Engine(std::shared_ptr<const Model> model, const EngineOptions& options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // hidden: tokens x hidden f32, row-major. Throws Error naming token and index for non-finite input.
  // Any thread may call; calls on one engine run one at a time (a backend owns per-call buffers),
  // so concurrent streams of work take one engine each.
  RunResult run(std::span<const float> hidden, int tokens, const RunOptions& options = {});
  std::string backend_name() const;
  const Model& model() const { return *model_; }

 private:
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  std::mutex run_mutex_;
};

// The per-token byte bill of numerics.md §10 for this head.
struct ByteBill {
  uint64_t weights = 0, normed = 0, logits = 0, softcap_nodes = 0, softcap_one_pass = 0, argmax = 0;
};
ByteBill byte_bill(const HeadConfig&);

}  // namespace lmhead
