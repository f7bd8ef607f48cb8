// The CUDA backend: the head lives on the device (uploaded once), and each call is one CUDA graph:
// RMSNorm + activation quantization (one block per token), the head kernel with the scale, soft
// cap and argmax in its epilogue (its last block merges the argmax and writes the per-token answer
// into mapped host memory), then only what the request asks for (top-k lists, sums of
// exponentials, logits, stages). Every number is byte-identical to the scalar backend's, except
// sum_exp, whose exp() is CUDA's (see docs/cuda.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "backend/head_math.hpp"
#include "cuda/call_results.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_head.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/graph_cache.hpp"
#include "cuda/kernels.hpp"
#include "cuda/multi_gpu.hpp"
#include "cuda/plan.hpp"
#include "cuda/spin.hpp"
#include "quant/activation.hpp"

namespace lmhead {
namespace cuda {
namespace {

constexpr int kPartialBlocksPerSm = 8;
constexpr size_t kGuard = 1024;         // sentinel floats before and after the device logits
constexpr uint32_t kGuardWord = 0xA5A5A5A5u;

// One call as the graph cache sees it: the plan and the request's outputs.
struct Shape {
  int T = 0;
  Plan plan;
  bool float_route = false;
  ActFormat format = ActFormat::q8_K;
  int cap_mode = kScaleOnly;
  int k = 0;
  bool logprobs = false;
  bool logits = false;
  bool stages = false;
  bool events = false;  // event nodes between the stages (TestHooks::stage_events and the request asks for stage times)
  bool pdl = false;
  bool sequential_norm = false;
  bool input_normed = false;  // the prep kernel skips the norm (--input normed)
  bool device_input = false;  // the rows are the caller's device memory (Engine::run_device)

  auto key() const {
    const unsigned flags = unsigned(logprobs) | unsigned(logits) << 1 | unsigned(stages) << 2 | unsigned(events) << 3 |
                           unsigned(pdl) << 4 | unsigned(sequential_norm) << 5 | unsigned(input_normed) << 6 |
                           unsigned(device_input) << 7;
    return std::tuple(T, plan.kernel, plan.warps, plan.last_warps, int(format), cap_mode, k, flags);
  }
};
using GraphKey = decltype(Shape{}.key());

// The timing events of a call, in the order they are recorded.
enum Event : int { kCallStart, kPrepDone, kHeadDone, kSelectDone, kCallEnd, kEvents };

class CudaBackend final : public Backend {
 public:
  CudaBackend(const HeadView& head, int gpus, int device = 0) : head_(head), device_(device) {
    std::string why;
    if (!cuda_available(&why)) throw Error("the cuda backend is not available: " + why);
    if (gpus > 1)
      throw Error("the cuda backend runs one GPU per engine; " + std::to_string(gpus) +
                  " GPUs (vocabulary split across devices) is not implemented");
    if (head.vocab <= 0 || head.hidden <= 0 || head.weights == nullptr || head.gamma == nullptr)
      throw Error("the cuda backend needs a head with weights, gamma and positive shapes");
    if (head.vocab > (int64_t(1) << 31) - 1) throw Error("the cuda backend supports vocabularies below 2^31");
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (device < 0 || device >= devices)
      throw Error("the cuda backend was asked for device " + std::to_string(device) + " but " +
                  std::to_string(devices) + " CUDA device(s) are visible");
    // The constructor may run on a thread that drives another device: it leaves that thread's
    // current device as it found it.
    CUDA_CHECK(cudaGetDevice(&caller_device_));
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    graphs_ = std::make_unique<GraphCache<GraphKey>>(stream_);
    for (cudaEvent_t& e : events_) CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventCreateWithFlags(&input_ready_, cudaEventDisableTiming));

