#include "io/hidden_input.hpp"

#include <cmath>
#include <cstring>

#include "gguf/gguf.hpp"
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

HiddenStates hidden_from_gguf(const gguf::File& file, std::string_view tensor, int64_t expected_hidden) {
  const std::string where = file.name() + ":" + std::string(tensor);
  const gguf::TensorInfo* info = file.find_tensor(tensor);
  if (!info) {
    std::string names;
    size_t listed = 0;
    for (const gguf::TensorInfo& t : file.tensors()) {
      if (listed == 12) {
        names += ", ...";
        break;
      }
      names += (listed++ ? ", " : "") + std::string(t.name);
    }
    throw Error(where + ": no tensor named '" + std::string(tensor) + "' in " + file.name() +
                (names.empty() ? std::string(" (it has no tensors)") : " (it has: " + names + ")"));
  }
  if (info->type != TensorType::F32)
    throw Error(where + ": tensor is " + std::string(tensor_type_name(info->type)) + ", a hidden state must be F32");
  if (info->dims[2] != 1 || info->dims[3] != 1)
    throw Error(where + ": tensor has " + std::to_string(info->n_dims) + " dims [" + std::to_string(info->dims[0]) + ", " +
                std::to_string(info->dims[1]) + ", " + std::to_string(info->dims[2]) + ", " + std::to_string(info->dims[3]) +
                "], expected ggml dims [H, T]");
  HiddenStates out;
  out.hidden = info->dims[0];
  out.tokens = info->dims[1];
  if (expected_hidden > 0 && out.hidden != expected_hidden)
    throw Error(where + ": hidden size (dim 0) is " + std::to_string(out.hidden) + ", the model's is " +
                std::to_string(expected_hidden));
  // The reader checked nbytes against the file, so this allocation is bounded by the file's size.
  out.values.resize(static_cast<size_t>(info->nbytes / 4));
  std::memcpy(out.values.data(), info->data, info->nbytes);  // the mapping need not be 4-byte aligned
  check_finite(out, where);
  return out;
}

HiddenStates load_hidden(const std::string& spec, int64_t expected_hidden) {
  HiddenInputSpec parsed = parse_hidden_input_spec(spec);
  if (!parsed.tensor.empty()) {
    auto file = gguf::File::open(parsed.path);
    return hidden_from_gguf(*file, parsed.tensor, expected_hidden);
  }
  HiddenStates out = read_npy_f32(parsed.path);
  if (expected_hidden > 0 && out.hidden != expected_hidden)
    throw Error(parsed.path + ": hidden size (last dim) is " + std::to_string(out.hidden) + ", the model's is " +
                std::to_string(expected_hidden));
  check_finite(out, parsed.path);
  return out;
}

}  // namespace lmhead::io
