// Route llamacpp's cpu kernels (all but the tiled K-quant order, which is tiled_avx2.cpp's),
// compiled for AVX2 + FMA + F16C: the unpacked dots of quant/llamacpp_route.cpp (same integers,
// same float operations in the same order), with the fused multiply-adds as instructions instead of
// libm calls, the byte dots vectorized by the compiler, F16 and BF16 activations widened once per
// tile instead of once per row, and BF16's vdpbf16ps emulated 8 lanes at a time (the rare results
// near FLT_MIN through the portable step). Only intrinsics, builtins and out-of-line functions of
// the portable code are used here (kernels.hpp says why).
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

// The repacked Q4_K path (q4_K_8x8): gemv (Grouped false) and gemm (Grouped true) orders. The tiled
// K-quant order has its own kernels (tiled_avx2.cpp).
template <LlamaCppPath Path, TensorType Type, bool Grouped>
float kquant_dot(const uint8_t* unpacked, const uint8_t* act, int64_t nb) {
  static_assert(Path == LlamaCppPath::repack_q4_K_8x8 && Type == TensorType::Q4_K);
  const int8_t* levels = reinterpret_cast<const int8_t*>(unpacked);
  const int32_t* scales = reinterpret_cast<const int32_t*>(unpacked + 256 * nb);
  const int32_t* mins = scales + 16 * nb;
  const float* d = reinterpret_cast<const float*>(mins + 8 * nb);
  const float* dmin = d + nb;
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

// F16 and F32 weights (and F16 activations) as exact f32 values.
template <LlamaCppPath Path>
float float_dot(const float* w, const float* a, int64_t n) {
  if constexpr (Path == LlamaCppPath::sgemm_f16 || Path == LlamaCppPath::sgemm_f32) {
    float acc[16] = {};
    for (int64_t i = 0; i < n; i += 16)
      for (int l = 0; l < 16; ++l) acc[l] = std::fma(w[i + l], a[i + l], acc[l]);
    return reduce16_avx2(acc);
  } else {
    static_assert(Path == LlamaCppPath::vec_dot_f16 || Path == LlamaCppPath::vec_dot_f32);
    float sum[4][16] = {};
    const int64_t np = n / 64 * 64;
    for (int64_t i = 0; i < np; i += 64)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 16; ++l) sum[j][l] = std::fma(w[i + 16 * j + l], a[i + 16 * j + l], sum[j][l]);
    float r[16];
    for (int l = 0; l < 16; ++l) r[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    if constexpr (Path == LlamaCppPath::vec_dot_f16) {
      double total = reduce16_avx2(r);
      for (int64_t e = np; e < n; ++e) total += double(w[e] * a[e]);
      return float(total);
    } else {
      float total = reduce16_avx2(r);
      const int64_t unfused = np + (n - np) / 8 * 8;
      for (int64_t e = np; e < unfused; ++e) total = total + w[e] * a[e];
      for (int64_t e = unfused; e < n; ++e) total = std::fma(w[e], a[e], total);
      return total;
    }
  }
}

// BF16: a row's (or a token's) pairs split into the pair's even and odd elements, widened with
// bf16 subnormals read as zeros (the instruction's DAZ; the fused multiply-add below needs it done
// on the inputs), p = 0 .. n / 2 - 1: even[p] = x[2p], odd[p] = x[2p + 1].
void split_bf16_pairs(const uint16_t* x, int64_t n, float* even, float* odd) {
  auto widen = [](uint16_t h) {
    const uint32_t bits = (h & 0x7F80u) == 0 ? uint32_t(h & 0x8000u) << 16 : uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  for (int64_t p = 0; p < n / 2; ++p) {
    even[p] = widen(x[2 * p]);
    odd[p] = widen(x[2 * p + 1]);
  }
}

// One vdpbf16ps step in 8 lanes on inputs already DAZ'd (the accumulator always is: it starts at
// +0 and every step flushes): the fused multiply-add is the instruction's result except in
// (0, FLT_MIN], where the flush rules decide and those lanes are redone by quant::vdpbf16ps_step.
__m256 dpbf16_step8(__m256 acc, __m256 w, __m256 a) {
  const __m256 r = _mm256_fmadd_ps(w, a, acc);
  const __m256 m = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), r);
  const int tiny = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GT_OQ),
                                                    _mm256_cmp_ps(m, _mm256_set1_ps(0x1p-126f), _CMP_LE_OQ)));
  if (tiny == 0) return r;
  alignas(32) float av[8], wv[8], xv[8], rv[8];
  _mm256_store_ps(av, acc);
  _mm256_store_ps(wv, w);
  _mm256_store_ps(xv, a);
  _mm256_store_ps(rv, r);
  for (int l = 0; l < 8; ++l)
    if (tiny & (1 << l)) rv[l] = quant::vdpbf16ps_step(av[l], wv[l], xv[l]);
  return _mm256_load_ps(rv);
}

