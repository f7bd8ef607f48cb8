// Q5_K head x Q8_K activations with AVX-512 (F, BW, VL, VNNI), for CPUs that have it; same bytes
// as the AVX2 kernel and the scalar reference (numerics.md §5). Only the integer lane sums are
// computed differently, and those are exact in any order:
//
//   P_j[k] = sum_b level(32j + 4k + b) * q8(32j + 4k + b)     one vpdpbusd per sub-block
//   isum[k] = sum_j sc[j] * P_j[k]                            vpdpwssd on (P_2q, P_2q+1) word pairs
//
// |P_j[k]| <= 4 * 31 * 127 fits an int16, so two sub-blocks' P share one int32 lane as a word pair
// and one vpdpwssd applies both scales. Up to four tokens the registers are 256-bit (on Zen 4 a
// 512-bit operation takes two 256-bit issue slots, and the 512-bit variants tried there were
// slower); from five tokens each super-block is decoded into 512-bit registers once per group of
// eight (decode512, below), which pays where a 512-bit multiply issues like a 256-bit one (the Intel
// Xeon of docs/performance.md, CPU attempt 13). The float operations are the reference's, unchanged.
//
// Compiled for AVX-512 through a target pragma placed after every shared include, so nothing but
// this file's own internal functions carries AVX-512 code.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12 reports the "undefined" upper halves inside its own 512-bit insert, extract and broadcast
// intrinsics as maybe-uninitialized (a false positive of the headers, not of this code).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx512 {
namespace {

using avx2::bsum_pairs;
using avx2::f16_at;
using avx2::hsum_epi32;
using avx2::k_scales_mins_vec;
using avx2::keep_in_register;
using avx2::kQ8KBytes;
using avx2::kQ8KQsAt;
using avx2::KTokens;
using avx2::q8k_d;
using avx2::reduce_lanes;

constexpr int kBlockBytes = 176;

// The single-token path in 256-bit registers (AVX-512 VL: ternary logic, VNNI): a 512-bit
// register would only split into two halves on this path's CPUs and add work to gather them.
// Per super-block j-th level vector: (nibble) | (qh shifted so bit j lands on bit 4, masked) in one
// ternary-logic operation; P_j by vpdpbusd; isum = sum over pairs (2q, 2q+1) of vpdpwssd on the
// word pair (P_2q, P_2q+1) with the scale pair (sc[2q], sc[2q+1]).
template <int J>
inline __m256i level_j(__m256i nibble, __m256i qh) {
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  const __m256i moved = J <= 4 ? _mm256_slli_epi16(qh, 4 - J) : _mm256_srli_epi16(qh, J - 4);
  return _mm256_ternarylogic_epi32(nibble, moved, bit4, 0xF8);  // nibble | (moved & bit4)
}

struct SingleToken {
  __m128i pairs;  // bsums[2j] + bsums[2j+1], int16 x 8
  float yd, neg_yd;
  float pad[2];
};

void prepare_single(const uint8_t* act, int64_t nb, SingleToken* t) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* y = act + i * kQ8KBytes;
    t[i].pairs = bsum_pairs(y);
    t[i].yd = q8k_d(y);
    t[i].neg_yd = -q8k_d(y);
  }
}

// isum of one super-block (x: its bytes, a: the token's 256 quants), scales and mins decoded into
// `sm`.
inline __m256i lane_sums_vnni(const uint8_t* x, const uint8_t* a, __m128i sm) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i zero = _mm256_setzero_si256();
  const __mmask16 high_words = 0xAAAA;
  alignas(16) int32_t scale_pairs[4];  // sc[2q] | sc[2q+1] << 16
  _mm_store_si128(reinterpret_cast<__m128i*>(scale_pairs), _mm_cvtepu8_epi16(sm));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
  __m256i isum = zero;
