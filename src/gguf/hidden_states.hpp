#pragma once
// Hidden states in a GGUF file (FILE.gguf:TENSOR, e.g. a golden vectors file's `hidden`): an F32
// tensor of ggml dims [H, T] (a 1-token tensor may be stored with n_dims 1). Here rather than in io,
// because reading it needs the GGUF reader and io is the layer below it; so is the public
// load_hidden_states (lmhead/files.hpp), which takes a .npy or FILE.gguf:TENSOR.
#include <cstdint>
#include <string_view>

#include "io/npy.hpp"

namespace lmhead::gguf {

class File;

// The F32 tensor `tensor` of an already-open GGUF file, as T x H. When expected_hidden > 0 the hidden
// size must match it. Every value must be finite: a NaN or infinity is an error naming the token
// and the index.
io::HiddenStates hidden_from_gguf(const File& file, std::string_view tensor, int64_t expected_hidden = 0);

}  // namespace lmhead::gguf
