#include "synth/synthetic_head.hpp"

#include <cstring>
#include <random>
#include <string>

#include "lmhead/error.hpp"
#include "quant/blocks.hpp"
#include "synth/splitmix64.hpp"

namespace lmhead::synth {
namespace {

// A small positive f16 factor in [2^-10, 2^-6), now and then zero or subnormal.
uint16_t small_f16(SplitMix64& rng) {
  const uint64_t v = rng.next();
  if ((v & 63) == 0) return 0;
  if ((v & 63) == 1) return uint16_t(1 + (v >> 8) % 1023);  // subnormal
  return uint16_t(((5 + (v >> 8) % 4) << 10) | ((v >> 16) & 0x3FF));
}

float unit(SplitMix64& rng) { return rng.unit24() * 2.0f - 1.0f; }  // [-1, 1)

void put_f16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

}  // namespace

uint64_t row_bytes_of(TensorType type, int64_t hidden) {
  const TensorTypeInfo* info = tensor_type_info(type);
  if (info == nullptr || hidden % info->block_elems != 0)
    throw Error("synthetic head: " + std::to_string(hidden) + " is not a whole number of " +
                std::string(tensor_type_name(type)) + " blocks");
  return uint64_t(hidden / info->block_elems) * uint64_t(info->block_bytes);
}

void fill_synthetic_rows(TensorType type, int64_t rows, int64_t hidden, uint64_t seed, uint8_t* dst) {
  SplitMix64 rng{seed * 0x2545F4914F6CDD1Dull + 1};
  const uint64_t row_bytes = row_bytes_of(type, hidden);
  const uint64_t total = row_bytes * uint64_t(rows);
  switch (type) {
    case TensorType::Q4_K:
    case TensorType::Q5_K: {
      const uint64_t bb = type == TensorType::Q4_K ? 144 : 176;
      rng.fill_bytes(dst, total);
      for (uint64_t at = 0; at < total; at += bb) {
        put_f16(dst + at, small_f16(rng));
        put_f16(dst + at + 2, small_f16(rng));
      }
      return;
    }
    case TensorType::Q6_K:
      rng.fill_bytes(dst, total);
      for (uint64_t at = 0; at < total; at += 210) put_f16(dst + at + 208, small_f16(rng));
      return;
    case TensorType::Q8_0:
      rng.fill_bytes(dst, total);
      for (uint64_t at = 0; at < total; at += 34) put_f16(dst + at, small_f16(rng));
      return;
    case TensorType::F16:
    case TensorType::BF16:
      for (uint64_t at = 0; at < total; at += 2) {
        const float v = unit(rng) * 0.1f;
        put_f16(dst + at, type == TensorType::F16 ? quant::f32_to_f16(v) : quant::f32_to_bf16(v));
      }
      return;
    case TensorType::F32:
      for (uint64_t at = 0; at < total; at += 4) {
        const float v = unit(rng) * 0.1f;
        std::memcpy(dst + at, &v, 4);
      }
      return;
    default:
      throw Error("synthetic head: " + std::string(tensor_type_name(type)) + " is not a head type");
  }
}

std::vector<float> normal_floats(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng{seed};
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

}  // namespace lmhead::synth
