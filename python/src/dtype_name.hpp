#pragma once
// A DLPack dtype as the module's messages name it ("float32", "int64", "bfloat16", ...).
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

inline std::string describe_dtype(const nanobind::dlpack::dtype& d) {
  using code = nanobind::dlpack::dtype_code;
  const char* kind = d.code == uint8_t(code::Float)    ? "float"
                     : d.code == uint8_t(code::Int)    ? "int"
                     : d.code == uint8_t(code::UInt)   ? "uint"
                     : d.code == uint8_t(code::Bfloat) ? "bfloat"
                     : d.code == uint8_t(code::Bool)   ? "bool"
                                                       : "other";
  return std::string(kind) + std::to_string(d.bits);
}
