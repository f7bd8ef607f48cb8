#pragma once
// GGUF v3: a memory-mapped, validating reader with zero-copy tensor views, and a streaming writer.
// Every check of spec/gguf.md fails with an Error that names the problem.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmhead/error.hpp"
#include "lmhead/tensor_type.hpp"

namespace lmhead::gguf {

enum class ValueType : int32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8,
  array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view to_string(ValueType);

// One metadata value. Strings are views into the mapping; numeric arrays are raw little-endian
// bytes (`array_data`, `array_count` elements of `array_type`); string arrays are `strings`.
struct Value {
  ValueType type = ValueType::u8;
  uint64_t u = 0;      // unsigned integer types and bool
  int64_t i = 0;       // signed integer types
  double f = 0;        // f32 / f64
  std::string_view s;  // string
  ValueType array_type = ValueType::u8;
  uint64_t array_count = 0;
  const uint8_t* array_data = nullptr;
  std::vector<std::string_view> strings;

  bool is_integer() const;
  bool is_float() const;
  // Checked conversions for known keys: throw Error naming `key` and the actual type.
  double as_number(std::string_view key) const;  // any integer or float type
  uint64_t as_u64(std::string_view key) const;    // non-negative integer types
  std::string_view as_string(std::string_view key) const;
};

struct KeyValue {
  std::string_view key;
  Value value;
};

struct TensorInfo {
  std::string_view name;
  uint32_t n_dims = 0;
  int64_t dims[4] = {1, 1, 1, 1};  // ggml order, missing trailing dims are 1
  TensorType type = TensorType::F32;
  uint64_t offset = 0;             // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;   // into the mapping
  int64_t elements() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
};

// A validated view of GGUF bytes. open() maps a file read-only; from_bytes() parses a buffer the
// caller keeps alive (fuzzing, tests).
class File {
 public:
  static std::unique_ptr<File> open(const std::string& path);
  static std::unique_ptr<File> from_bytes(std::span<const uint8_t> bytes, std::string name = "<memory>");
  ~File();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
  const std::string& name() const { return name_; }
  std::span<const uint8_t> bytes() const { return {base_, size_}; }

 private:
  File() = default;
  void parse();
  std::string name_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;  // munmap on destruction when set
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
};

// Streaming writer: metadata and tensor infos up front, tensor bytes produced by callbacks so a
// 1 GB head never has to sit in memory. write() goes to PATH.tmp-XXXX and renames on success.
class Writer {
 public:
  using Fill = std::function<void(uint8_t* dst, uint64_t offset, uint64_t nbytes)>;  // chunks, in order
  using Progress = std::function<void(uint64_t done, uint64_t total)>;

  void set_alignment(uint32_t alignment);
  void add_u32(std::string key, uint32_t v);
  void add_i32(std::string key, int32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_f32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_string_array(std::string key, std::vector<std::string> v);
  void add_f32_array(std::string key, std::vector<float> v);
  // dims in ggml order (dim 0 contiguous); trailing dims of 1 are dropped as ggml does.
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> dims, Fill fill);
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes);
  void write(const std::string& path, const Progress& progress = {}) const;

  struct Item;  // opaque
  Writer();
  ~Writer();
 private:
  std::vector<std::unique_ptr<Item>> kvs_;
  struct Tensor;
  std::vector<std::unique_ptr<Tensor>> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace lmhead::gguf
