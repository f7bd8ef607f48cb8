#pragma once
// NumPy .npy files of little-endian float32 (`<f4`), C order: the hidden states lmhead reads and
// the logits it writes. The reader treats the file as untrusted: the header is parsed as the small
// Python literal it is, and every size is checked against the file before anything is allocated.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lmhead/files.hpp"

namespace lmhead::io {

// The reader and the writer are public (lmhead/files.hpp); io implements them.
using lmhead::HiddenStates;
using lmhead::read_npy_f32;
using lmhead::write_npy_f32;

// read_npy_f32 on bytes the caller holds (tests, fuzzing); `name` is used in messages. Shape [H]
// reads as 1 x H, [T, H] as T x H. Throws Error naming the file and the problem: wrong dtype,
// Fortran order, rank other than 1 or 2, an empty dim, truncated data, a header that lies (length
// past the end, a shape whose size overflows or disagrees with the bytes present).
HiddenStates parse_npy_f32(std::span<const uint8_t> bytes, const std::string& name = "<memory>");

// The bytes write_npy_f32 writes (header and data).
std::vector<uint8_t> encode_npy_f32(const std::vector<int64_t>& shape, const float* data);

}  // namespace lmhead::io
