// llama.cpp's tiled K-quant order (route tiled, and route llamacpp where llama.cpp tiles) for Q4_K,
// Q5_K and Q6_K heads with AVX2: byte for byte quant::llamacpp_dot(LlamaCppPath::tiled_kquant).
// Per 256-element super-block, with every integer exact (so formed in any order):
//   s1 = sum over sub-blocks of scale * (levels . q8)   (Q6_K: signed levels, the 32 offset taken
//                                                        off through the bsums, as in the default route)
//   s2 = sum over j of m[j] * (bsums[2j] + bsums[2j+1])  (Q4_K / Q5_K)
//   r = fma(-dmin, float(s2), float(s1) * d)            (Q6_K: r = float(s1) * d)
//   out = fma(r, y.d, out)                               super-block after super-block.
//
// The integer work is the default route's (kquant_avx2.hpp, q5k_avx2.cpp): per super-block the
// levels are decoded into registers once and each sub-block's maddubs + madd (scale applied in
// int16 pairs) goes to eight int32 lanes for up to four tokens. Where vec_dot converts those lanes
// and accumulates them in eight float lanes, this order sums them in integer to s1 (three hadds for
// four tokens), and the four tokens' float steps run in the four lanes of one SSE vector, one
// super-block late (see tiled_group). All three types decode in registers as q5k_avx2.cpp does
// (the default route's Q4_K and Q6_K kernels still unpack whole rows into L1 instead).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"
#include "cpu/kquant_avx2.hpp"
#include "cpu/simd_avx2.hpp"

namespace lmhead::cpu::avx2 {
namespace {

// Token-side values for a group of four tokens and one super-block (missing tokens zero).
struct alignas(16) TiledTokens {
  __m128i pairs[4];  // per token: bsums[2j] + bsums[2j+1] for j = 0..7, int16 (Q4_K / Q5_K)
  float yd[4];
};

void prepare_tiled(const TokenActs& acts, int64_t nb, TiledTokens* cells) {
  for (int t0 = 0; t0 < acts.tokens; t0 += 4)
    for (int64_t i = 0; i < nb; ++i) {
      TiledTokens& cell = cells[(t0 / 4) * nb + i];
      for (int k = 0; k < 4; ++k) {
        if (t0 + k < acts.tokens) {
          const uint8_t* y = acts.data + size_t(t0 + k) * acts.stride + i * kQ8KBytes;
          cell.pairs[k] = bsum_pairs(y);
          cell.yd[k] = q8k_d(y);
        } else {
          cell.pairs[k] = _mm_setzero_si128();
          cell.yd[k] = 0.0f;
        }
      }
    }
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

// Q6_K's scale vector of 32-element chunk c: scales[2c] on element pairs 0..7, scales[2c + 1] on
// 8..15 (src: the row's int16 scales 0..7, or 8..15 for c >= 4, in both halves).
template <int C>
inline __m256i q6_chunk_scales(__m256i src) {
  constexpr char a = char(2 * ((2 * C) & 7)), b = char(2 * ((2 * C + 1) & 7));
  return _mm256_shuffle_epi8(src, _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a,
                                                   a + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b,
                                                   b + 1, b, b + 1));
}

// Tokens 0 .. G-1 of a group (y[g]: token g's activation blocks) against one row: the tiled dots.
template <KQuant K, int G>
void tiled_group(const uint8_t* row, const uint8_t* const* y, const TiledTokens* tok, int64_t nb, float* result) {
  constexpr int kBytes = kBlockBytesOf<K>;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m128 out = _mm_setzero_ps();  // token g in lane g
  // The reference's float steps for one super-block, one rounding each, token g in lane g (dd: [d,
  // dmin, ..]). Each super-block's run one iteration late, after the next one's integer work: the
  // chain from the last madd to `out` (reductions, conversions, three roundings) is then off the
  // loop's critical path. On zeros they leave out = +0, the reference's start, so the first
  // iteration finishes a zero super-block.
  __m128i prev_s1 = _mm_setzero_si128(), prev_s2 = _mm_setzero_si128();
  __m128 prev_dd = _mm_setzero_ps(), prev_yd = _mm_setzero_ps();
  auto finish = [&out](__m128i s1, [[maybe_unused]] __m128i s2, __m128 dd, __m128 yd) {
    __m128 r = _mm_mul_ps(_mm_cvtepi32_ps(s1), _mm_broadcastss_ps(dd));
    if constexpr (K != KQuant::q6_K) {
      const __m128 neg_dmin = _mm_xor_ps(_mm_permute_ps(dd, _MM_SHUFFLE(1, 1, 1, 1)), _mm_set1_ps(-0.0f));
      r = _mm_fmadd_ps(neg_dmin, _mm_cvtepi32_ps(s2), r);
    }
    out = _mm_fmadd_ps(r, yd, out);
  };
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = row + i * kBytes;
    for (int l = 0; l < (kBytes + 63) / 64; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(x + kPrefetchAhead + 64 * l), _MM_HINT_T0);
    const size_t blk = size_t(i) * kQ8KBytes;
    __m256i isum[G];
    for (int g = 0; g < G; ++g) isum[g] = _mm256_setzero_si256();
    __m128i sm = _mm_setzero_si128();
    __m128 dd;  // [d, dmin, ...]
    if constexpr (K == KQuant::q6_K) {
      // Unsigned levels u = code (0..63): 2 * 63 * 128 fits maddubs' int16; the offset below.
      const __m128i sc = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 192)));
      const __m128i sc_hi = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 200)));
      const __m256i all_lo = _mm256_broadcastsi128_si256(sc), all_hi = _mm256_broadcastsi128_si256(sc_hi);
      const __m256i two = _mm256_set1_epi8(0x30);
