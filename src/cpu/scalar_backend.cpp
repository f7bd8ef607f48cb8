// The reference backend: plain loops, one stage at a time, each stage's bytes kept. Every other
// backend (AVX2, CUDA) is tested against this one byte for byte.
#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/backend.hpp"
#include "backend/final_norm.hpp"
#include "backend/head_math.hpp"
#include "quant/activation.hpp"
#include "quant/llamacpp_route.hpp"
#include "quant/vec_dot.hpp"

namespace lmhead {
namespace {

class StageClock {
 public:
  explicit StageClock(std::vector<StageTime>& times) : times_(times) {}
  void lap(const char* label) {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    for (StageTime& t : times_)
      if (t.label == label) { t.ms += ms; last_ = now; return; }
    times_.push_back({label, ms});
    last_ = now;
  }
 private:
  std::vector<StageTime>& times_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

class ScalarBackend final : public Backend {
 public:
  explicit ScalarBackend(const HeadView& head) : head_(head) {}
  std::string name() const override { return "scalar"; }
  bool takes_normed_input() const override { return true; }
  bool takes_llamacpp_route() const override { return true; }

  void forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) override {
    const int64_t H = head_.hidden, V = head_.vocab;
    const bool llamacpp = req.route == Route::llamacpp;
    const auto fmt = llamacpp ? quant::llamacpp_activation_format(req.llamacpp_path, head_.type)
                              : quant::activation_format(head_.type, req.activations);
    const size_t act_bytes = quant::activation_bytes(fmt, H);
    const CapParams cap = cap_params(head_, req.softcap);
    const bool has_cap = cap.cap != 0.0f;

    std::vector<float> normed(size_t(tokens) * H);
    std::vector<uint8_t> acts(size_t(tokens) * act_bytes);
    std::vector<float> raw(size_t(tokens) * V), capped(size_t(tokens) * V);
    std::vector<float> scaled, divided, tanhed;
    if (req.want_stages && has_cap) {
      scaled.resize(capped.size());
      divided.resize(capped.size());
      tanhed.resize(capped.size());
    }
    out.times.clear();
    StageClock clock(out.times);

    if (req.input_normed)
      std::copy(hidden, hidden + size_t(tokens) * H, normed.begin());
    else
      for (int t = 0; t < tokens; ++t)
        final_norm(head_, hidden + t * H, normed.data() + t * H);
    clock.lap("norm");

    // A pass holds whole groups of 4 of the call's tokens (passes are 16 tokens but the last), so the
    // repacked path's per-group quantization is decided by the pass's own count.
    for (int t = 0; t < tokens; ++t) {
      if (llamacpp)
        quant::quantize_llamacpp_activations(req.llamacpp_path, head_.type, normed.data() + t * H, H, t, tokens,
                                             acts.data() + t * act_bytes);
      else
        quant::quantize_activations(fmt, normed.data() + t * H, H, acts.data() + t * act_bytes);
    }
    clock.lap("quantize");

    std::vector<float> scratch(H);
    for (int64_t r = 0; r < V; ++r) {
      const uint8_t* row = head_.weights + r * head_.row_bytes;
      for (int t = 0; t < tokens; ++t) {
        raw[t * V + r] = llamacpp
            ? quant::llamacpp_dot(req.llamacpp_path, head_.type, row, acts.data() + t * act_bytes, H,
                                  quant::in_group_of_4(req.llamacpp_path, t, tokens))
            : req.activations == ActivationRoute::q8
            ? quant::vec_dot_q8_route(head_.type, row, acts.data() + t * act_bytes, H)
            : quant::vec_dot_f32_route(head_.type, row, normed.data() + t * H, H, scratch.data());
      }
    }
    // llama.cpp adds the head bias as its own node on the matmul's output, before any scale or cap.
    if (head_.head_bias)
      for (int t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < V; ++r) raw[t * V + r] += head_.head_bias[r];
    clock.lap("head");

    for (size_t i = 0; i < raw.size(); ++i) {
      capped[i] = cap_logit(raw[i], cap);
      if (!scaled.empty()) {
        // The stages of the route that ran, each as its own rounded value.
        if (req.softcap == SoftcapRoute::nodes) {
          const ops::CapNodes n = ops::softcap_nodes(raw[i], cap.logit_scale, cap.cap, cap.inv_cap);
          scaled[i] = n.scaled; divided[i] = n.div; tanhed[i] = n.tanh;
        } else {
          scaled[i] = raw[i] * cap.logit_scale;
          divided[i] = scaled[i] / cap.cap;
          tanhed[i] = ops::portable_tanhf(divided[i]);
        }
      }
    }
    clock.lap("softcap");

    out.summaries.assign(tokens, {});
    out.sum_exp.assign(req.logprobs ? tokens : 0, 0.0);
    for (int t = 0; t < tokens; ++t) {
      const float* row = capped.data() + size_t(t) * V;
      select::summarize(row, 0, V, req.top_k, out.summaries[t]);
      if (req.logprobs) out.sum_exp[t] = select::sum_exp(row, V, out.summaries[t].max);
    }
    clock.lap("select");

    if (req.want_stages) {
      out.stages.normed = std::move(normed);
      out.stages.raw = raw;
      if (has_cap) {
        out.stages.scaled = std::move(scaled);
        out.stages.div = std::move(divided);
        out.stages.tanh = std::move(tanhed);
      } else {
        out.stages.scaled = capped;
      }
      out.stages.capped = capped;
    }
    if (req.want_logits || req.want_stages) out.logits = std::move(capped);
  }

 private:
  HeadView head_;
};

}  // namespace

std::unique_ptr<Backend> make_scalar_backend(const HeadView& head) {
  return std::make_unique<ScalarBackend>(head);
}

}  // namespace lmhead
