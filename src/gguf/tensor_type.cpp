#include "lmhead/tensor_type.hpp"

namespace lmhead {
namespace {

struct Entry {
  TensorType type;
  TensorTypeInfo info;
};

// Block sizes from ggml's type table (ggml/src/ggml.c type_traits: blck_size, type_size);
// lmhead runs heads in the types marked head_supported. Every other type is still sized, so a
// file holding it is validated byte for byte like any other.
constexpr Entry kTypes[] = {
    {TensorType::F32, {"f32", 1, 4, true}},
    {TensorType::F16, {"f16", 1, 2, true}},
    {TensorType::Q4_0, {"q4_0", 32, 18, false}},
    {TensorType::Q4_1, {"q4_1", 32, 20, false}},
    {TensorType::Q5_0, {"q5_0", 32, 22, false}},
    {TensorType::Q5_1, {"q5_1", 32, 24, false}},
    {TensorType::Q8_0, {"q8_0", 32, 34, true}},
    {TensorType::Q8_1, {"q8_1", 32, 36, false}},
    {TensorType::Q2_K, {"q2_K", 256, 84, false}},
    {TensorType::Q3_K, {"q3_K", 256, 110, false}},
    {TensorType::Q4_K, {"q4_K", 256, 144, true}},
    {TensorType::Q5_K, {"q5_K", 256, 176, true}},
    {TensorType::Q6_K, {"q6_K", 256, 210, true}},
    {TensorType::Q8_K, {"q8_K", 256, 292, false}},
    {TensorType::IQ2_XXS, {"iq2_xxs", 256, 66, false}},
    {TensorType::IQ2_XS, {"iq2_xs", 256, 74, false}},
    {TensorType::IQ3_XXS, {"iq3_xxs", 256, 98, false}},
    {TensorType::IQ1_S, {"iq1_s", 256, 50, false}},
    {TensorType::IQ4_NL, {"iq4_nl", 32, 18, false}},
    {TensorType::IQ3_S, {"iq3_s", 256, 110, false}},
    {TensorType::IQ2_S, {"iq2_s", 256, 82, false}},
    {TensorType::IQ4_XS, {"iq4_xs", 256, 136, false}},
    {TensorType::I8, {"i8", 1, 1, false}},
    {TensorType::I16, {"i16", 1, 2, false}},
    {TensorType::I32, {"i32", 1, 4, false}},
    {TensorType::I64, {"i64", 1, 8, false}},
    {TensorType::F64, {"f64", 1, 8, false}},
    {TensorType::IQ1_M, {"iq1_m", 256, 56, false}},
    {TensorType::BF16, {"bf16", 1, 2, true}},
    {TensorType::TQ1_0, {"tq1_0", 256, 54, false}},
    {TensorType::TQ2_0, {"tq2_0", 256, 66, false}},
    {TensorType::MXFP4, {"mxfp4", 32, 17, false}},
    {TensorType::NVFP4, {"nvfp4", 64, 36, false}},
    {TensorType::Q1_0, {"q1_0", 128, 18, false}},
};

}  // namespace

const TensorTypeInfo* tensor_type_info(int32_t raw_id) {
  for (const Entry& e : kTypes)
    if (static_cast<int32_t>(e.type) == raw_id) return &e.info;
  return nullptr;
}

const TensorTypeInfo* tensor_type_info(TensorType type) {
  return tensor_type_info(static_cast<int32_t>(type));
}

bool parse_tensor_type(std::string_view name, TensorType& out) {
  for (const Entry& e : kTypes) {
    if (e.info.name.size() != name.size()) continue;
    bool same = true;  // case-insensitive: "q5_k" and "Q5_K" both name Q5_K
    for (size_t i = 0; i < name.size() && same; ++i) {
      auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; };
      same = lower(e.info.name[i]) == lower(name[i]);
    }
    if (same) {
      out = e.type;
      return true;
    }
  }
  return false;
}

std::string_view tensor_type_name(TensorType type) {
  const TensorTypeInfo* info = tensor_type_info(type);
  return info ? info->name : std::string_view("unknown");
}

}  // namespace lmhead
