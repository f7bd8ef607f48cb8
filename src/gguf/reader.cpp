// GGUF v3 reader. The file is untrusted: every read goes through a cursor that checks the bytes
// are there first, every count is bounded by the bytes left before anything is allocated for it,
// and every size is computed with overflow checks (spec/gguf.md, "What a hostile file tries").
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "gguf/gguf.hpp"
#include "io/mapped_file.hpp"

namespace lmhead::gguf {
namespace {

// The fewest bytes one key-value can take: key length (8), value type (4), a 1-byte value.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
// The fewest bytes one tensor info can take: name length (8), n_dims (4), type (4), offset (8).
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
constexpr uint32_t kMaxDims = 4;

uint64_t value_size(ValueType type) {
  switch (type) {
    case ValueType::u8: case ValueType::i8: case ValueType::boolean: return 1;
    case ValueType::u16: case ValueType::i16: return 2;
    case ValueType::u32: case ValueType::i32: case ValueType::f32: return 4;
    case ValueType::u64: case ValueType::i64: case ValueType::f64: return 8;
    default: return 0;  // string, array: variable
  }
}

bool known_value_type(int32_t raw) { return raw >= 0 && raw <= 12; }

// ggml type ids that no longer have a size in ggml's type table (ggml's own reader refuses them
// too), so an error can say what the file holds.
std::string_view ggml_type_name(int32_t raw) {
  switch (raw) {
    case 4: return "q4_2, removed from ggml";
    case 5: return "q4_3, removed from ggml";
    case 31: return "q4_0_4_4, removed from ggml";
    case 32: return "q4_0_4_8, removed from ggml";
    case 33: return "q4_0_8_8, removed from ggml";
    case 36: return "iq4_nl_4_4, removed from ggml";
    case 37: return "iq4_nl_4_8, removed from ggml";
    case 38: return "iq4_nl_8_8, removed from ggml";
    default: return "";
  }
}

std::string quoted(std::string_view s) {
  // Names in messages are shown as the file holds them, but bounded and without control bytes,
  // so a hostile name cannot flood or garble a terminal.
  std::string out = "'";
  size_t shown = 0;
  for (char c : s) {
    if (++shown > 120) {
      out += "...";
      break;
    }
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string num(uint64_t v) { return std::to_string(v); }

class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size, const std::string& file) : base_(base), size_(size), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& message) const { throw Error(file_ + ": " + message); }

  template <class Describe>
  void need(uint64_t nbytes, const Describe& describe) const {
    if (nbytes > remaining())
      fail("truncated: expected " + num(nbytes) + " bytes for " + describe() + " at offset " + num(pos_) +
           ", file has " + num(size_));
  }

  template <class T, class Describe>
  T read(const Describe& describe) {
    need(sizeof(T), describe);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // GGUF is little-endian, as is every host lmhead builds for
    pos_ += sizeof(T);
    return v;
  }

  template <class Describe>
  const uint8_t* take(uint64_t nbytes, const Describe& describe) {
    need(nbytes, describe);
    const uint8_t* p = base_ + pos_;
    pos_ += nbytes;
    return p;
  }

