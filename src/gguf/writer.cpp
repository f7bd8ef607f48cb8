// GGUF v3 writer: the layout ggml writes (header, key-values in insertion order, tensor infos,
// padding, then each tensor's bytes padded to the alignment), streamed through an AtomicFile.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "gguf/gguf.hpp"
#include "io/atomic_file.hpp"

namespace lmhead::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian; the writer copies host bytes");

// Rows are gathered into chunks of about this size before the Fill callback runs, so a 1 GB head
// is produced a few MiB at a time.
constexpr uint64_t kChunkBytes = uint64_t(4) << 20;

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  const size_t at = out.size();
  out.resize(at + s.size());
  if (!s.empty()) std::memcpy(out.data() + at, s.data(), s.size());
}

void check_utf8(std::string_view text, const std::string& what) {
  if (size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
    throw Error("GGUF writer: " + what + " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
}

uint64_t align_up(uint64_t v, uint64_t alignment) { return (v + alignment - 1) / alignment * alignment; }

}  // namespace

struct Writer::Item {
  std::string key;
  std::vector<uint8_t> encoded;  // i32 value type then the value, as it goes into the file
};

struct Writer::Tensor {
  std::string name;
  TensorType type;
  std::vector<int64_t> dims;  // trailing 1s already dropped
  uint64_t row_bytes = 0;
  uint64_t nbytes = 0;
  Fill fill;
};

Writer::Writer() = default;
Writer::~Writer() = default;

namespace {
std::unique_ptr<Writer::Item> make_item(std::string key, ValueType type) {
  check_utf8(key, "key '" + key + "'");
  auto item = std::make_unique<Writer::Item>();
  item->key = std::move(key);
  put<int32_t>(item->encoded, static_cast<int32_t>(type));
  return item;
}
}  // namespace

// Keys keep their first insertion position; adding a key twice is a mistake the reader would
// refuse as a duplicate, so it is refused here.
void Writer::push_item(std::unique_ptr<Item> item) {
  for (const auto& existing : kvs_)
    if (existing->key == item->key) throw Error("GGUF writer: duplicate key '" + item->key + "'");
  kvs_.push_back(std::move(item));
}

void Writer::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kMaxAlignment)
    throw Error("GGUF writer: alignment " + std::to_string(alignment) + " must be a power of two between 1 and " +
                std::to_string(kMaxAlignment));
  alignment_ = alignment;
  auto item = make_item("general.alignment", ValueType::u32);
  put<uint32_t>(item->encoded, alignment);
  for (auto& existing : kvs_)
    if (existing->key == item->key) {
      existing = std::move(item);
      return;
    }
  kvs_.push_back(std::move(item));
}

void Writer::add_u32(std::string key, uint32_t v) {
  if (key == "general.alignment") {
    for (const auto& existing : kvs_)
      if (existing->key == key) throw Error("GGUF writer: duplicate key 'general.alignment'");
    set_alignment(v);  // the key and the layout's alignment must agree, so they are set together
    return;
  }
  auto item = make_item(std::move(key), ValueType::u32);
  put<uint32_t>(item->encoded, v);
  push_item(std::move(item));
}

namespace {
void refuse_alignment_key(const std::string& key, std::string_view type) {
  if (key == "general.alignment")
    throw Error("GGUF writer: general.alignment must be u32, not " + std::string(type));
}
}  // namespace

void Writer::add_i32(std::string key, int32_t v) {
  refuse_alignment_key(key, "i32");
  auto item = make_item(std::move(key), ValueType::i32);
  put<int32_t>(item->encoded, v);
  push_item(std::move(item));
}

void Writer::add_u64(std::string key, uint64_t v) {
  refuse_alignment_key(key, "u64");
  auto item = make_item(std::move(key), ValueType::u64);
  put<uint64_t>(item->encoded, v);
  push_item(std::move(item));
}

void Writer::add_f32(std::string key, float v) {
  refuse_alignment_key(key, "f32");
  auto item = make_item(std::move(key), ValueType::f32);
  put<float>(item->encoded, v);
  push_item(std::move(item));
}

void Writer::add_bool(std::string key, bool v) {
  refuse_alignment_key(key, "bool");
  auto item = make_item(std::move(key), ValueType::boolean);
  put<uint8_t>(item->encoded, v ? 1 : 0);
  push_item(std::move(item));
}

void Writer::add_string(std::string key, std::string v) {
  refuse_alignment_key(key, "string");
  check_utf8(v, "the value of key '" + key + "'");
  auto item = make_item(std::move(key), ValueType::string);
  put_string(item->encoded, v);
  push_item(std::move(item));
}