    // Every upload, fill and kernel of this backend goes to stream_, so each is ordered before
    // the work that reads it (docs/cuda.md, "Completion"); the synchronize at the end makes the
    // backend complete when the constructor returns.
    head_copies_ = std::make_unique<DeviceHead>(head, stream_);
    const int64_t H = head.hidden, V = head.vocab;
    gamma_.reset(size_t(H), stream_);
    CUDA_CHECK(cudaMemcpyAsync(gamma_.get(), head.gamma, size_t(H) * 4, cudaMemcpyHostToDevice, stream_));
    if (head.beta) {
      beta_.reset(size_t(H), stream_);
      CUDA_CHECK(cudaMemcpyAsync(beta_.get(), head.beta, size_t(H) * 4, cudaMemcpyHostToDevice, stream_));
    }
    if (head.head_bias) {
      head_bias_.reset(size_t(V), stream_);
      CUDA_CHECK(cudaMemcpyAsync(head_bias_.get(), head.head_bias, size_t(V) * 4, cudaMemcpyHostToDevice, stream_));
    }
    const size_t groups256 = size_t(H + 255) / 256;
    act_qs_.reset(groups256 * kMaxTokens * kActPitch, stream_);
    act_d_.reset(size_t(H + 31) / 32 * kMaxTokens, stream_);
    act_bsp_.reset(groups256 * kMaxTokens * 4, stream_);
    act_frag_.reset(groups256 * kMaxTokens * kFragPitch, stream_);
    act_lanes_.reset(groups256 * kLanesTokens * 32 * kLanesPitch, stream_);  // zero slots must stay zero
    act_f_.reset(groups256 * 256 * kMaxTokens, stream_);
    logits_store_.reset(size_t(V) * kMaxTokens + 2 * kGuard, stream_);
    CUDA_CHECK(cudaMemsetAsync(logits_store_.get(), 0xA5, logits_store_.bytes(), stream_));
    logits_ = logits_store_.get() + kGuard;
    partials_.reset(size_t(num_sms_) * kPartialBlocksPerSm * kMaxTokens, stream_);
    counters_.reset(3, stream_);
    done_flag_.reset(1);
    *done_flag_.host() = 0;
    max_out_.reset(kMaxTokens, stream_);
    hidden_.reset(size_t(H) * kMaxTokens);
    results_.reset(kMaxTokens);
    norm_path_.reset(kMaxTokens);
    device_rows_.reset(1);
    *device_rows_.host() = nullptr;
    non_finite_.reset(kMaxTokens);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaSetDevice(caller_device_));
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);  // the members' memory lives on this backend's device
    graphs_.reset();         // before the stream it synchronizes
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (input_ready_) cudaEventDestroy(input_ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return device_ == 0 ? "cuda" : "cuda:" + std::to_string(device_); }
  bool takes_normed_input() const override { return true; }
  bool takes_llamacpp_route() const override { return true; }
  bool takes_device_input() const override { return true; }
  uint64_t device_bytes() const override { return head_device_bytes(); }

