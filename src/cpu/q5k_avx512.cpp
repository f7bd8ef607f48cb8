// Q5_K head x Q8_K activations with AVX-512 (F, BW, VL, VNNI), for CPUs that have it; same bytes
// as the AVX2 kernel and the scalar reference (numerics.md §5). Only the integer lane sums are
// computed differently, and those are exact in any order:
//
//   P_j[k] = sum_b level(32j + 4k + b) * q8(32j + 4k + b)     one vpdpbusd per sub-block
//   isum[k] = sum_j sc[j] * P_j[k]                            vpdpwssd on (P_2q, P_2q+1) word pairs
//
// |P_j[k]| <= 4 * 31 * 127 fits an int16, so two sub-blocks' P share one int32 lane as a word pair
// and one vpdpwssd applies both scales (the pairs kernel below forms sc[j] * P_j[k] with vpmaddubsw
// and one vpdpwssd per sub-block instead: the same integers). Up to four tokens the registers are 256-bit (on Zen 4 a
// 512-bit operation takes two 256-bit issue slots, and the 512-bit variants tried there were
// slower). From five tokens two tokens share each 512-bit register, one per half (dot_pairs512,
// below), which pays where a 512-bit multiply issues about as fast as a 256-bit one (the Intel Xeon
// of docs/performance.md, CPU attempt 13). The float operations are the reference's, unchanged.
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
#pragma GCC diagnostic ignored "-Wuninitialized"

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
using avx2::k_tile;
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
// The token-side cells and the tile loop are kquant_avx2.hpp's (KTokens, k_tile).
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

// Bit 4 of every byte of v moved from bit 4 - S (S > 0: a left shift); a 16-bit shift by at most 4
// left or 3 right never carries a bit into another byte's bit 4.
template <int S>
inline __m512i shift_to_bit4(__m512i v) {
  if constexpr (S > 0) return _mm512_slli_epi16(v, S);
  else if constexpr (S < 0) return _mm512_srli_epi16(v, -S);
  else return v;
}

// Two tokens per 512-bit register: the halves of every vector are the two tokens of a pair, each
// level vector is one sub-block in both halves (broadcast loads), and a token's eight lanes never
// leave its half: per pair and sub-block j one vpmaddubsw, then one vpdpwssd with sc[j] in every
// word, so lane k of each half gets sc[j] * P_j[k] (exact, as above), then one conversion and one
// fma for the two tokens. Every super-block is decoded once for up to sixteen tokens. Pair p's
// quants: per super-block and sub-block j, 64 bytes [token 2p's 32 | token 2p + 1's 32]
// (interleave_pair; a missing partner is zeros, its results dropped).
inline void interleave_pair(const uint8_t* a_blocks, const uint8_t* b_blocks, int64_t nb, uint8_t* out) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < 8; ++j) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a_blocks + i * kQ8KBytes + kQ8KQsAt + 32 * j));
      const __m256i b = b_blocks ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b_blocks + i * kQ8KBytes + kQ8KQsAt + 32 * j))
                                 : _mm256_setzero_si256();
      _mm512_storeu_si512(out + i * 512 + 64 * j, _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
    }
}

// The token side of the pairs kernel, per super-block and for up to sixteen tokens (missing ones
// zero): y.d, -y.d, and the bsum pairs transposed so that one vpdpwssd per two sub-blocks gives the
// mins sums of all sixteen tokens: word pair q of token t = (bsums[4q] + bsums[4q + 1], bsums[4q + 2]
// + bsums[4q + 3]), i.e. the pairs of sub-blocks 2q and 2q + 1.
struct alignas(64) PairTokens {
  int32_t pairs[4][16];
  float yd[16];
  float neg_yd[16];
};

void prepare_pair_tokens(const TokenActs& acts, int64_t nb, PairTokens* cells) {
  for (int64_t i = 0; i < nb; ++i) {
    PairTokens& cell = cells[i];
    std::memset(&cell, 0, sizeof cell);
    for (int t = 0; t < acts.tokens; ++t) {
      const uint8_t* y = acts.data + size_t(t) * acts.stride + i * kQ8KBytes;
      alignas(16) int32_t w[4];  // the eight int16 pairs as four word pairs
      _mm_store_si128(reinterpret_cast<__m128i*>(w), bsum_pairs(y));
      for (int q = 0; q < 4; ++q) cell.pairs[q][t] = w[q];
      cell.yd[t] = q8k_d(y);
      cell.neg_yd[t] = -q8k_d(y);
    }
  }
}

