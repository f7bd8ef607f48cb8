#pragma once
// GGUF v3: a memory-mapped, validating reader with zero-copy tensor views, and a streaming writer.
// Every check of spec/gguf.md fails with an Error that names the problem.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lmhead/error.hpp"
#include "lmhead/tensor_type.hpp"

namespace lmhead::io {
class MappedFile;
}

namespace lmhead::gguf {

// general.alignment bounds. The upper bound is far above any real file's (32, sometimes 64 or a
// 4 KiB page) and keeps every "round up to the alignment" of an in-file offset far from wrapping
// around 2^64; a hostile 2^31 alignment could otherwise push the data section past any check.
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t(1) << 20;

// Index of the first byte that breaks UTF-8 (overlong forms, surrogates and code points past
// U+10FFFF included), or std::string_view::npos when `text` is valid.
size_t invalid_utf8_at(std::string_view text);

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
  uint64_t row_bytes = 0;          // bytes of one dim-0 row
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
  std::unique_ptr<io::MappedFile> mapping_;  // set by open(); from_bytes() borrows the caller's buffer
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// Streaming writer: metadata and tensor infos up front, tensor bytes produced by callbacks so a
// 1 GB head never has to sit in memory. write() goes to PATH.tmp-XXXX and renames on success.
// Every add_* checks what the reader would refuse (duplicate names, invalid UTF-8, bad dims or
// types) and throws then, so a Writer never produces a file lmhead cannot read back.
// Fill is called with whole dim-0 rows, in order: `offset` is the byte offset inside the tensor,
// `nbytes` a multiple of the row size (up to a few MiB per call).
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
  // A value as a reader holds it, any type (arrays of arrays are refused): copies a file's metadata.
  void add_value(std::string key, const Value& v);
  // dims in ggml order (dim 0 contiguous); trailing dims of 1 are dropped as ggml does.
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> dims, Fill fill);
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes);
  void write(const std::string& path, const Progress& progress = {}) const;

  struct Item;  // opaque
  Writer();
  ~Writer();
 private:
  void push_item(std::unique_ptr<Item> item);  // refuses a key added twice
  std::vector<std::unique_ptr<Item>> kvs_;
  struct Tensor;
  std::vector<std::unique_ptr<Tensor>> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace lmhead::gguf
