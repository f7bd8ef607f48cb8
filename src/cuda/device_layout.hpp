#pragma once
// How a head's rows are laid out in device memory. Each row is cut into groups of elements whose
// bytes are contiguous and 16-byte aligned, so a warp can stage whole groups with 16-byte async
// copies: Q4_K / Q5_K keep their blocks as they are; Q6_K moves its 2-byte d out of the block into
// a side array (208 aligned bytes stay); Q8_0 packs eight blocks as their eight d's (16 B) then
// their 256 quants; float types use 256-byte groups. Bytes read per row stay those of the file
// (plus zero padding of a partial last group of a float or Q8_0 row).
#include <cstdint>
#include <cstring>

#include "lmhead/error.hpp"
#include "lmhead/tensor_type.hpp"

namespace lmhead::cuda {

struct DeviceLayout {
  TensorType type = TensorType::F32;
  int group_elems = 0;    // elements per group
  int group_bytes = 0;    // device bytes per group (multiple of 16)
  int smem_pitch = 0;     // shared-memory bytes per staged row group (odd multiple of 16: no bank conflicts)
  int groups = 0;         // groups per row (the last may be partial for float and Q8_0 heads)
  int64_t row_stride = 0; // device bytes per row
  bool aux_d = false;     // Q6_K: per-group f16 d in a side array [vocab][groups]
};

inline DeviceLayout device_layout(TensorType type, int64_t hidden) {
  DeviceLayout l;
  l.type = type;
  switch (type) {
    case TensorType::Q4_K: l.group_elems = 256; l.group_bytes = 144; break;
    case TensorType::Q5_K: l.group_elems = 256; l.group_bytes = 176; break;
    case TensorType::Q6_K: l.group_elems = 256; l.group_bytes = 208; l.aux_d = true; break;
    case TensorType::Q8_0: l.group_elems = 256; l.group_bytes = 16 + 256; break;
    case TensorType::F16:
    case TensorType::BF16: l.group_elems = 128; l.group_bytes = 256; break;
    case TensorType::F32: l.group_elems = 64; l.group_bytes = 256; break;
    default:
      throw Error("the cuda backend has no device layout for tensor type " + std::string(tensor_type_name(type)));
  }
  if (hidden <= 0) throw Error("device_layout: hidden size must be positive, got " + std::to_string(hidden));
  const bool kquant = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
  if (kquant && hidden % 256 != 0)
    throw Error("device_layout: a K-quant row needs a multiple of 256 elements, got " + std::to_string(hidden));
  if (type == TensorType::Q8_0 && hidden % 32 != 0)
    throw Error("device_layout: a q8_0 row needs a multiple of 32 elements, got " + std::to_string(hidden));
  l.groups = int((hidden + l.group_elems - 1) / l.group_elems);
  l.row_stride = int64_t(l.groups) * l.group_bytes;
  l.smem_pitch = (l.group_bytes / 16) % 2 == 1 ? l.group_bytes : l.group_bytes + 16;
  return l;
}

// Repacks one file row (`hidden` elements in `type`) into the device layout; `aux` receives the
// Q6_K d's (groups entries) when the layout has them. Padding bytes are zero.
inline void to_device_row(const DeviceLayout& l, const uint8_t* src, int64_t hidden, uint8_t* dst, uint16_t* aux) {
  std::memset(dst, 0, size_t(l.row_stride));
  switch (l.type) {
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      std::memcpy(dst, src, size_t(l.row_stride));
      return;
    case TensorType::Q6_K:
      for (int g = 0; g < l.groups; ++g) {
        std::memcpy(dst + size_t(g) * 208, src + size_t(g) * 210, 208);  // ql, qh, scales
        std::memcpy(&aux[g], src + size_t(g) * 210 + 208, 2);            // d
      }
      return;
    case TensorType::Q8_0: {
      const int64_t blocks = hidden / 32;
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* group = dst + size_t(b / 8) * l.group_bytes;
        std::memcpy(group + 2 * (b % 8), src + size_t(b) * 34, 2);
        std::memcpy(group + 16 + 32 * (b % 8), src + size_t(b) * 34 + 2, 32);
      }
      return;
    }
    case TensorType::F16:
    case TensorType::BF16:
      std::memcpy(dst, src, size_t(hidden) * 2);
      return;
    case TensorType::F32:
      std::memcpy(dst, src, size_t(hidden) * 4);
      return;
    default:
      throw Error("to_device_row: unsupported tensor type " + std::string(tensor_type_name(l.type)));
  }
}

}  // namespace lmhead::cuda
