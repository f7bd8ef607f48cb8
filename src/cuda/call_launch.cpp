#include "cuda/call_launch.hpp"

#include <algorithm>

#include "backend/head_math.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/kernels.hpp"

namespace lmhead::cuda {
namespace {

// Inside a capture this becomes an event-record node of the graph, so replays time the stages.
void record_stage_event(cudaEvent_t event, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status == cudaStreamCaptureStatusActive)
    CUDA_CHECK(cudaEventRecordWithFlags(event, stream, cudaEventRecordExternal));
  else
    CUDA_CHECK(cudaEventRecord(event, stream));
}

// The generic kernel's walk each plan kernel of it runs; vec_dot for the kernels of their own.
constexpr GenericOrder generic_order(HeadKernel k) {
  switch (k) {
    case HeadKernel::llamacpp_tiled: return GenericOrder::llamacpp_tiled;
    case HeadKernel::llamacpp_repack: return GenericOrder::llamacpp_repack;
    case HeadKernel::llamacpp_float_vec: return GenericOrder::llamacpp_float_vec;
    case HeadKernel::llamacpp_float_sgemm: return GenericOrder::llamacpp_float_sgemm;
    default: return GenericOrder::vec_dot;
  }
}

// The plan's kernel, in passes of at most its max_tokens tokens.
void launch_head(const Shape& s, HeadParams& hp, TensorType type, int num_sms, cudaStream_t stream) {
  const KernelDesc& kd = desc(s.plan.kernel);
  for (int t0 = 0; t0 < s.T; t0 += kd.max_tokens) {
    hp.t0 = t0;
    hp.tc = std::min(kd.max_tokens, s.T - t0);
    const bool pdl = s.pdl && t0 == 0;
    const int warps = t0 + kd.max_tokens >= s.T ? s.plan.last_warps : s.plan.warps;
    switch (s.plan.kernel) {
      case HeadKernel::q5k_stream: launch_q5k_stream(hp, warps, false, pdl, num_sms, stream); break;
      case HeadKernel::q4k_stream: launch_q5k_stream(hp, warps, true, pdl, num_sms, stream); break;
      case HeadKernel::q6k_stream: launch_q6k_stream(hp, warps, false, pdl, num_sms, stream); break;
      case HeadKernel::q6k_stream_tiled: launch_q6k_stream(hp, warps, true, pdl, num_sms, stream); break;
      case HeadKernel::q8_0_stream: launch_q8_0_stream(hp, warps, pdl, num_sms, stream); break;
      case HeadKernel::q5k_tma: launch_q5k_tma(hp, pdl, num_sms, stream); break;
      case HeadKernel::q5k_stream_n: launch_q5k_stream_n(hp, warps, false, pdl, num_sms, stream); break;
      case HeadKernel::q5k_stream_n_tiled: launch_q5k_stream_n(hp, warps, true, pdl, num_sms, stream); break;
      case HeadKernel::q5k_stream_tiled: launch_kquant_tiled(hp, warps, TensorType::Q5_K, pdl, num_sms, stream); break;
      case HeadKernel::q4k_stream_tiled: launch_kquant_tiled(hp, warps, TensorType::Q4_K, pdl, num_sms, stream); break;
      case HeadKernel::q6k_tiled_n: launch_kquant_tiled(hp, warps, TensorType::Q6_K, pdl, num_sms, stream); break;
      case HeadKernel::q5k_tma_n: launch_q5k_stream_n_staged(hp, warps, false, pdl, num_sms, stream); break;
      case HeadKernel::q5k_tma_n_tiled: launch_q5k_stream_n_staged(hp, warps, true, pdl, num_sms, stream); break;
      case HeadKernel::q5k_tma_tiled: launch_kquant_tiled_staged(hp, warps, TensorType::Q5_K, pdl, num_sms, stream); break;
      case HeadKernel::q4k_tma_tiled: launch_kquant_tiled_staged(hp, warps, TensorType::Q4_K, pdl, num_sms, stream); break;
      case HeadKernel::q6k_tma_tiled: launch_kquant_tiled_staged(hp, warps, TensorType::Q6_K, pdl, num_sms, stream); break;
      case HeadKernel::q5k_lanes: launch_q5k_lanes(hp, pdl, num_sms, stream); break;
      case HeadKernel::q5k_mma: {
        MmaConfig mc;
        mc.warps = warps;
        mc.pdl = pdl;
        launch_q5k_mma(hp, mc, num_sms, stream);
        break;
      }
      // float_route picks the generic walk's activations; the llama.cpp orders fix their own.
      case HeadKernel::generic:
      case HeadKernel::llamacpp_tiled:
      case HeadKernel::llamacpp_repack:
      case HeadKernel::llamacpp_float_vec:
      case HeadKernel::llamacpp_float_sgemm:
        launch_generic_head(hp, type, s.float_route, generic_order(s.plan.kernel), num_sms, pdl, stream);
        break;
    }
  }
}

}  // namespace

