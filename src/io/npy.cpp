// .npy format (NumPy's NEP 1): "\x93NUMPY", major and minor version bytes, a little-endian header
// length (u16 for version 1, u32 for 2 and 3), then a Python dict literal with 'descr',
// 'fortran_order' and 'shape', padded with spaces and ended by '\n'; the raw array data follows.
#include "io/npy.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <string_view>

#include "io/atomic_file.hpp"
#include "io/mapped_file.hpp"
#include "lmhead/error.hpp"

namespace lmhead::io {
namespace {

static_assert(std::endian::native == std::endian::little, "'<f4' data is copied as host floats");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

std::string num(uint64_t v) { return std::to_string(v); }

// What a header value looks like to a user: bounded, control bytes escaped.
std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  if (s.size() > 80) out += "...";
  return out;
}

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<uint64_t> shape;
};

// A parser for exactly the dict literal NumPy writes (any key order, either quote style, optional
// trailing commas, Python 2's "L" suffix on ints); anything else is an error naming the position.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (seen_descr) fail("'descr' appears twice");
        seen_descr = true;
        h.descr = parse_string();
      } else if (key == "fortran_order") {
        if (seen_order) fail("'fortran_order' appears twice");
        seen_order = true;
        h.fortran_order = parse_bool();
      } else if (key == "shape") {
        if (seen_shape) fail("'shape' appears twice");
        seen_shape = true;
        h.shape = parse_shape();
      } else {
        fail("unexpected key '" + shown(key) + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        break;
      }
      fail("expected ',' or '}'");
    }
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the dict");
    if (!seen_descr) fail("no 'descr' (dtype)");
    if (!seen_order) fail("no 'fortran_order'");
    if (!seen_shape) fail("no 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(name_ + ": malformed .npy header: " + what + " at header byte " + num(pos_) + " in \"" + shown(text_) + "\"");
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parse_string() {
    char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    ++pos_;
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  bool parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  std::vector<uint64_t> parse_shape() {
    std::vector<uint64_t> dims;
    expect('(');
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        return dims;
      }
      if (dims.size() == 32) fail("more than 32 dims");  // NumPy's own limit; keeps this vector tiny
      if (peek() < '0' || peek() > '9') fail("expected a non-negative integer dim");
      uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        uint64_t digit = static_cast<uint64_t>(peek() - '0');
        if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10) fail("dim too large");
        v = v * 10 + digit;
        ++pos_;
      }
      if (peek() == 'L') ++pos_;
      dims.push_back(v);
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail("expected ',' or ')' in shape");
    }
  }

  std::string_view text_;
  const std::string& name_;
  size_t pos_ = 0;
};

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + num(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

HiddenStates parse_npy_f32(std::span<const uint8_t> bytes, const std::string& name) {
  auto fail = [&](const std::string& what) -> void { throw Error(name + ": " + what); };
  const uint64_t size = bytes.size();
  if (size > 0 && std::memcmp(bytes.data(), kMagic, std::min<uint64_t>(size, kMagicBytes)) != 0)
    fail("not a .npy file (it does not start with \\x93NUMPY)");
  if (size < kMagicBytes + 2)
    fail("truncated: expected 8 bytes for the .npy magic and version, file has " + num(size));
  const uint8_t major = bytes[6];
  const uint8_t minor = bytes[7];
  if (major < 1 || major > 3)
    fail("unsupported .npy format version " + num(major) + "." + num(minor) + " (lmhead reads 1.0, 2.0 and 3.0)");
  const uint64_t length_bytes = major == 1 ? 2 : 4;
  const uint64_t header_start = kMagicBytes + 2 + length_bytes;
  if (size < header_start)
    fail("truncated: expected " + num(length_bytes) + " bytes for the header length at offset 8, file has " + num(size));
  uint64_t header_length = bytes[8] | (uint64_t(bytes[9]) << 8);
  if (major > 1) header_length |= (uint64_t(bytes[10]) << 16) | (uint64_t(bytes[11]) << 24);
  if (header_length > size - header_start)
    fail("truncated or lying header: the header length " + num(header_length) + " at offset 8 runs past the end of the file (" +
         num(size) + " bytes)");
  std::string_view header_text(reinterpret_cast<const char*>(bytes.data() + header_start), header_length);
  Header h = HeaderParser(header_text, name).parse();

  if (h.descr != "<f4") {
    std::string hint = h.descr == ">f4" ? " (big-endian float32)"
                       : h.descr == "<f8" ? " (float64)"
                       : h.descr == "<f2" ? " (float16)"
                                          : "";
    fail("dtype '" + shown(h.descr) + "'" + hint + ", expected '<f4' (little-endian float32): save with arr.astype('<f4')");
  }
  if (h.fortran_order)
    fail("fortran_order is True: lmhead reads C-order arrays (save np.ascontiguousarray(arr))");
  if (h.shape.size() != 1 && h.shape.size() != 2)
    fail("shape " + shape_text(h.shape) + " has rank " + num(h.shape.size()) + ", expected [H] or [T, H]");
  for (uint64_t d : h.shape)
    if (d == 0) fail("shape " + shape_text(h.shape) + " is empty");

  const uint64_t data_start = header_start + header_length;
  const uint64_t data_bytes = size - data_start;
  // Compare element counts against what the file holds before multiplying further, so neither the
  // product nor the allocation can be driven by the header alone.
  const uint64_t present = data_bytes / 4;
  uint64_t elements = 1;
  for (uint64_t d : h.shape)
    if (__builtin_mul_overflow(elements, d, &elements))
      fail("shape " + shape_text(h.shape) + " has more elements than fit in 64 bits (lying header)");
  if (elements > present)
    fail("truncated: shape " + shape_text(h.shape) + " needs " +
         (elements > std::numeric_limits<uint64_t>::max() / 4 ? std::string("more than 2^64") : num(elements * 4)) +
         " bytes of data at offset " + num(data_start) + ", only " + num(data_bytes) + " follow the header (file has " +
         num(size) + ")");
  if (elements * 4 != data_bytes)
    fail("data size mismatch: shape " + shape_text(h.shape) + " needs " + num(elements * 4) + " bytes of data at offset " +
         num(data_start) + ", but " + num(data_bytes) + " bytes follow the header");

  HiddenStates out;
  out.tokens = h.shape.size() == 2 ? static_cast<int64_t>(h.shape[0]) : 1;
  out.hidden = static_cast<int64_t>(h.shape.back());
  out.values.resize(elements);
  std::memcpy(out.values.data(), bytes.data() + data_start, elements * 4);
  return out;
}

namespace {

// The preamble and header of an f32 .npy of `shape`; returns the element count through `elements`.
std::vector<uint8_t> npy_header(const std::vector<int64_t>& shape, uint64_t& elements) {
  if (shape.empty() || shape.size() > 2) throw Error(".npy writer: shape must be [N] or [T, N]");
  elements = 1;
  std::vector<uint64_t> dims;
  for (int64_t d : shape) {
    if (d <= 0) throw Error(".npy writer: dims must be positive, got " + std::to_string(d));
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements) || elements > (uint64_t(1) << 60))
      throw Error(".npy writer: array too large");
    dims.push_back(static_cast<uint64_t>(d));
  }
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(dims) + ", }";
  // NumPy pads so the data starts at a multiple of 64 bytes, with the header ending in '\n'.
  size_t total = kMagicBytes + 2 + 2 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string preamble(kMagic, kMagicBytes);
  preamble += '\x01';  // format 1.0: the header of a rank-2 shape is far below its 64 KiB limit
  preamble += '\x00';
  preamble += static_cast<char>(header.size() & 0xFF);
  preamble += static_cast<char>(header.size() >> 8);
  preamble += header;
  std::vector<uint8_t> out(preamble.begin(), preamble.end());
  return out;
}

}  // namespace

std::vector<uint8_t> encode_npy_f32(const std::vector<int64_t>& shape, const float* data) {
  uint64_t elements = 0;
  std::vector<uint8_t> out = npy_header(shape, elements);
  const uint8_t* raw = reinterpret_cast<const uint8_t*>(data);
  out.insert(out.end(), raw, raw + elements * 4);
  return out;
}

}  // namespace lmhead::io

namespace lmhead {

HiddenStates read_npy_f32(const std::string& path) {
  io::MappedFile file(path);
  return io::parse_npy_f32(file.bytes(), path);
}

void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  uint64_t elements = 0;
  std::vector<uint8_t> header = io::npy_header(shape, elements);
  io::write_file_atomically(path, [&](io::AtomicFile& f) {
    f.write(header);
    f.write(data, elements * 4);
  });
}

}  // namespace lmhead