#define LMHEAD_Q5_PAIR(P)                                                                                     \
  {                                                                                                           \
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 48 + 32 * P));                  \
    const __m256i lo = level_j<2 * P>(_mm256_and_si256(b, low4), qh);                                         \
    const __m256i hi = level_j<2 * P + 1>(_mm256_and_si256(_mm256_srli_epi16(b, 4), low4), qh);              \
    const __m256i p0 = _mm256_dpbusd_epi32(zero, lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 64 * P)));      \
    const __m256i p1 = _mm256_dpbusd_epi32(zero, hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 64 * P + 32))); \
    isum = _mm256_dpwssd_epi32(isum, _mm256_mask_blend_epi16(high_words, p0, _mm256_slli_epi32(p1, 16)),        \
                               _mm256_set1_epi32(scale_pairs[P]));                                            \
  }
  LMHEAD_Q5_PAIR(0) LMHEAD_Q5_PAIR(1) LMHEAD_Q5_PAIR(2) LMHEAD_Q5_PAIR(3)
#undef LMHEAD_Q5_PAIR
  return isum;
}

// Two super-blocks per iteration: their mins terms share one madd and one reduction, then feed the
// reference's sequential summs chain in order.
float dot_row(const uint8_t* row, const uint8_t* qs8, const SingleToken* tok, int64_t nb, uint64_t prefetch_ahead) {
  __m256 acc = _mm256_setzero_ps();
  __m128 summs = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const uint8_t* x0 = row + i * kBlockBytes;
    const uint8_t* x1 = x0 + kBlockBytes;
    for (int k = 0; k < 6; ++k) _mm_prefetch(reinterpret_cast<const char*>(x0 + prefetch_ahead + 64 * k), _MM_HINT_T0);
    uint32_t dd0, dd1;
    std::memcpy(&dd0, x0, 4);
    std::memcpy(&dd1, x1, 4);
    // [dq0, dm0, dq1, dm1]: [d, dmin] of each block times [y.d, -y.d] of its token block.
    const __m128 dd = _mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128(int(dd0)), _mm_cvtsi32_si128(int(dd1))));
    const __m128 yy = _mm_castsi128_ps(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&tok[i].yd)),
                                                          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(&tok[i + 1].yd))));
    const __m128 f = _mm_mul_ps(dd, yy);
    const __m128i sm0 = k_scales_mins_vec(x0 + 4), sm1 = k_scales_mins_vec(x1 + 4);
    // imin of both blocks: madd of [m | m'] with [pairs | pairs'], then two horizontal adds.
    const __m256i m01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm0, 8))),
                                                _mm_cvtepu8_epi16(_mm_srli_si128(sm1, 8)), 1);
    const __m256i p01 = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(&tok[i + 1].pairs),
                                            reinterpret_cast<const __m128i*>(&tok[i].pairs));
    const __m256i part = _mm256_madd_epi16(m01, p01);
    const __m128i both = _mm_hadd_epi32(_mm256_castsi256_si128(part), _mm256_extracti128_si256(part, 1));
    const __m128 imin = _mm_cvtepi32_ps(_mm_hadd_epi32(both, both));  // [imin0, imin1, ..]
    summs = _mm_fmadd_ss(_mm_movehdup_ps(f), imin, summs);
    summs = _mm_fmadd_ss(_mm_shuffle_ps(f, f, _MM_SHUFFLE(3, 3, 3, 3)), _mm_movehdup_ps(imin), summs);
    const __m256i isum0 = lane_sums_vnni(x0, qs8 + i * kQ8KBytes, sm0);
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), _mm256_cvtepi32_ps(isum0), acc);
    const __m256i isum1 = lane_sums_vnni(x1, qs8 + (i + 1) * kQ8KBytes, sm1);
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehl_ps(f, f)), _mm256_cvtepi32_ps(isum1), acc);
  }
  for (; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    const float dq = tok[i].yd * f16_at(x);
    const float dm = tok[i].neg_yd * f16_at(x + 2);
    const __m128i sm = k_scales_mins_vec(x + 4);
    const int32_t imin = hsum_epi32(_mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), tok[i].pairs));
    summs = _mm_fmadd_ss(_mm_set_ss(dm), _mm_set_ss(float(imin)), summs);
    const __m256i isum = lane_sums_vnni(x, qs8 + i * kQ8KBytes, sm);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dq), _mm256_cvtepi32_ps(isum), acc);
  }
  return reduce_lanes(acc) + _mm_cvtss_f32(summs);
}

