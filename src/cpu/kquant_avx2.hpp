#pragma once
// The K-quant (Q4_K, Q5_K, Q6_K) x Q8_K kernels' shared machinery, AVX2. Include only from
// *_avx2.cpp files (everything has internal linkage).
//
// Structure: per super-block the levels are decoded into registers, chunk by chunk, and used at
// once for a group of up to four tokens (superblock_lanes); the row is re-read from L1 for the next
// group, so nothing decoded is ever stored (decoding whole rows into an L1 scratch first was slower
// at every T: docs/performance.md, CPU, attempts 9 and 12). What follows the integer lanes is the
// order's: vec_dot's eight float lanes (kquant_vec_dot_avx2.cpp) or llama.cpp's tiled sums
// (tiled_avx2.cpp), each exactly its scalar reference's float operations per (row, token), so a
// token's bytes never depend on the batch it is in.
//
// Integer lane sums are exact in any order (numerics.md §5); what each float lane receives is not:
// - Q4_K / Q5_K: levels are unsigned (0..15 / 0..31): maddubs(level, q8) then madd with the
//   sub-block scale gives the eight int32 lanes of the reference directly.
// - Q6_K (§5b): the unsigned levels u (0..63) go through the same maddubs + madd (2 * 63 * 128 <
//   32768: no saturation), then lane k loses 32 * (sc[2k] * bsums[2k] + sc[2k+1] * bsums[2k+1]),
//   one madd of the token's sixteen bsums with the row's sixteen scales times 32. That share of the offset,
//   not the one of the lane's own elements, is what makes each lane's integer, and so its fma's
//   rounding, the reference's.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

enum class KQuant { q4_K, q5_K, q6_K };

template <KQuant K>
constexpr int kBlockBytesOf = K == KQuant::q4_K ? 144 : K == KQuant::q5_K ? 176 : 210;

// Moves bit J of every byte of qh to bit 4 (0x10) and clears the rest. A 16-bit shift by at most 4
// to the left or 3 to the right never carries a bit into another byte's bit 4.
template <int J>
inline __m256i q5_high_bit(__m256i qh) {
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  if constexpr (J <= 4)
    return _mm256_and_si256(_mm256_slli_epi16(qh, 4 - J), bit4);
  else
    return _mm256_and_si256(_mm256_srli_epi16(qh, J - 4), bit4);
}

// The eight level vectors of a Q4_K (16-byte offset of qs) or Q5_K (qh at 16, qs at 48) block (the
// f32 route's decode).
template <KQuant K>
inline void unpack_levels_q45(const uint8_t* block, __m256i q[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const uint8_t* qs = block + (K == KQuant::q5_K ? 48 : 16);
  const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 0));
  const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32));
  const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64));
  const __m256i b3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 96));
  q[0] = _mm256_and_si256(b0, low4);
  q[1] = _mm256_and_si256(_mm256_srli_epi16(b0, 4), low4);
  q[2] = _mm256_and_si256(b1, low4);
  q[3] = _mm256_and_si256(_mm256_srli_epi16(b1, 4), low4);
  q[4] = _mm256_and_si256(b2, low4);
  q[5] = _mm256_and_si256(_mm256_srli_epi16(b2, 4), low4);
  q[6] = _mm256_and_si256(b3, low4);
  q[7] = _mm256_and_si256(_mm256_srli_epi16(b3, 4), low4);
  if constexpr (K == KQuant::q5_K) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16));
    q[0] = _mm256_or_si256(q[0], q5_high_bit<0>(qh));
    q[1] = _mm256_or_si256(q[1], q5_high_bit<1>(qh));
    q[2] = _mm256_or_si256(q[2], q5_high_bit<2>(qh));
    q[3] = _mm256_or_si256(q[3], q5_high_bit<3>(qh));
    q[4] = _mm256_or_si256(q[4], q5_high_bit<4>(qh));
    q[5] = _mm256_or_si256(q[5], q5_high_bit<5>(qh));
    q[6] = _mm256_or_si256(q[6], q5_high_bit<6>(qh));
    q[7] = _mm256_or_si256(q[7], q5_high_bit<7>(qh));
  }
}

