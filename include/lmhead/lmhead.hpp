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

// What Engine::run is given per token (numerics.md §1).
enum class InputKind {
  hidden,  // the last layer's output: the final norm is applied first
  normed,  // already through the final norm (HF's hidden_states[-1], llama.cpp's embeddings):
           // taken as `normed`; on the q8 route it is still quantized as llama.cpp does
};

// Where a value in force came from (shown by `info`).
enum class ValueSource {
  file,          // the checkpoint's metadata
  arch_default,  // absent from the file: the architecture's default (docs/architectures.md)
  override_kv,   // a metadata override (--override-kv, ModelOptions::overrides)
  not_applied,   // the architecture's graph never applies it: any value in the file is ignored
};

std::string_view to_string(InputKind);
std::string_view to_string(ValueSource);
bool parse(std::string_view, InputKind&);
std::string_view to_string(ActivationRoute);
std::string_view to_string(SoftcapRoute);
std::string_view to_string(BackendKind);
bool parse(std::string_view, ActivationRoute&);
bool parse(std::string_view, SoftcapRoute&);
bool parse(std::string_view, BackendKind&);

// A metadata override in llama.cpp's `--override-kv` syntax, KEY=TYPE:VALUE with TYPE one of
// int, float, bool, str (e.g. "granite.logit_scale=float:8", "general.architecture=str:llama").
// It replaces (or adds) the key before the architecture's rule reads the metadata.
struct MetadataOverride {
  enum class Type { int_value, float_value, bool_value, str_value };
  std::string key;
  Type type = Type::float_value;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  // Throws Error naming what is wrong (no '=', an unknown type, a value that does not parse).
  static MetadataOverride parse(std::string_view text);
  std::string text() const;  // back to KEY=TYPE:VALUE
};

struct ModelOptions {
  std::vector<MetadataOverride> overrides;  // a key given twice: the last one wins
};

// The head's configuration (numerics.md §2): the architecture's rule (docs/architectures.md) applied
// to the metadata. *_from says where each value came from; *_is_default is *_from == arch_default.
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
  // The rule in force, from docs/architectures.md.
  std::string rule_source;         // the llama.cpp model source the rule is derived from
  std::string logit_scale_rule;    // e.g. "multiply, always" / "divide, always" / "never"
  std::string softcap_rule;        // e.g. "always" / "if nonzero" / "never"
  std::string final_norm = "rmsnorm";
  std::string eps_key;             // the metadata key eps is read from
  float logit_scale_stated = 1.0f; // the value as stated (granite divides: logit_scale = 1 / it)
  ValueSource logit_scale_from = ValueSource::not_applied;
  ValueSource softcap_from = ValueSource::not_applied;
  ValueSource eps_from = ValueSource::arch_default;
  bool has_head_bias = false;      // output.bias is added to the logits (not computed yet: refused)
  std::vector<std::string> overrides;  // the overrides given, as KEY=TYPE:VALUE
};

// A checkpoint's head: the mapped file plus the configuration. Immutable after open, so one
// Model can be shared by any number of engines and threads.
class Model {
 public:
  // Refuses an architecture without a rule, naming it and how to state one (overrides).
  static std::shared_ptr<const Model> open(const std::string& path, const ModelOptions& options = {});
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
  InputKind input = InputKind::hidden;
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

  // hidden: tokens x hidden f32, row-major (normed vectors with RunOptions::input = normed).
  // Throws Error naming token and index for non-finite input. Any thread may call; calls on one
  // engine run one at a time (a backend owns per-call buffers), so concurrent streams of work take
  // one engine each.
  RunResult run(std::span<const float> hidden, int tokens, const RunOptions& options = {});
  std::string backend_name() const;
  // Bytes of the head held in GPU memory now (0 on the CPU); a copy a plan reads only on some
  // routes (the file's rows next to the stream layouts) is counted once a call has needed it.
  uint64_t device_bytes() const;
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
