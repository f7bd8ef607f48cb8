// Row decoders for the head formats (numerics.md §3). Every product is rounded to f32 on its own,
// in the order the spec writes it: (f32(d) * sc) * q - (f32(dmin) * m). The project builds with
// -ffp-contract=off, so none of these is silently fused into an FMA.
#include "quant/dequantize.hpp"

#include <string>

#include "lmhead/error.hpp"
#include "quant/blocks.hpp"

namespace lmhead::quant {
namespace {

// Q4_K and Q5_K share the scale/min layout and the formula; only the level decoding differs.
template <class Block, int (*Level)(const Block&, int)>
void dequantize_k_scale_min(const Block* blocks, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const Block& b = blocks[i];
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k_scale_min(b.scales, j, sc, m);
      const float scale = d * float(sc);
      const float min = dmin * float(m);
      for (int e = 32 * j; e < 32 * j + 32; ++e) y[e] = scale * float(Level(b, e)) - min;
    }
    y += kSuperBlock;
  }
}

void dequantize_q4_K(const block_q4_K* blocks, float* y, int64_t nb) {
  dequantize_k_scale_min<block_q4_K, q4k_level>(blocks, y, nb);
}

void dequantize_q5_K(const block_q5_K* blocks, float* y, int64_t nb) {
  dequantize_k_scale_min<block_q5_K, q5k_level>(blocks, y, nb);
}

void dequantize_q6_K(const block_q6_K* blocks, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const block_q6_K& b = blocks[i];
    const float d = f16_to_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      const float scale = d * float(b.scales[g]);
      for (int e = 16 * g; e < 16 * g + 16; ++e) y[e] = scale * float(q6k_level(b, e));
    }
    y += kSuperBlock;
  }
}

void dequantize_q8_0(const block_q8_0* blocks, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(blocks[i].d);
    for (int j = 0; j < kQ8_0Block; ++j) y[j] = d * float(blocks[i].qs[j]);
    y += kQ8_0Block;
  }
}

}  // namespace

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  const TensorTypeInfo* info = tensor_type_info(type);
  if (info == nullptr || !info->head_supported)
    throw Error("dequantize_row: tensor type " + std::string(tensor_type_name(type)) +
                " (id " + std::to_string(int(type)) + ") is not a head type");
  if (n < 0 || n % info->block_elems != 0)
    throw Error("dequantize_row: " + std::to_string(n) + " elements is not a whole number of " +
                std::string(info->name) + " blocks of " + std::to_string(info->block_elems));
  const int64_t nb = n / info->block_elems;
  switch (type) {
    case TensorType::Q4_K: dequantize_q4_K(static_cast<const block_q4_K*>(src), dst, nb); return;
    case TensorType::Q5_K: dequantize_q5_K(static_cast<const block_q5_K*>(src), dst, nb); return;
    case TensorType::Q6_K: dequantize_q6_K(static_cast<const block_q6_K*>(src), dst, nb); return;
    case TensorType::Q8_0: dequantize_q8_0(static_cast<const block_q8_0*>(src), dst, nb); return;
    case TensorType::F16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case TensorType::BF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case TensorType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    default: break;
  }
  throw Error("dequantize_row: no decoder for " + std::string(info->name));
}

}  // namespace lmhead::quant
