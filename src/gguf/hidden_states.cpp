#include "gguf/hidden_states.hpp"

#include <cstring>
#include <string>

#include "gguf/gguf.hpp"
#include "io/hidden_input.hpp"
#include "lmhead/error.hpp"
#include "lmhead/files.hpp"

namespace lmhead::gguf {

io::HiddenStates hidden_from_gguf(const File& file, std::string_view tensor, int64_t expected_hidden) {
  const std::string where = file.name() + ":" + std::string(tensor);
  const TensorInfo* info = file.find_tensor(tensor);
  if (!info) {
    std::string names;
    size_t listed = 0;
    for (const TensorInfo& t : file.tensors()) {
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
  io::HiddenStates out;
  out.hidden = info->dims[0];
  out.tokens = info->dims[1];
  if (expected_hidden > 0 && out.hidden != expected_hidden)
    throw Error(where + ": hidden size (dim 0) is " + std::to_string(out.hidden) + ", the model's is " +
                std::to_string(expected_hidden));
  // The reader checked nbytes against the file, so this allocation is bounded by the file's size.
  out.values.resize(static_cast<size_t>(info->nbytes / 4));
  std::memcpy(out.values.data(), info->data, info->nbytes);  // the mapping need not be 4-byte aligned
  io::check_finite(out, where);
  return out;
}

}  // namespace lmhead::gguf

namespace lmhead {

HiddenStates load_hidden_states(const std::string& input, int64_t expected_hidden) {
  const io::HiddenInputSpec parsed = io::parse_hidden_input_spec(input);
  if (!parsed.tensor.empty()) {
    auto file = gguf::File::open(parsed.path);
    return gguf::hidden_from_gguf(*file, parsed.tensor, expected_hidden);
  }
  HiddenStates out = read_npy_f32(parsed.path);
  if (expected_hidden > 0 && out.hidden != expected_hidden)
    throw Error(parsed.path + ": hidden size (last dim) is " + std::to_string(out.hidden) + ", the model's is " +
                std::to_string(expected_hidden));
  io::check_finite(out, parsed.path);
  return out;
}

}  // namespace lmhead
