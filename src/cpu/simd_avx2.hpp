#pragma once
// Helpers shared by the *_avx2.cpp kernels. Include ONLY from files compiled with -mavx2 -mfma
// -mf16c: everything here has internal linkage so no AVX2 copy can leak into portable code.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace lmhead::cpu::avx2 {
namespace {

// Pins a vector value in a register at this point of the program. GCC reassociates chains of
// integer vector adds into trees, which for the batch kernels means computing every product first
// and spilling most of them; a pin after each add keeps the chain a chain.
template <class V>
inline void keep_in_register(V& v) {
  asm("" : "+x"(v));
}

// The K-quant kernels prefetch the weights a fixed distance ahead (kernels.hpp's
// weight_prefetch_ahead): the hardware prefetchers stop at 4 KiB page boundaries, and a page's first
// line then arrives late on every page (in a VM each page also costs a nested page walk).

// Asks for bytes [p, p + n) to be brought towards the core (into L2 and beyond: the T1 hint).
// Prefetches never fault, so running past the end of the head's weights is harmless.
inline void prefetch_bytes(const uint8_t* p, uint64_t n) {
  for (uint64_t off = 0; off < n; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
}

// Q8_K activation block (numerics.md §3): d f32 @0, qs[256] @4, bsums[16] int16 @260. Read through
// byte offsets because a token's blocks may sit at any address.
constexpr int kQ8KBytes = 292, kQ8KQsAt = 4, kQ8KBsumsAt = 260;

inline float q8k_d(const uint8_t* block) {
  float d;
  std::memcpy(&d, block, 4);
  return d;
}

// f16 at p -> f32, exact (F16C converts subnormals, infinities and NaNs exactly).
inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 6-bit scales and mins of a Q4_K / Q5_K super-block (numerics.md §3) as 16 bytes:
// sc[0..7] then m[0..7]. Four 32-bit words do in a few operations what k_scale_min does per j.
inline __m128i k_scales_mins(const uint8_t* packed) {
  uint32_t w[4];
  std::memcpy(w, packed, 12);
  constexpr uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint32_t m_hi = ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4);  // m[4..7]
  const uint32_t m_lo = w[1] & low6;                                         // m[0..3]
  const uint32_t sc_hi = (w[2] & low4) | (((w[0] >> 6) & low2) << 4);        // sc[4..7]
  const uint32_t sc_lo = w[0] & low6;                                        // sc[0..3]
  return _mm_set_epi32(int(m_hi), int(m_lo), int(sc_hi), int(sc_lo));
}

// The same 16 bytes from the 12 packed ones with vector operations (the 16-byte load reads four
// bytes past the scales, inside the block). Dwords w0, w1, w2:
//   sc[0..3] = w0 & 0x3f..      sc[4..7] = (w2 & 0x0f..) | ((w0 >> 6) & 0x03..) << 4
//   m[0..3]  = w1 & 0x3f..      m[4..7]  = ((w2 >> 4) & 0x0f..) | ((w1 >> 6) & 0x03..) << 4
inline __m128i k_scales_mins_vec(const uint8_t* packed) {
  const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i a = _mm_shuffle_epi32(w, _MM_SHUFFLE(2, 1, 2, 0));  // [w0, w2, w1, w2]
  const __m128i b = _mm_shuffle_epi32(w, _MM_SHUFFLE(1, 1, 0, 0));  // [w0, w0, w1, w1]
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                    _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  // ((w >> 6) & 3) << 4 per byte is (w >> 2) & 0x30.
  const __m128i high = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(low, high);
}

// sc[0..7] as int16 in both 128-bit halves.
inline __m256i scale_pairs(__m128i scales_mins) {
  return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scales_mins));
}

// sc[j] in all sixteen 16-bit lanes.
inline __m256i broadcast_pair(__m256i pairs, int j) {
  const int16_t pick = int16_t((2 * j) | ((2 * j + 1) << 8));
  return _mm256_shuffle_epi8(pairs, _mm256_set1_epi16(pick));
}

// bsums[2j] + bsums[2j+1] for j = 0..7 (exact in int16: |bsums| <= 16 * 127).
inline __m128i bsum_pairs(const uint8_t* q8k_block) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8k_block + kQ8KBsumsAt));
  return _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}

inline int32_t hsum_epi32(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(v);
}

// sum_j m[j] * (bsums[2j] + bsums[2j+1]), exact.
inline int32_t mins_dot_bsums(__m128i scales_mins, const uint8_t* q8k_block) {
  const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(scales_mins, 8));
  return hsum_epi32(_mm_madd_epi16(mins, bsum_pairs(q8k_block)));
}

// The reference reduction of eight lanes: h = [a0+a4, a1+a5, a2+a6, a3+a7]; (h0+h2) + (h1+h3).
inline float reduce_lanes(__m256 acc) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 pairs = _mm_add_ps(h, _mm_movehl_ps(h, h));  // [h0+h2, h1+h3, ..]
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
}

// The four-lane reduction of the Q4_K mins: (m0 + m2) + (m1 + m3).
inline float reduce_lanes4(__m128 m) {
  const __m128 pairs = _mm_add_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)));
}

}  // namespace
}  // namespace lmhead::cpu::avx2
