#pragma once
// Pieces of the multi-GPU head that live next to the CUDA backend (not public API).
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "sample/boundary.hpp"

namespace lmhead::cuda {

// Phase two of the logprob exchange. After a forward of `tokens` tokens on the CUDA backend
// `backend`, writes out[t * chunks + c] = the sum over chunk c (select::kSumExpChunk ids, the
// device's sequential order) of exp(logit - max_per_token[t]), with chunks = ceil(shard rows /
// kSumExpChunk). With max = the global maximum these are exactly the chunk sums the one-GPU
// backend computes for the same ids, so adding every shard's chunk sums in id order gives its
// double byte for byte. Throws Error when `backend` is not the CUDA backend.
void chunk_sums_against(Backend& backend, const float* max_per_token, int tokens, double* out);

int64_t sum_exp_chunks(int64_t rows);  // ceil(rows / select::kSumExpChunk)

// One shard's half of the sampling rounds of numerics.md §9 over the logits its last forward left
// on the device (the multi-GPU backend's sampling without gathering logits; the merges are the
// caller's). Temperature, top-p and min-p come from `call`; its bias and mask are the shard's.
// Round 1, only with a bias or a mask: per token the shard's largest z as an ordered key (the
// bits of ~sample::descending_key(z); 0 when none of its ids takes part). It uploads the shard's
// bias (shard-local ids) and mask rows (the shard's words of each row, rows `mask_stride` words
// apart, 0: one row for every token) for the next rounds.
struct ShardSampleInputs {
  std::vector<std::pair<int32_t, float>> bias;
  const uint32_t* mask = nullptr;
  size_t mask_stride = 0;
};
void sample_round_max(Backend& backend, const SamplingOptions& call, const ShardSampleInputs& in, int tokens,
                      uint64_t* max_key);
// Round 2: per token the shard's total integer weight, its per-512-id chunk masses (chunk c = the
// shard's ids [512 c, 512 c + 512)) and, with top-p, its mass per rank bucket, against the global
// maximum: the largest logit of each token (max_per_token, no bias or mask) or, after round 1,
// the largest z's key over every shard (global_max_key).
struct ShardWeights {
  std::vector<uint64_t> total;        // [tokens]
  std::vector<uint64_t> chunk_mass;   // [tokens][chunks]
  std::vector<uint64_t> bucket_mass;  // [tokens][sample::kRankBuckets], top-p only
  int64_t chunks = 0;
};
void sample_round_weights(Backend& backend, const SamplingOptions& call, const float* max_per_token,
                          const uint64_t* global_max_key, int tokens, ShardWeights& out);
// Round 3 (top-p), after round 2 on the same backend: with each token's boundary bucket, the chunk
// masses of the ids in earlier buckets, the boundary bucket's mass per fine bin (the next 10 bits
// of max - z, monotone like the bucket: sample.cu's fine_bin) and its ids (shard-local id, rank
// key, weight, fine bin). `overflow[t]` when the bucket holds more ids than the device keeps
// (kSampleCandidates): the caller then draws that token from the logits.
constexpr int kShardFineBins = 1024;  // kSampleFineBins of kernels.hpp (this header stays CUDA-free)
struct ShardCandidate {
  uint64_t key;  // sample::descending_key(z)
  uint64_t weight;
  int32_t id;    // shard-local
  int32_t fine;
};
struct ShardBoundary {
  std::vector<uint64_t> chunk_mass;  // [tokens][chunks]
  std::vector<uint64_t> fine_mass;   // [tokens][kShardFineBins]
  std::vector<std::vector<ShardCandidate>> candidates;
  std::vector<uint8_t> overflow;
};
void sample_round_boundary(Backend& backend, const int32_t* boundary_per_token, int tokens, ShardBoundary& out);
// Logits [first, first + count) of token `token` of the last forward, for each run in turn, into
// out (the runs' counts add up): the draws' chunks, and the rare token drawn from all its logits.
struct LogitRun {
  int token = 0;
  int64_t first = 0;
  int64_t count = 0;
};
void fetch_logit_runs(Backend& backend, std::span<const LogitRun> runs, float* out);

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
