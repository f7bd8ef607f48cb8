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
#include <utility>
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

// Whose order the head's dot products follow (numerics.md, "The llama.cpp route").
enum class Route {
  vec_dot,   // default: ggml's vec_dot order for every T (batch-invariant); llama.cpp's own bytes
             // where llama.cpp takes that path (RunResult::llamacpp_path says when)
  llamacpp,  // what llama.cpp's x86 CPU backend computes for this head type and token count (its
             // tiled, repacked and sgemm paths included); a backend or head type without the path
             // is refused by name. Needs ActivationRoute::q8.
  tiled,     // llama.cpp's tiled K-quant order (one float chain per output, exact integers per
             // super-block) at every T for Q4_K, Q5_K and Q6_K heads: batch-invariant, the same bytes
             // on every backend, llama.cpp's own where it takes that path (Q5_K, Q6_K from 8
             // tokens); other head types keep vec_dot's order. Needs ActivationRoute::q8.
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
std::string_view to_string(Route);
bool parse(std::string_view, Route&);
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
  bool has_head_bias = false;      // output.bias is added to the raw logits, before scale and cap
  bool has_norm_bias = false;      // output_norm.bias is added after gamma (LayerNorm + bias)
  std::vector<std::string> overrides;  // the overrides given, as KEY=TYPE:VALUE
};

// llama.cpp's CPU path (commit 0c1e570, x86 AVX-512 build) for a head at `tokens` tokens per call:
// "vec_dot", "llamafile_sgemm_q8_0", "tiled_kquant", "repack_q4_K_8x8", "vec_dot_f16",
// "llamafile_sgemm_f16", "vec_dot_bf16", "llamafile_sgemm_bf16", "vec_dot_f32", "llamafile_sgemm_f32"
// or "unsupported"; `why` (optional) gets the reason from llama.cpp's source.
std::string llamacpp_path(const HeadConfig& head, int tokens, std::string* why = nullptr);

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
  const float* norm_bias() const;       // beta, hidden f32, or nullptr (no output_norm.bias)
  const float* head_bias() const;       // output.bias, vocab f32, or nullptr
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
  // cuda, Q5_K heads: also hold the head's second stream layout on each GPU (the head's bytes
  // once more) so that 1- and 2-token calls take their faster kernels; by default each GPU holds
  // one copy, in the layout every token count can read (docs/cuda.md, "Device layouts"; the
  // measured gain: docs/performance.md). Other head types hold one copy either way.
  bool cuda_second_layout = false;
};

// Choosing the token by seeded sampling (numerics.md §9), applied to the capped logits in vLLM's
// order: bias and mask, temperature, min-p, top-k, top-p. The defaults choose the argmax. The
// draw is a pure function of (logits, options, seed, position): no backend, thread count, shard
// count or split of the tokens over calls can change it.
struct SamplingOptions {
  float temperature = 0;  // 0: greedy (largest biased logit among the allowed ids, lowest id on ties)
  int top_k = 0;          // keep the k most likely ids; 0: off
  float top_p = 1;        // keep the most likely ids until their mass reaches top_p, in (0, 1]; 1: off
  float min_p = 0;        // keep ids with p >= min_p * p_max, in [0, 1]; 0: off
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to an id's capped logit (once per id)
  // Allowed ids as a bitmask, the layout grammar engines produce: bit (id % 32) of word id / 32,
  // ceil(V / 32) words for every token, or tokens x that for one mask per token. Empty: all allowed.
  std::vector<uint32_t> allowed;
  uint64_t seed = 0;
  int64_t position = 0;   // the first token's position; token t of the call draws at position + t
};

struct RunOptions {
  InputKind input = InputKind::hidden;
  ActivationRoute activations = ActivationRoute::q8;
  SoftcapRoute softcap = SoftcapRoute::nodes;
  Route route = Route::vec_dot;
  int top_k = 0;             // 0: argmax only
  bool logprobs = false;     // log_softmax for the argmax and the top-k
  bool want_logits = false;  // return the capped logits [T, V]
  bool want_stages = false;  // return every intermediate stage (for --dump)
  SamplingOptions sampling{};  // TokenChoice::sampled; the defaults make it the argmax
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
  int32_t sampled = 0;               // the token RunOptions::sampling chose (the argmax by default)
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
  // llama.cpp's CPU path for this head at this call's token count, and whether the route that ran
  // reproduces it (always with Route::llamacpp; with vec_dot only where that path is vec_dot's order).
  std::string llamacpp_path;
  bool reproduces_llamacpp = false;
};

