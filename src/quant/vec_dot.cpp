// Reference dot products, one weight row against one token's activations. The float order here IS
// the specification every fast kernel (AVX2, CUDA) reproduces byte for byte; integer sums are exact,
// so only where floats are rounded matters. All orders share eight float accumulator lanes, lane k
// fed with fma (one rounding), reduced as llama.cpp's hsum_float_8 does:
//   h = [a0+a4, a1+a5, a2+a6, a3+a7];  result = (h0+h2) + (h1+h3).
// For the integer-dot formats, lane k of a 32-element sub-block covers its elements 4k..4k+3 (the
// 32-bit lane k of an AVX2 register after maddubs + madd).
#include "quant/vec_dot.hpp"

#include <cmath>
#include <string>

#include "lmhead/error.hpp"
#include "quant/blocks.hpp"
#include "quant/dequantize.hpp"

namespace lmhead::quant {
namespace {

constexpr int kLanes = 8;

float reduce_lanes(const float acc[kLanes]) {
  const float h0 = acc[0] + acc[4], h1 = acc[1] + acc[5], h2 = acc[2] + acc[6], h3 = acc[3] + acc[7];
  return (h0 + h2) + (h1 + h3);
}

// Integer part shared by Q4_K and Q5_K: isum[k] = sum over sub-blocks j of
// sc[j] * sum_{b<4} level(32j + 4k + b) * q8[32j + 4k + b]. Exact in int32.
template <typename LevelOf>
void k_lane_sums(const uint8_t sc[8], const int8_t* q8, LevelOf level, int32_t isum[kLanes]) {
  for (int k = 0; k < kLanes; ++k) {
    int32_t lane = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t part = 0;
      for (int b = 0; b < 4; ++b) {
        const int e = 32 * j + 4 * k + b;
        part += level(e) * q8[e];
      }
      lane += int32_t(sc[j]) * part;
    }
    isum[k] = lane;
  }
}

// Q5_K x Q8_K in llama.cpp's x86 AVX2 order (numerics.md §5), per super-block:
//   dq = y.d * f32(d); dm = (-y.d) * f32(dmin)
//   summs = fma(dm, float(sum_j m[j] * (bsums[2j] + bsums[2j+1])), summs)
//   acc[k] = fma(dq, float(isum[k]), acc[k])           (isum: k_lane_sums)
// result = reduce_lanes(acc) + summs.
float dot_q5_K_q8_K(const block_q5_K* x, const block_q8_K* y, int64_t nb) {
  float acc[kLanes] = {};
  float summs = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const float dq = y[i].d * f16_to_f32(x[i].d);
    const float dm = -y[i].d * f16_to_f32(x[i].dmin);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) k_scale_min(x[i].scales, j, sc[j], m[j]);
    int32_t imin = 0;
    for (int j = 0; j < 8; ++j) imin += int32_t(m[j]) * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    summs = std::fma(dm, float(imin), summs);
    int32_t isum[kLanes];
    k_lane_sums(sc, y[i].qs, [&](int e) { return q5k_level(x[i], e); }, isum);
    for (int k = 0; k < kLanes; ++k) acc[k] = std::fma(dq, float(isum[k]), acc[k]);
  }
  return reduce_lanes(acc) + summs;
}