#define LMHEAD_Q6_HALF(N, SRC)                                                                                     \
      {                                                                                                            \
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * (N)));                     \
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * (N) + 32));                \
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 128 + 32 * (N)));                \
        sub_block<G>(_mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), two)), \
                     q6_chunk_scales<4 * (N) + 0>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 0), isum);             \
        sub_block<G>(_mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), two)), \
                     q6_chunk_scales<4 * (N) + 1>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 1), isum);             \
        sub_block<G>(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, two)), \
                     q6_chunk_scales<4 * (N) + 2>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 2), isum);             \
        sub_block<G>(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),                             \
                                     _mm256_and_si256(_mm256_srli_epi16(h, 2), two)),                              \
                     q6_chunk_scales<4 * (N) + 3>(SRC), y, blk + kQ8KQsAt + 32 * (4 * (N) + 3), isum);             \
      }
      LMHEAD_Q6_HALF(0, all_lo) LMHEAD_Q6_HALF(1, all_hi)
#undef LMHEAD_Q6_HALF
      // The offset: 32 * sum over the 16 sub-blocks of scale * bsum, in the lanes as vec_dot has it
      // (the sum over the lanes is what counts here, and it is exact either way).
      const __m256i sc32 = _mm256_slli_epi16(_mm256_set_m128i(sc_hi, sc), 5);
      for (int g = 0; g < G; ++g) {
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[g] + blk + kQ8KBsumsAt));
        isum[g] = _mm256_sub_epi32(isum[g], _mm256_madd_epi16(bs, sc32));
      }
      uint16_t dbits;
      std::memcpy(&dbits, x + 208, 2);
      dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dbits)));
    } else {
      sm = k_scales_mins_vec(x + 4);
      const __m256i pairs = scale_pairs(sm);
      const uint8_t* qs = x + (K == KQuant::q5_K ? 48 : 16);
      [[maybe_unused]] __m256i qh;
      if constexpr (K == KQuant::q5_K) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
#define LMHEAD_TILED_SUB(J, NIBBLE)                                                                                \
      {                                                                                                            \
        __m256i level = NIBBLE;                                                                                    \
        if constexpr (K == KQuant::q5_K) level = _mm256_or_si256(level, q5_high_bit<J>(qh));                       \
        sub_block<G>(level, broadcast_pair(pairs, J), y, blk + kQ8KQsAt + 32 * (J), isum);                         \
      }
#define LMHEAD_TILED_PAIR(P)                                                                                       \
      {                                                                                                            \
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (P)));                     \
        LMHEAD_TILED_SUB(2 * (P), _mm256_and_si256(b, low4))                                                       \
        LMHEAD_TILED_SUB(2 * (P) + 1, _mm256_and_si256(_mm256_srli_epi16(b, 4), low4))                             \
      }
      LMHEAD_TILED_PAIR(0) LMHEAD_TILED_PAIR(1) LMHEAD_TILED_PAIR(2) LMHEAD_TILED_PAIR(3)
