#pragma once
// Benchmark figures as `lmhead bench` measures and prints them: the read ceiling a head's time is set
// against, measured in the same run (the machine's bandwidth moves between runs), and byte counts
// with thousands separators.
//
// In the static library (lmhead::lmhead_static), like compare.hpp; not among liblmhead.so's exported
// symbols, and not installed.
#include <cstdint>
#include <string>

namespace lmhead {

// GB/s (1e9 B/s) of the best of a few passes. CPU: an AVX2 (or scalar) read of `bytes` from DRAM
// with `threads` threads. CUDA: a read-only stream of `bytes` on the device (throws Error without a
// usable GPU).
double measure_cpu_read_ceiling_gbps(uint64_t bytes, int threads);
double measure_cuda_read_ceiling_gbps(uint64_t bytes);

// "924,571,648".
std::string with_commas(uint64_t n);

}  // namespace lmhead
