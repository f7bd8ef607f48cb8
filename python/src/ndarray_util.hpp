#pragma once
// What the module's functions share about the arrays they are given: a dtype's name for messages,
// and rows read in place when packed, gathered once when strided.
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

// A DLPack dtype as the messages name it ("float32", "int64", "bfloat16", ...).
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

// An array [W] (one row) or [T, W] whose rows are C-contiguous and adjacent.
inline bool rows_packed(const nanobind::ndarray<nanobind::ro>& a, int64_t T, int64_t W) {
  return a.ndim() == 1 ? (W <= 1 || a.stride(0) == 1) : ((W <= 1 || a.stride(1) == 1) && (T <= 1 || a.stride(0) == W));
}

// The rows in place when packed; otherwise gathered into `copy` (a slice, a transpose, a negative
// stride), which the caller keeps alive while it reads them.
template <class E>
const E* packed_or_gathered(const nanobind::ndarray<nanobind::ro>& a, int64_t T, int64_t W, std::vector<E>& copy) {
  const E* data = static_cast<const E*>(a.data());
  if (rows_packed(a, T, W)) return data;
  const int64_t s0 = a.ndim() == 2 ? a.stride(0) : 0, s1 = a.stride(a.ndim() - 1);
  copy.resize(size_t(T) * size_t(W));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < W; ++i) copy[size_t(t * W + i)] = data[t * s0 + i * s1];
  return copy.data();
}
