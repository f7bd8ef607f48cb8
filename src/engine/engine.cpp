// The public Engine: checks the input, runs the chosen backend in passes of at most
// kMaxTokensPerPass tokens, and turns the backend's per-token summaries into token choices.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/backend.hpp"
#include "backend/input_check.hpp"
#include "backend/sharding.hpp"
#include "cpu/thread_pool.hpp"
#include "model/resources.hpp"
#include "sample/sampler.hpp"
#include "sample/verify.hpp"
#include "quant/llamacpp_route.hpp"
#include "lmhead/lmhead.hpp"

namespace lmhead {

namespace {
template <class E>
struct Names { E value; std::string_view name; };
constexpr Names<ActivationRoute> kActivationNames[] = {{ActivationRoute::q8, "q8"}, {ActivationRoute::f32, "f32"}};
constexpr Names<Route> kRouteNames[] = {
    {Route::vec_dot, "vec_dot"}, {Route::llamacpp, "llamacpp"}, {Route::tiled, "tiled"}};

// Route::tiled's heads: the types llama.cpp's tiled K-quant matmul takes (quant::llamacpp_route.cpp).
bool has_tiled_order(TensorType t) {
  return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K;
}
constexpr Names<SoftcapRoute> kSoftcapNames[] = {{SoftcapRoute::nodes, "nodes"}, {SoftcapRoute::fused, "fused"}};
constexpr Names<BackendKind> kBackendNames[] = {
    {BackendKind::scalar, "scalar"}, {BackendKind::cpu, "cpu"}, {BackendKind::cuda, "cuda"}};

template <class E, size_t N>
std::string_view name_of(const Names<E> (&table)[N], E v) {
  for (const auto& n : table) if (n.value == v) return n.name;
  return "unknown";
}
template <class E, size_t N>
bool parse_name(const Names<E> (&table)[N], std::string_view s, E& out) {
  for (const auto& n : table) if (n.name == s) { out = n.value; return true; }
  return false;
}

void append(std::vector<float>& to, std::vector<float>& from) { to.insert(to.end(), from.begin(), from.end()); }

void add_times(std::vector<StageTime>& to, const std::vector<StageTime>& from) {
  for (const StageTime& t : from) {
    auto it = std::find_if(to.begin(), to.end(), [&](const StageTime& x) { return x.label == t.label; });
    if (it == to.end()) to.push_back(t); else it->ms += t.ms;
  }
}
}  // namespace

std::string_view to_string(ActivationRoute v) { return name_of(kActivationNames, v); }
std::string_view to_string(SoftcapRoute v) { return name_of(kSoftcapNames, v); }
std::string_view to_string(Route v) { return name_of(kRouteNames, v); }
bool parse(std::string_view s, Route& v) { return parse_name(kRouteNames, s, v); }

std::string llamacpp_path(const HeadConfig& c, int tokens, std::string* why) {
  std::string_view w;
  const auto p = quant::llamacpp_path(c.head_type, c.vocab, c.hidden, tokens, &w);
  if (why) *why = std::string(w);
  return std::string(quant::path_name(p));
}
std::string_view to_string(BackendKind v) { return name_of(kBackendNames, v); }
bool parse(std::string_view s, ActivationRoute& v) { return parse_name(kActivationNames, s, v); }
bool parse(std::string_view s, SoftcapRoute& v) { return parse_name(kSoftcapNames, s, v); }
bool parse(std::string_view s, BackendKind& v) { return parse_name(kBackendNames, s, v); }

// The host sampler's threads: as many as the CPU backend's (EngineOptions::threads, 0: every
// hardware thread). Its own pool rather than the backend's: a sharded backend holds several pools
// and a GPU backend none, and the Backend interface lends none. The two pools never compete for
// the cores: the backend's threads sleep once the logits are out.
struct Engine::SamplePool {
  explicit SamplePool(int threads) : pool(threads) {
    workers.count = pool.size();
    workers.run = [this](const std::function<void(int)>& task) { pool.run(task); };
  }
  cpu::ThreadPool pool;
  sample::Workers workers;
};

Engine::Engine(std::shared_ptr<const Model> model, const EngineOptions& options)
    : model_(std::move(model)), backend_kind_(options.backend), sample_threads_(options.threads) {
  if (!model_) throw Error("Engine needs a model");
  HeadView head = head_view(*model_);
  head.cuda_second_layout = options.cuda_second_layout;
  if (options.backend != BackendKind::cuda) {
    // A head that cannot be resident is refused with the numbers, not paged from disk every token.
    const HeadConfig& c = model_->config();
    check_head_fits(c.head_bytes, cpu_working_bytes(c), model_->path());
  }
  if (options.shards < 0) throw Error("shards must be 0 (automatic) or positive");
  const int shards = options.shards > 0 ? options.shards : 1;
  auto make_one = [&](const HeadView& h, int threads) -> std::unique_ptr<Backend> {
    switch (options.backend) {
      case BackendKind::scalar: return make_scalar_backend(h);
      case BackendKind::cpu: return make_cpu_backend(h, threads);
      case BackendKind::cuda: return make_cuda_backend(h, options.gpus);
    }
    throw Error("unknown backend");
  };
  if (options.nccl_ranks > 1 || options.nccl_rank != 0) {
    if (options.backend != BackendKind::cuda) throw Error("the one-process-per-GPU mode (NCCL ranks) needs the cuda backend");
    backend_ = make_nccl_rank_backend(head, options.nccl_rank, options.nccl_ranks, options.nccl_id_file);
  } else if (options.backend == BackendKind::cuda && (options.gpus > 1 || shards > 1)) {
    // One shard per GPU by default; more shards than GPUs go round-robin over the devices.
    backend_ = make_multi_gpu_backend(head, std::max(shards, options.gpus), options.gpus);
  } else if (shards == 1) {
    backend_ = make_one(head, options.threads);
  } else {
    // Shards run concurrently; on the CPU they share the threads asked for.
    const int per_shard = options.threads > 0 ? std::max(1, options.threads / shards) : 1;
    backend_ = make_sharded_backend(head, shards, [&](const HeadView& h, int) { return make_one(h, per_shard); });
  }
}

Engine::~Engine() = default;

std::string Engine::backend_name() const { return backend_->name(); }
uint64_t Engine::device_bytes() const { return backend_->device_bytes(); }

struct Engine::DeviceRows {
  void* stream = nullptr;
};

RunResult Engine::run(std::span<const float> hidden, int tokens, const RunOptions& options) {
  const HeadConfig& c = model_->config();
  if (tokens <= 0) throw Error("run needs at least one token, got " + std::to_string(tokens));
  if (hidden.size() != static_cast<size_t>(tokens) * static_cast<size_t>(c.hidden))
    throw Error("hidden state has " + std::to_string(hidden.size()) + " values, expected " +
                std::to_string(tokens) + " tokens x " + std::to_string(c.hidden));
  return run_rows(hidden.data(), tokens, options, nullptr);
}

RunResult Engine::run_device(const float* hidden, int tokens, void* cuda_stream, const RunOptions& options) {
  if (backend_kind_ != BackendKind::cuda)
    throw Error("run_device reads GPU memory: the " + backend_->name() +
                " backend reads host memory (make the engine with the cuda backend, or use run())");
  if (hidden == nullptr) throw Error("run_device: the hidden states' device pointer is null");
  if (tokens <= 0) throw Error("run needs at least one token, got " + std::to_string(tokens));
  if (backend_->takes_device_input()) {
    const DeviceRows rows{cuda_stream};
    return run_rows(hidden, tokens, options, &rows);
  }
  // A split engine's shards read one host buffer: the rows come over once, after the stream's work.
  std::vector<float> host(static_cast<size_t>(tokens) * static_cast<size_t>(model_->config().hidden));
  copy_device_rows_to_host(hidden, host.size(), cuda_stream, host.data());
  return run_rows(host.data(), tokens, options, nullptr);
}

RunResult Engine::run_rows(const float* hidden, int tokens, const RunOptions& options, const DeviceRows* device) {
  const HeadConfig& c = model_->config();
  const size_t values = static_cast<size_t>(tokens) * static_cast<size_t>(c.hidden);
  if (options.input == InputKind::normed && !backend_->takes_normed_input())
    throw Error("the " + backend_->name() + " backend does not take already-normed input (--input normed)");
  const auto path = quant::llamacpp_path(c.head_type, c.vocab, c.hidden, tokens);
  if (options.route == Route::llamacpp) {
    if (options.activations != ActivationRoute::q8)
      throw Error("route llamacpp reproduces llama.cpp's quantized activations: it needs --activations q8");
    if (!backend_->takes_llamacpp_route())
      throw Error("route llamacpp: the " + backend_->name() + " backend does not compute llama.cpp's " +
                  std::string(quant::path_name(path)) + " path yet; use the cpu or scalar backend");
    if (path == quant::LlamaCppPath::unsupported) {
      std::string why;
      llamacpp_path(c, tokens, &why);
      throw Error("route llamacpp: " + std::string(tensor_type_name(c.head_type)) + " heads are " + why);
    }
  }
  // Route tiled runs as llama.cpp's tiled path at every T, so every backend that computes llama.cpp's
  // paths computes it; other head types keep vec_dot's order.
  const bool tiled = options.route == Route::tiled && has_tiled_order(c.head_type);
  if (options.route == Route::tiled) {
    if (options.activations != ActivationRoute::q8)
      throw Error("route tiled multiplies llama.cpp's quantized activations: it needs --activations q8");
    if (tiled && !backend_->takes_llamacpp_route())
      throw Error("route tiled: the " + backend_->name() + " backend does not compute llama.cpp's tiled order");
  }
  if (options.top_k < 0 || options.top_k > c.vocab)
    throw Error("top-k must be between 0 and the vocabulary size " + std::to_string(c.vocab));
  sample::validate(options.sampling, c.vocab, tokens);
  // Sampling draws with the sampler's integer weights (numerics.md §9), so every backend and every
  // split draws the same token: inside a backend that samples these options (the GPU's kernels, the
  // sharded backend's rounds over its shards), else here from the capped logits. Greedy without
  // bias or mask is the argmax.
  const bool sampling = sample::needs_logits(options.sampling);
  const bool backend_samples = sampling && backend_->samples(options.sampling);
  const bool sample_from_logits = sampling && !backend_samples;
  // One pass through a backend that checks while it copies (it names the same token and index);
  // otherwise every value is checked here, before any pass runs.
  // Rows in device memory are checked on the device, pass by pass (the backend names the token).
  if (device == nullptr && (tokens > kMaxTokensPerPass || !backend_->checks_finite_input()))
    if (const size_t i = first_non_finite(hidden, values); i < values)
      throw non_finite_hidden_error(hidden, i, c.hidden);

  ForwardRequest req;
  req.input_normed = options.input == InputKind::normed;
  req.activations = options.activations;
  req.softcap = options.softcap;
  req.route = tiled ? Route::llamacpp : options.route == Route::tiled ? Route::vec_dot : options.route;
  req.llamacpp_path = tiled ? quant::LlamaCppPath::tiled_kquant : path;
  req.top_k = options.top_k;
  req.logprobs = options.logprobs;
  req.want_logits = options.want_logits || sample_from_logits;
  req.want_stages = options.want_stages;
  req.want_stage_times = options.stage_times;
  req.input_on_device = device != nullptr;
  req.input_stream = device != nullptr ? device->stream : nullptr;
  const size_t mask_words = size_t((c.vocab + 31) / 32);
  if (backend_samples) {
    req.sampling = &options.sampling;
    req.sample_mask_stride = options.sampling.allowed.size() == mask_words ? 0 : mask_words;
  }

  std::lock_guard<std::mutex> one_call_at_a_time(run_mutex_);
  RunResult result;
  result.tokens = tokens;
  result.backend = backend_->name();
  result.llamacpp_path = std::string(quant::path_name(path));
  // vec_dot reproduces llama.cpp wherever llama.cpp's path has vec_dot's order (Q8_0's sgemm has).
  // tiled reproduces it where llama.cpp takes the tiled path.
  result.reproduces_llamacpp = options.activations == ActivationRoute::q8 &&
      (options.route == Route::llamacpp || (tiled ? path == quant::LlamaCppPath::tiled_kquant
                                                  : path == quant::LlamaCppPath::vec_dot ||
                                                        path == quant::LlamaCppPath::sgemm_q8_0));
  for (int first = 0; first < tokens; first += kMaxTokensPerPass) {
    const int n = std::min(kMaxTokensPerPass, tokens - first);
    ForwardOutput out;
    req.first_token = first;
    if (backend_samples) {
      req.sample_position = options.sampling.position + first;
      req.sample_mask = sample::mask_row(options.sampling, c.vocab, first);
    }
    backend_->forward(hidden + static_cast<size_t>(first) * c.hidden, n, req, out);
    std::vector<int32_t> sampled;
    if (sample_from_logits) {
      if (!sample_pool_) sample_pool_ = std::make_unique<SamplePool>(sample_threads_);
      sampled.resize(size_t(n));
      sample::sample_tokens(out.logits.data(), c.vocab, n, options.sampling, first, sampled.data(),
                            &sample_pool_->workers);
    }
    for (int t = 0; t < n; ++t) {
      const select::TokenSummary& s = out.summaries.at(t);
      TokenChoice choice;
      choice.argmax = s.argmax;
      choice.value = s.max;
      choice.tie_count = s.tie_count;
      if (s.tie_count > 1) choice.tied_ids = s.tied_ids;
      choice.top = s.top;
      choice.sampled = s.argmax;
      if (backend_samples) choice.sampled = out.sampled.at(t);
      if (sample_from_logits) choice.sampled = sampled[size_t(t)];
      if (options.logprobs) {
        const double se = out.sum_exp.at(t);
        choice.logprob = select::logprob(s.max, s.max, se);
        for (Candidate& cand : choice.top) cand.logprob = select::logprob(cand.logit, s.max, se);
      }
      result.choices.push_back(std::move(choice));
    }
    if (options.want_logits) append(result.logits, out.logits);
    if (options.want_stages) {
      append(result.stages.normed, out.stages.normed);
      append(result.stages.raw, out.stages.raw);
      append(result.stages.scaled, out.stages.scaled);
      append(result.stages.div, out.stages.div);
      append(result.stages.tanh, out.stages.tanh);
      append(result.stages.capped, out.stages.capped);
    }
    add_times(result.times, out.times);
  }
  return result;
}

VerifyResult Engine::verify(std::span<const float> hidden, std::span<const int32_t> draft, const RunOptions& options,
                            std::span<const float> draft_probs) {
  const HeadConfig& c = model_->config();
  const int rows = int(draft.size()) + 1;
  if (hidden.size() != size_t(rows) * size_t(c.hidden))
    throw Error("verification of " + std::to_string(draft.size()) + " draft tokens needs " + std::to_string(rows) +
                " hidden rows (one per draft token plus one for the token after them), got " +
                std::to_string(hidden.size()) + " values = " + std::to_string(double(hidden.size()) / double(c.hidden)) +
                " rows of " + std::to_string(c.hidden));
  sample::validate_draft(c.vocab, draft, draft_probs);  // before the head runs, not after
  RunOptions o = options;
  // Only the rejection rule reads the logits (p of every id); otherwise the rows' own draws decide.
  o.want_logits = options.want_logits || !draft_probs.empty();
  VerifyResult v;
  v.run = run(hidden, rows, o);
  std::vector<int32_t> drawn;
  for (const TokenChoice& ch : v.run.choices) drawn.push_back(ch.sampled);
  const sample::Verdict verdict =
      sample::verify(v.run.logits.data(), c.vocab, draft, options.sampling, draft_probs, drawn);
  v.accepted = verdict.accepted;
  v.next = verdict.next;
  v.target = verdict.target;
  if (!options.want_logits) v.run.logits.clear();
  return v;
}

}  // namespace lmhead
