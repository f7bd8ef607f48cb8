// libFuzzer target: the GGUF reader (header, metadata, tensor table, tensor views) on arbitrary
// bytes. Every view a successfully parsed file exposes is read end to end and every typed accessor
// a caller may use on a metadata value is called, so a view that escapes the input or an accessor
// that trusts a wrong type shows up under ASan/UBSan.
#include <cmath>
#include <string>

#include "fuzz_common.hpp"
#include "gguf/gguf.hpp"
#include "lmhead/error.hpp"

using namespace lmhead;

namespace {

uint64_t exercise_value(const gguf::KeyValue& kv) {
  const gguf::Value& v = kv.value;
  uint64_t sum = kv.key.size();
  try { double d = v.as_number(kv.key); sum += std::isfinite(d) ? 1 : 2; } catch (const Error&) {}
  try { sum += v.as_u64(kv.key); } catch (const Error&) {}
  try { sum += v.as_string(kv.key).size(); } catch (const Error&) {}
  for (std::string_view s : v.strings) sum += fuzzing::touch(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  if (v.type == gguf::ValueType::string)
    sum += fuzzing::touch(reinterpret_cast<const uint8_t*>(v.s.data()), v.s.size());
  if (v.array_data && v.array_count > 0) {
    // Element sizes of the numeric array types; the reader guarantees count * size bytes are present.
    uint64_t elem = 0;
    switch (v.array_type) {
      case gguf::ValueType::u8: case gguf::ValueType::i8: case gguf::ValueType::boolean: elem = 1; break;
      case gguf::ValueType::u16: case gguf::ValueType::i16: elem = 2; break;
      case gguf::ValueType::u32: case gguf::ValueType::i32: case gguf::ValueType::f32: elem = 4; break;
      case gguf::ValueType::u64: case gguf::ValueType::i64: case gguf::ValueType::f64: elem = 8; break;
      default: break;
    }
    sum += fuzzing::touch(v.array_data, v.array_count * elem);
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = gguf::File::from_bytes({data, size}, "fuzz.gguf");
    uint64_t sum = file->version() + file->alignment() + file->data_offset();
    for (const gguf::KeyValue& kv : file->metadata()) {
      sum += exercise_value(kv);
      if (file->find(kv.key) == nullptr) __builtin_trap();  // every key read must be findable
    }
    for (const gguf::TensorInfo& t : file->tensors()) {
      if (file->find_tensor(t.name) != &t) __builtin_trap();
      if (t.nbytes == 0 || t.data == nullptr || t.elements() <= 0) __builtin_trap();
      if (t.data < data + file->data_offset() || t.data + t.nbytes > data + size) __builtin_trap();
      sum += fuzzing::touch(t.data, t.nbytes) + static_cast<uint64_t>(t.elements()) + t.row_bytes;
      const TensorTypeInfo* info = tensor_type_info(t.type);
      if (!info || t.dims[0] % info->block_elems != 0) __builtin_trap();
    }
    fuzzing::consume(sum);
  } catch (const Error&) {
  }
  return 0;
}