// Several tokens in registers: each super-block is unpacked once (as on the single-token path)
// and used at once for G = 2..4 tokens (measured faster than unpacking whole rows into L1 and
// streaming 512-bit vectors over them: docs/performance.md), whose isum, acc and summs stay in registers; the row
// (4.5 KB at the Muse shape) is re-read from L1 for each group of four. The four tokens' mins
// terms run in the lanes of one vector: imin[t] from two madds and two horizontal adds, then
// summs = fma(dm, float(imin), summs) lane by lane, the reference's single rounding per token.
// The token-side cells are kquant_avx2.hpp's (KTokens); the tile loop is q5_K_q8's.
template <int G>
void dot_group(const uint8_t* row, const uint8_t* const* y, const KTokens* tok, int64_t nb, float* result,
               uint64_t prefetch_ahead) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i zero = _mm256_setzero_si256();
  const __mmask16 high_words = 0xAAAA;
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);  // [t0 t2 . . | t1 t3 . .] -> [t0 t1 t2 t3]
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  __m128 summs = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead + 128), _MM_HINT_T0);
    const __m128i sm = k_scales_mins_vec(x + 4);
    alignas(16) int32_t scale_pairs[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(scale_pairs), _mm_cvtepu8_epi16(sm));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
    __m256i isum[G];
    for (int g = 0; g < G; ++g) isum[g] = zero;
#define LMHEAD_Q5_PAIR(P)                                                                                   \
    {                                                                                                       \
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 48 + 32 * P));              \
      const __m256i lo = level_j<2 * P>(_mm256_and_si256(b, low4), qh);                                     \
      const __m256i hi = level_j<2 * P + 1>(_mm256_and_si256(_mm256_srli_epi16(b, 4), low4), qh);          \
      const __m256i sc = _mm256_set1_epi32(scale_pairs[P]);                                                 \
      for (int g = 0; g < G; ++g) {                                                                         \
        const uint8_t* a = y[g] + i * kQ8KBytes + kQ8KQsAt + 64 * P;                                        \
        const __m256i p0 = _mm256_dpbusd_epi32(zero, lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));      \
        const __m256i p1 = _mm256_dpbusd_epi32(zero, hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32))); \
        isum[g] = _mm256_dpwssd_epi32(isum[g], _mm256_mask_blend_epi16(high_words, p0, _mm256_slli_epi32(p1, 16)), sc); \
        keep_in_register(isum[g]);                                                                          \
      }                                                                                                     \
    }
    LMHEAD_Q5_PAIR(0) LMHEAD_Q5_PAIR(1) LMHEAD_Q5_PAIR(2) LMHEAD_Q5_PAIR(3)
#undef LMHEAD_Q5_PAIR
    uint32_t dd_bits;
    std::memcpy(&dd_bits, x, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd_bits)));  // [d, dmin, 0, 0]
    const __m128 d = _mm_broadcastss_ps(dd), dmin = _mm_permute_ps(dd, _MM_SHUFFLE(1, 1, 1, 1));
    const __m128 dq = _mm_mul_ps(_mm_loadu_ps(tok[i].yd), d);
    for (int g = 0; g < G; ++g) {
      const __m128 dq_g = _mm_permutevar_ps(dq, _mm_set1_epi32(g));
      acc[g] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dq_g), _mm256_cvtepi32_ps(isum[g]), acc[g]);
    }
    const __m256i m = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
    const __m256i m01 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[0])));
    const __m256i m23 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[2])));
    const __m256i h = _mm256_hadd_epi32(m01, m23);
    const __m128i imin = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_hadd_epi32(h, h), order));
    summs = _mm_fmadd_ps(_mm_mul_ps(_mm_loadu_ps(tok[i].neg_yd), dmin), _mm_cvtepi32_ps(imin), summs);
  }
  alignas(16) float s[4];
  _mm_store_ps(s, summs);
  for (int g = 0; g < G; ++g) result[g] = reduce_lanes(acc[g]) + s[g];
}

