#pragma once
// Random but valid head weights for tests and benchmarks, in memory: any byte pattern with finite
// d / dmin is a valid K-quant or Q8_0 block (numerics.md §3), so blocks are random bytes with their
// f16 factors set to small finite values; float heads hold small random values. Deterministic for a
// seed. Not in the library: no plan computes with it (lmhead_synth, linked by the tool, the tests
// and the benchmarks).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lmhead/tensor_type.hpp"

namespace lmhead::synth {

// Bytes of one row of `hidden` elements in `type` (hidden must be a whole number of blocks).
uint64_t row_bytes_of(TensorType type, int64_t hidden);

// Fills `rows` rows of `type` at `dst` (rows * row_bytes_of(type, hidden) bytes).
void fill_synthetic_rows(TensorType type, int64_t rows, int64_t hidden, uint64_t seed, uint8_t* dst);

// n values of N(0, stddev) from std::mt19937(seed) and the standard library's normal distribution:
// the hidden states of the CPU backend tests, the C API tests and the CPU head benchmark.
std::vector<float> normal_floats(size_t n, uint32_t seed, float stddev = 1.0f);

}  // namespace lmhead::synth
