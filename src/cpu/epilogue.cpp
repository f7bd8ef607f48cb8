#include "cpu/epilogue.hpp"

#include <cmath>
#include <cstdint>

#include "cpu/softcap_avx2.hpp"

namespace lmhead::cpu {

void cap_tile(const float* raw, int64_t n, const CapParams& cap, float* capped, Isa isa) {
  if (isa != Isa::scalar) {
    const SoftcapArgs args{cap.logit_scale, cap.cap, cap.inv_cap, cap.route == SoftcapRoute::fused};
    avx2::cap_tile(raw, n, args, capped);
    return;
  }
  for (int64_t i = 0; i < n; ++i) capped[i] = cap_logit(raw[i], cap);
}

void write_stages(const float* raw, int64_t n, const CapParams& cap, float* scaled, float* div, float* tanh) {
  for (int64_t i = 0; i < n; ++i) {
    if (cap.route == SoftcapRoute::nodes) {
      const ops::CapNodes c = ops::softcap_nodes(raw[i], cap.logit_scale, cap.cap, cap.inv_cap);
      scaled[i] = c.scaled;
      div[i] = c.div;
      tanh[i] = c.tanh;
    } else {
      scaled[i] = raw[i] * cap.logit_scale;
      div[i] = scaled[i] / cap.cap;
      tanh[i] = ops::portable_tanhf(div[i]);
    }
  }
}

void fold_tile(const float* values, int64_t first, int64_t n, int k, select::TokenSummary& into) {
  // A tile whose every value lies strictly below the smallest value the summary could still take
  // in changes nothing: skip it. NaN compares false and is never skipped.
  if (into.argmax >= 0 && !std::isnan(into.max)) {
    const bool top_full = k <= 0 || int64_t(into.top.size()) == k;
    if (top_full) {
      const float bar = k > 0 ? into.top.back().logit : into.max;
      bool below = true;
      for (int64_t i = 0; i < n; ++i) below &= values[i] < bar;
      if (below) return;
    }
  }
  select::summarize_span(values, first, n, k, into);
}

}  // namespace lmhead::cpu
