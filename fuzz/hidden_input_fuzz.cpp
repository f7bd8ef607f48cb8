// libFuzzer target: the CLI's FILE.gguf:TENSOR hidden-state input. The bytes are parsed as a GGUF
// file (gguf::File::from_bytes) and each of its tensors, plus the golden vectors file's usual name
// `hidden` and a name that is absent, is loaded with gguf::hidden_from_gguf, with and without an
// expected hidden size. The input's first bytes also go through the INPUT spec splitter.
#include <algorithm>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "gguf/gguf.hpp"
#include "gguf/hidden_states.hpp"
#include "io/hidden_input.hpp"
#include "lmhead/error.hpp"

using namespace lmhead;

namespace {

void load(const gguf::File& file, std::string_view tensor, int64_t expected_hidden) {
  try {
    io::HiddenStates states = gguf::hidden_from_gguf(file, tensor, expected_hidden);
    if (states.tokens <= 0 || states.hidden <= 0) __builtin_trap();
    if (expected_hidden > 0 && states.hidden != expected_hidden) __builtin_trap();
    if (states.values.size() != static_cast<uint64_t>(states.tokens) * static_cast<uint64_t>(states.hidden)) __builtin_trap();
    fuzzing::consume(states.values.size());
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    std::string_view spec(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256));
    io::HiddenInputSpec parsed = io::parse_hidden_input_spec(spec);
    if (parsed.path.empty() && parsed.tensor.empty()) __builtin_trap();
  } catch (const Error&) {
  }

  std::unique_ptr<gguf::File> file;
  try {
    file = gguf::File::from_bytes({data, size}, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  load(*file, "hidden", 0);
  load(*file, "no such tensor", 0);
  size_t tried = 0;
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (++tried > 8) break;  // bounds the work per input; the first few tensors cover every shape seen
    load(*file, t.name, 0);
    load(*file, t.name, t.dims[0]);
    load(*file, t.name, 256);
  }
  return 0;
}
