#pragma once
// The seam between the model layer and the compute backends (scalar, cpu SIMD, cuda).
// A backend owns everything per call: the final norm (RMSNorm or LayerNorm), activation quantization, the head, scale, cap and
// the per-token summaries (argmax, ties, top-k, sum of exponentials), so a fast backend can fuse
// them into one pass while the scalar backend computes them stage by stage as the oracle.
#include <memory>
#include <string>
#include <vector>

#include "lmhead/bench.hpp"  // the read ceilings, which each backend implements
#include "lmhead/lmhead.hpp"
#include "quant/llamacpp_route.hpp"
#include "select/token_summary.hpp"

namespace lmhead {

// What a backend needs to know about the head; pointers into the mapped file.
struct HeadView {
  TensorType type = TensorType::F32;
  const uint8_t* weights = nullptr;  // vocab rows of row_bytes
  int64_t vocab = 0;
  int64_t hidden = 0;
  uint64_t row_bytes = 0;
  const float* gamma = nullptr;      // hidden f32
  bool layer_norm = false;           // LayerNorm (ggml_norm) instead of RMSNorm
  const float* beta = nullptr;       // hidden f32 added after gamma (LayerNorm + bias), or nullptr
  const float* head_bias = nullptr;  // vocab f32 (this view's rows) added to the raw logits, or nullptr
  float eps = 1e-5f;
  float logit_scale = 1.0f;
  float softcap = 0.0f;              // 0: scale only
  // How a cuda backend holds the head (EngineOptions::cuda_second_layout), not what it computes.
  bool cuda_second_layout = false;
};

// The head of an opened model as the backends see it (pointers into the model's mapping).
inline HeadView head_view(const Model& m) {
  const HeadConfig& c = m.config();
  HeadView h;
  h.type = c.head_type;
  h.weights = m.head_weights();
  h.vocab = c.vocab;
  h.hidden = c.hidden;
  h.row_bytes = c.row_bytes;
  h.gamma = m.norm_weight();
  h.layer_norm = c.final_norm != "rmsnorm";
  h.beta = m.norm_bias();
  h.head_bias = m.head_bias();
  h.eps = c.eps;
  h.logit_scale = c.logit_scale;
  h.softcap = c.softcap;
  return h;
}

// Tokens of one Backend::forward() at most: the engine splits longer batches into passes of this many.
constexpr int kMaxTokensPerPass = 16;

struct ForwardRequest {
  bool input_normed = false;  // the rows are already through the final norm: skip it (InputKind::normed)
  ActivationRoute activations = ActivationRoute::q8;
  SoftcapRoute softcap = SoftcapRoute::nodes;
  Route route = Route::vec_dot;
  // Route::llamacpp: llama.cpp's path, chosen by the engine from the whole head and the whole call's
  // token count (a pass has at most kMaxTokensPerPass tokens and a shard only some rows; neither changes the path).
  quant::LlamaCppPath llamacpp_path = quant::LlamaCppPath::vec_dot;
  int top_k = 0;
  bool logprobs = false;     // fill ForwardOutput::sum_exp
  bool want_logits = false;  // fill ForwardOutput::logits
  bool want_stages = false;  // fill ForwardOutput::stages (implies logits)
  bool want_stage_times = false;  // ForwardOutput::times per stage (else a backend may report one total)
  // The rows are in GPU memory (Engine::run_device; only for a backend that takes_device_input()),
  // written by work queued on input_stream (a cudaStream_t; nullptr: the legacy default stream).
  // The backend checks them for NaN and infinity itself, naming token first_token + t.
  bool input_on_device = false;
  void* input_stream = nullptr;
  int first_token = 0;            // this pass's first token within the engine's call (messages)
  // Sampling inside the backend (only with options it samples(), numerics.md §9): token t of the
  // pass draws at sample_position + t with the mask row sample_mask + t * sample_mask_stride words
  // (stride 0: one row for every token; sample_mask nullptr: every id allowed).
  const SamplingOptions* sampling = nullptr;
  int64_t sample_position = 0;
  const uint32_t* sample_mask = nullptr;
  size_t sample_mask_stride = 0;
};

struct ForwardOutput {
  std::vector<select::TokenSummary> summaries;  // one per token
  std::vector<double> sum_exp;                  // per token, sum of exp(x - summaries[t].max)
  std::vector<float> logits;                    // [T, V] capped
  std::vector<int32_t> sampled;                 // per token, when ForwardRequest::sampling was set
  Stages stages;
  std::vector<StageTime> times;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // hidden: tokens x head.hidden f32, checked finite by the engine unless checks_finite_input().
  virtual void forward(const float* hidden, int tokens, const ForwardRequest& request,
                       ForwardOutput& out) = 0;
  // True when forward() refuses a non-finite hidden value itself, before any device work, with
  // non_finite_hidden_error (backend/input_check.hpp): the engine then skips its own pass.
  virtual bool checks_finite_input() const { return false; }
  // True when forward() honours ForwardRequest::input_normed; the engine refuses normed input
  // for a backend that does not (it would apply the norm a second time).
  virtual bool takes_normed_input() const { return false; }
  // True when forward() reads rows in GPU memory in place (ForwardRequest::input_on_device).
  virtual bool takes_device_input() const { return false; }
  // True when forward() computes Route::llamacpp's paths; the engine refuses the route otherwise.
  virtual bool takes_llamacpp_route() const { return false; }
  // True when forward() draws the sampled token itself for these options (ForwardRequest::sampling),
  // the same token as the host sampler's; otherwise the engine samples from the returned logits.
  virtual bool samples(const SamplingOptions&) const { return false; }
  // Bytes of the head this backend holds on accelerators now (the CPU backends read the mapped file).
  virtual uint64_t device_bytes() const { return 0; }
};

std::unique_ptr<Backend> make_scalar_backend(const HeadView& head);
std::unique_ptr<Backend> make_cpu_backend(const HeadView& head, int threads);
// Throws Error when lmhead was built without CUDA or no GPU is usable.
std::unique_ptr<Backend> make_cuda_backend(const HeadView& head, int gpus);
// One CUDA backend on device `device` (0-based), for the multi-GPU wrappers.
std::unique_ptr<Backend> make_cuda_backend_on_device(const HeadView& head, int device);
// Vocabulary-parallel CUDA head in one process: `shards` contiguous shards spread round-robin over
// devices 0..gpus-1, merged by exchanging per-token summaries (src/cuda/multi_gpu.cpp).
std::unique_ptr<Backend> make_multi_gpu_backend(const HeadView& head, int shards, int gpus);
// One rank of a one-process-per-GPU head: this process runs shard `rank` of `ranks` and the ranks
// exchange packed per-token summaries through NCCL; they meet through NCCL's unique id, which
// rank 0 writes atomically to `id_file` (src/dist/). Throws Error when built without NCCL.
std::unique_ptr<Backend> make_nccl_rank_backend(const HeadView& head, int rank, int ranks, const std::string& id_file);
bool cuda_available(std::string* why_not = nullptr);
// Copies n floats of GPU memory to `host` after the work queued on `stream` (a cudaStream_t;
// nullptr: the legacy default stream), for the engines whose backend reads host memory only.
void copy_device_rows_to_host(const float* device, size_t n, void* stream, float* host);

}  // namespace lmhead
