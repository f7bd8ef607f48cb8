#pragma once
// The K-quant (Q4_K, Q5_K, Q6_K) x Q8_K kernels' shared machinery, AVX2. Include only from
// *_avx2.cpp files (everything has internal linkage).
//
// Batch structure: a row is unpacked once per call into a scratch in L1 (per super-block: eight
// vectors of levels, eight vectors of per-sub-block scales, the mins or the offset correction, and
// the two f16 factors), then every token streams over it, four tokens at a time with their
// accumulators in registers. The float operations per (row, token) are exactly the scalar
// reference's in quant/vec_dot.cpp, so a token's bytes never depend on the batch it is in.
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

#include "cpu/kernels.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

enum class KQuant { q4_K, q5_K, q6_K };

template <KQuant K>
constexpr int kBlockBytesOf = K == KQuant::q4_K ? 144 : K == KQuant::q5_K ? 176 : 210;

// One super-block of a row, unpacked for every token.
struct alignas(32) UnpackedK {
  __m256i levels[8];  // sub-block j (32 elements) in element order, unsigned
  __m256i scales[8];  // int16 scale of each element pair of sub-block j
  __m256i extra;      // Q4/Q5: mins m[0..7] as int16 in both halves; Q6: 32 * scales[0..15] as int16
  float d, dmin;
  float pad[6];
};
static_assert(sizeof(UnpackedK) == 576, "kernel_scratch_bytes counts 576 B per unpacked super-block");

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

// The eight level vectors of a Q4_K (16-byte offset of qs) or Q5_K (qh at 16, qs at 48) block.
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
// (the offset 32 is taken off per lane, from the bsums, in dot_unpacked).
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

template <KQuant K>
inline void unpack_block(const uint8_t* x, UnpackedK& u) {
  if constexpr (K == KQuant::q6_K) {
    unpack_levels_q6(x, u.levels);
    // Chunk c: element pairs 0..7 take scales[2c], pairs 8..15 take scales[2c + 1] (int8, signed).
    const __m128i sc = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 192)));  // scales 0..7
    const __m128i sc_hi = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 200)));
    const __m256i all_lo = _mm256_broadcastsi128_si256(sc), all_hi = _mm256_broadcastsi128_si256(sc_hi);
    for (int c = 0; c < 8; ++c) {
      const __m256i src = c < 4 ? all_lo : all_hi;
      const int a = (2 * c) & 7, b = (2 * c + 1) & 7;  // int16 lanes of scales[2c], scales[2c+1]
      const __m256i pick = _mm256_setr_epi8(
          2 * a, 2 * a + 1, 2 * a, 2 * a + 1, 2 * a, 2 * a + 1, 2 * a, 2 * a + 1, 2 * a, 2 * a + 1, 2 * a, 2 * a + 1,
          2 * a, 2 * a + 1, 2 * a, 2 * a + 1, 2 * b, 2 * b + 1, 2 * b, 2 * b + 1, 2 * b, 2 * b + 1, 2 * b, 2 * b + 1,
          2 * b, 2 * b + 1, 2 * b, 2 * b + 1, 2 * b, 2 * b + 1, 2 * b, 2 * b + 1);
      u.scales[c] = _mm256_shuffle_epi8(src, pick);
    }
    // 32 * scale fits int16 (|.| <= 4096), so the offset's factor costs nothing per token.
    u.extra = _mm256_slli_epi16(_mm256_set_m128i(sc_hi, sc), 5);
    u.d = f16_at(x + 208);
    u.dmin = 0.0f;
  } else {
    unpack_levels_q45<K>(x, u.levels);
    const __m128i sm = k_scales_mins(x + 4);
    const __m256i pairs = scale_pairs(sm);
    for (int j = 0; j < 8; ++j) u.scales[j] = broadcast_pair(pairs, j);
    u.extra = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
    u.d = f16_at(x);
    u.dmin = f16_at(x + 2);
  }
}

template <KQuant K>
inline void unpack_row(const uint8_t* row, int64_t nb, UnpackedK* u) {
  for (int64_t i = 0; i < nb; ++i) unpack_block<K>(row + i * kBlockBytesOf<K>, u[i]);
}

