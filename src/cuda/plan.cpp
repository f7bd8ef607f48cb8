#include "cuda/plan.hpp"

#include <algorithm>
#include <string>

#include "lmhead/error.hpp"

#include "cuda/kernels.hpp"

namespace lmhead::cuda {

static_assert(desc(HeadKernel::q6k_stream).max_tokens == kStreamMaxTokens);
static_assert(desc(HeadKernel::q8_0_stream).max_tokens == kStreamMaxTokens);
static_assert(desc(HeadKernel::q5k_stream).max_tokens == kLanesTokens);
static_assert(desc(HeadKernel::q5k_tma).max_tokens == kLanesTokens);
static_assert(desc(HeadKernel::q5k_lanes).max_tokens == kLanesTokens);
static_assert(desc(HeadKernel::q4k_stream).max_tokens == 2);
static_assert(desc(HeadKernel::q5k_stream_n).max_tokens == kMaxTokens);
static_assert(desc(HeadKernel::q5k_mma).max_tokens == kMaxTokens);
static_assert(desc(HeadKernel::q5k_stream_tiled).max_tokens == kMaxTokens);
static_assert(desc(HeadKernel::q4k_stream_tiled).max_tokens == kMaxTokens);
static_assert(desc(HeadKernel::q6k_tiled_n).max_tokens == kMaxTokens);
static_assert(desc(HeadKernel::generic).max_tokens == kGenericTokens);
static_assert(desc(HeadKernel::llamacpp_tiled).max_tokens == kGenericTokens);
static_assert(desc(HeadKernel::llamacpp_repack).max_tokens == kGenericTokens);
static_assert(desc(HeadKernel::llamacpp_float_sgemm).max_tokens == kGenericTokens);
static_assert(desc(HeadKernel::llamacpp_float_vec).max_tokens == 1);

PlanRoute plan_route(bool float_route, Route route, quant::LlamaCppPath path) {
  using quant::LlamaCppPath;
  if (route != Route::llamacpp) return float_route ? PlanRoute::float_acts : PlanRoute::q8;
  switch (path) {
    case LlamaCppPath::vec_dot:
    case LlamaCppPath::sgemm_q8_0: return float_route ? PlanRoute::float_acts : PlanRoute::q8;
    case LlamaCppPath::tiled_kquant: return PlanRoute::llamacpp_tiled;
    case LlamaCppPath::repack_q4_K_8x8: return PlanRoute::llamacpp_repack;
    case LlamaCppPath::vec_dot_f16:
    case LlamaCppPath::vec_dot_bf16:
    case LlamaCppPath::vec_dot_f32: return PlanRoute::llamacpp_float_vec;
    case LlamaCppPath::sgemm_f16:
    case LlamaCppPath::sgemm_bf16:
    case LlamaCppPath::sgemm_f32: return PlanRoute::llamacpp_float_sgemm;
    default: break;
  }
  throw Error("route llamacpp: the cuda backend does not reproduce llama.cpp's " + std::string(quant::path_name(path)) +
              " path");
}

size_t plan_smem(HeadKernel kernel, int warps, int groups, int tokens) {
  const int tc = std::min(tokens, desc(kernel).max_tokens);
  switch (kernel) {
    case HeadKernel::q5k_stream:
    case HeadKernel::q4k_stream: return q5k_stream_smem(groups, tc);
    case HeadKernel::q6k_stream:
    case HeadKernel::q6k_stream_tiled: return q6k_stream_smem(groups, tc);
    case HeadKernel::q8_0_stream: return q8_0_stream_smem(groups, tc);
    case HeadKernel::q5k_tma: return q5k_tma_smem(groups, tc);
    case HeadKernel::q5k_stream_n: return q5k_stream_n_smem(groups, tc, false);
    case HeadKernel::q5k_stream_n_tiled: return q5k_stream_n_smem(groups, tc, true);
    case HeadKernel::q5k_stream_tiled:
    case HeadKernel::q4k_stream_tiled:
    case HeadKernel::q6k_tiled_n: return kquant_tiled_smem(groups, tc);
    case HeadKernel::q5k_tma_n: return q5k_stream_n_staged_smem(groups, tc, false, warps);
    case HeadKernel::q5k_tma_n_tiled: return q5k_stream_n_staged_smem(groups, tc, true, warps);
    case HeadKernel::q5k_tma_tiled: return kquant_tiled_staged_smem(groups, tc, TensorType::Q5_K, warps);
    case HeadKernel::q4k_tma_tiled: return kquant_tiled_staged_smem(groups, tc, TensorType::Q4_K, warps);
    case HeadKernel::q6k_tma_tiled: return kquant_tiled_staged_smem(groups, tc, TensorType::Q6_K, warps);
    case HeadKernel::q5k_lanes: return q5k_lanes_smem(groups, tc);
    case HeadKernel::q5k_mma: {
      MmaConfig c;
      c.warps = warps;
      return q5k_mma_smem(groups, tc, c);
    }
    case HeadKernel::generic:
    case HeadKernel::llamacpp_tiled:
    case HeadKernel::llamacpp_repack:
    case HeadKernel::llamacpp_float_vec:
    case HeadKernel::llamacpp_float_sgemm: return 0;
  }
  return 0;
}

namespace {

bool can_run(const PlanRow& r, int tokens, const PlanDevice& d, bool override_row) {
  const KernelDesc& k = desc(r.kernel);
  if (tokens < r.min_tokens || tokens > r.max_tokens) return false;
  if (tokens > k.max_tokens && !k.passes) return false;
  if (((d.copies | (override_row ? d.on_demand : 0u)) & copy_bit(k.reads)) == 0) return false;
  const int warps = r.warps != 0 ? r.warps : k.warps[0];
  // The staged kernels' lanes variant takes its activations next to the MMA kernel's stages.
  if (r.kernel == HeadKernel::q5k_lanes && plan_smem(HeadKernel::q5k_mma, 12, d.groups, tokens) + 8192 > d.smem_optin)
    return false;
  return plan_smem(r.kernel, warps, d.groups, tokens) + 8192 <= d.smem_optin;
}

}  // namespace

Plan choose(TensorType type, PlanRoute route, int tokens, const PlanDevice& device,
            std::span<const PlanRow> override_rows) {
  const std::span<const PlanRow> own = plan_table(type, route);
  const bool q8_or_float = route == PlanRoute::q8 || route == PlanRoute::float_acts;
  auto first_row = [&](int t) -> Plan {
    const std::span<const PlanRow> overrides = override_rows;
    for (std::span<const PlanRow> table : {overrides, own})
      for (const PlanRow& r : table) {
        if (q8_or_float && (!kernel_reads_type(r.kernel, type) ||
                            (route == PlanRoute::float_acts && r.kernel != HeadKernel::generic)))
          continue;
        if (!q8_or_float && table.data() == overrides.data() &&
            std::none_of(own.begin(), own.end(), [&](const PlanRow& o) { return o.kernel == r.kernel; }))
          continue;
        if (can_run(r, t, device, table.data() == overrides.data() && !overrides.empty())) {
          const int warps = r.warps != 0 ? r.warps : desc(r.kernel).warps[0];
          return Plan{r.kernel, warps, warps};
        }
      }
    return Plan{own.back().kernel, 0, 0};  // each table ends in a kernel that runs every call
  };
  Plan plan = first_row(tokens);
  // A call in passes: each pass takes the warps its own token count's row gives the same kernel.
  const int max = desc(plan.kernel).max_tokens;
  if (tokens > max) {
    auto warps_for = [&](int t) {
      const Plan p = first_row(t);
      return p.kernel == plan.kernel ? p.warps : plan.warps;
    };
    const int last = tokens % max == 0 ? max : tokens % max;
    const int full = warps_for(max);
    plan.last_warps = warps_for(last);
    plan.warps = full;
  }
  return plan;
}

}  // namespace lmhead::cuda
