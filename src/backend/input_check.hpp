#pragma once
// Hidden states must be finite: a NaN or infinity is refused with its token and index named. The
// engine checks before a backend runs; a backend that copies the values anyway (the multi-GPU
// head: each shard's thread copies its share into the shared input) checks while it copies
// instead, and says so (Backend::checks_finite_input), so the values are read once.
#include <cstddef>
#include <cstdint>

#include "lmhead/error.hpp"

namespace lmhead {

// Index of the first NaN or infinity in x[0, n), or n.
size_t first_non_finite(const float* x, size_t n);

// Copies src[0, n) to dst while checking; returns the index of the first non-finite value (n:
// none). What follows a non-finite value may or may not have been copied.
size_t copy_checking_finite(float* dst, const float* src, size_t n);

// The error for hidden[index] (hidden_size values per token).
InputError non_finite_hidden_error(const float* hidden, size_t index, int64_t hidden_size);

}  // namespace lmhead