  void forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) override {
    if (tokens < 1 || tokens > kMaxTokens)
      throw Error("the cuda backend runs 1 to " + std::to_string(kMaxTokens) + " tokens per pass, got " +
                  std::to_string(tokens));
    if (req.top_k < 0 || req.top_k > head_.vocab)
      throw Error("top-k must be between 0 and the vocabulary size " + std::to_string(head_.vocab));
    const int64_t H = head_.hidden, V = head_.vocab;
    const auto t_enter = std::chrono::steady_clock::now();
    CUDA_CHECK(cudaSetDevice(device_));  // any host thread may call; cheap when already current
    Shape shape = make_shape(tokens, req);
    head_copies_->ensure(desc(shape.plan.kernel).reads);
    ensure_buffers(shape);

    if (req.input_on_device) {
      // The caller's rows are read in place, after the work its stream has queued so far; the
      // prep kernel takes their address from a mapped word, so the captured graph stays valid.
      check_device_rows(hidden);
      CUDA_CHECK(cudaEventRecord(input_ready_, static_cast<cudaStream_t>(req.input_stream)));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, input_ready_, 0));
      *device_rows_.host() = hidden;
    } else {
      // A caller that already wrote the hidden states into this backend's input buffer saves the
      // copy: the multi-GPU backend's shards share one buffer (use_input_buffer), each copying a share.
      float* const input = shared_input_ != nullptr ? shared_input_ : hidden_.host();
      if (hidden != input) std::memcpy(input, hidden, size_t(tokens) * size_t(H) * sizeof(float));
    }
    const auto t_copied = std::chrono::steady_clock::now();
    const GraphKey key = shape.key();
    last_ = CallInfo{};
    last_.kernel = shape.plan.kernel;
    last_.warps = shape.plan.warps;
    last_.tokens = tokens;
    // One graph replay per call, timed by events around it (and, with stage events, by event
    // nodes between its stages). The first call of a shape runs directly (it also sets the
    // kernels' attributes), then its graph is captured for the next calls.
    // Nothing after the head kernel: wait on its done flag, and skip the timing events.
    const TestHooks& hooks = tuning_.hooks;
    const bool poll = hooks.poll_done && !req.want_stage_times && !hooks.check_guards && shape.k == 0 &&
                      !shape.logprobs && !shape.logits && !shape.stages;
    const unsigned flag_before = __atomic_load_n(done_flag_.host(), __ATOMIC_ACQUIRE);
    if (!poll) record_event(kCallStart);
    last_.graph_replayed = hooks.use_graph && graphs_->replay(key);
    if (!last_.graph_replayed) record(shape);
    if (!poll) record_event(kCallEnd);
    const auto t_launched = std::chrono::steady_clock::now();
    if (poll) wait_for_done_flag(flag_before);
    else CUDA_CHECK(cudaStreamSynchronize(stream_));
    last_.polled = poll;
    const auto t_synced = std::chrono::steady_clock::now();
    for (int t = 0; t < tokens; ++t) last_.norm_path[t] = norm_path_.host()[t];
    if (req.input_on_device) refuse_non_finite_rows(hidden, tokens, req.first_token);
    if (hooks.check_guards) last_.guards_intact = guards_intact();

    const HostResults h{results_.host(), h_candidates_.host(), h_sums_.host(), h_logits_.host(), h_normed_.host(),
                        h_raw_.host(),     h_scaled_.host(),     h_div_.host(),  h_tanh_.host()};
    read_results(h, tokens, V, H, shape.k, shape.logprobs, shape.logits, shape.stages, shape.cap_mode != kScaleOnly, out);
    if (poll) out.times.clear();
    else collect_times(shape, out.times);
    auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    last_.copy_us = us(t_enter, t_copied);
    last_.launch_us = us(t_copied, t_launched);
    last_.wait_us = us(t_launched, t_synced);
    last_.total_us = us(t_enter, std::chrono::steady_clock::now());
    // Captured only now: re-recording the events inside a capture would invalidate this call's.
    if (hooks.use_graph && !last_.graph_replayed) graphs_->capture(key, [&] { record(shape); });
  }

  // Reads the hidden states from `portable` (page-locked, mapped and portable, kMaxTokens x hidden
  // floats; with unified addressing its host pointer is every device's pointer) instead of its own
  // buffer. The captured graphs hold the old pointer: they go.
  void use_input_buffer(float* portable) {
    CUDA_CHECK(cudaSetDevice(device_));
    clear_graphs();
    CUDA_CHECK(cudaSetDevice(caller_device_));
    shared_input_ = portable;
  }

  // Phase two of the multi-GPU logprob exchange: the chunk sums of exp(x - max[t]) over the
  // logits the last forward left on the device, with the caller's (global) maximum instead of
  // this shard's own. Same kernel and chunking as the one-GPU path, so the doubles are the same.
  void chunk_sums_against(const float* max_per_token, int tokens, double* out) {
    if (tokens < 1 || tokens > last_.tokens)
      throw Error("chunk sums asked for " + std::to_string(tokens) + " tokens, the last forward ran " +
                  std::to_string(last_.tokens));
    CUDA_CHECK(cudaSetDevice(device_));
    const size_t V = size_t(head_.vocab), chunks = (V + kSumExpChunk - 1) / kSumExpChunk;
    if (chunk_sums_.size() < size_t(kMaxTokens) * chunks) {
      chunk_sums_.reset(size_t(kMaxTokens) * chunks, stream_);
      h_sums_.reset(size_t(kMaxTokens) * chunks);
      clear_graphs();  // captured graphs may hold the old buffers
    }
    // max_out_ is the head kernel's scratch: the next forward rewrites it.
    CUDA_CHECK(cudaMemcpyAsync(max_out_.get(), max_per_token, size_t(tokens) * 4, cudaMemcpyHostToDevice, stream_));
    SelectParams sp;
    sp.logits = logits_;
    sp.max_in = max_out_.get();
    sp.vocab = int(V);
    sp.T = tokens;
    sp.chunk_sums = chunk_sums_.get();
    launch_sum_exp(sp, stream_);
    CUDA_CHECK(cudaMemcpyAsync(h_sums_.host(), chunk_sums_.get(), size_t(tokens) * chunks * 8, cudaMemcpyDeviceToHost,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(out, h_sums_.host(), size_t(tokens) * chunks * 8);
  }

  uint64_t head_device_bytes() const { return head_copies_->bytes(); }

  Tuning tuning_;
  CallInfo last_;

 private:
  Shape make_shape(int tokens, const ForwardRequest& req) const {
    Shape s;
    s.T = tokens;
    const quant::ActivationFormat f = quant::activation_format(head_.type, req.activations);
    switch (f) {
      case quant::ActivationFormat::q8_K: s.format = ActFormat::q8_K; break;
      case quant::ActivationFormat::q8_0: s.format = ActFormat::q8_0; break;
      case quant::ActivationFormat::f16: s.format = ActFormat::f16; break;
      case quant::ActivationFormat::bf16: s.format = ActFormat::bf16; break;
      case quant::ActivationFormat::f32: s.format = ActFormat::f32; break;
    }
    s.float_route = s.format == ActFormat::f16 || s.format == ActFormat::bf16 || s.format == ActFormat::f32;
    s.plan = choose(head_.type, plan_route(s.float_route, req.route, req.llamacpp_path), tokens, plan_device(),
                    tuning_.rows);
    const CapParams cp = cap_params(head_, req.softcap);
    s.cap_mode = cp.cap == 0.0f ? kScaleOnly : (req.softcap == SoftcapRoute::fused ? kCapFused : kCapNodes);
    s.k = req.top_k;
    s.logprobs = req.logprobs;
    s.logits = req.want_logits;
    s.stages = req.want_stages;
    s.events = tuning_.hooks.stage_events && req.want_stage_times;
    s.pdl = tuning_.hooks.pdl && !s.events;
    s.sequential_norm = tuning_.hooks.force_sequential_norm;
    s.input_normed = req.input_normed;
    s.device_input = req.input_on_device;
    return s;
  }

  // Device rows must be this backend's device memory (or managed memory): a host pointer or
  // another GPU's memory would be read over the bus or fault.
  void check_device_rows(const float* rows) const {
    cudaPointerAttributes a{};
    CUDA_CHECK(cudaPointerGetAttributes(&a, rows));
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
      throw Error("device hidden states: the pointer is not GPU memory (run() takes host memory)");
    if (a.type == cudaMemoryTypeDevice && a.device != device_)
      throw Error("device hidden states are on GPU " + std::to_string(a.device) + ", the engine runs on GPU " +
                  std::to_string(device_));
  }

  // The prep kernel noted each token's first NaN or infinity: the call's answers are void then,
  // and the error names the same token and index as the host check does.
  void refuse_non_finite_rows(const float* rows, int tokens, int first_token) const {
    const int64_t H = head_.hidden;
    for (int t = 0; t < tokens; ++t) {
      const int32_t i = non_finite_.host()[t];
      if (i < 0) continue;
      float value = 0;
      CUDA_CHECK(cudaMemcpy(&value, rows + size_t(t) * size_t(H) + size_t(i), sizeof value, cudaMemcpyDeviceToHost));
      throw InputError("hidden state of token " + std::to_string(first_token + t) + " has a non-finite value (" +
                  std::to_string(value) + ") at index " + std::to_string(i));
    }
  }

  PlanDevice plan_device() const {
    PlanDevice d;
    d.groups = head_copies_->layout().groups;
    d.smem_optin = size_t(smem_optin_);
    d.copies = head_copies_->copies();
    d.on_demand = head_copies_->on_demand();
    return d;
  }

  // Lazily sized buffers of the optional outputs. A reallocation invalidates captured graphs.
  void ensure_buffers(const Shape& s) {
    const size_t V = size_t(head_.vocab), H = size_t(head_.hidden);
    bool changed = false;
    auto grow = [&](auto& arr, size_t n) {
      if (arr.size() >= n) return;
      if constexpr (requires { arr.host(); }) arr.reset(n);  // mapped host memory: no stream involved
      else arr.reset(n, stream_);
      changed = true;
    };
    const size_t TV = size_t(kMaxTokens) * V;
    if (s.logits || s.stages) grow(h_logits_, TV);
    if (s.stages) {
      grow(raw_, TV); grow(h_raw_, TV);
      grow(normed_, size_t(kMaxTokens) * H); grow(h_normed_, size_t(kMaxTokens) * H);
      if (s.cap_mode != kScaleOnly) {
        grow(scaled_, TV); grow(div_, TV); grow(tanh_, TV);
        grow(h_scaled_, TV); grow(h_div_, TV); grow(h_tanh_, TV);
      }
    }
    if (s.k > 0) {
      const size_t n = size_t(kMaxTokens) * ((V + kTopKChunk - 1) / kTopKChunk) * size_t(std::min(s.k, kTopKChunk));
      grow(candidates_, n);
      grow(h_candidates_, n);
    }
    if (s.logprobs) {
      const size_t n = size_t(kMaxTokens) * ((V + kSumExpChunk - 1) / kSumExpChunk);
      grow(chunk_sums_, n);
      grow(h_sums_, n);
    }
    if (changed) clear_graphs();
  }

  void record(const Shape& s) {
    const bool stage_events = s.events;
    const int64_t H = head_.hidden, V = head_.vocab;
    const size_t TV = size_t(s.T) * size_t(V);
    PrepParams pp;
    pp.hidden = shared_input_ != nullptr ? shared_input_ : hidden_.device();
    if (s.device_input) {
      pp.hidden_at = device_rows_.device();
      pp.non_finite = non_finite_.device();
    }
    pp.gamma = gamma_.get();
    pp.layer_norm = head_.layer_norm ? 1 : 0;
    pp.beta = head_.beta ? beta_.get() : nullptr;
    pp.input_normed = s.input_normed ? 1 : 0;
    pp.H = int(H);
    pp.T = s.T;
    pp.eps = head_.eps;
    pp.format = s.format;
    pp.force_sequential = s.sequential_norm ? 1 : 0;
    if (s.plan.kernel == HeadKernel::llamacpp_repack) pp.positive_amax_tokens = s.T - s.T % 4;
    pp.act_qs = act_qs_.get();
    pp.act_d = act_d_.get();
    pp.act_bsp = act_bsp_.get();
    pp.act_frag = reads_fragment_acts(s.plan.kernel) ? act_frag_.get() : nullptr;
    pp.act_lanes = reads_lanes_acts(s.plan.kernel) ? act_lanes_.get() : nullptr;
    pp.act_f = act_f_.get();
    pp.normed_out = s.stages ? normed_.get() : nullptr;
    pp.norm_path = norm_path_.device();
    launch_prep(pp, stream_);
    if (stage_events) record_stage_event(kPrepDone);

    HeadParams hp;
    const DeviceHead& w = *head_copies_;
    hp.weights = w.rows();
    hp.aux = w.aux();
    hp.row_stride = w.layout().row_stride;
    hp.vocab = int(V);
    hp.hidden = int(H);
    hp.groups = w.layout().groups;
    hp.T = s.T;
    hp.act_qs = act_qs_.get();
    hp.act_d = act_d_.get();
    hp.act_bsp = act_bsp_.get();
    hp.act_frag = act_frag_.get();
    hp.act_lanes = act_lanes_.get();
    hp.act_f = act_f_.get();
    const CapParams cp = cap_params(head_, s.cap_mode == kCapFused ? SoftcapRoute::fused : SoftcapRoute::nodes);
    hp.head_bias = head_.head_bias ? head_bias_.get() : nullptr;
    hp.logit_scale = cp.logit_scale;
    hp.cap = cp.cap;
    hp.inv_cap = cp.inv_cap;
    hp.cap_mode = s.cap_mode;
    hp.logits = logits_;
    hp.raw = s.stages ? raw_.get() : nullptr;
    hp.partials = partials_.get();
    hp.done_counter = counters_.get();
    hp.tile_counter = counters_.get() + 1;
    hp.call_seq = counters_.get() + 2;
    hp.done_flag = done_flag_.device();
    hp.results = results_.device();
    hp.max_out = max_out_.get();
    hp.stream_weights = w.lanes();
    hp.stream_n_weights = w.subblocks();
    launch_head(s, hp);
    if (stage_events) record_stage_event(kHeadDone);

    if (s.k > 0 || s.logprobs) {
      SelectParams sp;
      sp.logits = logits_;
      sp.max_in = max_out_.get();
      sp.vocab = int(V);
      sp.T = s.T;
      sp.k = s.k;
      sp.k_chunk = std::min(s.k, kTopKChunk);
      sp.candidates = candidates_.get();
      sp.chunk_sums = chunk_sums_.get();
      if (s.k > 0) launch_topk(sp, stream_);
      if (s.logprobs) launch_sum_exp(sp, stream_);
      if (stage_events) record_stage_event(kSelectDone);
    }
    if (s.stages && s.cap_mode != kScaleOnly)
      launch_stage_nodes(raw_.get(), int(V), s.T, hp.logit_scale, hp.cap, hp.inv_cap, s.cap_mode, scaled_.get(),
                         div_.get(), tanh_.get(), stream_);

    auto d2h = [&](void* dst, const void* src, size_t bytes) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    };
    if (s.k > 0) {
      const size_t n = size_t(s.T) * ((size_t(V) + kTopKChunk - 1) / kTopKChunk) * size_t(std::min(s.k, kTopKChunk));
      d2h(h_candidates_.host(), candidates_.get(), n * sizeof(int2));
    }
    if (s.logprobs) d2h(h_sums_.host(), chunk_sums_.get(), size_t(s.T) * ((size_t(V) + kSumExpChunk - 1) / kSumExpChunk) * 8);
    if (s.logits || s.stages) d2h(h_logits_.host(), logits_, TV * 4);
    if (s.stages) {
      d2h(h_normed_.host(), normed_.get(), size_t(s.T) * size_t(H) * 4);
      d2h(h_raw_.host(), raw_.get(), TV * 4);
      if (s.cap_mode != kScaleOnly) {
        d2h(h_scaled_.host(), scaled_.get(), TV * 4);
        d2h(h_div_.host(), div_.get(), TV * 4);
        d2h(h_tanh_.host(), tanh_.get(), TV * 4);
      }
    }
  }

  // The plan's kernel, in passes of at most its max_tokens tokens.
  void launch_head(const Shape& s, HeadParams& hp) const {
    const KernelDesc& kd = desc(s.plan.kernel);
    for (int t0 = 0; t0 < s.T; t0 += kd.max_tokens) {
      hp.t0 = t0;
      hp.tc = std::min(kd.max_tokens, s.T - t0);
      const bool pdl = s.pdl && t0 == 0;
      const int warps = t0 + kd.max_tokens >= s.T ? s.plan.last_warps : s.plan.warps;
      switch (s.plan.kernel) {
        case HeadKernel::q5k_stream: launch_q5k_stream(hp, warps, false, pdl, num_sms_, stream_); break;
        case HeadKernel::q4k_stream: launch_q5k_stream(hp, warps, true, pdl, num_sms_, stream_); break;
        case HeadKernel::q6k_stream: launch_q6k_stream(hp, warps, false, pdl, num_sms_, stream_); break;
        case HeadKernel::q6k_stream_tiled: launch_q6k_stream(hp, warps, true, pdl, num_sms_, stream_); break;
        case HeadKernel::q8_0_stream: launch_q8_0_stream(hp, warps, pdl, num_sms_, stream_); break;
        case HeadKernel::q5k_tma: launch_q5k_tma(hp, pdl, num_sms_, stream_); break;
        case HeadKernel::q5k_stream_n: launch_q5k_stream_n(hp, warps, false, pdl, num_sms_, stream_); break;
        case HeadKernel::q5k_stream_n_tiled: launch_q5k_stream_n(hp, warps, true, pdl, num_sms_, stream_); break;
        case HeadKernel::q5k_lanes: launch_q5k_lanes(hp, pdl, num_sms_, stream_); break;
        case HeadKernel::q5k_mma: {
          MmaConfig mc;
          mc.warps = warps;
          mc.pdl = pdl;
          launch_q5k_mma(hp, mc, num_sms_, stream_);
          break;
        }
        case HeadKernel::generic:
          launch_generic_head(hp, head_.type, s.float_route, GenericOrder::vec_dot, num_sms_, pdl, stream_);
          break;
        case HeadKernel::llamacpp_tiled:
          launch_generic_head(hp, head_.type, false, GenericOrder::llamacpp_tiled, num_sms_, pdl, stream_);
          break;
        case HeadKernel::llamacpp_repack:
          launch_generic_head(hp, head_.type, false, GenericOrder::llamacpp_repack, num_sms_, pdl, stream_);
          break;
        case HeadKernel::llamacpp_float_vec:
          launch_generic_head(hp, head_.type, true, GenericOrder::llamacpp_float_vec, num_sms_, pdl, stream_);
          break;
        case HeadKernel::llamacpp_float_sgemm:
          launch_generic_head(hp, head_.type, true, GenericOrder::llamacpp_float_sgemm, num_sms_, pdl, stream_);
          break;
      }
    }
  }

  void record_event(int i) { CUDA_CHECK(cudaEventRecord(events_[i], stream_)); }
  // Inside a capture this becomes an event-record node of the graph, so replays time the stages.
  void record_stage_event(int i) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
    if (status == cudaStreamCaptureStatusActive)
      CUDA_CHECK(cudaEventRecordWithFlags(events_[i], stream_, cudaEventRecordExternal));
    else
      CUDA_CHECK(cudaEventRecord(events_[i], stream_));
  }

  bool guards_intact() const {
    std::vector<uint32_t> band(kGuard);
    const size_t V = size_t(head_.vocab);
    for (const float* p : {logits_store_.get(), logits_ + V * kMaxTokens}) {
      CUDA_CHECK(cudaMemcpyAsync(band.data(), p, kGuard * 4, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (uint32_t w : band)
        if (w != kGuardWord) return false;
    }
    return true;
  }

  // The last kernel's flag reaches host memory after its results; the stream reports completion
  // some microseconds later. Every 256 spins the stream is asked too, so a failed kernel surfaces
  // as its error instead of a hang.
  //
  // Ordering: the last block writes the answers to mapped memory, then __threadfence_system(), then
  // the flag, so the answers reach host memory first (PCIe keeps posted writes in order too). On the
  // host the flag is read with acquire semantics, so neither the compiler nor the CPU moves the
  // reads of the answers before it.
  void wait_for_done_flag(unsigned before) {
    const unsigned* flag = done_flag_.host();
    auto changed = [&] { return __atomic_load_n(flag, __ATOMIC_ACQUIRE) != before; };
    for (unsigned spin = 1;; ++spin) {
      if (changed()) return;
      if (spin % 256 == 0) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) {
          if (changed()) return;
          throw Error("the head kernel finished without writing its done flag");
        }
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
      }
      cpu_relax();
    }
  }

  void clear_graphs() { graphs_->clear(); }

  void collect_times(const Shape& s, std::vector<StageTime>& times) const {
    times.clear();
    auto elapsed = [&](int a, int b) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[a], events_[b]));
      return double(ms);
    };
    bool stage_events = s.events;
    if (stage_events) {
      float probe = 0;
      if (cudaEventElapsedTime(&probe, events_[kCallStart], events_[kPrepDone]) != cudaSuccess) {
        cudaGetLastError();
        stage_events = false;  // this driver cannot time event nodes inside a replayed graph
      }
    }
    const bool copies = s.k > 0 || s.logprobs || s.logits || s.stages;
    const int passes = s.plan.passes(s.T);
    const std::string head_label = std::string("head+scale+cap+argmax (fused, ") + desc(s.plan.kernel).how +
                                   (passes > 1 ? ", " + std::to_string(passes) + " passes)" : std::string(")"));
    if (!stage_events) {
      times.push_back({"norm+quantize+" + head_label + (copies ? "+select+download" : "") + " (one graph)",
                       elapsed(kCallStart, kCallEnd)});
      return;
    }
    times.push_back({"norm+quantize", elapsed(kCallStart, kPrepDone)});
    times.push_back({head_label, elapsed(kPrepDone, kHeadDone)});
    int last = kHeadDone;
    if (s.k > 0 || s.logprobs) {
      times.push_back({"select (top-k, sum_exp)", elapsed(kHeadDone, kSelectDone)});
      last = kSelectDone;
    }
    if (s.logits || s.stages || s.k > 0 || s.logprobs) times.push_back({"stages+download", elapsed(last, kCallEnd)});
  }

  HeadView head_;
  int device_ = 0;
  int caller_device_ = 0;
  int num_sms_ = 0;
  int smem_optin_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[kEvents] = {};
  std::unique_ptr<GraphCache<GraphKey>> graphs_;

  std::unique_ptr<DeviceHead> head_copies_;
  DeviceArray<float> gamma_;
  DeviceArray<float> beta_;       // LayerNorm + bias only
  DeviceArray<float> head_bias_;  // output.bias only
  DeviceArray<int8_t> act_qs_;
  DeviceArray<float> act_d_;
  DeviceArray<uint32_t> act_bsp_;
  DeviceArray<int8_t> act_frag_;
  DeviceArray<int8_t> act_lanes_;
  DeviceArray<float> act_f_;
  DeviceArray<float> logits_store_, raw_, normed_, scaled_, div_, tanh_;
  float* logits_ = nullptr;  // logits_store_ past its leading guard band
  DeviceArray<PartialBest> partials_;
  DeviceArray<unsigned> counters_;
  DeviceArray<float> max_out_;
  DeviceArray<int2> candidates_;
  DeviceArray<double> chunk_sums_;

  MappedHostArray<float> hidden_;
  float* shared_input_ = nullptr;  // use_input_buffer: a portable mapped buffer the caller owns
  MappedHostArray<TokenResult> results_;
  MappedHostArray<int32_t> norm_path_;
  MappedHostArray<const float*> device_rows_;  // the caller's rows of a device-input call
  MappedHostArray<int32_t> non_finite_;        // per token of a device-input call: first bad index or -1
  cudaEvent_t input_ready_ = nullptr;          // the caller's stream reached the call
  MappedHostArray<unsigned> done_flag_;
  MappedHostArray<float> h_logits_, h_raw_, h_normed_, h_scaled_, h_div_, h_tanh_;
  MappedHostArray<int2> h_candidates_;
  MappedHostArray<double> h_sums_;
};

