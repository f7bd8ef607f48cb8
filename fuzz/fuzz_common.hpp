#pragma once
// What every lmhead fuzz target shares. A target feeds bytes to one parser of untrusted input and
// lets lmhead::Error pass: a clear error is the correct answer to a hostile file. Anything else
// (a sanitizer report, a signal, an exception of another type such as std::bad_alloc or
// std::length_error, which would mean an allocation was sized by an unchecked count) escapes to
// libFuzzer and is reported as a crash.
#include <cstddef>
#include <cstdint>
#include <span>

namespace lmhead::fuzzing {

// Reads every byte of a view the parser handed out, so AddressSanitizer sees any view that points
// outside the input. The sum is returned and consumed so the reads cannot be optimized away.
inline uint64_t touch(const uint8_t* data, uint64_t nbytes) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < nbytes; ++i) sum += data[i];
  return sum;
}

inline void consume(uint64_t value) {
  static volatile uint64_t sink;
  sink = sink + value;
}

}  // namespace lmhead::fuzzing
