#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lmhead {

// ggml type ids as stored in GGUF tensor infos (gguf.md): every type ggml's type table sizes
// (ggml/include/ggml.h, ggml/src/ggml.c), so a file ggml reads is fully validated whatever its
// other tensors hold. Ids ggml removed (4, 5, 31-33, 36-38) and unknown ids are refused with the
// tensor's name, never crashed on. Only the head's type must be one lmhead computes.
enum class TensorType : int32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

struct TensorTypeInfo {
  std::string_view name;   // "q5_K", "f16", ... (ggml's spelling)
  int64_t block_elems;     // elements per block (1 for float types)
  int64_t block_bytes;     // bytes per block
  bool head_supported;     // lmhead can run a head stored in this type
};

// nullptr for ids lmhead does not know (including ones ggml knows but lmhead cannot size).
const TensorTypeInfo* tensor_type_info(TensorType type);
const TensorTypeInfo* tensor_type_info(int32_t raw_id);
// "q5_K" -> Q5_K; returns false when unknown.
bool parse_tensor_type(std::string_view name, TensorType& out);
std::string_view tensor_type_name(TensorType type);  // "type#N" style is never returned: unknown -> "unknown"

}  // namespace lmhead
