#pragma once
// The sampler's dense passes over a range of ids (numerics.md §9): the scaled logits and their
// maximum, and the integer weights with their rank buckets. Each has a portable version and an
// AVX2 one that performs, lane by lane, the portable version's IEEE operations in the same order
// (no FMA: the build's -ffp-contract=off keeps the AVX2 file's multiplies and adds apart although
// it is compiled with -mfma), so the bits never depend on the CPU; SampleRow.* compare them.
#include <cstdint>

namespace lmhead::sample {

// z[i] = scaled_logit(x[i], 0, t) for i < n (an id without a bias has bias 0). Returns the largest
// finite z[i] (-inf when there is none).
double scaled_logits(const float* x, int64_t n, double t, double* z);
// The largest finite z[i], -inf when none.
double max_finite(const double* z, int64_t n);
// For i < n: w[i] = integer_weight(exp(z[i] - m)) when z[i] is finite and passes min-p, else 0;
// when bucket is not null, bucket[i] = rank_bucket(m - z[i]) wherever w[i] != 0 (elsewhere some
// value below kRankBuckets). Returns the sum of the w[i]. Distances below kZeroWeightBelow skip
// the exp (their weight is 0 either way).
uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket);
// Top-p's split of a row at the boundary bucket: for i < n, w[i] stays where rank[i] < bucket and
// becomes 0 elsewhere; the ids with rank[i] == bucket and w[i] != 0 (before) are the candidates,
// written as offsets to found[] with their weights to found_w[] (room for n each). Returns the sum
// of the w[i] that stay; *n_found gets the count.
uint64_t split_at_bucket(uint64_t* w, const uint16_t* rank, int64_t n, int bucket, int32_t* found, uint64_t* found_w,
                         int* n_found);
// y[i] = sample::exp(x[i]), except that where x[i] < kZeroWeightBelow, y[i] may be 0 instead.
void exp_batch(const double* x, double* y, int64_t n);

namespace portable {
uint64_t split_at_bucket(uint64_t* w, const uint16_t* rank, int64_t n, int bucket, int32_t* found, uint64_t* found_w,
                         int* n_found);
double scaled_logits(const float* x, int64_t n, double t, double* z);
double max_finite(const double* z, int64_t n);
uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket);
void exp_batch(const double* x, double* y, int64_t n);
}  // namespace portable

namespace avx2 {  // callers check cpu::cpu_supports(Isa::avx2) first
uint64_t split_at_bucket(uint64_t* w, const uint16_t* rank, int64_t n, int bucket, int32_t* found, uint64_t* found_w,
                         int* n_found);
double scaled_logits(const float* x, int64_t n, double t, double* z);
double max_finite(const double* z, int64_t n);
uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket);
void exp_batch(const double* x, double* y, int64_t n);
}  // namespace avx2

namespace avx512 {  // callers check cpu::cpu_supports(Isa::avx512) first; the other passes are avx2's
double scaled_logits(const float* x, int64_t n, double t, double* z);
uint64_t row_weights(const double* z, int64_t n, double m, double min_p, uint64_t* w, uint16_t* bucket);
}  // namespace avx512

}  // namespace lmhead::sample