  // A GGUF string: u64 length then UTF-8 bytes.
  template <class Describe>
  std::string_view read_string(const Describe& describe) {
    uint64_t start = pos_;
    uint64_t length = read<uint64_t>([&] { return "the length of " + describe(); });
    const char* chars = reinterpret_cast<const char*>(take(length, describe));
    std::string_view text(chars, length);
    if (size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
      fail(describe() + " at offset " + num(start) + " is not valid UTF-8 (bad byte at offset " + num(start + 8 + bad) + ")");
    return text;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
};

std::string nth(const char* what, uint64_t i) { return std::string(what) + " #" + num(i); }

}  // namespace

size_t invalid_utf8_at(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t min;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; cp = c & 0x07; }
    else return i;  // a continuation byte or 0xF8..0xFF cannot start a character
    if (n - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string_view to_string(ValueType type) {
  switch (type) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "unknown";
}

// ---- Value --------------------------------------------------------------------------------------

bool Value::is_integer() const {
  switch (type) {
    case ValueType::u8: case ValueType::i8: case ValueType::u16: case ValueType::i16:
    case ValueType::u32: case ValueType::i32: case ValueType::u64: case ValueType::i64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const { return type == ValueType::f32 || type == ValueType::f64; }

namespace {
bool is_signed(ValueType t) {
  return t == ValueType::i8 || t == ValueType::i16 || t == ValueType::i32 || t == ValueType::i64;
}
std::string type_text(const Value& v) {
  if (v.type == ValueType::array) return "array of " + std::string(to_string(v.array_type));
  return std::string(to_string(v.type));
}
}  // namespace

double Value::as_number(std::string_view key) const {
  if (is_float()) return f;
  if (is_integer()) return is_signed(type) ? static_cast<double>(i) : static_cast<double>(u);
  throw Error("metadata key " + quoted(key) + " has type " + type_text(*this) + ", expected a number");
}

uint64_t Value::as_u64(std::string_view key) const {
  if (!is_integer())
    throw Error("metadata key " + quoted(key) + " has type " + type_text(*this) + ", expected an integer");
  if (is_signed(type)) {
    if (i < 0) throw Error("metadata key " + quoted(key) + " is negative (" + std::to_string(i) + ")");
    return static_cast<uint64_t>(i);
  }
  return u;
}

std::string_view Value::as_string(std::string_view key) const {
  if (type != ValueType::string)
    throw Error("metadata key " + quoted(key) + " has type " + type_text(*this) + ", expected a string");
  return s;
}

// ---- File ---------------------------------------------------------------------------------------

File::~File() = default;

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> file(new File());
  file->name_ = path;
  file->mapping_ = std::make_unique<io::MappedFile>(path);
  file->base_ = file->mapping_->bytes().data();
  file->size_ = file->mapping_->bytes().size();
  file->parse();
  return file;
}

std::unique_ptr<File> File::from_bytes(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<File> file(new File());
  file->name_ = std::move(name);
  file->base_ = bytes.data();
  file->size_ = bytes.size();
  file->parse();
  return file;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void File::parse() {
  Cursor in(base_, size_, name_);

  // ---- header
  const uint8_t* magic = in.take(4, [] { return std::string("the magic 'GGUF'"); });
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    static const char hex[] = "0123456789abcdef";
    std::string shown;
    for (int k = 0; k < 4; ++k) {
      shown += hex[magic[k] >> 4];
      shown += hex[magic[k] & 15];
      if (k < 3) shown += ' ';
    }
    in.fail("not a GGUF file: starts with bytes " + shown + ", expected 'GGUF' (47 47 55 46)");
  }
  version_ = in.read<uint32_t>([] { return std::string("the version"); });
  if (version_ == 1 || version_ == 2)
    in.fail("obsolete GGUF version " + num(version_) + ": lmhead reads version 3 (convert the file again with a current llama.cpp)");
  if (version_ != 3) {
    std::string hint;
    if ((version_ & 0xFFFF) == 0 && (version_ >> 24) <= 3) hint = " (a big-endian GGUF file? lmhead reads little-endian files)";
    in.fail("unsupported GGUF version " + num(version_) + hint + ": lmhead reads version 3");
  }
  int64_t tensor_count = in.read<int64_t>([] { return std::string("the tensor count"); });
  int64_t kv_count = in.read<int64_t>([] { return std::string("the key-value count"); });
  if (tensor_count < 0) in.fail("negative tensor count " + std::to_string(tensor_count));
  if (kv_count < 0) in.fail("negative key-value count " + std::to_string(kv_count));
  // Both counts are checked against what could possibly follow before anything is reserved, so a
  // count of 2^62 fails here instead of asking for exabytes.
  const uint64_t after_header = in.remaining();
  if (static_cast<uint64_t>(kv_count) > after_header / kMinKeyValueBytes)
    in.fail("key-value count " + num(kv_count) + " cannot fit: each key-value takes at least " +
            num(kMinKeyValueBytes) + " bytes and only " + num(after_header) + " bytes follow the header (truncated or corrupt file)");
  if (static_cast<uint64_t>(tensor_count) > after_header / kMinTensorInfoBytes)
    in.fail("tensor count " + num(tensor_count) + " cannot fit: each tensor info takes at least " +
            num(kMinTensorInfoBytes) + " bytes and only " + num(after_header) + " bytes follow the header (truncated or corrupt file)");
  if (static_cast<uint64_t>(kv_count) * kMinKeyValueBytes + static_cast<uint64_t>(tensor_count) * kMinTensorInfoBytes > after_header)
    in.fail(num(kv_count) + " key-values and " + num(tensor_count) + " tensor infos cannot fit in the " +
            num(after_header) + " bytes that follow the header (truncated or corrupt file)");

  // ---- key-values
  kvs_.reserve(static_cast<size_t>(kv_count));
  kv_index_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t k = 0; k < static_cast<uint64_t>(kv_count); ++k) {
    KeyValue kv;
    kv.key = in.read_string([&] { return "the key of " + nth("key-value", k); });
    std::string key_text = quoted(kv.key);
    auto [it, inserted] = kv_index_.emplace(kv.key, kvs_.size());
    if (!inserted) in.fail("duplicate key " + key_text + " (key-values #" + num(it->second) + " and #" + num(k) + ")");

    uint64_t type_offset = in.pos();
    int32_t raw_type = in.read<int32_t>([&] { return "the value type of key " + key_text; });
    if (!known_value_type(raw_type))
      in.fail("key " + key_text + ": unknown value type " + std::to_string(raw_type) + " at offset " + num(type_offset));
    Value& v = kv.value;
    v.type = static_cast<ValueType>(raw_type);
    auto what = [&] { return "the value of key " + key_text; };
    switch (v.type) {
      case ValueType::u8: v.u = in.read<uint8_t>(what); break;
      case ValueType::u16: v.u = in.read<uint16_t>(what); break;
      case ValueType::u32: v.u = in.read<uint32_t>(what); break;
      case ValueType::u64: v.u = in.read<uint64_t>(what); break;
      case ValueType::i8: v.i = in.read<int8_t>(what); break;
      case ValueType::i16: v.i = in.read<int16_t>(what); break;
      case ValueType::i32: v.i = in.read<int32_t>(what); break;
      case ValueType::i64: v.i = in.read<int64_t>(what); break;
      case ValueType::f32: v.f = in.read<float>(what); break;
      case ValueType::f64: v.f = in.read<double>(what); break;
      case ValueType::boolean: {
        uint64_t at = in.pos();
        v.u = in.read<uint8_t>(what);
        if (v.u > 1) in.fail("key " + key_text + ": bool value " + num(v.u) + " at offset " + num(at) + " is neither 0 nor 1");
        break;
      }
      case ValueType::string: v.s = in.read_string(what); break;
      case ValueType::array: {
        uint64_t elem_offset = in.pos();
        int32_t raw_elem = in.read<int32_t>([&] { return "the element type of array " + key_text; });
        if (raw_elem == static_cast<int32_t>(ValueType::array))
          in.fail("key " + key_text + ": arrays of arrays are not supported (element type 9 at offset " + num(elem_offset) + ")");
        if (!known_value_type(raw_elem))
          in.fail("key " + key_text + ": unknown array element type " + std::to_string(raw_elem) + " at offset " + num(elem_offset));
        v.array_type = static_cast<ValueType>(raw_elem);
        uint64_t count_offset = in.pos();
        v.array_count = in.read<uint64_t>([&] { return "the length of array " + key_text; });
        if (v.array_type == ValueType::string) {
          if (v.array_count > in.remaining() / 8)
            in.fail("key " + key_text + ": array of " + num(v.array_count) + " strings (length at offset " + num(count_offset) +
                    ") cannot fit: each takes at least 8 bytes and only " + num(in.remaining()) + " bytes remain (truncated or corrupt file)");
          v.strings.reserve(static_cast<size_t>(v.array_count));
          for (uint64_t e = 0; e < v.array_count; ++e)
            v.strings.push_back(in.read_string([&] { return "element " + num(e) + " of array " + key_text; }));
        } else {
          uint64_t elem_size = value_size(v.array_type);
          if (v.array_count > in.remaining() / elem_size)
            in.fail("truncated: array " + key_text + " of " + num(v.array_count) + " " + std::string(to_string(v.array_type)) +
                    " (length at offset " + num(count_offset) + ") needs " +
                    (v.array_count > std::numeric_limits<uint64_t>::max() / elem_size ? std::string("more than 2^64")
                                                                                        : num(v.array_count * elem_size)) +
                    " bytes, only " + num(in.remaining()) + " remain in a file of " + num(size_));
          uint64_t start = in.pos();
          v.array_data = in.take(v.array_count * elem_size, what);
          if (v.array_type == ValueType::boolean)
            for (uint64_t e = 0; e < v.array_count; ++e)
              if (v.array_data[e] > 1)
                in.fail("key " + key_text + ": bool element " + num(e) + " at offset " + num(start + e) + " is neither 0 nor 1");
        }
        break;
      }
    }
    kvs_.push_back(std::move(kv));
  }

  if (const Value* a = find("general.alignment")) {
    if (a->type != ValueType::u32)
      in.fail("general.alignment has type " + type_text(*a) + ", must be u32");
    if (a->u == 0) in.fail("general.alignment is 0, must be a nonzero power of two");
    if ((a->u & (a->u - 1)) != 0) in.fail("general.alignment " + num(a->u) + " is not a power of two");
    if (a->u > kMaxAlignment)
      in.fail("general.alignment " + num(a->u) + " is larger than lmhead's limit of " + num(kMaxAlignment) + " (1 MiB)");
    alignment_ = a->u;
  } else {
    alignment_ = kDefaultAlignment;
  }

  // ---- tensor infos
  if (static_cast<uint64_t>(tensor_count) > in.remaining() / kMinTensorInfoBytes)
    in.fail("tensor count " + num(tensor_count) + " cannot fit: each tensor info takes at least " +
            num(kMinTensorInfoBytes) + " bytes and only " + num(in.remaining()) + " bytes follow the key-values (truncated or corrupt file)");
  tensors_.reserve(static_cast<size_t>(tensor_count));
  tensor_index_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t t = 0; t < static_cast<uint64_t>(tensor_count); ++t) {
    TensorInfo info;
    info.name = in.read_string([&] { return "the name of " + nth("tensor", t); });
    std::string name = "tensor " + quoted(info.name);
    auto [it, inserted] = tensor_index_.emplace(info.name, tensors_.size());
    if (!inserted) in.fail("duplicate tensor name " + quoted(info.name) + " (tensors #" + num(it->second) + " and #" + num(t) + ")");

    info.n_dims = in.read<uint32_t>([&] { return "n_dims of " + name; });
    if (info.n_dims > kMaxDims) in.fail(name + ": n_dims " + num(info.n_dims) + " is more than " + num(kMaxDims));
    uint64_t elements = 1;
    for (uint32_t d = 0; d < info.n_dims; ++d) {
      uint64_t dim_offset = in.pos();
      int64_t dim = in.read<int64_t>([&] { return "dim " + num(d) + " of " + name; });
      if (dim < 0) in.fail(name + ": dim " + num(d) + " is negative (" + std::to_string(dim) + ") at offset " + num(dim_offset));
      if (dim == 0) in.fail(name + ": dim " + num(d) + " is zero at offset " + num(dim_offset));
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements) ||
          elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        in.fail(name + ": the product of its dims overflows (dim " + num(d) + " = " + std::to_string(dim) + ")");
      info.dims[d] = dim;
    }
    uint64_t type_offset = in.pos();
    int32_t raw_type = in.read<int32_t>([&] { return "the type of " + name; });
    const TensorTypeInfo* type = tensor_type_info(raw_type);
    if (!type) {
      std::string_view known = ggml_type_name(raw_type);
      in.fail(name + ": unsupported ggml type id " + std::to_string(raw_type) +
              (known.empty() ? std::string(" (unknown to ggml and lmhead)") : " (" + std::string(known) + ")") +
              " at offset " + num(type_offset));
    }
    info.type = static_cast<TensorType>(raw_type);
    uint64_t block_elems = static_cast<uint64_t>(type->block_elems);
    uint64_t dim0 = static_cast<uint64_t>(info.dims[0]);
    if (dim0 % block_elems != 0)
      in.fail(name + ": dim 0 (" + num(dim0) + ") is not a multiple of " + std::string(type->name) + "'s block of " +
              num(block_elems) + " elements");
    uint64_t rows = elements / dim0;
    if (__builtin_mul_overflow(dim0 / block_elems, static_cast<uint64_t>(type->block_bytes), &info.row_bytes) ||
        __builtin_mul_overflow(info.row_bytes, rows, &info.nbytes))
      in.fail(name + ": its size in bytes overflows 64 bits");
    uint64_t offset_at = in.pos();
    info.offset = in.read<uint64_t>([&] { return "the data offset of " + name; });
    if (info.offset % alignment_ != 0)
      in.fail(name + ": data offset " + num(info.offset) + " (at offset " + num(offset_at) + ") is not a multiple of the alignment " +
              num(alignment_));
    tensors_.push_back(info);
  }