void Writer::add_string_array(std::string key, std::vector<std::string> v) {
  refuse_alignment_key(key, "array");
  for (size_t e = 0; e < v.size(); ++e) check_utf8(v[e], "element " + std::to_string(e) + " of key '" + key + "'");
  auto item = make_item(std::move(key), ValueType::array);
  put<int32_t>(item->encoded, static_cast<int32_t>(ValueType::string));
  put<uint64_t>(item->encoded, v.size());
  for (const std::string& s : v) put_string(item->encoded, s);
  push_item(std::move(item));
}

void Writer::add_f32_array(std::string key, std::vector<float> v) {
  refuse_alignment_key(key, "array");
  auto item = make_item(std::move(key), ValueType::array);
  put<int32_t>(item->encoded, static_cast<int32_t>(ValueType::f32));
  put<uint64_t>(item->encoded, v.size());
  for (float f : v) put<float>(item->encoded, f);
  push_item(std::move(item));
}

namespace {
size_t scalar_bytes(ValueType t) {
  switch (t) {
    case ValueType::u8: case ValueType::i8: case ValueType::boolean: return 1;
    case ValueType::u16: case ValueType::i16: return 2;
    case ValueType::u32: case ValueType::i32: case ValueType::f32: return 4;
    case ValueType::u64: case ValueType::i64: case ValueType::f64: return 8;
    default: return 0;
  }
}

void put_scalar(std::vector<uint8_t>& out, ValueType t, const Value& v) {
  switch (t) {
    case ValueType::u8: put<uint8_t>(out, uint8_t(v.u)); break;
    case ValueType::i8: put<int8_t>(out, int8_t(v.i)); break;
    case ValueType::boolean: put<uint8_t>(out, v.u ? 1 : 0); break;
    case ValueType::u16: put<uint16_t>(out, uint16_t(v.u)); break;
    case ValueType::i16: put<int16_t>(out, int16_t(v.i)); break;
    case ValueType::u32: put<uint32_t>(out, uint32_t(v.u)); break;
    case ValueType::i32: put<int32_t>(out, int32_t(v.i)); break;
    case ValueType::f32: put<float>(out, float(v.f)); break;  // read from an f32: exact
    case ValueType::u64: put<uint64_t>(out, v.u); break;
    case ValueType::i64: put<int64_t>(out, v.i); break;
    case ValueType::f64: put<double>(out, v.f); break;
    default: break;
  }
}
}  // namespace

void Writer::add_value(std::string key, const Value& v) {
  if (key == "general.alignment") {
    if (v.type != ValueType::u32) refuse_alignment_key(key, to_string(v.type));
    add_u32(std::move(key), uint32_t(v.u));
    return;
  }
  if (v.type == ValueType::string) return add_string(std::move(key), std::string(v.s));
  if (v.type != ValueType::array) {
    if (scalar_bytes(v.type) == 0) throw Error("GGUF writer: key '" + key + "' has an unknown value type");
    auto item = make_item(std::move(key), v.type);
    put_scalar(item->encoded, v.type, v);
    push_item(std::move(item));
    return;
  }
  if (v.array_type == ValueType::string) {
    std::vector<std::string> strings(v.strings.begin(), v.strings.end());
    return add_string_array(std::move(key), std::move(strings));
  }
  const size_t width = scalar_bytes(v.array_type);
  if (width == 0) throw Error("GGUF writer: key '" + key + "' is an array of " + std::string(to_string(v.array_type)) +
                              ", which the writer does not copy");
  auto item = make_item(std::move(key), ValueType::array);
  put<int32_t>(item->encoded, static_cast<int32_t>(v.array_type));
  put<uint64_t>(item->encoded, v.array_count);
  const size_t at = item->encoded.size(), n = size_t(v.array_count) * width;
  item->encoded.resize(at + n);
  if (n) std::memcpy(item->encoded.data() + at, v.array_data, n);
  push_item(std::move(item));
}

