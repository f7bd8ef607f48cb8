#pragma once
// Shared by the quant_*_test.cpp files: golden tensors through lmhead's own GGUF reader, and a
// deterministic random source.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>

#include "gguf/gguf.hpp"

namespace lmhead::quant::testing {

inline std::string data_path(const std::string& file) { return std::string(LMHEAD_TEST_DATA) + "/" + file; }

// A golden tensor checked for type and shape: `rows` rows (ggml dim 1, 1 when absent) of `cols`
// elements (ggml dim 0).
struct GoldenTensor {
  std::shared_ptr<gguf::File> file;
  const gguf::TensorInfo* info = nullptr;
  int64_t cols = 0, rows = 0;
  uint64_t row_bytes = 0;
  const uint8_t* row(int64_t r) const { return info->data + r * row_bytes; }
  std::span<const uint8_t> bytes() const { return {info->data, info->nbytes}; }
  const float* f32_row(int64_t r) const { return reinterpret_cast<const float*>(row(r)); }
};

inline GoldenTensor golden_tensor(const std::shared_ptr<gguf::File>& file, const std::string& name,
                                  TensorType type) {
  GoldenTensor t;
  t.file = file;
  t.info = file->find_tensor(name);
  if (t.info == nullptr) throw Error(file->name() + ": no tensor " + name);
  if (t.info->type != type)
    throw Error(file->name() + ": tensor " + name + " is " + std::string(tensor_type_name(t.info->type)));
  t.cols = t.info->dims[0];
  t.rows = t.info->dims[1];
  t.row_bytes = t.info->nbytes / uint64_t(t.rows);
  return t;
}

inline std::shared_ptr<gguf::File> open_golden(const std::string& file) {
  return std::shared_ptr<gguf::File>(gguf::File::open(data_path(file)));
}

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace lmhead::quant::testing
