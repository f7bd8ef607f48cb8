// The CUDA backend: the head lives on the device (uploaded once), and each call is one CUDA graph:
// RMSNorm + activation quantization (one block per token), the head kernel with the scale, soft
// cap and argmax in its epilogue (its last block merges the argmax and writes the per-token answer
// into mapped host memory), then only what the request asks for (top-k lists, sums of
// exponentials, logits, stages). Every number is byte-identical to the scalar backend's, except
// sum_exp, whose exp() is CUDA's (see docs/cuda.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/head_math.hpp"
#include "cuda/call_buffers.hpp"
#include "cuda/call_launch.hpp"
#include "cuda/call_results.hpp"
#include "cuda/call_shape.hpp"
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
#include "sample/sampler.hpp"
#include "sample/weight_math.hpp"

namespace lmhead {
namespace cuda {
namespace {

static_assert(kMaxTokens == kMaxTokensPerPass, "a pass of the engine is one call's graph");
static_assert(kShardFineBins == kSampleFineBins, "multi_gpu.hpp's fine bins are the sampling kernels'");

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
    buffers_ = std::make_unique<CallBuffers>(head, num_sms_, stream_);
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
  // Temperature > 0 without top-k (top-p, min-p, bias and mask included); greedy with a bias or a
  // mask and top-k sampling stay with the engine's host sampler.
  bool samples(const SamplingOptions& o) const override {
    return o.temperature > 0 && o.top_k == 0 && head_.vocab <= sample::kMaxSampledVocab;
  }

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
    if (buffers_->grow_outputs(shape, head_.vocab, head_.hidden, stream_)) clear_graphs();
    if (shape.sample) prepare_sampling(req, tokens);
    if (shape.block_clock && buffers_->block_clock.size() == 0) {
      buffers_->block_clock.reset(size_t(kBlockClockBlocks) * 4, stream_);
      clear_graphs();  // captured graphs may hold the old pointer
    }

    if (req.input_on_device) {
      // The caller's rows are read in place, after the work its stream has queued so far; the
      // prep kernel takes their address from a mapped word, so the captured graph stays valid.
      check_device_rows(hidden);
      CUDA_CHECK(cudaEventRecord(input_ready_, static_cast<cudaStream_t>(req.input_stream)));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, input_ready_, 0));
      *buffers_->device_rows.host() = hidden;
    } else {
      // A caller that already wrote the hidden states into this backend's input buffer saves the
      // copy: the multi-GPU backend's shards share one buffer (use_input_buffer), each copying a share.
      float* const input = buffers_->input_host();
      if (hidden != input) std::memcpy(input, hidden, size_t(tokens) * size_t(H) * sizeof(float));
    }
    const auto t_copied = std::chrono::steady_clock::now();
    const GraphKey key = shape.key();
    last_ = CallInfo{};
    last_.kernel = shape.plan.kernel;
    last_.warps = shape.plan.warps;
    last_.tokens = tokens;
    last_.sampled_on_device = shape.sample;
    // One graph replay per call, timed by events around it (and, with stage events, by event
    // nodes between its stages). The first call of a shape runs directly (it also sets the
    // kernels' attributes), then its graph is captured for the next calls.
    // Nothing after the head kernel (or the sampling kernels, which write the flag then): wait on
    // the done flag, and skip the timing events.
    const TestHooks& hooks = tuning_.hooks;
    const bool poll = hooks.poll_done && !req.want_stage_times && !hooks.check_guards && shape.k == 0 &&
                      !shape.logprobs && !shape.logits && !shape.stages;
    const unsigned flag_before = __atomic_load_n(buffers_->done_flag.host(), __ATOMIC_ACQUIRE);
    if (!poll) record_event(kCallStart);
    last_.graph_replayed = hooks.use_graph && graphs_->replay(key);
    if (!last_.graph_replayed) record_call(shape, call_target());
    if (!poll) record_event(kCallEnd);
    const auto t_launched = std::chrono::steady_clock::now();
    if (poll) wait_for_done_flag(flag_before);
    else CUDA_CHECK(cudaStreamSynchronize(stream_));
    last_.polled = poll;
    const auto t_synced = std::chrono::steady_clock::now();
    for (int t = 0; t < tokens; ++t) last_.norm_path[t] = buffers_->norm_path.host()[t];
    if (req.input_on_device) refuse_non_finite_rows(hidden, tokens, req.first_token);
    if (hooks.check_guards) last_.guards_intact = buffers_->guards_intact(head_.vocab, stream_);