  // ---- data section
  // pos <= size < 2^63 and alignment <= 2^20, so rounding up cannot wrap.
  data_offset_ = (in.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) return;  // a metadata-only file may end right after its key-values
  if (data_offset_ > size_)
    in.fail("truncated: expected the data section at offset " + num(data_offset_) + " (after the tensor infos, aligned to " +
            num(alignment_) + "), file has " + num(size_));
  const uint64_t data_bytes = size_ - data_offset_;
  for (TensorInfo& info : tensors_) {
    if (info.offset > data_bytes)
      in.fail("tensor " + quoted(info.name) + ": data offset " + num(info.offset) + " is past the end of the file (" +
              num(size_) + " bytes, data section starting at " + num(data_offset_) + ")");
    if (info.nbytes > data_bytes - info.offset) {
      uint64_t end;  // data_offset + offset <= size here, so only adding nbytes can wrap
      std::string end_text = __builtin_add_overflow(data_offset_ + info.offset, info.nbytes, &end) ? "beyond 2^64" : num(end);
      in.fail("truncated: tensor " + quoted(info.name) + " needs " + num(info.nbytes) + " bytes at file offset " +
              num(data_offset_ + info.offset) + " (ending at " + end_text + "), file has " + num(size_));
    }
    info.data = base_ + data_offset_ + info.offset;
  }
  std::vector<size_t> by_offset(tensors_.size());
  std::iota(by_offset.begin(), by_offset.end(), size_t(0));
  std::sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const TensorInfo& prev = tensors_[by_offset[k - 1]];
    const TensorInfo& cur = tensors_[by_offset[k]];
    if (prev.offset + prev.nbytes > cur.offset)
      in.fail("tensors " + quoted(prev.name) + " (data offsets " + num(prev.offset) + ".." + num(prev.offset + prev.nbytes) + ") and " +
              quoted(cur.name) + " (" + num(cur.offset) + ".." + num(cur.offset + cur.nbytes) + ") overlap");
  }
}

}  // namespace lmhead::gguf
