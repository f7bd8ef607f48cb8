#pragma once
// NumPy .npy files of little-endian float32 (`<f4`), C order: the hidden states lmhead reads and
// the logits it writes. The reader treats the file as untrusted: the header is parsed as the small
// Python literal it is, and every size is checked against the file before anything is allocated.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lmhead::io {

// T rows of H floats, row-major: token t's values are values[t*hidden, (t+1)*hidden).
struct HiddenStates {
  int64_t tokens = 0;
  int64_t hidden = 0;
  std::vector<float> values;
};

// Shape [H] reads as 1 x H, [T, H] as T x H. Throws Error naming the file and the problem: wrong
// dtype, Fortran order, rank other than 1 or 2, an empty dim, truncated data, a header that lies
// (length past the end, a shape whose size overflows or disagrees with the bytes present).
HiddenStates read_npy_f32(const std::string& path);
// The same on bytes the caller holds (tests, fuzzing); `name` is used in messages.
HiddenStates parse_npy_f32(std::span<const uint8_t> bytes, const std::string& name = "<memory>");

// Writes an f32 .npy of `shape` ([N] or [T, N]) from `data` (product of shape floats) atomically:
// the file appears complete under `path` or not at all.
void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
// The bytes such a file holds (header and data).
std::vector<uint8_t> encode_npy_f32(const std::vector<int64_t>& shape, const float* data);

}  // namespace lmhead::io
