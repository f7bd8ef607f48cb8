#pragma once
// The CLI's hidden-state INPUT: a .npy path, or FILE.gguf:TENSOR naming an F32 tensor of ggml dims
// [H, T] (a 1-token tensor may be stored with n_dims 1) in a GGUF file, such as a golden vectors
// file's `hidden`.
#include <cstdint>
#include <string>
#include <string_view>

#include "io/npy.hpp"

namespace lmhead::gguf {
class File;
}

namespace lmhead::io {

struct HiddenInputSpec {
  std::string path;
  std::string tensor;  // empty: `path` is a .npy file
};

// Splits on the last ':' that has a non-empty name after it and a path ending in ".gguf" before it,
// so paths holding ':' and tensor names holding ':' both work. Throws for "x.gguf" (no tensor) and
// "x.gguf:" (empty tensor name).
HiddenInputSpec parse_hidden_input_spec(std::string_view spec);

// Loads INPUT. When expected_hidden > 0 the hidden size must match it. Every value must be finite:
// a NaN or infinity is an error naming the token and the index.
HiddenStates load_hidden(const std::string& spec, int64_t expected_hidden = 0);

// The F32 tensor `tensor` of an already-open GGUF file, as T x H (finite check included).
HiddenStates hidden_from_gguf(const gguf::File& file, std::string_view tensor, int64_t expected_hidden = 0);

// Throws Error "<source>: token t, index i is NaN" (or +inf / -inf) for the first non-finite value.
void check_finite(const HiddenStates& states, std::string_view source);

}  // namespace lmhead::io
