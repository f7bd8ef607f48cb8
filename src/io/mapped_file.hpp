#pragma once
// A whole file mapped read-only. Readers of untrusted files (GGUF, .npy) parse straight from the
// mapping: nothing is copied, and the span's size is the bound every offset is checked against.
#include <cstdint>
#include <span>
#include <string>

namespace lmhead::io {

class MappedFile {
 public:
  // Throws Error naming the path: missing, not a regular file, empty, or the mapping failed.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace lmhead::io
