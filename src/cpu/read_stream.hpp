#pragma once
// A pure streaming read (the wrapping sum of every whole 8-byte word) used to measure the memory read ceiling
// that benchmark figures are quoted against. `data` is 32-byte aligned.
#include <cstdint>

namespace lmhead::cpu {
uint64_t read_stream_scalar(const uint8_t* data, uint64_t bytes);
namespace avx2 {
uint64_t read_stream(const uint8_t* data, uint64_t bytes);
}
}  // namespace lmhead::cpu