// Q4_K x Q8_K in llama.cpp's x86 AVX2 order. It differs from Q5_K only in the mins: they
// accumulate in FOUR float lanes (lane t: sub-blocks 2t and 2t+1, the int32 lanes of
// _mm_madd_epi16(mins, pairwise bsums)), reduced (m0+m2)+(m1+m3) and added after the main lanes:
//   dq = y.d * f32(d); dm = (-y.d) * f32(dmin)
//   imin[t] = m[2t] * (bsums[4t] + bsums[4t+1]) + m[2t+1] * (bsums[4t+2] + bsums[4t+3])
//   acc_m[t] = fma(dm, float(imin[t]), acc_m[t])       t = 0..3
//   acc[k] = fma(dq, float(isum[k]), acc[k])           (isum: k_lane_sums, 4-bit levels)
// result = reduce_lanes(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])).
float dot_q4_K_q8_K(const block_q4_K* x, const block_q8_K* y, int64_t nb) {
  float acc[kLanes] = {};
  float acc_m[4] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const float dq = y[i].d * f16_to_f32(x[i].d);
    const float dm = -y[i].d * f16_to_f32(x[i].dmin);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) k_scale_min(x[i].scales, j, sc[j], m[j]);
    const int16_t* bs = y[i].bsums;
    for (int t = 0; t < 4; ++t) {
      const int32_t imin = int32_t(m[2 * t]) * (bs[4 * t] + bs[4 * t + 1]) +
                           int32_t(m[2 * t + 1]) * (bs[4 * t + 2] + bs[4 * t + 3]);
      acc_m[t] = std::fma(dm, float(imin), acc_m[t]);
    }
    int32_t isum[kLanes];
    k_lane_sums(sc, y[i].qs, [&](int e) { return q4k_level(x[i], e); }, isum);
    for (int k = 0; k < kLanes; ++k) acc[k] = std::fma(dq, float(isum[k]), acc[k]);
  }
  const float mins = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
  return reduce_lanes(acc) + mins;
}

// Q6_K x Q8_K in llama.cpp's x86 AVX2 order (numerics.md §5b), per super-block:
//   d = y.d * f32(d)
//   pos[k]  = sum over 32-element chunks c of scales[2c + k / 4] * sum_{b<4} u(e) * q8(e),
//             e = 32c + 4k + b, u the unsigned level (0..63)
//   isum[k] = pos[k] - 32 * (scales[2k] * bsums[2k] + scales[2k+1] * bsums[2k+1])
//   acc[k] = fma(d, float(isum[k]), acc[k])
// result = reduce_lanes(acc). The offset's share in lane k is that of 16-element groups 2k and
// 2k+1, not of the lane's own elements: the lanes' totals (and so their roundings in float and
// fma) differ from a signed-level sum per lane although all eight add up to the same integer.
float dot_q6_K_q8_K(const block_q6_K* x, const block_q8_K* y, int64_t nb) {
  float acc[kLanes] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const float d = y[i].d * f16_to_f32(x[i].d);
    const int8_t* sc = x[i].scales;
    const int16_t* bs = y[i].bsums;
    for (int k = 0; k < kLanes; ++k) {
      int32_t pos = 0;
      for (int c = 0; c < 8; ++c) {
        int32_t part = 0;
        for (int b = 0; b < 4; ++b) {
          const int e = 32 * c + 4 * k + b;
          part += (q6k_level(x[i], e) + 32) * y[i].qs[e];
        }
        pos += int32_t(sc[2 * c + k / 4]) * part;
      }
      const int32_t offset = int32_t(sc[2 * k]) * bs[2 * k] + int32_t(sc[2 * k + 1]) * bs[2 * k + 1];
      acc[k] = std::fma(d, float(pos - 32 * offset), acc[k]);
    }
  }
  return reduce_lanes(acc);
}

// Q8_0 x Q8_0 in llama.cpp's x86 AVX2 order (numerics.md §4), per 32-element block:
//   dprod = f32(w.d) * f32(a.d)
//   acc[k] = fma(dprod, float(sum_{b<4} w.qs[4k+b] * a.qs[4k+b]), acc[k])
// result = reduce_lanes(acc).
float dot_q8_0_q8_0(const block_q8_0* x, const block_q8_0* y, int64_t nb) {
  float acc[kLanes] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const float dprod = f16_to_f32(x[i].d) * f16_to_f32(y[i].d);
    for (int k = 0; k < kLanes; ++k) {
      int32_t isum = 0;
      for (int b = 0; b < 4; ++b) isum += int32_t(x[i].qs[4 * k + b]) * y[i].qs[4 * k + b];
      acc[k] = std::fma(dprod, float(isum), acc[k]);
    }
  }
  return reduce_lanes(acc);
}