// Levels and scales in 512-bit registers (from five tokens). On the Intel Xeon this was built on, a
// 512-bit vpmaddubsw or vpdpwssd issues at about the rate of a 256-bit one, so it does nearly twice
// the work per cycle; on Zen 4 (one 512-bit operation = two 256-bit ones) it would not (docs/
// performance.md, CPU attempt 13).
//
// A 64-byte load of the quants holds pairs 2Q and 2Q + 1 (Q = 0, 1): its low nibbles are sub-blocks
// 4Q (low half) and 4Q + 2 (high half), its high nibbles 4Q + 1 and 4Q + 3. The token's quants are
// permuted once per call to match (permute_token), and each half gets its own sub-block's scale, so
//   isum_half[k] = sum over the half's sub-blocks j of sc[j] * P_j[k]   (vpmaddubsw, then vpdpwssd)
// and the eight lanes of numerics.md §5 are the two halves added: integer sums, exact in any order.
// |level * q8| pairs fit vpmaddubsw's int16 (2 * 31 * 128), and the scales are at most 63.
struct Levels512 {
  __m512i lv[4];  // sub-blocks (0 | 2), (1 | 3), (4 | 6), (5 | 7)
  __m512i sc[4];  // their scales as int16 words, each half its sub-block's
};

// Bit 4 of every byte of v moved from bit 4 - S (S > 0: a left shift); a 16-bit shift by at most 4
// left or 3 right never carries a bit into another byte's bit 4.
template <int S>
inline __m512i shift_to_bit4(__m512i v) {
  if constexpr (S > 0) return _mm512_slli_epi16(v, S);
  else if constexpr (S < 0) return _mm512_srli_epi16(v, -S);
  else return v;
}

inline Levels512 decode512(const uint8_t* x, __m128i sm) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
  // Low half: qh; high half: qh >> 2, so sub-block 4Q + 2's bit sits where 4Q's does.
  const __m512i qhz = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
  const __m512i b0 = _mm512_loadu_si512(x + 48), b1 = _mm512_loadu_si512(x + 112);
  Levels512 L;
  // level = nibble | (qh bit moved to bit 4): one ternary-logic operation, a | (b & c).
  L.lv[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(b0, low4), shift_to_bit4<4>(qhz), bit4, 0xF8);
  L.lv[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(b0, 4), low4), shift_to_bit4<3>(qhz), bit4, 0xF8);
  L.lv[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(b1, low4), shift_to_bit4<0>(qhz), bit4, 0xF8);
  L.lv[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(b1, 4), low4), shift_to_bit4<-1>(qhz), bit4, 0xF8);
  // sc[0..7] as words in every 128-bit lane; each vector picks word j0 in lanes 0, 1 and j1 in 2, 3.
  const __m512i words = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
  auto pick = [&](int j0, int j1) {
    const short w0 = short((2 * j0) | ((2 * j0 + 1) << 8)), w1 = short((2 * j1) | ((2 * j1 + 1) << 8));
    return _mm512_shuffle_epi8(words, _mm512_inserti64x4(_mm512_set1_epi16(w0), _mm256_set1_epi16(w1), 1));
  };
  L.sc[0] = pick(0, 2);
  L.sc[1] = pick(1, 3);
  L.sc[2] = pick(4, 6);
  L.sc[3] = pick(5, 7);
  return L;
}

