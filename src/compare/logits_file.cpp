// A side of `lmhead compare` read from a file (lmhead/compare.hpp): a .npy or FILE.gguf:TENSOR.
#include <cstring>
#include <string>
#include <string_view>

#include "gguf/gguf.hpp"
#include "lmhead/compare.hpp"
#include "lmhead/files.hpp"

namespace lmhead {
namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace

LogitsFile read_logits(const std::string& spec) {
  LogitsFile out;
  const size_t colon = spec.rfind(':');
  if (colon != std::string::npos && ends_with(std::string_view(spec).substr(0, colon), ".gguf")) {
    const std::string path = spec.substr(0, colon), tensor = spec.substr(colon + 1);
    if (tensor.empty()) throw Error("'" + spec + "': empty tensor name after ':' (FILE.gguf:TENSOR)");
    auto file = gguf::File::open(path);
    const gguf::TensorInfo* t = file->find_tensor(tensor);
    if (t == nullptr) throw Error("'" + spec + "': no tensor named '" + tensor + "' in " + path);
    if (t->type != TensorType::F32)
      throw Error("'" + spec + "': tensor is " + std::string(tensor_type_name(t->type)) + ", logits must be F32");
    if (t->n_dims > 2 || t->dims[2] != 1 || t->dims[3] != 1)
      throw Error("'" + spec + "': tensor has " + std::to_string(t->n_dims) + " dims, logits are [V] or ggml [V, T]");
    out.vocab = t->dims[0];
    out.tokens = t->dims[1];
    out.values.resize(size_t(t->elements()));
    std::memcpy(out.values.data(), t->data, out.values.size() * sizeof(float));
    return out;
  }
  if (ends_with(spec, ".gguf")) throw Error("'" + spec + "': a GGUF file needs a tensor name, FILE.gguf:TENSOR");
  HiddenStates s = read_npy_f32(spec);  // [V] reads as 1 x V, [T, V] as T x V
  out.tokens = s.tokens;
  out.vocab = s.hidden;
  out.values = std::move(s.values);
  return out;
}

}  // namespace lmhead