// Float formats (both operands decoded to f32): element e feeds lane e % 8 in element order,
//   acc[e % 8] = fma(w[e], a[e], acc[e % 8]),  result = reduce_lanes(acc).
// This is lmhead's own order, not llama.cpp's (its ggml_vec_dot_f16 keeps four 8-lane
// accumulators over 32-element steps), so F16/BF16/F32 heads are not byte-identical to llama.cpp.
template <typename DecodeW, typename DecodeA>
float dot_float_lanes(DecodeW w, DecodeA a, int64_t n) {
  float acc[kLanes] = {};
  for (int64_t e = 0; e < n; ++e) acc[e % kLanes] = std::fma(w(e), a(e), acc[e % kLanes]);
  return reduce_lanes(acc);
}

void check_row(TensorType head, int64_t n, const char* who) {
  const TensorTypeInfo* info = tensor_type_info(head);
  if (info == nullptr || !info->head_supported)
    throw Error(std::string(who) + ": tensor type " + std::string(tensor_type_name(head)) + " (id " +
                std::to_string(int(head)) + ") is not a head type");
  if (n < 0 || n % info->block_elems != 0)
    throw Error(std::string(who) + ": " + std::to_string(n) + " elements is not a whole number of " +
                std::string(info->name) + " blocks of " + std::to_string(info->block_elems));
}

}  // namespace

float vec_dot_q8_route(TensorType head, const void* row, const void* act, int64_t n) {
  check_row(head, n, "vec_dot_q8_route");
  switch (head) {
    case TensorType::Q4_K:
      return dot_q4_K_q8_K(static_cast<const block_q4_K*>(row), static_cast<const block_q8_K*>(act), n / kSuperBlock);
    case TensorType::Q5_K:
      return dot_q5_K_q8_K(static_cast<const block_q5_K*>(row), static_cast<const block_q8_K*>(act), n / kSuperBlock);
    case TensorType::Q6_K:
      return dot_q6_K_q8_K(static_cast<const block_q6_K*>(row), static_cast<const block_q8_K*>(act), n / kSuperBlock);
    case TensorType::Q8_0:
      return dot_q8_0_q8_0(static_cast<const block_q8_0*>(row), static_cast<const block_q8_0*>(act), n / kQ8_0Block);
    case TensorType::F16: {
      const uint16_t* w = static_cast<const uint16_t*>(row);
      const uint16_t* a = static_cast<const uint16_t*>(act);
      return dot_float_lanes([&](int64_t e) { return f16_to_f32(w[e]); }, [&](int64_t e) { return f16_to_f32(a[e]); }, n);
    }
    case TensorType::BF16: {
      const uint16_t* w = static_cast<const uint16_t*>(row);
      const uint16_t* a = static_cast<const uint16_t*>(act);
      return dot_float_lanes([&](int64_t e) { return bf16_to_f32(w[e]); }, [&](int64_t e) { return bf16_to_f32(a[e]); }, n);
    }
    case TensorType::F32: {
      const float* w = static_cast<const float*>(row);
      const float* a = static_cast<const float*>(act);
      return dot_float_lanes([&](int64_t e) { return w[e]; }, [&](int64_t e) { return a[e]; }, n);
    }
    default: break;
  }
  throw Error("vec_dot_q8_route: no dot product for " + std::string(tensor_type_name(head)));
}

float vec_dot_f32_route(TensorType head, const void* row, const float* x, int64_t n, float* scratch) {
  check_row(head, n, "vec_dot_f32_route");
  dequantize_row(head, row, scratch, n);
  return dot_float_lanes([&](int64_t e) { return scratch[e]; }, [&](int64_t e) { return x[e]; }, n);
}

}  // namespace lmhead::quant
