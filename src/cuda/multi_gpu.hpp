#pragma once
// Pieces of the multi-GPU head that live next to the CUDA backend (not public API).
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"

namespace lmhead::cuda {

// Phase two of the logprob exchange. After a forward of `tokens` tokens on the CUDA backend
// `backend`, writes out[t * chunks + c] = the sum over chunk c (select::kSumExpChunk ids, the
// device's sequential order) of exp(logit - max_per_token[t]), with chunks = ceil(shard rows /
// kSumExpChunk). With max = the global maximum these are exactly the chunk sums the one-GPU
// backend computes for the same ids, so adding every shard's chunk sums in id order gives its
// double byte for byte. Throws Error when `backend` is not the CUDA backend.
void chunk_sums_against(Backend& backend, const float* max_per_token, int tokens, double* out);

int64_t sum_exp_chunks(int64_t rows);  // ceil(rows / select::kSumExpChunk)

// For benchmarks and tests, on a backend made by make_multi_gpu_backend: the tuning of every
// shard, the last call of every shard, and whether the shards share one input buffer that each
// shard's thread fills in part (the default) or each copies the whole input.
struct Tuning;
struct CallInfo;
void set_tuning_of_shards(Backend& backend, const Tuning& tuning);
std::vector<CallInfo> last_calls_of_shards(Backend& backend);
void set_shared_input(Backend& backend, bool shared);

// CUDA devices visible to this process (0 when none, or when built without CUDA).
int device_count();

}  // namespace lmhead::cuda