#undef LMHEAD_TILED_PAIR
#undef LMHEAD_TILED_SUB
      uint32_t dd_bits;
      std::memcpy(&dd_bits, x, 4);
      dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(dd_bits)));
    }

    finish(prev_s1, prev_s2, prev_dd, prev_yd);

    // s1 (and s2) of token g in lane g, exact.
    __m128i s1, s2 = _mm_setzero_si128();
    if constexpr (G == 1) {
      // Shuffles and adds (single micro-ops) rather than hadds.
      const __m128i v = _mm_add_epi32(_mm256_castsi256_si128(isum[0]), _mm256_extracti128_si256(isum[0], 1));
      if constexpr (K == KQuant::q6_K) {
        const __m128i h = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
        s1 = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 1, 1, 1)));
      } else {
        const __m128i m = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)), tok[i].pairs[0]);
        const __m128i h = _mm_add_epi32(_mm_unpacklo_epi64(v, m), _mm_unpackhi_epi64(v, m));  // [v02 v13 m02 m13]
        const __m128i both = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));  // [s1 s1 s2 s2]
        s1 = both;
        s2 = _mm_unpackhi_epi64(both, both);
      }
    } else {
      __m256i v[4];
      for (int g = 0; g < 4; ++g) v[g] = g < G ? isum[g] : _mm256_setzero_si256();
      const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
      s1 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      if constexpr (K != KQuant::q6_K) {
        const __m256i m = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sm, 8)));
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);  // [t0 t2 . . | t1 t3 . .] -> [t0 t1 t2 t3]
        const __m256i m01 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[0])));
        const __m256i m23 = _mm256_madd_epi16(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&tok[i].pairs[2])));
        const __m256i hm = _mm256_hadd_epi32(m01, m23);
        s2 = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_hadd_epi32(hm, hm), order));
      }
    }

    prev_s1 = s1;
    prev_s2 = s2;
    prev_dd = dd;
    prev_yd = _mm_load_ps(tok[i].yd);
  }
  finish(prev_s1, prev_s2, prev_dd, prev_yd);
  alignas(16) float o[4];
  _mm_store_ps(o, out);
  for (int g = 0; g < G; ++g) result[g] = o[g];
}

template <KQuant K>
void tiled_tile(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  const int64_t nb = tile.hidden / 256;
  TiledTokens* tok = static_cast<TiledTokens*>(scratch);
  prepare_tiled(acts, nb, tok);
  for (int64_t r = 0; r < tile.count; ++r) {
    const uint8_t* row = tile.rows + r * tile.row_bytes;
    for (int t0 = 0; t0 < acts.tokens; t0 += 4) {
      const int g = acts.tokens - t0 < 4 ? acts.tokens - t0 : 4;
      const uint8_t* y[4];
      for (int k = 0; k < g; ++k) y[k] = acts.data + size_t(t0 + k) * acts.stride;
      const TiledTokens* cells = tok + (t0 / 4) * nb;
      float result[4];
      switch (g) {
        case 1: tiled_group<K, 1>(row, y, cells, nb, result); break;
        case 2: tiled_group<K, 2>(row, y, cells, nb, result); break;
        case 3: tiled_group<K, 3>(row, y, cells, nb, result); break;
        default: tiled_group<K, 4>(row, y, cells, nb, result); break;
      }
      for (int k = 0; k < g; ++k) out.data[size_t(t0 + k) * out.stride + r] = result[k];
    }
  }
}

}  // namespace

void q4_K_tiled(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  tiled_tile<KQuant::q4_K>(tile, acts, out, scratch);
}
void q5_K_tiled(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  tiled_tile<KQuant::q5_K>(tile, acts, out, scratch);
}
void q6_K_tiled(const HeadTile& tile, const TokenActs& acts, const RawOut& out, void* scratch) {
  tiled_tile<KQuant::q6_K>(tile, acts, out, scratch);
}

}  // namespace lmhead::cpu::avx2