CudaBackend& as_cuda(Backend& b) {
  auto* c = dynamic_cast<CudaBackend*>(&b);
  if (c == nullptr) throw Error("not the cuda backend: " + b.name());
  return *c;
}

}  // namespace

void set_tuning(Backend& backend, const Tuning& tuning) {
  CudaBackend& c = as_cuda(backend);
  for (const PlanRow& r : tuning.rows) {
    const KernelDesc& d = desc(r.kernel);
    if (r.min_tokens < 1 || r.max_tokens > kMaxTokens || r.min_tokens > r.max_tokens)
      throw Error(std::string("a plan row for ") + d.name + " covers no token count in 1.." + std::to_string(kMaxTokens));
    if (r.warps != 0 && std::find(std::begin(d.warps), std::end(d.warps), r.warps) == std::end(d.warps))
      throw Error(std::string("the ") + d.name + " kernel is not built for " + std::to_string(r.warps) +
                  " warps per block");
  }
  c.tuning_ = tuning;
}
Tuning get_tuning(Backend& backend) { return as_cuda(backend).tuning_; }
void chunk_sums_against(Backend& backend, const float* max_per_token, int tokens, double* out) {
  as_cuda(backend).chunk_sums_against(max_per_token, tokens, out);
}
CallInfo last_call(Backend& backend) { return as_cuda(backend).last_; }
uint64_t head_device_bytes(Backend& backend) { return as_cuda(backend).head_device_bytes(); }
void use_input_buffer(Backend& backend, float* portable) { as_cuda(backend).use_input_buffer(portable); }