// The eight int32 lanes of one token (a: its permuted 256 quants of this super-block).
inline __m256i token_lanes(const Levels512& L, const uint8_t* a) {
  // Two chains of two joined by one add (one chain of four measured the same: docs/performance.md,
  // CPU attempt 13), then the halves added.
  __m512i s0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(L.lv[0], _mm512_loadu_si512(a)), L.sc[0]);
  __m512i s1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(L.lv[1], _mm512_loadu_si512(a + 64)), L.sc[1]);
  s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(L.lv[2], _mm512_loadu_si512(a + 128)), L.sc[2]);
  s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(L.lv[3], _mm512_loadu_si512(a + 192)), L.sc[3]);
  const __m512i isum = _mm512_add_epi32(s0, s1);
  return _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
}

// A token's quants of every super-block in the order decode512 pairs them: 32-byte sub-blocks
// 0, 2, 1, 3, 4, 6, 5, 7.
inline void permute_token(const uint8_t* blocks, int64_t nb, uint8_t* out) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* qs = blocks + i * kQ8KBytes + kQ8KQsAt;
    uint8_t* o = out + i * 256;
    for (int k = 0; k < 8; ++k) {
      static constexpr int kFrom[8] = {0, 2, 1, 3, 4, 6, 5, 7};
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * k),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * kFrom[k])));
    }
  }
}

// The four tokens of one KTokens cell: their mins terms in the lanes of one vector, imin[t] from two
// madds and two horizontal adds, then summs = fma(dm, float(imin), summs) lane by lane, the
// reference's single rounding per token.
inline __m128 mins_step(__m128i sm, const KTokens& cell, __m128 dmin, __m128 summs) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);  // [t0 t2 . . | t1 t3 . .] -> [t0 t1 t2 t3]
  const __m256i m = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
  const __m256i m01 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&cell.pairs[0])));
  const __m256i m23 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&cell.pairs[2])));
  const __m256i h = _mm256_hadd_epi32(m01, m23);
  const __m128i imin = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_hadd_epi32(h, h), order));
  return _mm_fmadd_ps(_mm_mul_ps(_mm_loadu_ps(cell.neg_yd), dmin), _mm_cvtepi32_ps(imin), summs);
}

// From five tokens: each super-block is decoded once (decode512) and used at once for
// G = 1..8 tokens (y[g]: token g's permuted quants; tok[0], tok[1]: the KTokens cells of tokens 0-3
// and 4-7), whose lanes, acc and summs stay in registers; the row is re-read from L1 for the next
// group. Eight tokens per decode, where the 256-bit path took four: AVX-512 has 32 vector registers.
template <int G>
void dot_group512(const uint8_t* row, const uint8_t* const* y, const KTokens* const* tok, int64_t nb, float* result,
                  uint64_t prefetch_ahead) {
  static_assert(G >= 1 && G <= 8);
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  __m128 summs[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead + 128), _MM_HINT_T0);
    const __m128i sm = k_scales_mins_vec(x + 4);
    const Levels512 L = decode512(x, sm);
    __m256i isum[G];
    for (int g = 0; g < G; ++g) isum[g] = token_lanes(L, y[g] + i * 256);
    uint32_t dd_bits;
    std::memcpy(&dd_bits, x, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd_bits)));  // [d, dmin, 0, 0]
    const __m128 d = _mm_broadcastss_ps(dd), dmin = _mm_permute_ps(dd, _MM_SHUFFLE(1, 1, 1, 1));
    // dq of the eight tokens in one vector (y.d * d, the reference's product), one permute each.
    const __m256 dq = _mm256_mul_ps(_mm256_set_m128(_mm_loadu_ps(tok[1][i].yd), _mm_loadu_ps(tok[0][i].yd)),
                                    _mm256_set1_ps(_mm_cvtss_f32(d)));
    for (int g = 0; g < G; ++g)
      acc[g] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dq, _mm256_set1_epi32(g)), _mm256_cvtepi32_ps(isum[g]), acc[g]);
    for (int c = 0; c < (G + 3) / 4; ++c) summs[c] = mins_step(sm, tok[c][i], dmin, summs[c]);
  }
  alignas(16) float s[8];
  _mm_store_ps(s, summs[0]);
  _mm_store_ps(s + 4, summs[1]);
  for (int g = 0; g < G; ++g) result[g] = reduce_lanes(acc[g]) + s[g];
}

