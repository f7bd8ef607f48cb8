#include "cuda/call_buffers.hpp"

#include <algorithm>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace lmhead::cuda {

CallBuffers::CallBuffers(const HeadView& head, int num_sms, cudaStream_t stream) {
  const int64_t H = head.hidden, V = head.vocab;
  gamma.reset(size_t(H), stream);
  CUDA_CHECK(cudaMemcpyAsync(gamma.get(), head.gamma, size_t(H) * 4, cudaMemcpyHostToDevice, stream));
  if (head.beta) {
    beta.reset(size_t(H), stream);
    CUDA_CHECK(cudaMemcpyAsync(beta.get(), head.beta, size_t(H) * 4, cudaMemcpyHostToDevice, stream));
  }
  if (head.head_bias) {
    head_bias.reset(size_t(V), stream);
    CUDA_CHECK(cudaMemcpyAsync(head_bias.get(), head.head_bias, size_t(V) * 4, cudaMemcpyHostToDevice, stream));
  }
  const size_t groups256 = size_t(H + 255) / 256;
  act_qs.reset(groups256 * kMaxTokens * kActPitch, stream);
  act_d.reset(size_t(H + 31) / 32 * kMaxTokens, stream);
  act_bsp.reset(groups256 * kMaxTokens * 4, stream);
  act_frag.reset(groups256 * kMaxTokens * kFragPitch, stream);
  act_lanes.reset(groups256 * kLanesTokens * 32 * kLanesPitch, stream);  // zero slots must stay zero
  act_f.reset(groups256 * 256 * kMaxTokens, stream);
  logits_store.reset(size_t(V) * kMaxTokens + 2 * kGuard, stream);
  CUDA_CHECK(cudaMemsetAsync(logits_store.get(), 0xA5, logits_store.bytes(), stream));
  logits = logits_store.get() + kGuard;
  partials.reset(size_t(num_sms) * kPartialBlocksPerSm * kMaxTokens, stream);
  counters.reset(3, stream);
  done_flag.reset(1);
  *done_flag.host() = 0;
  max_out.reset(kMaxTokens, stream);
  hidden.reset(size_t(H) * kMaxTokens);
  results.reset(kMaxTokens);
  norm_path.reset(kMaxTokens);
  device_rows.reset(1);
  *device_rows.host() = nullptr;
  non_finite.reset(kMaxTokens);
}

bool CallBuffers::grow_outputs(const Shape& s, int64_t vocab, int64_t hidden_size, cudaStream_t stream) {
  const size_t V = size_t(vocab), H = size_t(hidden_size);
  bool changed = false;
  auto grow = [&](auto& arr, size_t n) {
    if (arr.size() >= n) return;
    if constexpr (requires { arr.host(); }) arr.reset(n);  // mapped host memory: no stream involved
    else arr.reset(n, stream);
    changed = true;
  };
  const size_t TV = size_t(kMaxTokens) * V;
  if (s.logits || s.stages) grow(h_logits, TV);
  if (s.stages) {
    grow(raw, TV); grow(h_raw, TV);
    grow(normed, size_t(kMaxTokens) * H); grow(h_normed, size_t(kMaxTokens) * H);
    if (s.cap_mode != kScaleOnly) {
      grow(scaled, TV); grow(div, TV); grow(tanh, TV);
      grow(h_scaled, TV); grow(h_div, TV); grow(h_tanh, TV);
    }
  }
  if (s.k > 0) {
    const size_t n = size_t(kMaxTokens) * ((V + kTopKChunk - 1) / kTopKChunk) * size_t(std::min(s.k, kTopKChunk));
    grow(candidates, n);
    grow(h_candidates, n);
  }
  if (s.logprobs) {
    const size_t n = size_t(kMaxTokens) * ((V + kSumExpChunk - 1) / kSumExpChunk);
    grow(chunk_sums, n);
    grow(h_sums, n);
  }
  if (s.sample) {
    grow(sample_call_in, 1);
    grow(sample_call, 1);
    grow(sample_scratch, size_t(kMaxTokens));
    grow(chunk_mass, size_t(kMaxTokens) * ((V + kSumExpChunk - 1) / kSumExpChunk));
    grow(sampled, size_t(kMaxTokens));
    grow(sample_status, size_t(kMaxTokens));
  }
  if (s.sample_top_p) grow(sample_candidates, size_t(kMaxTokens) * kSampleCandidates);
  // The bias and mask buffers grow where the backend fills them (grow_sample_inputs).
  return changed;
}

bool CallBuffers::guards_intact(int64_t vocab, cudaStream_t stream) const {
  std::vector<uint32_t> band(kGuard);
  const size_t V = size_t(vocab);
  for (const float* p : {logits_store.get(), logits + V * kMaxTokens}) {
    CUDA_CHECK(cudaMemcpyAsync(band.data(), p, kGuard * 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (uint32_t w : band)
      if (w != kGuardWord) return false;
  }
  return true;
}

SampleParams CallBuffers::sample_params(int64_t vocab, int T, bool top_p) const {
  SampleParams sp;
  sp.logits = logits;
  sp.max_in = max_out.get();
  sp.call = sample_call.get();
  sp.bias = sample_bias.get();
  sp.mask = sample_mask.get();
  sp.scratch = sample_scratch.get();
  sp.chunk_mass = chunk_mass.get();
  sp.candidates = sample_candidates.get();
  sp.vocab = int(vocab);
  sp.T = T;
  sp.top_p = top_p ? 1 : 0;
  return sp;
}

HostResults CallBuffers::host_results() const {
  return HostResults{results.host(), h_candidates.host(), h_sums.host(), h_logits.host(), h_normed.host(),
                     h_raw.host(),     h_scaled.host(),     h_div.host(),  h_tanh.host()};
}

}  // namespace lmhead::cuda