void record_call(const Shape& s, const CallTarget& c) {
  const CallBuffers& b = c.buffers;
  const bool stage_events = s.events;
  const int64_t H = c.head.hidden, V = c.head.vocab;
  const size_t TV = size_t(s.T) * size_t(V);
  PrepParams pp;
  pp.hidden = b.input_device();
  if (s.device_input) {
    pp.hidden_at = b.device_rows.device();
    pp.non_finite = b.non_finite.device();
  }
  pp.gamma = b.gamma.get();
  pp.layer_norm = c.head.layer_norm ? 1 : 0;
  pp.beta = c.head.beta ? b.beta.get() : nullptr;
  pp.input_normed = s.input_normed ? 1 : 0;
  pp.H = int(H);
  pp.T = s.T;
  pp.eps = c.head.eps;
  pp.format = s.format;
  pp.force_sequential = s.sequential_norm ? 1 : 0;
  if (s.plan.kernel == HeadKernel::llamacpp_repack) pp.positive_amax_tokens = s.T - s.T % 4;
  pp.act_qs = b.act_qs.get();
  pp.act_d = b.act_d.get();
  pp.act_bsp = b.act_bsp.get();
  pp.act_frag = reads_fragment_acts(s.plan.kernel) ? b.act_frag.get() : nullptr;
  pp.act_lanes = reads_lanes_acts(s.plan.kernel) ? b.act_lanes.get() : nullptr;
  pp.act_f = b.act_f.get();
  pp.normed_out = s.stages ? b.normed.get() : nullptr;
  pp.norm_path = b.norm_path.device();
  if (s.sample) {
    pp.sample_scratch = b.sample_scratch.get();
    pp.sample_call_in = b.sample_call_in.device();
    pp.sample_call = b.sample_call.get();
  }
  launch_prep(pp, c.stream);
  if (stage_events) record_stage_event(c.events[kPrepDone], c.stream);

  HeadParams hp;
  const DeviceHead& w = c.weights;
  hp.weights = w.rows();
  hp.aux = w.aux();
  hp.row_stride = w.layout().row_stride;
  hp.vocab = int(V);
  hp.hidden = int(H);
  hp.groups = w.layout().groups;
  hp.T = s.T;
  hp.act_qs = b.act_qs.get();
  hp.act_d = b.act_d.get();
  hp.act_bsp = b.act_bsp.get();
  hp.act_frag = b.act_frag.get();
  hp.act_lanes = b.act_lanes.get();
  hp.act_f = b.act_f.get();
  const CapParams cp = cap_params(c.head, s.cap_mode == kCapFused ? SoftcapRoute::fused : SoftcapRoute::nodes);
  hp.head_bias = c.head.head_bias ? b.head_bias.get() : nullptr;
  hp.logit_scale = cp.logit_scale;
  hp.cap = cp.cap;
  hp.inv_cap = cp.inv_cap;
  hp.cap_mode = s.cap_mode;
  hp.logits = b.logits;
  hp.raw = s.stages ? b.raw.get() : nullptr;
  hp.partials = b.partials.get();
  hp.done_counter = b.counters.get();
  hp.tile_counter = b.counters.get() + 1;
  hp.call_seq = b.counters.get() + 2;
  hp.done_flag = s.sample ? nullptr : b.done_flag.device();  // sampling: its kernels write the flag
  hp.results = b.results.device();
  hp.max_out = b.max_out.get();
  hp.stream_weights = w.lanes();
  hp.stream_n_weights = w.subblocks();
  hp.block_clock = s.block_clock ? b.block_clock.get() : nullptr;
  launch_head(s, hp, c.head.type, c.num_sms, c.stream);
  if (stage_events) record_stage_event(c.events[kHeadDone], c.stream);

  if (s.k > 0 || s.logprobs) {
    SelectParams sp;
    sp.logits = b.logits;
    sp.max_in = b.max_out.get();
    sp.vocab = int(V);
    sp.T = s.T;
    sp.k = s.k;
    sp.k_chunk = std::min(s.k, kTopKChunk);
    sp.candidates = b.candidates.get();
    sp.chunk_sums = b.chunk_sums.get();
    if (s.k > 0) launch_topk(sp, c.stream);
    if (s.logprobs) launch_sum_exp(sp, c.stream);
    if (stage_events) record_stage_event(c.events[kSelectDone], c.stream);
  }
  if (s.sample) {
    SampleParams sp = b.sample_params(V, s.T, s.sample_top_p);
    sp.sampled = b.sampled.device();
    sp.status = b.sample_status.device();
    sp.done_flag = b.done_flag.device();
    sp.call_seq = b.counters.get() + 2;
    sp.max_kernel = s.sample_max ? 1 : 0;
    // Right after the head kernel (no select or stage nodes between) the sampling kernels may be
    // launched before it ends and wait for its memory with griddepcontrol.wait.
    sp.pdl = s.pdl && s.k == 0 && !s.logprobs ? 1 : 0;
    launch_sample(sp, c.stream);
  }
  if (s.stages && s.cap_mode != kScaleOnly)
    launch_stage_nodes(b.raw.get(), int(V), s.T, hp.logit_scale, hp.cap, hp.inv_cap, s.cap_mode, b.scaled.get(),
                       b.div.get(), b.tanh.get(), c.stream);

  auto d2h = [&](void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c.stream));
  };
  if (s.k > 0) {
    const size_t n = size_t(s.T) * ((size_t(V) + kTopKChunk - 1) / kTopKChunk) * size_t(std::min(s.k, kTopKChunk));
    d2h(b.h_candidates.host(), b.candidates.get(), n * sizeof(int2));
  }
  if (s.logprobs) d2h(b.h_sums.host(), b.chunk_sums.get(), size_t(s.T) * ((size_t(V) + kSumExpChunk - 1) / kSumExpChunk) * 8);
  if (s.logits || s.stages) d2h(b.h_logits.host(), b.logits, TV * 4);
  if (s.stages) {
    d2h(b.h_normed.host(), b.normed.get(), size_t(s.T) * size_t(H) * 4);
    d2h(b.h_raw.host(), b.raw.get(), TV * 4);
    if (s.cap_mode != kScaleOnly) {
      d2h(b.h_scaled.host(), b.scaled.get(), TV * 4);
      d2h(b.h_div.host(), b.div.get(), TV * 4);
      d2h(b.h_tanh.host(), b.tanh.get(), TV * 4);
    }
  }
}

}  // namespace lmhead::cuda