// Q6_K (numerics.md §3): 32-element chunk c = 4n + r takes the low (r = 0, 1) or high (r = 2, 3)
// nibble of ql[64n + 32 (r & 1) + l] and bits 2r, 2r+1 of qh[32n + l]: the unsigned level u
// (the f32 route's decode; superblock_lanes decodes the same way chunk by chunk).
inline void unpack_levels_q6(const uint8_t* block, __m256i q[8]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x30);
  for (int n = 0; n < 2; ++n) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * n));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * n + 32));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 128 + 32 * n));
    // qh bits 2r, 2r+1 moved to bits 4, 5 (16-bit shifts, masked per byte afterwards).
    q[4 * n + 0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), two));
    q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), two));
    q[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, two));
    q[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                   _mm256_and_si256(_mm256_srli_epi16(h, 2), two));
  }
}

// Q6_K's scale vector of 32-element chunk c: scales[2c] on element pairs 0..7, scales[2c + 1] on
// 8..15 (src: the row's int16 scales 0..7, or 8..15 for c >= 4, in both halves).
template <int C>
inline __m256i q6_chunk_scales(__m256i src) {
  constexpr char a = char(2 * ((2 * C) & 7)), b = char(2 * ((2 * C + 1) & 7));
  return _mm256_shuffle_epi8(src, _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a,
                                                   a + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b,
                                                   b + 1, b, b + 1));
}

// isum[g] += madd(maddubs(level, q8 of token g at byte `at`), scale), g < G.
template <int G>
inline void sub_block(__m256i level, __m256i scale, const uint8_t* const* y, size_t at, __m256i* isum) {
  for (int g = 0; g < G; ++g) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[g] + at));
    isum[g] = _mm256_add_epi32(isum[g], _mm256_madd_epi16(_mm256_maddubs_epi16(level, a), scale));
    keep_in_register(isum[g]);
  }
}

// What a super-block's header gives the float steps: dd = [f32(d), f32(dmin), 0, 0] (Q6_K: [f32(d),
// 0, ..]) and, for Q4_K / Q5_K, the scales and mins as 16 bytes (sc[0..7], m[0..7]).
struct KHeader {
  __m128 dd;
  __m128i sm;
};

// One super-block x of a row against tokens 0 .. G-1 (token g's Q8_K blocks at y[g], this
// super-block's at byte blk): the eight int32 lanes of numerics.md §5 / §5b per token, exact. Lane k
// gets elements 4k .. 4k + 3 of every 32-element chunk times the chunk's scale (Q6_K: the scale of
// its 16-element half), less (Q6_K) lane k's share of the 32 offset, 32 * (sc[2k] bsums[2k] +
// sc[2k + 1] bsums[2k + 1]). The levels are decoded into registers chunk by chunk and used at once
// for every token of the group, so nothing is stored.
template <KQuant K, int G>
inline KHeader superblock_lanes(const uint8_t* x, const uint8_t* const* y, size_t blk, __m256i* isum, uint64_t ahead) {
  for (int l = 0; l < (kBlockBytesOf<K> + 63) / 64; ++l)
    _mm_prefetch(reinterpret_cast<const char*>(x + ahead + 64 * l), _MM_HINT_T0);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int g = 0; g < G; ++g) isum[g] = _mm256_setzero_si256();
  KHeader h;
  h.sm = _mm_setzero_si128();
  if constexpr (K == KQuant::q6_K) {
    // Unsigned levels u = code (0..63): 2 * 63 * 128 fits maddubs' int16; the offset below.
    const __m128i sc = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 192)));
    const __m128i sc_hi = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 200)));
    const __m256i all_lo = _mm256_broadcastsi128_si256(sc), all_hi = _mm256_broadcastsi128_si256(sc_hi);
    const __m256i two = _mm256_set1_epi8(0x30);
#define LMHEAD_Q6_HALF(N, SRC)                                                                                     \
    {                                                                                                              \
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * (N)));                       \
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * (N) + 32));                  \
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 128 + 32 * (N)));                 \
      sub_block<G>(_mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), two)),   \
                   q6_chunk_scales<4 * (N) + 0>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 0), isum);               \
      sub_block<G>(_mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), two)),   \
                   q6_chunk_scales<4 * (N) + 1>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 1), isum);               \
      sub_block<G>(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hb, two)),   \
                   q6_chunk_scales<4 * (N) + 2>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 2), isum);               \
      sub_block<G>(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),                               \
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), two)),                                \
                   q6_chunk_scales<4 * (N) + 3>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 3), isum);               \
    }
    LMHEAD_Q6_HALF(0, all_lo) LMHEAD_Q6_HALF(1, all_hi)