inline size_t align64(size_t n) { return (n + 63) / 64 * 64; }


}  // namespace

void q5_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  const uint64_t ahead = avx512_prefetch_ahead();
  uint8_t* base = static_cast<uint8_t*>(scratch);
  if (acts.tokens == 1) {
    SingleToken* tok = reinterpret_cast<SingleToken*>(base);
    prepare_single(acts.data, nb, tok);
    for (int64_t r = 0; r < tile.count; ++r)
      out.data[r] = dot_row(tile.rows + r * tile.row_bytes, acts.data + kQ8KQsAt, tok, nb, ahead);
    return;
  }
  KTokens* cells = reinterpret_cast<KTokens*>(base);
  prepare_k_tokens(acts, nb, cells);
  if (acts.tokens <= 4) {
    // One group, 256-bit: below five tokens decode512's cost is not shared by enough tokens
    // (docs/performance.md, CPU attempt 13).
    const int g = acts.tokens;
    const uint8_t* y[4];
    for (int k = 0; k < g; ++k) y[k] = acts.data + size_t(k) * acts.stride;
    for (int64_t r = 0; r < tile.count; ++r) {
      const uint8_t* row = tile.rows + r * tile.row_bytes;
      float result[4];
      switch (g) {
        case 2: dot_group<2>(row, y, cells, nb, result, ahead); break;
        case 3: dot_group<3>(row, y, cells, nb, result, ahead); break;
        default: dot_group<4>(row, y, cells, nb, result, ahead); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(k) * out.stride + r] = result[k];
    }
    return;
  }
  // Groups of up to eight tokens (two KTokens cells each) on the permuted activations, each
  // super-block decoded once per group; the row is re-read from L1 for the next group.
  const size_t token_bytes = size_t(nb) * 256;
  uint8_t* perm = base + align64(size_t((acts.tokens + 3) / 4) * size_t(nb) * sizeof(KTokens));
  for (int t = 0; t < acts.tokens; ++t) permute_token(acts.data + size_t(t) * acts.stride, nb, perm + t * token_bytes);
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int t0 = 0; t0 < acts.tokens; t0 += 8) {
      const int g = acts.tokens - t0 < 8 ? acts.tokens - t0 : 8;
      const uint8_t* y[8];
      for (int k = 0; k < g; ++k) y[k] = perm + (t0 + k) * token_bytes;
      const KTokens* c[2] = {cells + (t0 / 4) * nb, cells + (t0 / 4 + (g > 4 ? 1 : 0)) * nb};
      float result[8];
      switch (g) {
        case 1: dot_group512<1>(row, y, c, nb, result, ahead); break;
        case 2: dot_group512<2>(row, y, c, nb, result, ahead); break;
        case 3: dot_group512<3>(row, y, c, nb, result, ahead); break;
        case 4: dot_group512<4>(row, y, c, nb, result, ahead); break;
        case 5: dot_group512<5>(row, y, c, nb, result, ahead); break;
        case 6: dot_group512<6>(row, y, c, nb, result, ahead); break;
        case 7: dot_group512<7>(row, y, c, nb, result, ahead); break;
        default: dot_group512<8>(row, y, c, nb, result, ahead); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(t0 + k) * out.stride + r] = result[k];
    }
  }
}

}  // namespace lmhead::cpu::avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options
