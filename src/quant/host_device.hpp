#pragma once
// What host and device code share below every layer: the qualifier of functions compiled for both,
// and exact float <-> bits casts.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LMHEAD_HD __host__ __device__ __forceinline__
#else
#define LMHEAD_HD inline
#endif

namespace lmhead::quant {

LMHEAD_HD uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
LMHEAD_HD float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

}  // namespace lmhead::quant