// Token-side values, per super-block i and token t (tokens padded to a multiple of 8 with zeros,
// so eight tokens load as one vector): y.d, -y.d, the bsum pairs as int32 words
// (bsums[4p] + bsums[4p+1]) | (bsums[4p+2] + bsums[4p+3]) << 16 for p = 0..3, the quants
// copied 32-byte aligned, and (Q6_K) the sixteen bsums themselves, 32-byte aligned.
struct PreparedTokens {
  int tpad = 0;
  float* yd = nullptr;        // [nb][tpad]
  float* neg_yd = nullptr;    // [nb][tpad]
  int32_t* pairs = nullptr;   // [nb][4][tpad]
  uint8_t* qs = nullptr;      // [tokens][nb][256]
  int16_t* bsums = nullptr;   // Q6_K: [tokens][nb][16]
};

template <KQuant K>
PreparedTokens prepare_tokens(const TokenActs& acts, int64_t nb, uint8_t* mem) {
  PreparedTokens p;
  p.tpad = (acts.tokens + 7) / 8 * 8;
  const size_t cells = size_t(nb) * p.tpad;
  p.pairs = reinterpret_cast<int32_t*>(mem);
  p.yd = reinterpret_cast<float*>(p.pairs + 4 * cells);
  p.neg_yd = p.yd + cells;
  p.qs = reinterpret_cast<uint8_t*>(p.neg_yd + cells);
  p.bsums = reinterpret_cast<int16_t*>(p.qs + size_t(acts.tokens) * nb * 256);
  for (int64_t i = 0; i < nb; ++i)
    for (int t = 0; t < p.tpad; ++t) {
      const size_t c = size_t(i) * p.tpad + t;
      alignas(16) int32_t words[4] = {0, 0, 0, 0};
      if (t < acts.tokens) {
        const uint8_t* y = acts.data + size_t(t) * acts.stride + i * kQ8KBytes;
        p.yd[c] = q8k_d(y);
        p.neg_yd[c] = -q8k_d(y);
        _mm_store_si128(reinterpret_cast<__m128i*>(words), bsum_pairs(y));
        uint8_t* dst = p.qs + (size_t(t) * nb + i) * 256;
        for (int j = 0; j < 8; ++j) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + kQ8KQsAt + 32 * j));
          _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * j), q);
        }
        if constexpr (K == KQuant::q6_K)
          _mm256_store_si256(reinterpret_cast<__m256i*>(p.bsums + (size_t(t) * nb + i) * 16),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + kQ8KBsumsAt)));
      } else {
        p.yd[c] = 0.0f;
        p.neg_yd[c] = 0.0f;
      }
      for (int q = 0; q < 4; ++q) p.pairs[(size_t(i) * 4 + q) * p.tpad + t] = words[q];
    }
  return p;
}

// The mins terms of Q4_K / Q5_K for every token of the call, tokens in the lanes (eight per
// vector): imin for the sub-block pair q of token t is the int32 lane t of
// madd([bsum pair words of t], [m[2q], m[2q+1]]). Per super-block in order, lane by lane:
//   Q5_K: summs = fma(dm, float(sum over q of imin_q), summs)
//   Q4_K: acc_m[q] = fma(dm, float(imin_q), acc_m[q]), then (m0 + m2) + (m1 + m3)
// with dm = (-y.d) * f32(dmin): the reference's single roundings, token by token.
template <KQuant K>
void mins_terms(const UnpackedK* u, int64_t nb, const PreparedTokens& p, float* out) {
  for (int t0 = 0; t0 < p.tpad; t0 += 8) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; ++i) {
      const int32_t* m = reinterpret_cast<const int32_t*>(&u[i].extra);  // m[2q] | m[2q+1] << 16
      const int32_t* words = p.pairs + size_t(i) * 4 * p.tpad + t0;
      const __m256 dm = _mm256_mul_ps(_mm256_loadu_ps(p.neg_yd + size_t(i) * p.tpad + t0), _mm256_broadcast_ss(&u[i].dmin));
      __m256i imin[4];
      for (int q = 0; q < 4; ++q)
        imin[q] = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + q * p.tpad)),
                                    _mm256_set1_epi32(m[q]));
      if constexpr (K == KQuant::q5_K) {
        const __m256i all = _mm256_add_epi32(_mm256_add_epi32(imin[0], imin[1]), _mm256_add_epi32(imin[2], imin[3]));
        acc[0] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(all), acc[0]);
      } else {
        for (int q = 0; q < 4; ++q) acc[q] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(imin[q]), acc[q]);
      }
    }
    const __m256 sum = K == KQuant::q5_K
        ? acc[0]
        : _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    _mm256_storeu_ps(out + t0, sum);
  }
}