    const HostResults h = buffers_->host_results();
    read_results(h, tokens, V, H, shape.k, shape.logprobs, shape.logits, shape.stages, shape.cap_mode != kScaleOnly, out);
    if (shape.sample) read_sampled(req, tokens, out);
    if (poll) out.times.clear();
    else collect_times(shape, out.times);
    auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    last_.copy_us = us(t_enter, t_copied);
    last_.launch_us = us(t_copied, t_launched);
    last_.wait_us = us(t_launched, t_synced);
    last_.total_us = us(t_enter, std::chrono::steady_clock::now());
    // Captured only now: re-recording the events inside a capture would invalidate this call's.
    if (hooks.use_graph && !last_.graph_replayed) graphs_->capture(key, [&] { record_call(shape, call_target()); });
  }

  std::vector<uint64_t> block_clock_stamps() {
    std::vector<uint64_t> out(size_t(kBlockClockBlocks) * 4, 0);
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // a polled call's last block stamps after its flag
    if (buffers_->block_clock.size() == out.size())
      CUDA_CHECK(cudaMemcpy(out.data(), buffers_->block_clock.get(), out.size() * 8, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaSetDevice(caller_device_));
    return out;
  }

  // Reads the hidden states from `portable` (page-locked, mapped and portable, kMaxTokens x hidden
  // floats; with unified addressing its host pointer is every device's pointer) instead of its own
  // buffer. The captured graphs hold the old pointer: they go.
  void use_input_buffer(float* portable) {
    CUDA_CHECK(cudaSetDevice(device_));
    clear_graphs();
    CUDA_CHECK(cudaSetDevice(caller_device_));
    buffers_->shared_input = portable;
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
    if (buffers_->chunk_sums.size() < size_t(kMaxTokens) * chunks) {
      buffers_->chunk_sums.reset(size_t(kMaxTokens) * chunks, stream_);
      buffers_->h_sums.reset(size_t(kMaxTokens) * chunks);
      clear_graphs();  // captured graphs may hold the old buffers
    }
    // max_out is the head kernel's scratch: the next forward rewrites it.
    CallBuffers& b = *buffers_;
    CUDA_CHECK(cudaMemcpyAsync(b.max_out.get(), max_per_token, size_t(tokens) * 4, cudaMemcpyHostToDevice, stream_));
    SelectParams sp;
    sp.logits = b.logits;
    sp.max_in = b.max_out.get();
    sp.vocab = int(V);
    sp.T = tokens;
    sp.chunk_sums = b.chunk_sums.get();
    launch_sum_exp(sp, stream_);
    CUDA_CHECK(cudaMemcpyAsync(b.h_sums.host(), b.chunk_sums.get(), size_t(tokens) * chunks * 8, cudaMemcpyDeviceToHost,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(out, b.h_sums.host(), size_t(tokens) * chunks * 8);
  }

  // One shard's half of the multi-GPU sampling rounds (multi_gpu.hpp): the sampling kernels in
  // their rounds-only mode over the logits the last forward left on the device, the global maximum
  // in max_out, and only the sums a merge needs downloaded, through pinned buffers, one
  // synchronization per round; nothing here is part of a call's graph.
  // Round 1, with a bias or a mask only: the call's parameters, this shard's bias and mask rows go
  // to the device (the next rounds read them too), and each token's largest z among this shard's
  // ids comes back as the max kernel's ordered key (0: none takes part).
  void sample_round_max(const SamplingOptions& o, const ShardSampleInputs& in, int tokens, uint64_t* max_key) {
    check_round_tokens(tokens);
    CUDA_CHECK(cudaSetDevice(device_));
    ensure_round_buffers(o.top_p < 1);
    CallBuffers& b = *buffers_;
    SampleCallParams& c = round_call(o);
    upload_bias_and_mask(in.bias, in.mask, in.mask_stride, tokens, c);
    CUDA_CHECK(cudaMemcpyAsync(b.sample_call.get(), &c, sizeof c, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaMemsetAsync(b.sample_scratch.get(), 0, size_t(tokens) * sizeof(SampleScratch), stream_));
    SampleParams sp = round_params(tokens, o.top_p < 1);
    sp.max_kernel = 1;
    launch_sample_round(sp, 1, stream_);
    download_round_scratch(tokens, offsetof(SampleScratch, hist));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int t = 0; t < tokens; ++t) max_key[t] = rounds_.scratch.host()[t].max_key;
    max_round_ran_ = true;
  }

  void sample_round_weights(const SamplingOptions& o, const float* max_per_token, const uint64_t* global_max_key,
                            int tokens, ShardWeights& out) {
    check_round_tokens(tokens);
    CUDA_CHECK(cudaSetDevice(device_));
    const bool top_p = o.top_p < 1;
    ensure_round_buffers(top_p);
    CallBuffers& b = *buffers_;
    const bool after_max = global_max_key != nullptr;
    if (after_max && !max_round_ran_) throw Error("the weights round with a global maximum key needs the max round first");
    max_round_ran_ = false;
    if (!after_max) {  // else round 1 left the call's parameters, bias and mask on the device
      SampleCallParams& c = round_call(o);
      CUDA_CHECK(cudaMemcpyAsync(b.sample_call.get(), &c, sizeof c, cudaMemcpyHostToDevice, stream_));
      std::memcpy(rounds_.max.host(), max_per_token, size_t(tokens) * 4);
      // max_out is the head kernel's scratch: the next forward rewrites it.
      CUDA_CHECK(cudaMemcpyAsync(b.max_out.get(), rounds_.max.host(), size_t(tokens) * 4, cudaMemcpyHostToDevice, stream_));
    }
    CUDA_CHECK(cudaMemsetAsync(b.sample_scratch.get(), 0, size_t(tokens) * sizeof(SampleScratch), stream_));
    SampleParams sp = round_params(tokens, top_p);
    if (after_max) {  // the weights kernel reads the maximum from the scratch's key, as after its max kernel
      std::memcpy(rounds_.max_key.host(), global_max_key, size_t(tokens) * 8);
      CUDA_CHECK(cudaMemcpy2DAsync(&b.sample_scratch.get()->max_key, sizeof(SampleScratch), rounds_.max_key.host(), 8, 8,
                                   size_t(tokens), cudaMemcpyHostToDevice, stream_));
      sp.max_kernel = 1;
    }
    launch_sample_round(sp, 2, stream_);
    // Per token the scratch's counters and, with top-p, its bucket masses (not the fine bins).
    download_round_scratch(tokens, offsetof(SampleScratch, hist) + (top_p ? sizeof(SampleScratch::hist) : 0));
    const size_t chunks = round_chunks();
    CUDA_CHECK(cudaMemcpyAsync(rounds_.chunk_mass.host(), b.chunk_mass.get(), size_t(tokens) * chunks * 8,
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    out.chunks = int64_t(chunks);
    out.chunk_mass.assign(rounds_.chunk_mass.host(), rounds_.chunk_mass.host() + size_t(tokens) * chunks);
    out.total.resize(size_t(tokens));
    out.bucket_mass.clear();
    for (int t = 0; t < tokens; ++t) {
      const SampleScratch& sc = rounds_.scratch.host()[t];
      out.total[size_t(t)] = sc.total;
      if (top_p) out.bucket_mass.insert(out.bucket_mass.end(), std::begin(sc.hist), std::end(sc.hist));
    }
  }

  void sample_round_boundary(const int32_t* boundary_per_token, int tokens, ShardBoundary& out) {
    check_round_tokens(tokens);
    CUDA_CHECK(cudaSetDevice(device_));
    CallBuffers& b = *buffers_;
    if (b.sample_candidates.size() < size_t(kMaxTokens) * kSampleCandidates)
      throw Error("the boundary round of sampling needs the weights round with top-p first");
    std::memcpy(rounds_.boundary.host(), boundary_per_token, size_t(tokens) * 4);
    CUDA_CHECK(cudaMemcpy2DAsync(&b.sample_scratch.get()->boundary, sizeof(SampleScratch), rounds_.boundary.host(), 4, 4,
                                 size_t(tokens), cudaMemcpyHostToDevice, stream_));
    SampleParams sp = round_params(tokens, true);
    sp.max_kernel = rounds_.call.host()->has_bias || rounds_.call.host()->has_mask ? 1 : 0;
    launch_sample_round(sp, 3, stream_);
    download_round_scratch(tokens, offsetof(SampleScratch, hist));
    CUDA_CHECK(cudaMemcpy2DAsync(&rounds_.scratch.host()->fine_mass, sizeof(SampleScratch), &b.sample_scratch.get()->fine_mass,
                                 sizeof(SampleScratch), sizeof(SampleScratch::fine_mass), size_t(tokens),
                                 cudaMemcpyDeviceToHost, stream_));
    const size_t chunks = round_chunks();
    CUDA_CHECK(cudaMemcpyAsync(rounds_.chunk_mass.host(), b.chunk_mass.get(), size_t(tokens) * chunks * 8,
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    out.chunk_mass.assign(rounds_.chunk_mass.host(), rounds_.chunk_mass.host() + size_t(tokens) * chunks);
    out.fine_mass.clear();
    for (int t = 0; t < tokens; ++t)
      out.fine_mass.insert(out.fine_mass.end(), std::begin(rounds_.scratch.host()[t].fine_mass),
                           std::end(rounds_.scratch.host()[t].fine_mass));
    out.overflow.assign(size_t(tokens), 0);
    std::vector<size_t> at(size_t(tokens) + 1, 0);  // token t's candidates at [at[t], at[t + 1]) of the staging
    for (int t = 0; t < tokens; ++t) {
      const uint32_t n = rounds_.scratch.host()[t].n_candidates;
      out.overflow[size_t(t)] = n > uint32_t(kSampleCandidates) ? 1 : 0;
      at[size_t(t) + 1] = at[size_t(t)] + (out.overflow[size_t(t)] ? 0 : n);
    }
    if (rounds_.candidates.size() < at.back()) rounds_.candidates.reset(at.back() + at.back() / 2);
    for (int t = 0; t < tokens; ++t)
      if (at[size_t(t) + 1] > at[size_t(t)])
        CUDA_CHECK(cudaMemcpyAsync(rounds_.candidates.host() + at[size_t(t)],
                                   b.sample_candidates.get() + size_t(t) * kSampleCandidates,
                                   (at[size_t(t) + 1] - at[size_t(t)]) * sizeof(SampleCandidate), cudaMemcpyDeviceToHost,
                                   stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    out.candidates.assign(size_t(tokens), {});
    for (int t = 0; t < tokens; ++t) {
      std::vector<ShardCandidate>& to = out.candidates[size_t(t)];
      to.reserve(at[size_t(t) + 1] - at[size_t(t)]);
      for (size_t i = at[size_t(t)]; i < at[size_t(t) + 1]; ++i) {
        const SampleCandidate& c = rounds_.candidates.host()[i];
        to.push_back(ShardCandidate{c.key, c.weight, c.id, c.fine});
      }
    }
  }

  void fetch_logit_runs(std::span<const LogitRun> runs, float* out) {
    size_t total = 0;
    for (const LogitRun& r : runs) {
      check_round_tokens(r.token + 1);
      if (r.first < 0 || r.count < 0 || r.first + r.count > head_.vocab)
        throw Error("fetch_logit_runs: ids [" + std::to_string(r.first) + ", " + std::to_string(r.first + r.count) +
                    ") are outside this head's " + std::to_string(head_.vocab) + " rows");
      total += size_t(r.count);
    }
    CUDA_CHECK(cudaSetDevice(device_));
    if (rounds_.logits.size() < total) rounds_.logits.reset(total);
    size_t at = 0;
    for (const LogitRun& r : runs) {
      CUDA_CHECK(cudaMemcpyAsync(rounds_.logits.host() + at, buffers_->logits + size_t(r.token) * size_t(head_.vocab) + size_t(r.first),
                                 size_t(r.count) * 4, cudaMemcpyDeviceToHost, stream_));
      at += size_t(r.count);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(out, rounds_.logits.host(), total * 4);
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
    s.block_clock = tuning_.hooks.block_clock;
    s.input_normed = req.input_normed;
    s.device_input = req.input_on_device;
    if (req.sampling != nullptr) {
      if (!samples(*req.sampling)) throw Error("the cuda backend was asked to sample options it does not sample on the device");
      s.sample = true;
      s.sample_max = !req.sampling->logit_bias.empty() || req.sample_mask != nullptr;
      s.sample_top_p = req.sampling->top_p < 1;
    }
    return s;
  }

  // The call's sampling parameters into mapped memory (prep copies them to the device), and the
  // bias (dense, uploaded when it changes) and mask rows into device buffers, ahead of the graph on
  // the same stream.
  void prepare_sampling(const ForwardRequest& req, int tokens) {
    const SamplingOptions& o = *req.sampling;
    SampleCallParams& c = *buffers_->sample_call_in.host();
    c.temperature = double(o.temperature);
    c.top_p = double(o.top_p);
    c.min_p = double(o.min_p);
    c.seed = o.seed;
    c.position = req.sample_position;
    upload_bias_and_mask(o.logit_bias, req.sample_mask, req.sample_mask_stride, tokens, c);
  }

  // The dense bias (uploaded when it changes) and the mask rows (this head's ceil(V / 32) words of
  // each, `stride` words apart in `mask`, 0: one row for every token) into device buffers on the
  // backend's stream; sets c's has_bias, has_mask and mask_stride.
  void upload_bias_and_mask(const std::vector<std::pair<int32_t, float>>& bias, const uint32_t* mask, size_t stride,
                            int tokens, SampleCallParams& c) {
    CallBuffers& b = *buffers_;
    const size_t V = size_t(head_.vocab), words = (V + 31) / 32;
    c.has_bias = bias.empty() ? 0 : 1;
    c.has_mask = mask != nullptr ? 1 : 0;
    c.mask_stride = 0;  // one row for every token, unless per-token rows are uploaded below
    if (c.has_bias && bias != uploaded_bias_) {
      if (b.sample_bias.size() < V) {
        b.sample_bias.reset(V, stream_);
        clear_graphs();  // captured graphs hold the old pointer
      }
      std::vector<float> dense(V, 0.0f);
      for (const auto& [id, value] : bias) dense[size_t(id)] = value;
      CUDA_CHECK(cudaMemcpyAsync(b.sample_bias.get(), dense.data(), V * 4, cudaMemcpyHostToDevice, stream_));
      uploaded_bias_ = bias;
    }
    if (c.has_mask) {
      const size_t rows = stride == 0 ? 1 : size_t(tokens);
      if (b.sample_mask.size() < size_t(kMaxTokens) * words) {
        b.sample_mask.reset(size_t(kMaxTokens) * words, stream_);
        clear_graphs();
      }
      for (size_t r = 0; r < rows; ++r)
        CUDA_CHECK(cudaMemcpyAsync(b.sample_mask.get() + r * words, mask + r * stride, words * 4, cudaMemcpyHostToDevice,
                                   stream_));
      if (rows > 1) c.mask_stride = int32_t(words);  // the device's rows are packed
    }
  }

  // The device's tokens; a token the device handed back (its maximum not finite, or more ids tied
  // at the top-p boundary than the candidate buffer holds) is drawn by the host sampler from its
  // logits, still on the device: the same function, so the same token.
  void read_sampled(const ForwardRequest& req, int tokens, ForwardOutput& out) {
    const SamplingOptions& o = *req.sampling;
    const size_t V = size_t(head_.vocab);
    out.sampled.assign(size_t(tokens), -1);
    for (int t = 0; t < tokens; ++t) {
      const int32_t status = buffers_->sample_status.host()[t];
      if (status == kSampled) {
        out.sampled[size_t(t)] = buffers_->sampled.host()[t];
        continue;
      }
      if (status == kSampleNothingAllowed)
        throw Error("no token can be sampled: the allowed-token mask (or NaN logits) excludes every id");
      std::vector<float> row(V);
      // On the backend's stream: a polled call's flag can precede the stream's completion.
      CUDA_CHECK(cudaMemcpyAsync(row.data(), buffers_->logits + size_t(t) * V, V * 4, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      const uint32_t* mask = req.sample_mask == nullptr ? nullptr : req.sample_mask + size_t(t) * req.sample_mask_stride;
      out.sampled[size_t(t)] = sample::sample_token(row.data(), int64_t(V), o, mask, req.sample_position + t);
      ++last_.sampled_on_host;
    }
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
      const int32_t i = buffers_->non_finite.host()[t];
      if (i < 0) continue;
      float value = 0;
      CUDA_CHECK(cudaMemcpy(&value, rows + size_t(t) * size_t(H) + size_t(i), sizeof value, cudaMemcpyDeviceToHost));
      throw InputError("hidden state of token " + std::to_string(first_token + t) + " has a non-finite value (" +
                  std::to_string(value) + ") at index " + std::to_string(i));
    }
  }

  CallTarget call_target() const { return CallTarget{head_, *head_copies_, *buffers_, num_sms_, stream_, events_}; }

  PlanDevice plan_device() const {
    PlanDevice d;
    d.groups = head_copies_->layout().groups;
    d.smem_optin = size_t(smem_optin_);
    d.copies = head_copies_->copies();
    d.on_demand = head_copies_->on_demand();
    return d;
  }

  void record_event(int i) { CUDA_CHECK(cudaEventRecord(events_[i], stream_)); }
  // The last kernel's flag reaches host memory after its results; the stream reports completion
  // some microseconds later. Every 256 spins the stream is asked too, so a failed kernel surfaces
  // as its error instead of a hang.
  //
  // Ordering: the last block writes the answers to mapped memory, then __threadfence_system(), then
  // the flag, so the answers reach host memory first (PCIe keeps posted writes in order too). On the
  // host the flag is read with acquire semantics, so neither the compiler nor the CPU moves the
  // reads of the answers before it.
  void wait_for_done_flag(unsigned before) {
    const unsigned* flag = buffers_->done_flag.host();
    auto changed = [&] { return __atomic_load_n(flag, __ATOMIC_ACQUIRE) != before; };
    for (unsigned spin = 1;; ++spin) {
      if (changed()) return;
      if (spin % 256 == 0) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) {
          if (changed()) return;
          throw Error("the call's last kernel finished without writing its done flag");
        }
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
      }
      cpu_relax();
    }
  }

  void clear_graphs() { graphs_->clear(); }

  void check_round_tokens(int tokens) const {
    if (tokens < 1 || tokens > last_.tokens)
      throw Error("a sampling round asked for " + std::to_string(tokens) + " tokens, the last forward ran " +
                  std::to_string(last_.tokens));
  }
  size_t round_chunks() const { return size_t((head_.vocab + kSumExpChunk - 1) / kSumExpChunk); }
  void ensure_round_buffers(bool top_p) {
    CallBuffers& b = *buffers_;
    bool changed = false;
    auto grow = [&](auto& a, size_t n) {
      if (a.size() >= n) return;
      a.reset(n, stream_);
      changed = true;
    };
    grow(b.sample_call, 1);
    grow(b.sample_scratch, size_t(kMaxTokens));
    grow(b.chunk_mass, size_t(kMaxTokens) * round_chunks());
    if (top_p) grow(b.sample_candidates, size_t(kMaxTokens) * kSampleCandidates);
    if (changed) clear_graphs();  // captured graphs may hold the old buffers
    if (rounds_.call.size() == 0) {
      rounds_.call.reset(1);
      rounds_.max.reset(size_t(kMaxTokens));
      rounds_.boundary.reset(size_t(kMaxTokens));
      rounds_.scratch.reset(size_t(kMaxTokens));
      rounds_.max_key.reset(size_t(kMaxTokens));
    }
    if (rounds_.chunk_mass.size() < size_t(kMaxTokens) * round_chunks())
      rounds_.chunk_mass.reset(size_t(kMaxTokens) * round_chunks());
  }
  // The rounds' parameters in pinned memory (no bias, no mask until round 1 uploads them).
  SampleCallParams& round_call(const SamplingOptions& o) {
    SampleCallParams& c = *rounds_.call.host();
    c = SampleCallParams{};
    c.temperature = double(o.temperature);
    c.top_p = double(o.top_p);
    c.min_p = double(o.min_p);
    c.seed = o.seed;
    return c;
  }
  SampleParams round_params(int tokens, bool top_p) const {
    SampleParams sp = buffers_->sample_params(head_.vocab, tokens, top_p);
    sp.rounds_only = 1;  // no answer written
    return sp;
  }
  // The first `bytes` of each token's scratch into the pinned copy (the rest of it stays stale).
  void download_round_scratch(int tokens, size_t bytes) {
    CUDA_CHECK(cudaMemcpy2DAsync(rounds_.scratch.host(), sizeof(SampleScratch), buffers_->sample_scratch.get(),
                                 sizeof(SampleScratch), bytes, size_t(tokens), cudaMemcpyDeviceToHost, stream_));
  }

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
    const std::string sampling = s.sample ? "+sample" : "";
    const int passes = s.plan.passes(s.T);
    const std::string head_label = std::string("head+scale+cap+argmax (fused, ") + desc(s.plan.kernel).how +
                                   (passes > 1 ? ", " + std::to_string(passes) + " passes)" : std::string(")"));
    if (!stage_events) {
      times.push_back({"norm+quantize+" + head_label + sampling + (copies ? "+select+download" : "") + " (one graph)",
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
    if (s.sample) times.push_back({"sample+stages+download", elapsed(last, kCallEnd)});
    else if (s.logits || s.stages || s.k > 0 || s.logprobs) times.push_back({"stages+download", elapsed(last, kCallEnd)});
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
  std::unique_ptr<CallBuffers> buffers_;
  // The sampling rounds' host side, pinned so that every copy is asynchronous and one
  // synchronization ends a round; allocated by the first round (the candidates and logits grow to
  // the largest round seen).
  struct RoundStaging {
    MappedHostArray<SampleCallParams> call;
    MappedHostArray<float> max;
    MappedHostArray<unsigned long long> max_key;
    MappedHostArray<int32_t> boundary;
    MappedHostArray<SampleScratch> scratch;
    MappedHostArray<unsigned long long> chunk_mass;
    MappedHostArray<SampleCandidate> candidates;
    MappedHostArray<float> logits;
  } rounds_;
  bool max_round_ran_ = false;  // round 1 uploaded the bias and mask the next weights round reads
  cudaEvent_t input_ready_ = nullptr;  // the caller's stream reached the call
  std::vector<std::pair<int32_t, float>> uploaded_bias_;  // the bias sample_bias holds
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
void sample_round_max(Backend& backend, const SamplingOptions& call, const ShardSampleInputs& in, int tokens,
                      uint64_t* max_key) {
  as_cuda(backend).sample_round_max(call, in, tokens, max_key);
}
void sample_round_weights(Backend& backend, const SamplingOptions& call, const float* max_per_token,
                          const uint64_t* global_max_key, int tokens, ShardWeights& out) {
  as_cuda(backend).sample_round_weights(call, max_per_token, global_max_key, tokens, out);
}
void sample_round_boundary(Backend& backend, const int32_t* boundary_per_token, int tokens, ShardBoundary& out) {
  as_cuda(backend).sample_round_boundary(boundary_per_token, tokens, out);
}
void fetch_logit_runs(Backend& backend, std::span<const LogitRun> runs, float* out) {
  as_cuda(backend).fetch_logit_runs(runs, out);
}
CallInfo last_call(Backend& backend) { return as_cuda(backend).last_; }
std::vector<uint64_t> last_block_clock(Backend& backend) { return as_cuda(backend).block_clock_stamps(); }
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

std::unique_ptr<Backend> make_cuda_backend(const HeadView& head, int gpus) {
  return std::make_unique<cuda::CudaBackend>(head, gpus);
}

std::unique_ptr<Backend> make_cuda_backend_on_device(const HeadView& head, int device) {
  return std::make_unique<cuda::CudaBackend>(head, 1, device);
}

}  // namespace lmhead
