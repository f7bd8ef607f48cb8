#pragma once
// Route llamacpp on BF16 heads (vdpbf16ps pairs, numerics.md "The llama.cpp route"): when the
// instruction's step is a plain fused multiply-add, so the generic kernel may skip its flush rules.
//
// The screen. A bf16 weight w is m * 2^(E_w - 7) with an integer m < 2^8, an f32 activation a is
// n * 2^(E_a - 23) with n < 2^24, so their product is an integer multiple of 2^(E_w + E_a - 30).
// If no nonzero weight is below 2^-48 and no nonzero activation below 2^-47 in magnitude, every
// product is a multiple of g = 2^-125, and so is every accumulator: it starts at +0; a sum of two
// multiples of g is one; rounding it to 24 bits keeps it exact below 2^-101 and leaves a multiple
// of its ulp (at least 2^-124) above. So each result is 0 or at least 2^-125 > FLT_MIN in
// magnitude, no input is subnormal, and quant::vdpbf16ps_step's rules change nothing: the step is
// fma(w, a, acc), bit for bit, signed zeros included (a zero result is fma's own, which is also
// what the step returns; an infinite or NaN one is returned as it is). This holds step after step
// for as long as every input of the lane has passed, so the kernel keeps a row's token on the
// plain steps only until the first weight or activation that does not pass.
#include <cstdint>

#include "quant/host_device.hpp"

namespace lmhead::cuda {

constexpr uint32_t kBf16PairWeightMin = 0x2780u;    // bf16 magnitude bits of 2^-48
constexpr uint32_t kBf16PairActMin = 0x28000000u;   // f32 magnitude bits of 2^-47

// A weight (bf16 bits) or activation (f32 bits) the screen turns away: nonzero and below its bound.
LMHEAD_HD bool bf16_pair_weight_screened_out(uint16_t h) {
  const uint32_t m = h & 0x7FFFu;
  return m != 0 && m < kBf16PairWeightMin;
}
LMHEAD_HD bool bf16_pair_act_screened_out(uint32_t bits) {
  const uint32_t m = bits & 0x7FFFFFFFu;
  return m != 0 && m < kBf16PairActMin;
}

// Test hook (tests/llamacpp_bf16_test.cpp): out[i] = the generic kernel's exact device step applied
// to one vdpbf16ps lane, step(step(acc, w1, a1), w0, a0), for n lanes given on the host. acc must not
// be subnormal (the kernel's accumulators never are). Throws without a usable GPU.
void dpbf16_lanes_on_device(const float* acc, const float* w0, const float* a0, const float* w1, const float* a1,
                            int64_t n, float* out);

}  // namespace lmhead::cuda