template <int NP>
void dot_pairs512(const uint8_t* row, const uint8_t* const* y, const PairTokens* tok, int64_t nb, float* result,
                  uint64_t prefetch_ahead) {
  static_assert(NP >= 1 && NP <= 8);
  const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
  __m512 acc[NP];
  for (int p = 0; p < NP; ++p) acc[p] = _mm512_setzero_ps();
  __m512 summs = _mm512_setzero_ps();  // token t's mins chain in lane t
  __m256 summs8 = _mm256_setzero_ps();  // the same, up to eight tokens
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + prefetch_ahead + 128), _MM_HINT_T0);
    const __m128i sm = k_scales_mins_vec(x + 4);
    // sc[j] in both words (the token lanes' vpdpwssd operand) and (m[2q], m[2q + 1]) (the mins').
    alignas(32) int32_t scw[8];
    alignas(16) int32_t mw[4];
    {
      const __m256i w = _mm256_cvtepu8_epi32(sm);
      _mm256_store_si256(reinterpret_cast<__m256i*>(scw), _mm256_or_si256(w, _mm256_slli_epi32(w, 16)));
      _mm_store_si128(reinterpret_cast<__m128i*>(mw), _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
    }
    const __m512i qhb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16)));
    __m512i lv[8];
#define LMHEAD_Q5_BCAST_PAIR(P)                                                                                 \
    {                                                                                                           \
      const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 48 + 32 * P))); \
      lv[2 * P] = _mm512_ternarylogic_epi32(_mm512_and_si512(b, low4), shift_to_bit4<4 - 2 * P>(qhb), bit4, 0xF8); \
      lv[2 * P + 1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(b, 4), low4),                 \
                                                shift_to_bit4<3 - 2 * P>(qhb), bit4, 0xF8);                      \
    }
    LMHEAD_Q5_BCAST_PAIR(0) LMHEAD_Q5_BCAST_PAIR(1) LMHEAD_Q5_BCAST_PAIR(2) LMHEAD_Q5_BCAST_PAIR(3)
#undef LMHEAD_Q5_BCAST_PAIR
    uint32_t dd_bits;
    std::memcpy(&dd_bits, x, 4);
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd_bits)));  // [d, dmin, 0, 0]
    const PairTokens& t = tok[i];
    // dq = y.d * d of every token (the reference's product), one permute per pair.
    const __m512 dq = _mm512_mul_ps(_mm512_load_ps(t.yd), _mm512_broadcastss_ps(dd));
    for (int p = 0; p < NP; ++p) {
      const uint8_t* a = y[p] + i * 512;
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      for (int j = 0; j < 8; j += 2) {
        s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(lv[j], _mm512_loadu_si512(a + 64 * j)), _mm512_set1_epi32(scw[j]));
        s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(lv[j + 1], _mm512_loadu_si512(a + 64 * j + 64)),
                                 _mm512_set1_epi32(scw[j + 1]));
      }
      const __m512i pick = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
      acc[p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick, dq), _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[p]);
    }
    // imin of the tokens: four vpdpwssd of the transposed pairs with (m[2q], m[2q + 1]), 256-bit
    // up to eight tokens; then summs = fma((-y.d) * dmin, float(imin), summs), the reference's single
    // rounding per token.
    if constexpr (NP <= 4) {
      __m256i imin = _mm256_dpwssd_epi32(_mm256_setzero_si256(), _mm256_load_si256(reinterpret_cast<const __m256i*>(t.pairs[0])),
                                         _mm256_set1_epi32(mw[0]));
      for (int q = 1; q < 4; ++q)
        imin = _mm256_dpwssd_epi32(imin, _mm256_load_si256(reinterpret_cast<const __m256i*>(t.pairs[q])), _mm256_set1_epi32(mw[q]));
      const __m256 dm = _mm256_mul_ps(_mm256_load_ps(t.neg_yd), _mm256_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(dd))));
      summs8 = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(imin), summs8);
    } else {
      __m512i imin = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_load_si512(t.pairs[0]), _mm512_set1_epi32(mw[0]));
      for (int q = 1; q < 4; ++q) imin = _mm512_dpwssd_epi32(imin, _mm512_load_si512(t.pairs[q]), _mm512_set1_epi32(mw[q]));
      const __m512 dm = _mm512_mul_ps(_mm512_load_ps(t.neg_yd), _mm512_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(dd))));
      summs = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(imin), summs);
    }
  }
  alignas(64) float s[16];
  if constexpr (NP <= 4) _mm256_store_ps(s, summs8);
  else _mm512_store_ps(s, summs);
  for (int p = 0; p < NP; ++p) {
    result[2 * p] = reduce_lanes(_mm512_castps512_ps256(acc[p])) + s[2 * p];
    result[2 * p + 1] = reduce_lanes(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1))) + s[2 * p + 1];
  }
}

