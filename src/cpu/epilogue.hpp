#pragma once
// The per-tile epilogue of the CPU backend: raw logits -> capped logits (and the intermediate
// stages when asked), folded into the token's running summary while the tile is in L1.
#include <cstdint>

#include "backend/head_math.hpp"
#include "cpu/kernels.hpp"
#include "select/token_summary.hpp"

namespace lmhead::cpu {

// capped[i] = cap_logit(raw[i]) for i < n, the same bytes as the scalar backend's; eight at a time
// unless isa is scalar (the caller checked the CPU has AVX2).
void cap_tile(const float* raw, int64_t n, const CapParams& cap, float* capped, Isa isa);
// The node or fused route's intermediate values (cap != 0), as the scalar backend's stages.
void write_stages(const float* raw, int64_t n, const CapParams& cap, float* scaled, float* div, float* tanh);
// Folds the values of ids first .. first + n - 1 into `into`, exactly as select::summarize would.
void fold_tile(const float* values, int64_t first, int64_t n, int k, select::TokenSummary& into);

}  // namespace lmhead::cpu
