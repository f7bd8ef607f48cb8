// Route llamacpp's cpu kernels, compiled for AVX2 + FMA + F16C: the unpacked dots of
// quant/llamacpp_route.cpp (same integers, same float operations in the same order), with the
// fused multiply-adds as instructions instead of libm calls, the byte dots vectorized by the
// compiler, and F16 activations widened once per tile instead of once per row. Only intrinsics,
// builtins and out-of-line functions of the portable code are used here (kernels.hpp says why).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"

namespace lmhead::cpu::avx2 {
namespace {

using quant::LlamaCppPath;

// _mm512_reduce_add_ps as GCC expands it (see quant/llamacpp_route.cpp).
float reduce16_avx2(const float a[16]) {
  float h8[8], h4[4];
  for (int i = 0; i < 8; ++i) h8[i] = a[i + 8] + a[i];
  for (int i = 0; i < 4; ++i) h4[i] = h8[i + 4] + h8[i];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

int32_t byte_dot_avx2(const int8_t* a, const int8_t* b, int n) {
  int32_t s = 0;
  for (int e = 0; e < n; ++e) s += int32_t(a[e]) * int32_t(b[e]);
  return s;
}

// The q8_K activation block's fields (quant::block_q8_K: d f32 @0, qs @4, bsums int16 @260).
struct Q8K {
  float d;
  const int8_t* qs;
  const int16_t* bsums;
};
Q8K q8k_at(const uint8_t* act, int64_t i) {
  const uint8_t* b = act + i * 292;
  Q8K q;
  std::memcpy(&q.d, b, 4);
  q.qs = reinterpret_cast<const int8_t*>(b + 4);
  q.bsums = reinterpret_cast<const int16_t*>(b + 260);
  return q;
}

template <LlamaCppPath Path, TensorType Type, bool Grouped>
float kquant_dot(const uint8_t* unpacked, const uint8_t* act, int64_t nb) {
  const int8_t* levels = reinterpret_cast<const int8_t*>(unpacked);
  const int32_t* scales = reinterpret_cast<const int32_t*>(unpacked + 256 * nb);
  const int32_t* mins = scales + 16 * nb;
  const float* d = reinterpret_cast<const float*>(mins + 8 * nb);
  const float* dmin = d + nb;
  if constexpr (Path == LlamaCppPath::tiled_kquant && Type == TensorType::Q6_K) {
    float out = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const Q8K y = q8k_at(act, i);
      int32_t s1 = 0;
      for (int s = 0; s < 16; ++s) s1 += scales[16 * i + s] * byte_dot_avx2(levels + 256 * i + 16 * s, y.qs + 16 * s, 16);
      out = std::fma(float(s1) * d[i], y.d, out);
    }
    return out;
  } else if constexpr (Path == LlamaCppPath::tiled_kquant) {
    float out = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const Q8K y = q8k_at(act, i);
      int32_t s1 = 0, s2 = 0;
      for (int j = 0; j < 8; ++j) {
        s1 += scales[16 * i + j] * byte_dot_avx2(levels + 256 * i + 32 * j, y.qs + 32 * j, 32);
        s2 += mins[8 * i + j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
      }
      out = std::fma(std::fma(-dmin[i], float(s2), float(s1) * d[i]), y.d, out);
    }
    return out;
  } else {
    static_assert(Path == LlamaCppPath::repack_q4_K_8x8);
    float acc = 0, acc_min = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const Q8K y = q8k_at(act, i);
      const float dd = d[i] * y.d, dm = dmin[i] * y.d;
      int32_t isum = 0, imin = 0;
      for (int j = 0; j < 8; ++j) {
        isum += scales[16 * i + j] * byte_dot_avx2(levels + 256 * i + 32 * j, y.qs + 32 * j, 32);
        imin += mins[8 * i + j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
        if (Grouped && j % 2 == 1) {
          acc = std::fma(float(isum), dd, acc);
          acc_min = std::fma(float(imin), dm, acc_min);
          isum = imin = 0;
        }
      }
      if (!Grouped) {
        acc = std::fma(float(isum), dd, acc);
        acc_min = std::fma(float(imin), dm, acc_min);
      }
    }
    return acc - acc_min;
  }
}

template <LlamaCppPath Path>
float f16_dot(const float* w, const float* a, int64_t n) {
  if constexpr (Path == LlamaCppPath::sgemm_f16) {
    float acc[16] = {};
    for (int64_t i = 0; i < n; i += 16)
      for (int l = 0; l < 16; ++l) acc[l] = std::fma(w[i + l], a[i + l], acc[l]);
    return reduce16_avx2(acc);
  } else {
    float sum[4][16] = {};
    const int64_t np = n / 64 * 64;
    for (int64_t i = 0; i < np; i += 64)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 16; ++l) sum[j][l] = std::fma(w[i + 16 * j + l], a[i + 16 * j + l], sum[j][l]);
    float r[16];
    for (int l = 0; l < 16; ++l) r[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    double total = reduce16_avx2(r);
    for (int64_t e = np; e < n; ++e) total += double(w[e] * a[e]);
    return float(total);
  }
}

}  // namespace

template <LlamaCppPath Path, TensorType Type, bool Grouped>
void llamacpp_rows(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  uint8_t* unpacked = static_cast<uint8_t*>(scratch);
  const size_t unpacked_bytes = (quant::llamacpp_unpacked_bytes(tile.hidden) + 63) / 64 * 64;
  float* widened = reinterpret_cast<float*>(unpacked + unpacked_bytes);
  if constexpr (Type == TensorType::F16) {
    // The f16 activations' exact f32 images, once for the whole tile.
    for (int t = 0; t < acts.tokens; ++t) {
      const uint16_t* a = reinterpret_cast<const uint16_t*>(acts.data + t * acts.stride);
      for (int64_t e = 0; e < tile.hidden; ++e) widened[t * tile.hidden + e] = _cvtsh_ss(a[e]);
    }
  }
  for (int64_t r = 0; r < tile.count; ++r) {
    if constexpr (Type == TensorType::F16) {
      const uint16_t* w = reinterpret_cast<const uint16_t*>(tile.rows + r * tile.row_bytes);
      float* wf = reinterpret_cast<float*>(unpacked);
      int64_t e = 0;
      for (; e + 8 <= tile.hidden; e += 8)
        _mm256_storeu_ps(wf + e, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + e))));
      for (; e < tile.hidden; ++e) wf[e] = _cvtsh_ss(w[e]);
    } else {
      quant::llamacpp_unpack_row(Type, tile.rows + r * tile.row_bytes, tile.hidden, unpacked);
    }
    for (int t = 0; t < acts.tokens; ++t) {
      float v;
      if constexpr (Type == TensorType::F16)
        v = f16_dot<Path>(reinterpret_cast<const float*>(unpacked), widened + t * tile.hidden, tile.hidden);
      else
        v = kquant_dot<Path, Type, Grouped>(unpacked, acts.data + t * acts.stride, tile.hidden / 256);
      out.data[t * out.stride + r] = v;
    }
  }
}

template void llamacpp_rows<LlamaCppPath::tiled_kquant, TensorType::Q4_K, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::tiled_kquant, TensorType::Q5_K, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::tiled_kquant, TensorType::Q6_K, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::repack_q4_K_8x8, TensorType::Q4_K, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::repack_q4_K_8x8, TensorType::Q4_K, true>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::vec_dot_f16, TensorType::F16, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::sgemm_f16, TensorType::F16, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);

}  // namespace lmhead::cpu::avx2
