#pragma once
// The CLI's hidden-state INPUT: a .npy path, or FILE.gguf:TENSOR naming an F32 tensor of ggml dims
// [H, T] (a 1-token tensor may be stored with n_dims 1) in a GGUF file, such as a golden vectors
// file's `hidden`. Here: splitting INPUT and the finite check; reading the tensor is the gguf
// layer's (gguf/hidden_states.hpp), so io stays below gguf.
#include <cstdint>
#include <string>
#include <string_view>

#include "io/npy.hpp"

namespace lmhead::io {

struct HiddenInputSpec {
  std::string path;
  std::string tensor;  // empty: `path` is a .npy file
};

// Splits on the last ':' that has a non-empty name after it and a path ending in ".gguf" before it,
// so paths holding ':' and tensor names holding ':' both work. Throws for "x.gguf" (no tensor) and
// "x.gguf:" (empty tensor name).
HiddenInputSpec parse_hidden_input_spec(std::string_view spec);

// Throws Error "<source>: token t, index i is NaN" (or +inf / -inf) for the first non-finite value.
void check_finite(const HiddenStates& states, std::string_view source);

}  // namespace lmhead::io
