#pragma once
// The device and mapped host buffers of a backend's calls: the norm's parameters, the activations
// prep writes for the head kernels, the logits between their guard bands, the argmax partials and
// counters, the mapped input and answers, and the optional outputs with their host copies, which
// grow on the first call that asks for them.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.hpp"
#include "cuda/call_results.hpp"
#include "cuda/call_shape.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernels.hpp"

namespace lmhead::cuda {

struct CallBuffers {
  static constexpr int kPartialBlocksPerSm = 8;
  static constexpr size_t kGuard = 1024;  // sentinel floats before and after the device logits
  static constexpr uint32_t kGuardWord = 0xA5A5A5A5u;

  // Allocates and fills every buffer a call always uses, on `stream` (the caller synchronizes).
  CallBuffers(const HeadView& head, int num_sms, cudaStream_t stream);

  // Lazily sized buffers of the optional outputs; true when one was reallocated (a reallocation
  // invalidates captured graphs).
  bool grow_outputs(const Shape& s, int64_t vocab, int64_t hidden, cudaStream_t stream);
  // The sentinel bands around the device logits are untouched (TestHooks::check_guards).
  bool guards_intact(int64_t vocab, cudaStream_t stream) const;
  HostResults host_results() const;
  // The sampling kernels' buffers (logits, maximum, parameters, bias, mask, scratch, chunk masses,
  // candidates) for T tokens of a vocabulary; the caller sets how the answer is delivered.
  SampleParams sample_params(int64_t vocab, int T, bool top_p) const;

  // The hidden states' buffer: the caller's portable one (use_input_buffer), else this one's.
  float* input_host() const { return shared_input != nullptr ? shared_input : hidden.host(); }
  const float* input_device() const { return shared_input != nullptr ? shared_input : hidden.device(); }

  DeviceArray<float> gamma;
  DeviceArray<float> beta;       // LayerNorm + bias only
  DeviceArray<float> head_bias;  // output.bias only
  DeviceArray<int8_t> act_qs;
  DeviceArray<float> act_d;
  DeviceArray<uint32_t> act_bsp;
  DeviceArray<int8_t> act_frag;
  DeviceArray<int8_t> act_lanes;
  DeviceArray<float> act_f;
  DeviceArray<float> logits_store, raw, normed, scaled, div, tanh;
  float* logits = nullptr;  // logits_store past its leading guard band
  DeviceArray<PartialBest> partials;
  DeviceArray<unsigned long long> block_clock;  // TestHooks::block_clock only
  DeviceArray<unsigned> counters;
  DeviceArray<float> max_out;
  DeviceArray<int2> candidates;
  DeviceArray<double> chunk_sums;

  MappedHostArray<float> hidden;
  float* shared_input = nullptr;  // use_input_buffer: a portable mapped buffer the caller owns
  MappedHostArray<TokenResult> results;
  MappedHostArray<int32_t> norm_path;
  MappedHostArray<const float*> device_rows;  // the caller's rows of a device-input call
  MappedHostArray<int32_t> non_finite;        // per token of a device-input call: first bad index or -1
  MappedHostArray<unsigned> done_flag;
  MappedHostArray<float> h_logits, h_raw, h_normed, h_scaled, h_div, h_tanh;
  MappedHostArray<int2> h_candidates;
  MappedHostArray<double> h_sums;

  // Sampling on the device (Shape::sample), allocated by the first call that samples: the call's
  // parameters (mapped, and the device copy prep makes), per-token scratch, chunk masses, the
  // top-p candidates, a dense bias and the mask rows, and the answers (mapped).
  MappedHostArray<SampleCallParams> sample_call_in;
  DeviceArray<SampleCallParams> sample_call;
  DeviceArray<SampleScratch> sample_scratch;
  DeviceArray<unsigned long long> chunk_mass;
  DeviceArray<SampleCandidate> sample_candidates;
  DeviceArray<float> sample_bias;
  DeviceArray<uint32_t> sample_mask;
  MappedHostArray<int32_t> sampled, sample_status;
};

}  // namespace lmhead::cuda
