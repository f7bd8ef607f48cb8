// Q5_K head x Q8_K activations with AVX2, in the float order of numerics.md §5 (the scalar
// reference is quant/vec_dot.cpp's dot_q5_K_q8_K). Integer lane sums are exact in any order; the
// float operations are exactly the reference's, per super-block in order:
//   dq = y.d * f32(d); dm = (-y.d) * f32(dmin)
//   summs = fma(dm, float(imin), summs); acc[k] = fma(dq, float(isum[k]), acc[k])
// and the final (h0 + h2) + (h1 + h3) + summs.
//
// One token: each super-block is unpacked into registers and used at once. Several tokens: the
// batch path of kquant_avx2.hpp (each row unpacked once into L1, every token streams over it).
#include <immintrin.h>

#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

constexpr int kBlockBytes = 176;

// One token's contribution of one super-block: the exact lane sums isum[k] (the 8 int32 lanes).
inline __m256i lane_sums(const __m256i q[8], const __m256i sc_pairs, const uint8_t* q8) {
  __m256i isum = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * j));
    const __m256i p16 = _mm256_maddubs_epi16(q[j], a);
    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, broadcast_pair(sc_pairs, j)));
    keep_in_register(isum);
  }
  return isum;
}

// One row against one token, everything in registers: the single-token path, where the weights
// stream from DRAM and the unpacked-row scratch of the batch path would only add stores.
float dot_row(const uint8_t* row, const uint8_t* act, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  __m128 summs = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    const uint8_t* y = act + i * kQ8KBytes;
    const float yd = q8k_d(y);
    const float dq = yd * f16_at(x);
    const float dm = -yd * f16_at(x + 2);
    const __m128i sm = k_scales_mins(x + 4);
    const int32_t imin = mins_dot_bsums(sm, y);
    summs = _mm_fmadd_ss(_mm_set_ss(dm), _mm_set_ss(float(imin)), summs);
    __m256i q[8];
    unpack_levels_q45<KQuant::q5_K>(x, q);
    const __m256i isum = lane_sums(q, scale_pairs(sm), y + kQ8KQsAt);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dq), _mm256_cvtepi32_ps(isum), acc);
  }
  return reduce_lanes(acc) + _mm_cvtss_f32(summs);
}

}  // namespace

void q5_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  if (acts.tokens == 1) {
    const int64_t nb = tile.hidden / 256;
    for (int64_t r = 0; r < tile.count; ++r) out.data[r] = dot_row(tile.rows + r * tile.row_bytes, acts.data, nb);
    return;
  }
  kquant_tile<KQuant::q5_K>(tile, acts, out, scratch);
}

}  // namespace lmhead::cpu::avx2
