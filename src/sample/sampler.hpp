#pragma once
// Seeded sampling of one token from its capped logits (numerics.md §9), written as per-range
// summaries that merge exactly, like select/: a range of ids (a thread's, a shard's, a GPU's) is
// summarized in rounds, and what travels between rounds is small (a maximum and k candidates;
// integer weight sums per 512-id chunk and per rank bucket; for top-p, the ids of one bucket).
// Every sum is of integer weights, exact in any order, so the token drawn is the same for every
// split of the vocabulary.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "lmhead/lmhead.hpp"

namespace lmhead::sample {

// The draw finds its chunk from per-chunk sums, then walks that chunk's ids; the size only sets
// how much travels and how far the walk goes (the sums are exact, so nothing depends on it).
constexpr int64_t kChunk = 512;

// Throws Error naming the problem: negative or non-finite temperature, top-p outside (0, 1], min-p
// outside [0, 1], negative top-k, a bias id outside the vocabulary or given twice, a non-finite
// bias, a mask whose length is neither ceil(V/32) nor tokens * ceil(V/32) words, sampling
// (temperature > 0) over more than kMaxSampledVocab ids (the integer weights' total would overflow).
void validate(const SamplingOptions& o, int64_t vocab, int tokens);
// Whether choosing the token needs the logits (otherwise it is the argmax of the summary).
bool needs_logits(const SamplingOptions& o);
// The mask row of token t (nullptr: all allowed).
const uint32_t* mask_row(const SamplingOptions& o, int64_t vocab, int t);

// Threads lent by the caller (the engine's pool), so that src/sample owns none: run(task) calls
// task(w) for every w in [0, count) concurrently and returns when all are done, rethrowing the
// first exception. Nothing drawn depends on count: it only sets how the work is spread.
struct Workers {
  int count = 1;
  std::function<void(const std::function<void(int worker)>&)> run;
};

// One token: its capped logits over ids [0, V), the mask row (or nullptr), its position.
// `bounds` splits the ids into ranges (ascending and non-empty, from 0 to V) that are summarized
// apart and merged, as shards would; the result never depends on it. With workers, each round's
// ranges run on them (without bounds: one 512-aligned range per worker).
int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& o, const uint32_t* mask,
                     int64_t position, std::span<const int64_t> bounds = {}, const Workers* workers = nullptr);

// A range of the vocabulary whose logits are held apart, as a shard holds its own: ids
// [begin, end), id i's capped logit at logits[i - begin].
struct RangeLogits {
  const float* logits = nullptr;
  int64_t begin = 0;
  int64_t end = 0;
};
// sample_token over ranges held apart (in id order, each beginning where the previous ends, from 0
// to V): between ranges only the summaries of numerics.md §9's table pass, never a logit, and the
// token is sample_token's on the same logits laid end to end.
int32_t sample_token_in_ranges(std::span<const RangeLogits> ranges, int64_t V, const SamplingOptions& o,
                               const uint32_t* mask, int64_t position, const Workers* workers = nullptr);

// Tokens first .. first + n - 1 of a call (row t of `logits` is token first + t: its mask row and
// position o.position + first + t), into out[0, n). Whole tokens go to the workers while there
// are at least as many left as workers; the rest are split over the vocabulary. The same tokens
// as sample_token one by one, for any workers.
void sample_tokens(const float* logits, int64_t V, int n, const SamplingOptions& o, int first, int32_t* out,
                   const Workers* workers = nullptr);

// The distribution the sampler draws from at temperature > 0: each id's integer weight W_i (0
// outside the final set) and their total S', both exact as doubles (W_i <= 2^40, S' < 2^63 is a
// sum of them: exact while below 2^53, otherwise the double nearest to it): p_i = weight[i] / total.
struct Weights {
  std::vector<double> weight;
  double total = 0;
};
Weights kept_weights(const float* logits, int64_t V, const SamplingOptions& o, const uint32_t* mask);

// Double weights for verification's residual max(0, p - q), which is not an integer weight: summed
// sequentially inside 512-id chunks, chunk sums added in id order.
double chunked_sum(const double* w, int64_t n);
// Inverse CDF over double weights in id order with the chunked sum's additions: the first id whose
// running total exceeds u * total (u in (0, 1)). -1 when every weight is 0.
int32_t inverse_cdf(const double* w, int64_t n, double u);

}  // namespace lmhead::sample
