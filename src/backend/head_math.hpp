#pragma once
// Per-logit epilogue shared by every backend: raw logit -> capped logit on the requested route.
#include "backend/backend.hpp"
#include "ops/softcap.hpp"

namespace lmhead {

struct CapParams {
  float logit_scale = 1.0f;
  float cap = 0.0f;       // 0: scale only
  float inv_cap = 0.0f;   // 1.0f / cap in f32, computed once (llama.cpp's graph constant)
  SoftcapRoute route = SoftcapRoute::nodes;
};

inline CapParams cap_params(const HeadView& head, SoftcapRoute route) {
  CapParams p;
  p.logit_scale = head.logit_scale;
  p.cap = head.softcap;
  p.inv_cap = head.softcap != 0.0f ? 1.0f / head.softcap : 0.0f;
  p.route = route;
  return p;
}

LMHEAD_HD float cap_logit(float raw, const CapParams& p) {
  if (p.cap == 0.0f) return ops::scale_only(raw, p.logit_scale);
  if (p.route == SoftcapRoute::fused) return ops::softcap_fused(raw, p.logit_scale, p.cap);
  return ops::softcap_nodes(raw, p.logit_scale, p.cap, p.inv_cap).capped;
}

}  // namespace lmhead