void Writer::add_tensor(std::string name, TensorType type, std::vector<int64_t> dims, Fill fill) {
  check_utf8(name, "tensor name '" + name + "'");
  for (const auto& t : tensors_)
    if (t->name == name) throw Error("GGUF writer: duplicate tensor name '" + name + "'");
  const TensorTypeInfo* info = tensor_type_info(type);
  if (!info) throw Error("GGUF writer: tensor '" + name + "' has an unknown type id " + std::to_string(static_cast<int32_t>(type)));
  if (dims.empty() || dims.size() > 4)
    throw Error("GGUF writer: tensor '" + name + "' has " + std::to_string(dims.size()) + " dims, expected 1 to 4");
  uint64_t elements = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] <= 0)
      throw Error("GGUF writer: tensor '" + name + "' dim " + std::to_string(d) + " is " + std::to_string(dims[d]) + ", must be positive");
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dims[d]), &elements) ||
        elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error("GGUF writer: tensor '" + name + "' has more elements than fit in 63 bits");
  }
  // ggml stores n_dims without trailing dims of 1 ([H, 1] is written as [H]); readers restore them.
  while (dims.size() > 1 && dims.back() == 1) dims.pop_back();
  uint64_t dim0 = static_cast<uint64_t>(dims[0]);
  if (dim0 % static_cast<uint64_t>(info->block_elems) != 0)
    throw Error("GGUF writer: tensor '" + name + "' dim 0 (" + std::to_string(dim0) + ") is not a multiple of " +
                std::string(info->name) + "'s block of " + std::to_string(info->block_elems) + " elements");
  auto tensor = std::make_unique<Tensor>();
  if (__builtin_mul_overflow(dim0 / info->block_elems, static_cast<uint64_t>(info->block_bytes), &tensor->row_bytes) ||
      __builtin_mul_overflow(tensor->row_bytes, elements / dim0, &tensor->nbytes))
    throw Error("GGUF writer: tensor '" + name + "' size in bytes overflows 64 bits");
  if (!fill) throw Error("GGUF writer: tensor '" + name + "' has no fill callback");
  tensor->name = std::move(name);
  tensor->type = type;
  tensor->dims = std::move(dims);
  tensor->fill = std::move(fill);
  tensors_.push_back(std::move(tensor));
}

void Writer::add_tensor(std::string name, TensorType type, std::vector<int64_t> dims, std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  std::string label = name;
  add_tensor(std::move(name), type, std::move(dims), [shared](uint8_t* dst, uint64_t offset, uint64_t nbytes) {
    std::memcpy(dst, shared->data() + offset, nbytes);
  });
  if (tensors_.back()->nbytes != shared->size()) {
    uint64_t expected = tensors_.back()->nbytes;
    tensors_.pop_back();
    throw Error("GGUF writer: tensor '" + label + "' needs " + std::to_string(expected) + " bytes, got " +
                std::to_string(shared->size()));
  }
}

void Writer::write(const std::string& path, const Progress& progress) const {
  std::vector<uint8_t> head;
  put<uint32_t>(head, 0x46554747);  // "GGUF" read as a little-endian u32
  put<uint32_t>(head, 3);
  put<int64_t>(head, static_cast<int64_t>(tensors_.size()));
  put<int64_t>(head, static_cast<int64_t>(kvs_.size()));
  for (const auto& item : kvs_) {
    put_string(head, item->key);
    head.insert(head.end(), item->encoded.begin(), item->encoded.end());
  }
  uint64_t offset = 0;
  uint64_t total = 0;
  for (const auto& t : tensors_) {
    put_string(head, t->name);
    put<uint32_t>(head, static_cast<uint32_t>(t->dims.size()));
    for (int64_t d : t->dims) put<int64_t>(head, d);
    put<int32_t>(head, static_cast<int32_t>(t->type));
    put<uint64_t>(head, offset);
    if (__builtin_add_overflow(offset, align_up(t->nbytes, alignment_), &offset) ||
        __builtin_add_overflow(total, t->nbytes, &total))
      throw Error("GGUF writer: the tensors of " + path + " add up to more than 2^64 bytes");
  }
  head.resize(align_up(head.size(), alignment_), 0);

  io::AtomicFile out(path);
  out.write(head);
  uint64_t done = 0;
  if (progress) progress(0, total);
  std::vector<uint8_t> chunk;
  for (const auto& t : tensors_) {
    uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunkBytes / t->row_bytes);
    uint64_t chunk_bytes = std::min(t->nbytes, rows_per_chunk * t->row_bytes);
    if (chunk.size() < chunk_bytes) chunk.resize(chunk_bytes);
    for (uint64_t at = 0; at < t->nbytes; at += chunk_bytes) {
      uint64_t n = std::min(chunk_bytes, t->nbytes - at);
      t->fill(chunk.data(), at, n);
      out.write(chunk.data(), n);
      done += n;
      if (progress) progress(done, total);
    }
    out.write_zeros(align_up(t->nbytes, alignment_) - t->nbytes);
  }
  out.commit();
}

}  // namespace lmhead::gguf
