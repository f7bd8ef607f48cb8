#pragma once
// Token choice (numerics.md §8) as mergeable partial summaries: each thread, shard or GPU
// summarizes its own vocabulary range; merging is exact and order-independent, so the result never
// depends on how the vocabulary was split.
#include <cstdint>
#include <limits>
#include <vector>

#include "lmhead/lmhead.hpp"

namespace lmhead::select {

constexpr int kMaxTiedIds = 16;  // tied ids kept (the lowest ones); tie_count counts them all

struct TokenSummary {
  float max = -std::numeric_limits<float>::infinity();
  int32_t argmax = -1;                 // lowest id reaching max
  int64_t tie_count = 0;               // ids equal to max
  std::vector<int32_t> tied_ids;       // lowest kMaxTiedIds of them, ascending
  std::vector<Candidate> top;          // at most k, value descending then id ascending
};

// Folds logits[begin, end) (ids begin..end-1; `logits` points at id 0) into `into`.
void summarize(const float* logits, int64_t begin, int64_t end, int k, TokenSummary& into);
// The same for `count` values whose first one has id `first_id` (`values` points at that one).
void summarize_span(const float* values, int64_t first_id, int64_t count, int k, TokenSummary& into);
// Folds b into a (a and b cover disjoint id ranges).
void merge(TokenSummary& a, const TokenSummary& b, int k);

// Deterministic sum of exp(x - max) in double over ids [0, n): ids are summed sequentially inside
// fixed chunks of kSumExpChunk ids and the chunk sums added in id order, so any split of the
// vocabulary on chunk boundaries (threads, GPUs) gives the same double.
constexpr int64_t kSumExpChunk = 512;
double sum_exp_chunk(const float* logits, int64_t begin, int64_t end, float max);  // one chunk
double sum_exp(const float* logits, int64_t n, float max);

// logprob of a value given the token's max and sum_exp (max-subtracted log_softmax).
float logprob(float value, float max, double sum_exp);

}  // namespace lmhead::select
