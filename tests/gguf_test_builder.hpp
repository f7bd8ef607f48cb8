#pragma once
// Builds GGUF bytes by hand, field by field, so tests can make files no well-behaved writer would:
// lying counts, truncations, overlaps. Written from spec/gguf.md independently of src/gguf/writer.cpp
// (a test of the reader must not lean on the writer it is meant to catch out).
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lmhead::testing {

class GgufBytes {
 public:
  std::vector<uint8_t> bytes;

  template <class T>
  GgufBytes& le(T v) {
    return append(&v, sizeof(T));
  }
  GgufBytes& raw(std::string_view s) { return append(s.data(), s.size()); }
  // resize + memcpy rather than vector::insert, which GCC 12 misreports under -Wstringop-overflow.
  GgufBytes& append(const void* p, size_t n) {
    const size_t at = bytes.size();
    bytes.resize(at + n);
    if (n) std::memcpy(bytes.data() + at, p, n);
    return *this;
  }
  GgufBytes& u8(uint8_t v) { return le(v); }
  GgufBytes& u32(uint32_t v) { return le(v); }
  GgufBytes& i32(int32_t v) { return le(v); }
  GgufBytes& u64(uint64_t v) { return le(v); }
  GgufBytes& i64(int64_t v) { return le(v); }
  GgufBytes& f32(float v) { return le(v); }
  GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  GgufBytes& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
  GgufBytes& pad_to(size_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
    return *this;
  }

  GgufBytes& header(int64_t tensors, int64_t kvs, uint32_t version = 3) {
    return raw("GGUF").u32(version).i64(tensors).i64(kvs);
  }
  // Key-values: key, i32 type, value.
  GgufBytes& kv_u32(std::string_view key, uint32_t v) { return str(key).i32(4).u32(v); }
  GgufBytes& kv_i32(std::string_view key, int32_t v) { return str(key).i32(5).i32(v); }
  GgufBytes& kv_f32(std::string_view key, float v) { return str(key).i32(6).f32(v); }
  GgufBytes& kv_u64(std::string_view key, uint64_t v) { return str(key).i32(10).u64(v); }
  GgufBytes& kv_str(std::string_view key, std::string_view v) { return str(key).i32(8).str(v); }
  GgufBytes& kv_bool(std::string_view key, uint8_t v) { return str(key).i32(7).u8(v); }
  GgufBytes& kv_str_array(std::string_view key, const std::vector<std::string>& v) {
    str(key).i32(9).i32(8).u64(v.size());
    for (const auto& s : v) str(s);
    return *this;
  }
  GgufBytes& kv_u32_array(std::string_view key, const std::vector<uint32_t>& v) {
    str(key).i32(9).i32(4).u64(v.size());
    for (uint32_t x : v) u32(x);
    return *this;
  }
  // Tensor info: name, u32 n_dims, i64 dims, i32 type, u64 offset.
  GgufBytes& tensor(std::string_view name, const std::vector<int64_t>& dims, int32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) i64(d);
    return i32(type).u64(offset);
  }

  std::span<const uint8_t> span() const { return bytes; }
  size_t size() const { return bytes.size(); }
};

constexpr int32_t kF32 = 0;
constexpr int32_t kQ8_0 = 8;
constexpr int32_t kQ5_K = 13;

// A small valid file: 3 key-values (one a string array), an F32 [8, 2] tensor and an F32 [4] one.
// Hostile tests change one thing about it. `data_a`/`data_b` fill the tensors with 1.0f.. ramps.
inline GgufBytes valid_gguf() {
  GgufBytes g;
  g.header(2, 3)
      .kv_str("general.architecture", "test-arch")
      .kv_f32("test.scale", 0.5f)
      .kv_str_array("tokenizer.ggml.tokens", {"a", "b", "\xC3\xA9t\xC3\xA9"})
      .tensor("a", {8, 2}, kF32, 0)
      .tensor("b", {4}, kF32, 64)
      .pad_to(32);
  for (int i = 0; i < 16; ++i) g.f32(1.0f + i);
  for (int i = 0; i < 4; ++i) g.f32(100.0f + i);
  g.pad_to(32);
  return g;
}

}  // namespace lmhead::testing