// Speculative verification (Engine::verify): how many draft tokens the target accepts and the token
// that follows them.
struct VerifyResult {
  int accepted = 0;       // draft tokens accepted, 0..drafts
  int32_t next = -1;      // the target's token after them (a correction, or the bonus token)
  std::vector<int32_t> target;  // the target's own choice at each position checked (accepted + 1)
  RunResult run;          // the run over all drafts + 1 rows (argmax, top-k, ... per row)
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
  // The same with the rows in GPU memory: a cuda engine only, tokens x hidden f32, row-major, on
  // the engine's GPU, written by work queued on cuda_stream (a cudaStream_t; nullptr: the legacy
  // default stream). A one-GPU engine reads them in place once that stream's work queued so far is
  // done, and checks them on the device (the same Error as run()); an engine split over shards or
  // GPUs copies them to the host first. Returns when the answers are on the host: the rows may be
  // overwritten then. Not for use inside a CUDA graph capture of cuda_stream.
  RunResult run_device(const float* hidden, int tokens, void* cuda_stream = nullptr, const RunOptions& options = {});
  // Speculative verification: hidden holds drafts + 1 rows, row j the state after draft token j - 1
  // (row 0 the state before the first draft), at positions sampling.position + j. Temperature 0:
  // a draft token is accepted while it equals that row's greedy choice. Temperature > 0 without
  // draft_probs: accepted while it equals the token run() would sample there. With draft_probs
  // (drafts x V probabilities of the draft model): accepted with probability min(1, p/q); on a
  // rejection `next` is drawn from max(0, p - q) normalized; the output distribution is the
  // target's (numerics.md §9). After every draft is accepted, `next` is the last row's token.
  VerifyResult verify(std::span<const float> hidden, std::span<const int32_t> draft, const RunOptions& options = {},
                      std::span<const float> draft_probs = {});
  std::string backend_name() const;
  // Bytes of the head held in GPU memory now (0 on the CPU); a copy a plan reads only on some
  // routes (the file's rows next to the stream layouts) is counted once a call has needed it.
  uint64_t device_bytes() const;
  const Model& model() const { return *model_; }

 private:
  struct DeviceRows;
  RunResult run_rows(const float* hidden, int tokens, const RunOptions& options, const DeviceRows* device);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  BackendKind backend_kind_ = BackendKind::cpu;
  std::mutex run_mutex_;
  struct SamplePool;  // threads for the host sampler, made on the first call that samples there
  std::unique_ptr<SamplePool> sample_pool_;
  int sample_threads_ = 0;
};

// The per-token byte bill of numerics.md §10 for this head: each stage's traffic, the figures the
// head's format implies, and (byte_bill with a backend) what that backend really moves per token.
struct ByteBill {
  uint64_t weights = 0, normed = 0, logits = 0, softcap_nodes = 0, softcap_one_pass = 0, argmax = 0;
  uint64_t head_bias = 0;        // output.bias read (0 without one)
  double bits_per_weight = 0;    // head bytes x 8 / (vocab x hidden)
  uint64_t q4_k_weights = 0;     // the same head as Q4_K (0 when hidden is not a multiple of 256)
  // Filled by byte_bill(config, backend, softcap): the traffic of one argmax-only call per token.
  // The scalar backend runs the stages one by one (logits written, the cap's passes, an argmax
  // pass); the cpu backend scales, caps and chooses in the head's epilogue while a tile is in
  // cache (no logits written); the cuda backend does too but stores the capped logits once.
  uint64_t moved = 0;
  bool cap_passes = false;       // the cap and the argmax read the logits again (scalar backend)
  bool logits_stored = false;    // the capped logits are written to memory
};
ByteBill byte_bill(const HeadConfig&);
ByteBill byte_bill(const HeadConfig&, BackendKind backend, SoftcapRoute softcap = SoftcapRoute::nodes);

}  // namespace lmhead