// 16 vdpbf16ps lanes over the pairs p0 .. p0 + 15 (lane l: pair p0 + l), the odd elements first.
void dpbf16_16(__m256 acc[2], const float* we, const float* wo, const float* ae, const float* ao, int64_t p0) {
  for (int h = 0; h < 2; ++h) {
    const int64_t p = p0 + 8 * h;
    acc[h] = dpbf16_step8(acc[h], _mm256_loadu_ps(wo + p), _mm256_loadu_ps(ao + p));
    acc[h] = dpbf16_step8(acc[h], _mm256_loadu_ps(we + p), _mm256_loadu_ps(ae + p));
  }
}

float reduce16_of(const __m256 acc[2]) {
  alignas(32) float v[16];
  _mm256_store_ps(v, acc[0]);
  _mm256_store_ps(v + 8, acc[1]);
  return reduce16_avx2(v);
}

float bf16_of(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The BF16 paths on split pairs (w, a: the row's and the token's raw bf16 values, for
// vec_dot_bf16's tail, which multiplies without DAZ).
template <LlamaCppPath Path>
float bf16_dot(const float* we, const float* wo, const float* ae, const float* ao, const uint16_t* w,
               const uint16_t* a, int64_t n) {
  if constexpr (Path == LlamaCppPath::sgemm_bf16) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n; i += 32) dpbf16_16(acc, we, wo, ae, ao, i / 2);
    return reduce16_of(acc);
  } else {
    static_assert(Path == LlamaCppPath::vec_dot_bf16);
    __m256 c1[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, c2[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      dpbf16_16(c1, we, wo, ae, ao, i / 2);
      dpbf16_16(c2, we, wo, ae, ao, i / 2 + 16);
    }
    double total = 0;
    total += reduce16_of(c1);
    total += reduce16_of(c2);
    for (; i < n; ++i) total += double(bf16_of(w[i]) * bf16_of(a[i]));
    return float(total);
  }
}

}  // namespace

template <LlamaCppPath Path, TensorType Type, bool Grouped>
void llamacpp_rows(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t n = tile.hidden;
  uint8_t* unpacked = static_cast<uint8_t*>(scratch);
  const size_t unpacked_bytes = (quant::llamacpp_unpacked_bytes(n) + 63) / 64 * 64;
  float* widened = reinterpret_cast<float*>(unpacked + unpacked_bytes);
  // The float types' activations as f32 once for the whole tile: F16 exactly, BF16 as split pairs
  // (n floats per token either way); F32 are used as they are.
  if constexpr (Type == TensorType::F16 || Type == TensorType::BF16) {
    for (int t = 0; t < acts.tokens; ++t) {
      const uint16_t* a = reinterpret_cast<const uint16_t*>(acts.data + t * acts.stride);
      if constexpr (Type == TensorType::F16)
        for (int64_t e = 0; e < n; ++e) widened[t * n + e] = _cvtsh_ss(a[e]);
      else
        split_bf16_pairs(a, n, widened + t * n, widened + t * n + n / 2);
    }
  }
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    if constexpr (Type == TensorType::F16) {
      const uint16_t* w = reinterpret_cast<const uint16_t*>(row);
      float* wf = reinterpret_cast<float*>(unpacked);
      int64_t e = 0;
      for (; e + 8 <= n; e += 8)
        _mm256_storeu_ps(wf + e, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + e))));
      for (; e < n; ++e) wf[e] = _cvtsh_ss(w[e]);
    } else if constexpr (Type == TensorType::BF16) {
      float* wf = reinterpret_cast<float*>(unpacked);
      split_bf16_pairs(reinterpret_cast<const uint16_t*>(row), n, wf, wf + n / 2);
    } else if constexpr (Type != TensorType::F32) {
      quant::llamacpp_unpack_row(Type, row, n, unpacked);
    }
    for (int t = 0; t < acts.tokens; ++t) {
      const uint8_t* act = acts.data + t * acts.stride;
      float v;
      if constexpr (Type == TensorType::F16) {
        v = float_dot<Path>(reinterpret_cast<const float*>(unpacked), widened + t * n, n);
      } else if constexpr (Type == TensorType::F32) {
        v = float_dot<Path>(reinterpret_cast<const float*>(row), reinterpret_cast<const float*>(act), n);
      } else if constexpr (Type == TensorType::BF16) {
        const float* wf = reinterpret_cast<const float*>(unpacked);
        v = bf16_dot<Path>(wf, wf + n / 2, widened + t * n, widened + t * n + n / 2,
                           reinterpret_cast<const uint16_t*>(row), reinterpret_cast<const uint16_t*>(act), n);
      } else {
        v = kquant_dot<Path, Type, Grouped>(unpacked, act, n / 256);
      }
      out.data[t * out.stride + r] = v;
    }
  }
}

template void llamacpp_rows<LlamaCppPath::repack_q4_K_8x8, TensorType::Q4_K, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::repack_q4_K_8x8, TensorType::Q4_K, true>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::vec_dot_f16, TensorType::F16, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::sgemm_f16, TensorType::F16, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::vec_dot_bf16, TensorType::BF16, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::sgemm_bf16, TensorType::BF16, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::vec_dot_f32, TensorType::F32, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);
template void llamacpp_rows<LlamaCppPath::sgemm_f32, TensorType::F32, false>(const HeadTile&, const TokenActs&, const RawOut&, void*);

}  // namespace lmhead::cpu::avx2
