#pragma once
// Speculative verification on one call's capped logits (numerics.md §9b).
#include <cstdint>
#include <span>
#include <vector>

#include "lmhead/lmhead.hpp"

namespace lmhead::sample {

struct Verdict {
  int accepted = 0;
  int32_t next = -1;
  std::vector<int32_t> target;  // the target's choice at each checked position
};

// Throws Error naming a draft id outside [0, V), a draft-probs array that is neither empty nor
// drafts x V values, or one holding a negative or non-finite value.
void validate_draft(int64_t V, std::span<const int32_t> draft, std::span<const float> draft_probs);

// logits: (drafts + 1) x V capped logits, row j at position o.position + j. drawn: sample_token's
// choice at each of those rows (run() has made them already). draft_probs: empty, or drafts x V
// probabilities of the draft model. Throws Error naming a bad draft id, a draft-probs
// array of the wrong size or holding a negative or non-finite value.
Verdict verify(const float* logits, int64_t V, std::span<const int32_t> draft, const SamplingOptions& o,
               std::span<const float> draft_probs, std::span<const int32_t> drawn);
// The same with the draws made here.
Verdict verify(const float* logits, int64_t V, std::span<const int32_t> draft, const SamplingOptions& o,
               std::span<const float> draft_probs);

}  // namespace lmhead::sample
