#include "io/hidden_input.hpp"

#include <cmath>

#include "lmhead/error.hpp"

namespace lmhead::io {
namespace {

bool ends_with_gguf(std::string_view s) {
  constexpr std::string_view ext = ".gguf";
  if (s.size() < ext.size()) return false;
  for (size_t i = 0; i < ext.size(); ++i) {
    char c = s[s.size() - ext.size() + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != ext[i]) return false;
  }
  return true;
}

}  // namespace

HiddenInputSpec parse_hidden_input_spec(std::string_view spec) {
  if (spec.empty()) throw Error("empty hidden-state INPUT: give a .npy path or FILE.gguf:TENSOR");
  for (size_t colon = spec.rfind(':'); colon != std::string_view::npos; colon = colon == 0 ? std::string_view::npos : spec.rfind(':', colon - 1)) {
    std::string_view before = spec.substr(0, colon);
    if (colon + 1 < spec.size() && ends_with_gguf(before))
      return {std::string(before), std::string(spec.substr(colon + 1))};
  }
  if (spec.back() == ':' && ends_with_gguf(spec.substr(0, spec.size() - 1)))
    throw Error("hidden-state INPUT '" + std::string(spec) + "' has an empty tensor name after ':' (use FILE.gguf:TENSOR)");
  if (ends_with_gguf(spec))
    throw Error("hidden-state INPUT '" + std::string(spec) +
                "' is a GGUF file but names no tensor: use FILE.gguf:TENSOR (for a golden vectors file, FILE.gguf:hidden)");
  return {std::string(spec), {}};
}

void check_finite(const HiddenStates& states, std::string_view source) {
  for (size_t k = 0; k < states.values.size(); ++k) {
    float v = states.values[k];
    if (std::isfinite(v)) continue;
    const char* what = std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf");
    const size_t hidden = static_cast<size_t>(states.hidden);
    throw Error(std::string(source) + ": hidden state of token " + std::to_string(k / hidden) + ", index " +
                std::to_string(k % hidden) + " is " + what + " (every value must be finite)");
  }
}

}  // namespace lmhead::io
