#pragma once
// The AVX2 soft cap (softcap_avx2.cpp). tanh8 is declared only for files compiled with AVX2.
#include <cstdint>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace lmhead::cpu {

// The epilogue's parameters as plain values (CapParams's, without its inline functions).
struct SoftcapArgs {
  float logit_scale = 1.0f;
  float cap = 0.0f;      // 0: scale only
  float inv_cap = 0.0f;  // 1.0f / cap in f32
  bool fused = false;    // cap * tanh(v / cap) instead of the node route
};

namespace avx2 {
// capped[i] for i < n, the bytes of the scalar cap_logit.
void cap_tile(const float* raw, int64_t n, const SoftcapArgs& cap, float* capped);
#if defined(__AVX2__)
// ops::portable_tanhf in every lane.
__m256 tanh8(__m256 x);
#endif
}  // namespace avx2

}  // namespace lmhead::cpu