struct GroupOrder {
  template <int G>
  static void group(const uint8_t* row, const uint8_t* const* y, const KTokens* tok, int64_t nb, float* result,
                    uint64_t ahead) {
    dot_group<G>(row, y, tok, nb, result, ahead);
  }
};

inline size_t align64(size_t n) { return (n + 63) / 64 * 64; }


}  // namespace

void q5_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  const uint64_t ahead = weight_prefetch_ahead();
  uint8_t* base = static_cast<uint8_t*>(scratch);
  if (acts.tokens == 1) {
    SingleToken* tok = reinterpret_cast<SingleToken*>(base);
    prepare_single(acts.data, nb, tok);
    for (int64_t r = 0; r < tile.count; ++r)
      out.data[r] = dot_row(tile.rows + r * tile.row_bytes, acts.data + kQ8KQsAt, tok, nb, ahead);
    return;
  }
  if (acts.tokens <= 4) {
    // One group, 256-bit: below five tokens the 512-bit decode is shared by too few tokens
    // (docs/performance.md, CPU attempt 13).
    k_tile<GroupOrder>(tile, acts, out, scratch);
    return;
  }
  // From five tokens: pairs of tokens in the halves of 512-bit registers, every super-block decoded
  // once for all of them (dot_pairs512). The token side (PairTokens and the interleaved quants,
  // about 7 % of a 64-row tile at sixteen tokens) is made by a worker's first tile of a call and
  // read by its later ones (TokenActs::scratch_prepared).
  PairTokens* ptok = reinterpret_cast<PairTokens*>(base);
  const size_t pair_bytes = size_t(nb) * 512;
  uint8_t* pairs = base + align64(size_t(nb) * sizeof(PairTokens));
  if (!acts.scratch_prepared) {
    prepare_pair_tokens(acts, nb, ptok);
    for (int t = 0; t < acts.tokens; t += 2)
      interleave_pair(acts.data + size_t(t) * acts.stride,
                      t + 1 < acts.tokens ? acts.data + size_t(t + 1) * acts.stride : nullptr, nb,
                      pairs + (t / 2) * pair_bytes);
  }
  const uint8_t* y[8];
  const int np = (acts.tokens + 1) / 2;
  for (int k = 0; k < np; ++k) y[k] = pairs + k * pair_bytes;
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    float result[16];
    switch (np) {
      case 1: dot_pairs512<1>(row, y, ptok, nb, result, ahead); break;
      case 2: dot_pairs512<2>(row, y, ptok, nb, result, ahead); break;
      case 3: dot_pairs512<3>(row, y, ptok, nb, result, ahead); break;
      case 4: dot_pairs512<4>(row, y, ptok, nb, result, ahead); break;
      case 5: dot_pairs512<5>(row, y, ptok, nb, result, ahead); break;
      case 6: dot_pairs512<6>(row, y, ptok, nb, result, ahead); break;
      case 7: dot_pairs512<7>(row, y, ptok, nb, result, ahead); break;
      default: dot_pairs512<8>(row, y, ptok, nb, result, ahead); break;
    }
    for (int k = 0; k < acts.tokens; ++k) out.data[size_t(k) * out.stride + r] = result[k];
  }
}

}  // namespace lmhead::cpu::avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options
