#pragma once
// Random but valid head weights for tests and benchmarks: any byte pattern with finite d / dmin is a
// valid K-quant or Q8_0 block (numerics.md §3), so blocks are random bytes with their f16 factors
// set to small finite values; float heads hold small random values. Deterministic for a seed.
#include <cstdint>
#include <vector>

#include "lmhead/tensor_type.hpp"

namespace lmhead::cpu {

// Bytes of one row of `hidden` elements in `type` (hidden must be a whole number of blocks).
uint64_t row_bytes_of(TensorType type, int64_t hidden);

// Fills `rows` rows of `type` at `dst` (rows * row_bytes_of(type, hidden) bytes).
void fill_synthetic_rows(TensorType type, int64_t rows, int64_t hidden, uint64_t seed, uint8_t* dst);

}  // namespace lmhead::cpu
