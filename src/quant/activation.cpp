// Activation quantization (numerics.md §4): what one token's normed vector becomes before it meets
// the head's weights, per head type and route.
#include <algorithm>
#include "quant/activation.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "lmhead/error.hpp"

namespace lmhead::quant {

ActivationFormat activation_format(TensorType head, ActivationRoute route) {
  switch (head) {
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
      return route == ActivationRoute::q8 ? ActivationFormat::q8_K : ActivationFormat::f32;
    case TensorType::Q8_0:
      return route == ActivationRoute::q8 ? ActivationFormat::q8_0 : ActivationFormat::f32;
    case TensorType::F16:
      return route == ActivationRoute::q8 ? ActivationFormat::f16 : ActivationFormat::f32;
    case TensorType::BF16:
      return route == ActivationRoute::q8 ? ActivationFormat::bf16 : ActivationFormat::f32;
    case TensorType::F32:
      return ActivationFormat::f32;
    default:
      throw Error("activation_format: tensor type " + std::string(tensor_type_name(head)) + " (id " +
                  std::to_string(int(head)) + ") is not a head type");
  }
}

namespace {

int64_t format_block(ActivationFormat fmt) {
  switch (fmt) {
    case ActivationFormat::q8_K: return kSuperBlock;
    case ActivationFormat::q8_0: return kQ8_0Block;
    default: return 1;
  }
}

const char* format_name(ActivationFormat fmt) {
  switch (fmt) {
    case ActivationFormat::q8_K: return "q8_K";
    case ActivationFormat::q8_0: return "q8_0";
    case ActivationFormat::f16: return "f16";
    case ActivationFormat::bf16: return "bf16";
    case ActivationFormat::f32: return "f32";
  }
  return "unknown";
}

void check_whole_blocks(ActivationFormat fmt, int64_t n, const char* who) {
  const int64_t block = format_block(fmt);
  if (n < 0 || n % block != 0)
    throw Error(std::string(who) + ": " + std::to_string(n) + " activations is not a whole number of " +
                format_name(fmt) + " blocks of " + std::to_string(block));
}

}  // namespace

size_t activation_bytes(ActivationFormat fmt, int64_t n) {
  check_whole_blocks(fmt, n, "activation_bytes");
  switch (fmt) {
    case ActivationFormat::q8_K: return size_t(n / kSuperBlock) * sizeof(block_q8_K);
    case ActivationFormat::q8_0: return size_t(n / kQ8_0Block) * sizeof(block_q8_0);
    case ActivationFormat::f16:
    case ActivationFormat::bf16: return size_t(n) * 2;
    case ActivationFormat::f32: return size_t(n) * 4;
  }
  throw Error("activation_bytes: unknown activation format");
}

void quantize_activations(ActivationFormat fmt, const float* x, int64_t n, void* dst) {
  check_whole_blocks(fmt, n, "quantize_activations");
  switch (fmt) {
    case ActivationFormat::q8_K: quantize_q8_K(x, n, static_cast<block_q8_K*>(dst)); return;
    case ActivationFormat::q8_0: quantize_q8_0_activations(x, n, static_cast<block_q8_0*>(dst)); return;
    case ActivationFormat::f16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
      return;
    }
    case ActivationFormat::bf16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    case ActivationFormat::f32: std::memcpy(dst, x, size_t(n) * sizeof(float)); return;
  }
  throw Error("quantize_activations: unknown activation format");
}

void quantize_q8_K(const float* x, int64_t n, block_q8_K* out, Q8KScaleSign sign) {
  check_whole_blocks(ActivationFormat::q8_K, n, "quantize_q8_K");
  for (int64_t i = 0; i < n / kSuperBlock; ++i, x += kSuperBlock) {
    block_q8_K& b = out[i];
    // The signed value at the first index reaching the largest magnitude sets the scale, so that
    // element quantizes to exactly -127 (d is usually negative).
    float amax = 0, max = 0;
    for (int j = 0; j < kSuperBlock; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0) {
      std::memset(&b, 0, sizeof b);
      continue;
    }
    if (sign == Q8KScaleSign::positive_if_any && max < 0)
      for (int j = 0; j < kSuperBlock; ++j)
        if (x[j] == amax) {
          max = amax;
          break;
        }
    const float iscale = -127.0f / max;
    // The product is rounded before nearest_int adds 1.5 * 2^23: fused into one FMA it gives a
    // different level in about 1 of 3,000 random blocks (docs/quantization.md).
    for (int j = 0; j < kSuperBlock; ++j) {
      const int v = nearest_int(iscale * x[j]);
      b.qs[j] = int8_t(v < 127 ? v : 127);
    }
    for (int k = 0; k < kSuperBlock / 16; ++k) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[16 * k + j];
      b.bsums[k] = int16_t(sum);
    }
    b.d = 1.0f / iscale;
  }
}

void quantize_q8_0_activations(const float* x, int64_t n, block_q8_0* out) {
  check_whole_blocks(ActivationFormat::q8_0, n, "quantize_q8_0_activations");
  for (int64_t i = 0; i < n / kQ8_0Block; ++i, x += kQ8_0Block) {
    float amax = 0;
    for (int j = 0; j < kQ8_0Block; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) amax = ax;
    }
    out[i].d = f32_to_f16(amax / 127.0f);
    // llama.cpp's AVX2 path scales by 127 / amax (not by the reciprocal of the rounded d) and
    // rounds half to even (_mm256_round_ps), unlike the weight quantizer's roundf.
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kQ8_0Block; ++j) {
      // A subnormal amax makes id infinite. llama.cpp converts with _mm256_cvtps_epi32 (NaN and
      // out-of-range give INT32_MIN) and packs with signed saturation: such values become -128.
      const float v = std::nearbyint(x[j] * id);
      out[i].qs[j] = std::fabs(v) < 2147483648.0f ? int8_t(std::clamp(int(v), -128, 127)) : int8_t(-128);
    }
  }
}

}  // namespace lmhead::quant
