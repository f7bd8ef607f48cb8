#pragma once
// Reading a call's results: the per-token answers the head kernel's last block wrote to mapped
// host memory, and the optional outputs the call copied into pinned host memory, turned into the
// backend's ForwardOutput (top-k chunk lists merged with select::merge, sum-exp chunks added in id
// order).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.hpp"
#include "cuda/kernels.hpp"

namespace lmhead::cuda {

// Host copies of one call's outputs ([kMaxTokens][...] each; unrequested ones are not read).
struct HostResults {
  const TokenResult* results = nullptr;
  const int2* candidates = nullptr;  // [T][top-k chunks][min(k, kTopKChunk)], id -1 ends a list
  const double* chunk_sums = nullptr;  // [T][sum-exp chunks]
  // The capped logits, then the stages: normed hidden states, raw, scaled, divided, tanh.
  const float *logits = nullptr, *normed = nullptr, *raw = nullptr, *scaled = nullptr, *div = nullptr,
              *tanh = nullptr;
};

// capped: the call ran a soft cap (else the scaled stage is the logits).
void read_results(const HostResults& h, int tokens, int64_t vocab, int64_t hidden, int top_k, bool logprobs,
                  bool logits, bool stages, bool capped, ForwardOutput& out);

}  // namespace lmhead::cuda
