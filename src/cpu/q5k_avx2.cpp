// Q5_K head x Q8_K activations with AVX2, in the float order of numerics.md §5 (the scalar
// reference is quant/vec_dot.cpp's dot_q5_K_q8_K). Integer lane sums are exact in any order; the
// float operations are exactly the reference's, per super-block in order:
//   dq = y.d * f32(d); dm = (-y.d) * f32(dmin)
//   summs = fma(dm, float(imin), summs); acc[k] = fma(dq, float(isum[k]), acc[k])
// and the final (h0 + h2) + (h1 + h3) + summs.
//
// One token: each super-block is unpacked into registers and used at once. Several tokens: each row
// is unpacked once into a small scratch (5-bit levels and per-sub-block scale vectors, 14 KB at
// hidden 6,656, resident in L1) and every token then streams over it, four tokens at a time, so the
// weights leave DRAM once per call whatever the number of tokens.
#include <immintrin.h>

#include <cstring>

#include "cpu/kernels.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

// Byte offsets inside the 176-byte block (numerics.md §3).
constexpr int kBlockBytes = 176, kScalesAt = 4, kQhAt = 16, kQsAt = 48;

// Moves bit J of every byte of qh to bit 4 (0x10) and clears the rest. A 16-bit shift by at most 4
// to the left or 3 to the right never carries a bit into another byte's bit 4.
template <int J>
inline __m256i high_bit(__m256i qh) {
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  if constexpr (J <= 4)
    return _mm256_and_si256(_mm256_slli_epi16(qh, 4 - J), bit4);
  else
    return _mm256_and_si256(_mm256_srli_epi16(qh, J - 4), bit4);
}

// The eight 5-bit level vectors of one super-block (sub-block j = 32 elements), in element order.
inline void unpack_levels(const uint8_t* block, __m256i q[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kQhAt));
  const uint8_t* qs = block + kQsAt;
  const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 0));
  const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32));
  const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64));
  const __m256i b3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 96));
  q[0] = _mm256_or_si256(_mm256_and_si256(b0, low4), high_bit<0>(qh));
  q[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b0, 4), low4), high_bit<1>(qh));
  q[2] = _mm256_or_si256(_mm256_and_si256(b1, low4), high_bit<2>(qh));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), low4), high_bit<3>(qh));
  q[4] = _mm256_or_si256(_mm256_and_si256(b2, low4), high_bit<4>(qh));
  q[5] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), low4), high_bit<5>(qh));
  q[6] = _mm256_or_si256(_mm256_and_si256(b3, low4), high_bit<6>(qh));
  q[7] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b3, 4), low4), high_bit<7>(qh));
}

// Per-super-block factors of one row, unpacked once for every token (batch path).
struct alignas(32) UnpackedBlock {
  __m256i levels[8];   // 5-bit levels, sub-block j
  __m256i scales[8];   // sc[j] in all sixteen 16-bit lanes
  __m128i mins;        // m[0..7] as int16
  float d, dmin;
  float pad[2];
};

// One token's contribution of one super-block: the exact lane sums isum[k] (the 8 int32 lanes).
inline __m256i lane_sums(const __m256i q[8], const __m256i sc_pairs, const uint8_t* q8) {
  __m256i isum = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * j));
    const __m256i p16 = _mm256_maddubs_epi16(q[j], a);
    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, broadcast_pair(sc_pairs, j)));
  }
  return isum;
}

// One row against one token, everything in registers.
float dot_row(const uint8_t* row, const uint8_t* act, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  __m128 summs = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    const uint8_t* y = act + i * kQ8KBytes;
    const float yd = q8k_d(y);
    const float dq = yd * f16_at(x);
    const float dm = -yd * f16_at(x + 2);
    const __m128i sm = k_scales_mins(x + kScalesAt);
    const int32_t imin = mins_dot_bsums(sm, y);
    summs = _mm_fmadd_ss(_mm_set_ss(dm), _mm_set_ss(float(imin)), summs);
    __m256i q[8];
    unpack_levels(x, q);
    const __m256i isum = lane_sums(q, scale_pairs(sm), y + kQ8KQsAt);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dq), _mm256_cvtepi32_ps(isum), acc);
  }
  return reduce_lanes(acc) + _mm_cvtss_f32(summs);
}

void unpack_row(const uint8_t* row, int64_t nb, UnpackedBlock* u) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    unpack_levels(x, u[i].levels);
    const __m128i sm = k_scales_mins(x + kScalesAt);
    const __m256i pairs = scale_pairs(sm);
    for (int j = 0; j < 8; ++j) u[i].scales[j] = broadcast_pair(pairs, j);
    u[i].mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    u[i].d = f16_at(x);
    u[i].dmin = f16_at(x + 2);
  }
}

// G tokens (1..4) against one unpacked row.
template <int G>
void dot_unpacked(const UnpackedBlock* u, int64_t nb, const uint8_t* const* act, float* result) {
  __m256 acc[G];
  __m128 summs[G];
  for (int g = 0; g < G; ++g) { acc[g] = _mm256_setzero_ps(); summs[g] = _mm_setzero_ps(); }
  for (int64_t i = 0; i < nb; ++i) {
    __m256i isum[G];
    for (int g = 0; g < G; ++g) isum[g] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i w = _mm256_load_si256(&u[i].levels[j]);
      const __m256i s = _mm256_load_si256(&u[i].scales[j]);
      for (int g = 0; g < G; ++g) {
        const __m256i a = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(act[g] + i * kQ8KBytes + kQ8KQsAt + 32 * j));
        isum[g] = _mm256_add_epi32(isum[g], _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), s));
      }
    }
    for (int g = 0; g < G; ++g) {
      const uint8_t* y = act[g] + i * kQ8KBytes;
      const float yd = q8k_d(y);
      const float dq = yd * u[i].d;
      const float dm = -yd * u[i].dmin;
      const int32_t imin = hsum_epi32(_mm_madd_epi16(u[i].mins, bsum_pairs(y)));
      summs[g] = _mm_fmadd_ss(_mm_set_ss(dm), _mm_set_ss(float(imin)), summs[g]);
      acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(dq), _mm256_cvtepi32_ps(isum[g]), acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) result[g] = reduce_lanes(acc[g]) + _mm_cvtss_f32(summs[g]);
}

}  // namespace

void q5_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  if (acts.tokens == 1) {
    for (int64_t r = 0; r < tile.count; ++r)
      out.data[r] = dot_row(tile.rows + r * tile.row_bytes, acts.data, nb);
    return;
  }
  UnpackedBlock* u = static_cast<UnpackedBlock*>(scratch);
  for (int64_t r = 0; r < tile.count; ++r) {
    unpack_row(tile.rows + r * tile.row_bytes, nb, u);
    for (int t0 = 0; t0 < acts.tokens; t0 += 4) {
      const uint8_t* act[4];
      const int g = acts.tokens - t0 < 4 ? acts.tokens - t0 : 4;
      for (int k = 0; k < g; ++k) act[k] = acts.data + size_t(t0 + k) * acts.stride;
      float result[4];
      switch (g) {
        case 1: dot_unpacked<1>(u, nb, act, result); break;
        case 2: dot_unpacked<2>(u, nb, act, result); break;
        case 3: dot_unpacked<3>(u, nb, act, result); break;
        default: dot_unpacked<4>(u, nb, act, result); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(t0 + k) * out.stride + r] = result[k];
    }
  }
}

}  // namespace lmhead::cpu::avx2
