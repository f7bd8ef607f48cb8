#pragma once
// One table of architecture rules for the head (numerics.md §2, docs/architectures.md): how
// llama.cpp's graph for each architecture treats the logit scale and the final soft cap, which
// final norm it uses, whether the head has a bias and where the head's weights come from. Every
// row is derived from the llama.cpp model source it names; an architecture without a row is refused.
#include <span>
#include <string_view>

namespace lmhead::model {

// When a value is applied by the architecture's graph.
enum class Apply {
  never,       // the graph never reads the key: any value in the file is ignored
  always,      // applied whatever its value (0, negative or non-finite is refused)
  if_nonzero,  // applied when nonzero (`if (value)` in llama.cpp): 0 means "none"
};

enum class ScaleOp { multiply, divide };  // raw * s, or raw * (1 / s) (granite)

enum class FinalNorm {
  rms,         // RMSNorm * gamma
  layer,       // LayerNorm * gamma (no bias)
  layer_bias,  // LayerNorm * gamma + beta (output_norm.bias)
};

enum class HeadBias { none, optional, required };  // output.bias added to the logits

enum class HeadTensor {
  output_or_tied,  // output.weight, else token_embd.weight
  output_only,     // output.weight, required
  tied_only,       // token_embd.weight always (output.weight is never read)
};

struct ArchRule {
  std::string_view arch;          // general.architecture
  ScaleOp scale_op;
  Apply scale_apply;
  bool scale_required;            // llama.cpp refuses the file without ARCH.logit_scale
  float scale_default;            // when absent and not required
  Apply cap_apply;
  float cap_default;              // ARCH.final_logit_softcapping when absent (0: none)
  FinalNorm norm;
  HeadBias bias;
  HeadTensor head;
  std::string_view source;        // the llama.cpp source file the rule is derived from
};

std::span<const ArchRule> arch_rules();
const ArchRule* find_arch_rule(std::string_view arch);  // nullptr: unknown architecture

std::string_view to_string(Apply);
std::string_view to_string(ScaleOp);
std::string_view to_string(FinalNorm);
std::string_view to_string(HeadBias);
std::string_view to_string(HeadTensor);

}  // namespace lmhead::model