#undef LMHEAD_Q6_HALF
    // 32 * scale fits int16 (|.| <= 4096), so the offset's factor costs nothing per token.
    const __m256i sc32 = _mm256_slli_epi16(_mm256_set_m128i(sc_hi, sc), 5);
    for (int g = 0; g < G; ++g) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[g] + blk + kQ8KBsumsAt));
      isum[g] = _mm256_sub_epi32(isum[g], _mm256_madd_epi16(bs, sc32));
    }
    uint16_t dbits;
    std::memcpy(&dbits, x + 208, 2);
    h.dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dbits)));
  } else {
    h.sm = k_scales_mins_vec(x + 4);
    const __m256i pairs = scale_pairs(h.sm);
    const uint8_t* qs = x + (K == KQuant::q5_K ? 48 : 16);
    [[maybe_unused]] __m256i qh;
    if constexpr (K == KQuant::q5_K) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
#define LMHEAD_K_SUB(J, NIBBLE)                                                                                    \
    {                                                                                                              \
      __m256i level = NIBBLE;                                                                                      \
      if constexpr (K == KQuant::q5_K) level = _mm256_or_si256(level, q5_high_bit<J>(qh));                         \
      sub_block<G>(level, broadcast_pair(pairs, J), y, blk + kQ8KQsAt + 32 * (J), isum);                           \
    }
#define LMHEAD_K_PAIR(P)                                                                                           \
    {                                                                                                              \
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (P)));                       \
      LMHEAD_K_SUB(2 * (P), _mm256_and_si256(b, low4))                                                             \
      LMHEAD_K_SUB(2 * (P) + 1, _mm256_and_si256(_mm256_srli_epi16(b, 4), low4))                                   \
    }
    LMHEAD_K_PAIR(0) LMHEAD_K_PAIR(1) LMHEAD_K_PAIR(2) LMHEAD_K_PAIR(3)
#undef LMHEAD_K_PAIR
#undef LMHEAD_K_SUB
    uint32_t dd_bits;
    std::memcpy(&dd_bits, x, 4);
    h.dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd_bits)));
  }
  return h;
}

// Token-side values for a group of four tokens and one super-block (missing tokens zero): the
// bsum pairs bsums[2j] + bsums[2j + 1] (j = 0..7, int16; Q4_K / Q5_K mins), y.d and -y.d.
struct alignas(16) KTokens {  // 96 bytes: kernel_scratch_bytes allows more per group and super-block
  __m128i pairs[4];
  float yd[4];
  float neg_yd[4];
};

inline void prepare_k_tokens(const TokenActs& acts, int64_t nb, KTokens* cells) {
  for (int t0 = 0; t0 < acts.tokens; t0 += 4)
    for (int64_t i = 0; i < nb; ++i) {
      KTokens& cell = cells[(t0 / 4) * nb + i];
      for (int k = 0; k < 4; ++k) {
        if (t0 + k < acts.tokens) {
          const uint8_t* y = acts.data + size_t(t0 + k) * acts.stride + i * kQ8KBytes;
          cell.pairs[k] = bsum_pairs(y);
          cell.yd[k] = q8k_d(y);
          cell.neg_yd[k] = -q8k_d(y);
        } else {
          cell.pairs[k] = _mm_setzero_si128();
          cell.yd[k] = 0.0f;
          cell.neg_yd[k] = 0.0f;
        }
      }
    }
}

// A whole tile in groups of up to four tokens: Order::template group<G>(row, y, cells, nb, result, ahead)
// computes tokens 0 .. G-1 of a group (y[g]: token g's activation blocks, cells: the group's
// KTokens per super-block) against one row. Each super-block is decoded once per group; the row is
// re-read from L1 for the next group.
template <class Order>
void k_tile(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  KTokens* tok = static_cast<KTokens*>(scratch);
  prepare_k_tokens(acts, nb, tok);
  const uint64_t ahead = weight_prefetch_ahead();
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int t0 = 0; t0 < acts.tokens; t0 += 4) {
      const int g = acts.tokens - t0 < 4 ? acts.tokens - t0 : 4;
      const uint8_t* y[4];
      for (int k = 0; k < g; ++k) y[k] = acts.data + size_t(t0 + k) * acts.stride;
      const KTokens* cells = tok + (t0 / 4) * nb;
      float result[4];
      switch (g) {
        case 1: Order::template group<1>(row, y, cells, nb, result, ahead); break;
        case 2: Order::template group<2>(row, y, cells, nb, result, ahead); break;
        case 3: Order::template group<3>(row, y, cells, nb, result, ahead); break;
        default: Order::template group<4>(row, y, cells, nb, result, ahead); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(t0 + k) * out.stride + r] = result[k];
    }
  }
}

}  // namespace
}  // namespace lmhead::cpu::avx2
