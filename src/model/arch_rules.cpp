#include "model/arch_rules.hpp"

#include <iterator>

namespace lmhead::model {
namespace {

using A = Apply;
using S = ScaleOp;
using N = FinalNorm;
using B = HeadBias;
using H = HeadTensor;

// Derived from llama.cpp's model sources (docs/architectures.md has the prose and the caveats).
// Columns: scale op, when applied, required, default | cap when applied, default | norm, bias, head.
constexpr ArchRule kRules[] = {
    {"llama", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/llama.cpp"},
    {"mistral3", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/mistral3.cpp"},
    {"qwen2", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::optional, H::output_or_tied,
     "src/models/qwen2.cpp"},
    {"qwen3", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/qwen3.cpp"},
    {"gemma", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::tied_only,
     "src/models/gemma.cpp"},
    {"gemma2", S::multiply, A::never, false, 1.0f, A::always, 30.0f, N::rms, B::none, H::output_or_tied,
     "src/models/gemma2-iswa.cpp"},
    {"gemma3", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/gemma3.cpp"},
    {"gemma4", S::multiply, A::never, false, 1.0f, A::if_nonzero, 30.0f, N::rms, B::none, H::output_or_tied,
     "src/models/gemma4-iswa.cpp"},
    {"grok", S::multiply, A::always, false, 0.5773502691896257f, A::if_nonzero, 0.0f, N::rms, B::none,
     H::output_or_tied, "src/models/grok.cpp"},
    {"granite", S::divide, A::always, true, 0.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/granite.cpp"},
    {"granitemoe", S::divide, A::always, true, 0.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/granite.cpp"},
    {"command-r", S::multiply, A::if_nonzero, true, 0.0f, A::never, 0.0f, N::layer, B::none, H::tied_only,
     "src/models/command-r.cpp"},
    {"cohere2", S::multiply, A::if_nonzero, true, 0.0f, A::never, 0.0f, N::layer, B::none, H::tied_only,
     "src/models/cohere2-iswa.cpp"},
    {"phi2", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::layer_bias, B::required, H::output_only,
     "src/models/phi2.cpp"},
    {"phi3", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/phi3.cpp"},
    {"gpt2", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::layer_bias, B::none, H::output_or_tied,
     "src/models/gpt2.cpp"},
    {"olmo2", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::output_only,
     "src/models/olmo2.cpp"},
    {"deepseek2", S::multiply, A::never, false, 1.0f, A::never, 0.0f, N::rms, B::none, H::output_or_tied,
     "src/models/deepseek2.cpp"},
    // lmhead's reference architecture: scale required (fail closed), cap 30 unless stated, 0 = none.
    {"muse-glimmer", S::multiply, A::always, true, 0.0f, A::if_nonzero, 30.0f, N::rms, B::none, H::output_or_tied,
     "src/models/muse-glimmer.cpp"},
};

}  // namespace

std::span<const ArchRule> arch_rules() { return kRules; }

const ArchRule* find_arch_rule(std::string_view arch) {
  for (const ArchRule& r : kRules)
    if (r.arch == arch) return &r;
  return nullptr;
}

std::string_view to_string(Apply a) {
  switch (a) {
    case Apply::never: return "never";
    case Apply::always: return "always";
    case Apply::if_nonzero: return "if nonzero";
  }
  return "?";
}
std::string_view to_string(ScaleOp s) { return s == ScaleOp::divide ? "divide" : "multiply"; }
std::string_view to_string(FinalNorm n) {
  switch (n) {
    case FinalNorm::rms: return "rmsnorm";
    case FinalNorm::layer: return "layernorm";
    case FinalNorm::layer_bias: return "layernorm+bias";
  }
  return "?";
}
std::string_view to_string(HeadBias b) {
  switch (b) {
    case HeadBias::none: return "none";
    case HeadBias::optional: return "optional";
    case HeadBias::required: return "required";
  }
  return "?";
}
std::string_view to_string(HeadTensor h) {
  switch (h) {
    case HeadTensor::output_or_tied: return "output.weight, else token_embd.weight";
    case HeadTensor::output_only: return "output.weight";
    case HeadTensor::tied_only: return "token_embd.weight";
  }
  return "?";
}

}  // namespace lmhead::model
