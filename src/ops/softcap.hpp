#pragma once
// Logit scale and soft cap (numerics.md §7), element by element, host and device.
#include "ops/tanh.hpp"

namespace lmhead::ops {

// The node route's four intermediate values for one logit; `inv_cap` is 1.0f / cap computed
// once in f32, as llama.cpp's graph does.
struct CapNodes {
  float scaled, div, tanh, capped;
};

LMHEAD_HD CapNodes softcap_nodes(float raw, float logit_scale, float cap, float inv_cap) {
  using namespace tanh_detail;
  CapNodes n;
  n.scaled = mul(raw, logit_scale);
  n.div = mul(n.scaled, inv_cap);
  n.tanh = portable_tanhf(n.div);
  n.capped = mul(n.tanh, cap);
  return n;
}

// The one-formula route: division by cap instead of multiplication by its reciprocal.
LMHEAD_HD float softcap_fused(float raw, float logit_scale, float cap) {
  using namespace tanh_detail;
  const float v = mul(raw, logit_scale);
  return mul(cap, portable_tanhf(div(v, cap)));
}

// What every route computes for cap == 0: the scale only.
LMHEAD_HD float scale_only(float raw, float logit_scale) { return tanh_detail::mul(raw, logit_scale); }

}  // namespace lmhead::ops