// Tokens t0 .. t0+G-1 (G = 1..4) against one unpacked row: the main lanes, reduced.
template <KQuant K, int G>
void dot_unpacked(const UnpackedK* u, int64_t nb, const PreparedTokens& p, int t0, float* result) {
  const uint8_t* qs[G];
  for (int g = 0; g < G; ++g) qs[g] = p.qs + size_t(t0 + g) * nb * 256;
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    __m256i isum[G];
    for (int g = 0; g < G; ++g) isum[g] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i w = _mm256_load_si256(&u[i].levels[j]);
      const __m256i s = _mm256_load_si256(&u[i].scales[j]);
      for (int g = 0; g < G; ++g) {
        const __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(qs[g] + i * 256 + 32 * j));
        isum[g] = _mm256_add_epi32(isum[g], _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), s));
        keep_in_register(isum[g]);
      }
    }
    const float* yd = p.yd + size_t(i) * p.tpad + t0;
    const __m256 d = _mm256_broadcast_ss(&u[i].d);
    for (int g = 0; g < G; ++g) {
      if constexpr (K == KQuant::q6_K) {
        const __m256i bs = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.bsums + (size_t(t0 + g) * nb + i) * 16));
        isum[g] = _mm256_sub_epi32(isum[g], _mm256_madd_epi16(bs, u[i].extra));
      }
      const __m256 dq = _mm256_mul_ps(_mm256_broadcast_ss(yd + g), d);
      acc[g] = _mm256_fmadd_ps(dq, _mm256_cvtepi32_ps(isum[g]), acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) result[g] = reduce_lanes(acc[g]);
}

// The whole tile: rows unpacked one at a time, tokens in groups of four.
template <KQuant K>
void kquant_tile(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  UnpackedK* u = static_cast<UnpackedK*>(scratch);
  const PreparedTokens p = prepare_tokens<K>(acts, nb, static_cast<uint8_t*>(scratch) + nb * sizeof(UnpackedK));
  alignas(32) float mins[kMaxKernelTokens];
  for (int64_t r = 0; r < tile.count; ++r) {
    unpack_row<K>(tile.rows + r * tile.row_bytes, nb, u);
    // The tokens below take long enough for the next row to arrive from DRAM meanwhile; without
    // this the next unpack stalls on every line (a fifth of the batch path's time).
    prefetch_bytes(tile.rows + (r + 1) * tile.row_bytes, tile.row_bytes);
    if constexpr (K != KQuant::q6_K) mins_terms<K>(u, nb, p, mins);
    for (int t0 = 0; t0 < acts.tokens; t0 += 4) {
      const int g = acts.tokens - t0 < 4 ? acts.tokens - t0 : 4;
      float result[4];
      switch (g) {
        case 1: dot_unpacked<K, 1>(u, nb, p, t0, result); break;
        case 2: dot_unpacked<K, 2>(u, nb, p, t0, result); break;
        case 3: dot_unpacked<K, 3>(u, nb, p, t0, result); break;
        default: dot_unpacked<K, 4>(u, nb, p, t0, result); break;
      }
      // The reference's last addition: main lanes reduced, plus the mins term.
      for (int k = 0; k < g; ++k)
        out.data[size_t(t0 + k) * out.stride + r] = K == KQuant::q6_K ? result[k] : result[k] + mins[t0 + k];
    }
  }
}

}  // namespace
}  // namespace lmhead::cpu::avx2
