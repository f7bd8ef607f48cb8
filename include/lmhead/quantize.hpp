#pragma once
// Quantizing with llama.cpp's reference quantizers (no importance matrix; Q4_K, Q5_K, Q6_K, Q8_0
// blocks byte-equal to ggml's, numerics.md §3b), as `lmhead quantize` does: one tensor of a GGUF
// file, or a checkpoint's head with every other tensor and all metadata copied as they are. Rows are
// streamed chunk by chunk, so a multi-GB f32 head never sits in memory twice.
//
//   lmhead::Quantizer q("muse-f32.gguf", {.type = lmhead::TensorType::Q6_K});
//   q.write("muse-q6.gguf");   // q.info(): the tensor, its shape, the bytes before and after
//
// In the static library (lmhead::lmhead_static), like compare.hpp; not among liblmhead.so's exported
// symbols, and not installed.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lmhead/tensor_type.hpp"

namespace lmhead {

struct QuantizeOptions {
  TensorType type = TensorType::Q8_0;  // a head type (tensor_type_info(type)->head_supported)
  int threads = 0;                     // 0: all hardware threads
  bool allow_requantize = false;       // accept an already quantized source (dequantized first)
};

struct QuantizeInfo {
  std::string tensor;             // the tensor quantized (the head's, for a whole checkpoint)
  bool whole_checkpoint = false;  // SRC named a checkpoint, not FILE.gguf:TENSOR
  TensorType from = TensorType::F32, to = TensorType::F32;
  int64_t rows = 0, cols = 0;
  uint64_t bytes_before = 0, bytes_after = 0, row_bytes = 0;  // row_bytes: of the quantized rows
  int threads = 0;
};

class Quantizer {
 public:
  // src: FILE.gguf:TENSOR (F32, F16 or BF16), or a checkpoint, meaning its head. Everything is
  // checked here, before anything is written: throws Error naming SRC, the tensor and the problem
  // (no such tensor, a quantized source without allow_requantize, rows that are not whole blocks).
  Quantizer(const std::string& src, const QuantizeOptions& options);
  ~Quantizer();
  Quantizer(const Quantizer&) = delete;
  Quantizer& operator=(const Quantizer&) = delete;

  const QuantizeInfo& info() const;
  // Writes dst atomically (complete or absent); progress(done, total) in bytes of the file.
  void write(const std::string& dst, const std::function<void(uint64_t done, uint64_t total)>& progress = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmhead
