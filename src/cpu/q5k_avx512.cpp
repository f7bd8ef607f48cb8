// Q5_K head x Q8_K activations with AVX-512 (F, BW, VL, VNNI), for CPUs that have it; same bytes
// as the AVX2 kernel and the scalar reference (numerics.md §5). Only the integer lane sums are
// computed differently, and those are exact in any order:
//
//   P_j[k] = sum_b level(32j + 4k + b) * q8(32j + 4k + b)     one vpdpbusd per two sub-blocks
//   isum[k] = sum_j sc[j] * P_j[k]                            vpdpwssd on (P_j, P_j+2) word pairs
//
// |P_j[k]| <= 4 * 31 * 127 fits an int16, so two sub-blocks' P share one int32 lane as a word pair
// and one vpdpwssd applies both scales. A 512-bit register holds sub-blocks 2p (low half) and
// 2p + 1 (high half): the low and high nibbles of the same 32 bytes of qs. The float operations
// are the reference's, unchanged.
//
// Compiled for AVX-512 through a target pragma placed after every shared include, so nothing but
// this file's own internal functions carries AVX-512 code.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cpu/kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx512 {
namespace {

using avx2::bsum_pairs;
using avx2::f16_at;
using avx2::hsum_epi32;
using avx2::k_scales_mins;
using avx2::k_scales_mins_vec;
using avx2::keep_in_register;
using avx2::kQ8KBytes;
using avx2::kQ8KQsAt;
using avx2::kPrefetchAhead;
using avx2::prefetch_bytes;
using avx2::q8k_d;
using avx2::reduce_lanes;

constexpr int kBlockBytes = 176;

// Level vectors L_p (p = 0..3) of one block: low half sub-block 2p, high half sub-block 2p + 1.
// qh bit 2p + h goes to bit 4 by a 64-bit rotation (left by 4 - (2p + h), i.e. right for p >= 2):
// within each byte no other byte's bit reaches bit 4, and the bits a rotation wraps land above it.
inline void unpack_levels(const uint8_t* block, __m512i level[4]) {
  const __m512i nibble_shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
  const __m512i low4 = _mm512_set1_epi8(0x0F), low5 = _mm512_set1_epi8(0x1F);
  const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16)));
  const __m512i rotate[4] = {_mm512_setr_epi64(4, 4, 4, 4, 3, 3, 3, 3), _mm512_setr_epi64(2, 2, 2, 2, 1, 1, 1, 1),
                             _mm512_setr_epi64(0, 0, 0, 0, 63, 63, 63, 63),
                             _mm512_setr_epi64(62, 62, 62, 62, 61, 61, 61, 61)};
  for (int p = 0; p < 4; ++p) {
    const __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 48 + 32 * p)));
    const __m512i nib = _mm512_srlv_epi64(qs, nibble_shift);
    const __m512i high = _mm512_rolv_epi64(qh, rotate[p]);
    // Bits 0-3 from the nibble, bits 4-7 from the rotated qh (0xE4: low4 ? nib : high), then
    // bits 5-7 cleared.
    level[p] = _mm512_and_si512(_mm512_ternarylogic_epi32(nib, high, low4, 0xE4), low5);
  }
}

// The word-pair scale vectors: [sc0 | sc2] in the low half's lanes and [sc1 | sc3] in the high
// half's (scale_a), [sc4 | sc6] and [sc5 | sc7] (scale_b).
inline void scale_pairs(__m128i scales_mins, __m512i& scale_a, __m512i& scale_b) {
  const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(scales_mins));
  const __m512i pick_a = _mm512_set_epi16(3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1,  //
                                          2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0);
  const __m512i four = _mm512_set1_epi16(4);
  scale_a = _mm512_permutexvar_epi16(pick_a, sc16);
  scale_b = _mm512_permutexvar_epi16(_mm512_add_epi16(pick_a, four), sc16);
}

// isum[k] of one super-block for one token (q8 = the token's 256 quants).
inline __m256i lane_sums(const __m512i level[4], __m512i scale_a, __m512i scale_b, const uint8_t* q8) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i p0 = _mm512_dpbusd_epi32(zero, level[0], _mm512_loadu_si512(q8));
  const __m512i p1 = _mm512_dpbusd_epi32(zero, level[1], _mm512_loadu_si512(q8 + 64));
  const __m512i p2 = _mm512_dpbusd_epi32(zero, level[2], _mm512_loadu_si512(q8 + 128));
  const __m512i p3 = _mm512_dpbusd_epi32(zero, level[3], _mm512_loadu_si512(q8 + 192));
  const __mmask32 high_words = 0xAAAAAAAA;
  __m512i isum = _mm512_dpwssd_epi32(zero, _mm512_mask_blend_epi16(high_words, p0, _mm512_slli_epi32(p1, 16)), scale_a);
  isum = _mm512_dpwssd_epi32(isum, _mm512_mask_blend_epi16(high_words, p2, _mm512_slli_epi32(p3, 16)), scale_b);
  return _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
}

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
float dot_row(const uint8_t* row, const uint8_t* qs8, const SingleToken* tok, int64_t nb, uint64_t prefetch_ahead = kPrefetchAhead) {
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

// One super-block of a row unpacked for every token of the batch.
struct alignas(64) UnpackedZ {
  __m512i level[4];
  __m512i scale_a, scale_b;
  float d;
  float pad[15];
};

// Tokens t0 .. t0+G-1 against one unpacked row: the main lanes, reduced. Token quants and y.d
// come from the AVX2 path's prepared layout.
template <int G>
void dot_unpacked(const UnpackedZ* u, int64_t nb, const avx2::PreparedTokens& p, int t0, float* result) {
  const uint8_t* qs[G];
  for (int g = 0; g < G; ++g) qs[g] = p.qs + size_t(t0 + g) * nb * 256;
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  const __mmask32 high_words = 0xAAAAAAAA;
  for (int64_t i = 0; i < nb; ++i) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i isum[G];
    for (int g = 0; g < G; ++g) isum[g] = zero;
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const __m512i l0 = _mm512_load_si512(&u[i].level[2 * half]);
      const __m512i l1 = _mm512_load_si512(&u[i].level[2 * half + 1]);
      const __m512i sc = _mm512_load_si512(half ? &u[i].scale_b : &u[i].scale_a);
      for (int g = 0; g < G; ++g) {
        const uint8_t* a = qs[g] + i * 256 + 128 * half;
        const __m512i p0 = _mm512_dpbusd_epi32(zero, l0, _mm512_loadu_si512(a));
        const __m512i p1 = _mm512_dpbusd_epi32(zero, l1, _mm512_loadu_si512(a + 64));
        isum[g] = _mm512_dpwssd_epi32(isum[g], _mm512_mask_blend_epi16(high_words, p0, _mm512_slli_epi32(p1, 16)), sc);
        keep_in_register(isum[g]);
      }
    }
    const float* yd = p.yd + size_t(i) * p.tpad + t0;
    const __m256 d = _mm256_broadcast_ss(&u[i].d);
    for (int g = 0; g < G; ++g) {
      const __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(isum[g]), _mm512_extracti64x4_epi64(isum[g], 1));
      const __m256 dq = _mm256_mul_ps(_mm256_broadcast_ss(yd + g), d);
      acc[g] = _mm256_fmadd_ps(dq, _mm256_cvtepi32_ps(lanes), acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) result[g] = reduce_lanes(acc[g]);
}

}  // namespace

void q5_K_q8(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  if (acts.tokens == 1) {
    SingleToken* tok = static_cast<SingleToken*>(scratch);
    prepare_single(acts.data, nb, tok);
    for (int64_t r = 0; r < tile.count; ++r)
      out.data[r] = dot_row(tile.rows + r * tile.row_bytes, acts.data + kQ8KQsAt, tok, nb);
    return;
  }
  // Scratch: the AVX2 path's unpacked row (its mins and dmin feed the shared mins pass), this
  // path's own unpacked row, then the prepared tokens.
  uint8_t* mem = static_cast<uint8_t*>(scratch);
  avx2::UnpackedK* uk = reinterpret_cast<avx2::UnpackedK*>(mem);
  UnpackedZ* uz = reinterpret_cast<UnpackedZ*>(mem + nb * sizeof(avx2::UnpackedK));
  const avx2::PreparedTokens p = avx2::prepare_tokens<avx2::KQuant::q5_K>(
      acts, nb, mem + nb * (sizeof(avx2::UnpackedK) + sizeof(UnpackedZ)));
  alignas(32) float mins[kMaxKernelTokens];
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* x = row + i * kBlockBytes;
      const __m128i sm = k_scales_mins(x + 4);
      unpack_levels(x, uz[i].level);
      scale_pairs(sm, uz[i].scale_a, uz[i].scale_b);
      uz[i].d = f16_at(x);
      uk[i].extra = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
      uk[i].dmin = f16_at(x + 2);
    }
    prefetch_bytes(row + tile.row_bytes, tile.row_bytes);
    avx2::mins_terms<avx2::KQuant::q5_K>(uk, nb, p, mins);
    for (int t0 = 0; t0 < acts.tokens; t0 += 4) {
      const int g = acts.tokens - t0 < 4 ? acts.tokens - t0 : 4;
      float result[4];
      switch (g) {
        case 1: dot_unpacked<1>(uz, nb, p, t0, result); break;
        case 2: dot_unpacked<2>(uz, nb, p, t0, result); break;
        case 3: dot_unpacked<3>(uz, nb, p, t0, result); break;
        default: dot_unpacked<4>(uz, nb, p, t0, result); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(t0 + k) * out.stride + r] = result[k] + mins[t0 + k];
    }
  }
}

}  // namespace lmhead::cpu::avx512

#pragma GCC pop_options