void tanh_sweep(uint64_t first, uint64_t count, uint32_t* host_out) {
  std::string why;
  if (!cuda_available(&why)) throw Error("tanh_sweep: " + why);
  DeviceArray<uint32_t> out(count, nullptr);  // the legacy stream, in order with the sweep and the copy
  launch_tanh_sweep(first, count, out.get(), nullptr);
  CUDA_CHECK(cudaMemcpy(host_out, out.get(), count * 4, cudaMemcpyDeviceToHost));
}

}  // namespace cuda

void copy_device_rows_to_host(const float* device, size_t n, void* stream, float* host) {
  cudaPointerAttributes a{};
  CUDA_CHECK(cudaPointerGetAttributes(&a, device));
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw Error("device hidden states: the pointer is not GPU memory (run() takes host memory)");
  int caller = 0;
  CUDA_CHECK(cudaGetDevice(&caller));
  if (a.type == cudaMemoryTypeDevice) CUDA_CHECK(cudaSetDevice(a.device));
  // Ordered after the caller's work on its stream, and complete when this returns.
  const cudaError_t copied = cudaMemcpyAsync(host, device, n * sizeof(float), cudaMemcpyDeviceToHost,
                                             static_cast<cudaStream_t>(stream));
  const cudaError_t synced = copied == cudaSuccess ? cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) : copied;
  CUDA_CHECK(cudaSetDevice(caller));
  CUDA_CHECK(synced);
}

bool cuda_available(std::string* why_not) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why_not) *why_not = std::string("no usable CUDA device (") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")";
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    if (why_not) *why_not = "no CUDA device found";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    if (why_not) *why_not = "cannot read the properties of CUDA device 0";
    cudaGetLastError();
    return false;
  }
  if (prop.major < 9) {
    if (why_not)
      *why_not = std::string("the cuda backend is built for compute capability 9.0 (Hopper) and newer; device 0 (") +
                 prop.name + ") is " + std::to_string(prop.major) + "." + std::to_string(prop.minor);
    return false;
  }
  return true;
}

std::unique_ptr<Backend> make_cuda_backend(const HeadView& head, int gpus) {
  return std::make_unique<cuda::CudaBackend>(head, gpus);
}

std::unique_ptr<Backend> make_cuda_backend_on_device(const HeadView& head, int device) {
  return std::make_unique<cuda::CudaBackend>(head, 1, device);
}

}  // namespace lmhead
