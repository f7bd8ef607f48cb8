#pragma once
// The final norm of a head as the CPU backends compute it, one token row at a time.
#include "backend/backend.hpp"
#include "ops/layernorm.hpp"
#include "ops/rmsnorm.hpp"

namespace lmhead {

inline void final_norm(const HeadView& head, const float* x, float* normed) {
  if (head.layer_norm)
    ops::layernorm(x, head.gamma, head.beta, head.hidden, head.eps, normed);
  else
    ops::rmsnorm(x, head.gamma, head.hidden, head.eps, normed);
}

}  // namespace lmhead
