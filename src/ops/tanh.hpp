#pragma once
// The C library's tanhf (glibc's float tanh through expm1, numerics.md §7b) as a portable function:
// every step one IEEE f32 operation rounded to nearest, no contraction, so the CPU and the GPU
// produce the same bytes as llama.cpp's CPU soft cap. Host and device.
#include <cstdint>

#include "quant/blocks.hpp"  // LMHEAD_HD, f32_bits, bits_f32

namespace lmhead::ops {

float portable_tanhf(float x);

}  // namespace lmhead::ops
