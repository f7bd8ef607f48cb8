#pragma once
// sample::exp over an array, for the sampler's weight pass: the AVX2 version computes each lane
// with exactly the scalar function's IEEE operations (same order, no FMA), so the bits do not
// depend on which one runs (SampleExpBatch.* compare them).
#include <cstdint>

namespace lmhead::sample {

// y[i] = sample::exp(x[i]) for i < n, except that where x[i] < kZeroWeightBelow (weight_math.hpp)
// y[i] may be 0 instead: both give integer weight 0, and the exp is skipped.
void exp_batch(const double* x, double* y, int64_t n);
void exp_batch_scalar(const double* x, double* y, int64_t n);

namespace avx2 {
// Requires AVX2; exp_batch dispatches to it when the CPU has it.
void exp_batch(const double* x, double* y, int64_t n);
}  // namespace avx2

}  // namespace lmhead::sample
