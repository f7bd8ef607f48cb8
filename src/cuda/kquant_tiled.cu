// Q4_K, Q5_K and Q6_K heads in llama.cpp's tiled K-quant order (route tiled at every T; route llamacpp
// where llama.cpp tiles) on the lanes stream layout (stream_layout.hpp), tokens in the MMA's N
// (tokens_n.cuh's kernel body).
//
// The lanes split gives thread q of a quad, per row and sub-block j, the levels of elements
// 32j + 4q .. 32j + 4q + 3 (A(2j)) and 32j + 16 + 4q .. + 3 (A(2j + 1)): exactly an m16n8k32 A
// fragment whose K is sub-block j. So one MMA per sub-block and token tile gives that sub-block's
// integer dot for 16 rows x 8 tokens, and its 6-bit scale multiplies it in int32: s1 += sc[j] * D
// (exact: |s1| < 2^26). Per item and token tile that is 8 MMAs and 32 multiply-adds, where the
// sub-blocks split (q5k_stream_n.cu, K = one lane over all sub-blocks) folds the scales into two
// planes: 16 MMAs and 64 multiplies of the level words. Then, as there, r = fma(-dmin, s2, s1 * d)
// and out = fma(r, y.d, out) once per super-block (numerics.md, "Route tiled").
//
// B in shared memory: per (super-block, token) a run of 64 words (tokens_n::run_word).
// Thread q's sixteen words, (word (j, q), word (j, q + 4)) for j = 0..7 (word (j, k) = q8 bytes
// 32j + 4k .. + 3), are four 16-byte chunks: chunk i holds j = 2i, 2i + 1 and sits at chunk position
// 4i + q of the run. The eight threads of a 16-byte load phase (tokens g, g + 1; q = 0..3) then read
// chunk positions 4i + q of two neighbouring runs, the odd one's swizzled: eight different bank groups.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/stream_item.cuh"
#include "cuda/stream_layout.hpp"
#include "cuda/tokens_n.cuh"

namespace lmhead::cuda {
namespace {

using tokens_n::Acc;
using tokens_n::TokenSmem;

// The B runs of the lanes split's K = one chunk: thread q's words (j, q) and (j, q + 4) of every
// chunk j (Q4_K, Q5_K, Q6_K).
struct LanesRuns {
  template <int TTOT>
  __device__ static void stage_runs(const HeadParams& p, uint32_t* runs, int items) {
    // Word (j, k) goes to chunk position 4 (j / 2) + k % 4, slot 2 (j % 2) + k / 4.
    tokens_n::stage_q8_runs<TTOT>(p, runs, items,
                                  [](int j, int k) { return 4 * (4 * (j >> 1) + (k & 3)) + 2 * (j & 1) + (k >> 2); });
  }
};

template <bool Q4>
struct LanesTiled : LanesRuns {
  using Item = lmhead::cuda::Item;
  template <class Src = FromGlobal>
  __device__ static void load(Item& it, const uint8_t* item, int lane) {
    load_item<Q4, Src>(it, item, lane);
  }
  static constexpr int kItemBytes = Q4 ? stream::kQ4ItemBytes : stream::kItemBytes;
  static constexpr int kLanes = 1;
  static constexpr int kSumVecs = 2;  // tokens_n::stage_token_sums16 (the mins MMAs' B)
  __device__ static const uint8_t* weights(const HeadParams& p) { return p.stream_weights; }
  template <int TTOT>
  __device__ static void stage_sums(const HeadParams& p, const TokenSmem& s, int items) {
    tokens_n::stage_token_sums16<TTOT>(p, s, items);
  }

  template <int NT>
  __device__ static void compute(const Item& it, int sb, const TokenSmem& s, int lane, Acc<NT, 1>& a) {
    const tokens_n::KRowHeaders h(it);

    // bq[nt][i]: (b0, b1) of sub-block 2i, then of 2i + 1, for token 8 nt + g.
    uint4 bq[NT][4];
    tokens_n::load_b_runs<NT>(s.runs, sb, lane, bq);

    uint32_t w[2][10];
    if constexpr (Q4) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        w[r][0] = it.w03[r].x; w[r][1] = it.w03[r].y; w[r][2] = it.w03[r].z; w[r][3] = it.w03[r].w;
        w[r][4] = it.w47[r].x; w[r][5] = it.w47[r].y; w[r][6] = it.w47[r].z; w[r][7] = it.w47[r].w;
      }
    } else {
      item_words(it, w);
    }

    int s1[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s1[nt][e] = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint32_t lo[2], hi[2];  // rows g, g + 8: A(2j) (K 4q ..) and A(2j + 1) (K 16 + 4q ..)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if constexpr (Q4) {
          lo[r] = stream::q4_level_word(w[r][j], 0);
          hi[r] = stream::q4_level_word(w[r][j], 1);
        } else {
          lo[r] = stream::level_word(w[r], 2 * j);
          hi[r] = stream::level_word(w[r], 2 * j + 1);
        }
      }
      const int sc0 = int(__byte_perm(j < 4 ? h.ks[0].sc_lo : h.ks[0].sc_hi, 0u, 0x4440u | unsigned(j & 3)));
      const int sc1 = int(__byte_perm(j < 4 ? h.ks[1].sc_lo : h.ks[1].sc_hi, 0u, 0x4440u | unsigned(j & 3)));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        int d[4];  // d[2r + c]: row g + 8r, token 8 nt + 2q + c
        mma_u8s8(d, lo[0], lo[1], hi[0], hi[1], word_of(bq[nt][j >> 1], 2 * (j & 1)),
                 word_of(bq[nt][j >> 1], 2 * (j & 1) + 1), 0);
        s1[nt][0] += sc0 * d[0];
        s1[nt][1] += sc0 * d[1];
        s1[nt][2] += sc1 * d[2];
        s1[nt][3] += sc1 * d[3];
      }
    }
    tokens_n::tiled_accumulate<NT>(s1, h, sb, s, lane, a);
  }
};

// Q6_K: sixteen 16-element sub-blocks with signed 8-bit scales, levels stored as u = q6 + 32 (0..63).
// A(2j) and A(2j + 1) are sub-blocks 2j and 2j + 1's elements 4q .. 4q + 3: each one m16n8k16 A
// fragment (K = one sub-block), so per chunk two MMAs, each D times its signed scale in int32. The
// offset, -32 times the scaled sums of the token's 16-element sums, is two more m16n8k16 MMAs per
// token tile: A = the row's sixteen scales as stored (word q = scales 4q .. 4q + 3, the fragment of
// K = 16), B = the low bytes (unsigned) and high bytes (signed) of the sums (|sum| <= 2,032). So
// s1 = sum_s sc[s] (u . q8)_s - 32 (256 O_hi + O_lo), exact (|s1| < 2^29), and
// out = fma(float(s1) * d, y.d, out) (numerics.md, "Route tiled").
struct Q6LanesTiled : LanesRuns {
  using Item = Q6Item;
  template <class Src = FromGlobal>
  __device__ static void load(Item& it, const uint8_t* item, int lane) {
    load_q6_item<Src>(it, item, lane);
  }
  static constexpr int kItemBytes = stream::kQ6ItemBytes;
  static constexpr int kLanes = 1;
  static constexpr int kSumVecs = 2;  // tokens_n::stage_token_sums16
  __device__ static const uint8_t* weights(const HeadParams& p) { return p.stream_weights; }

  template <int TTOT>
  __device__ static void stage_sums(const HeadParams& p, const TokenSmem& s, int items) {
    tokens_n::stage_token_sums16<TTOT>(p, s, items);
  }

  template <int NT>
  __device__ static void compute(const Item& it, int sb, const TokenSmem& s, int lane, Acc<NT, 1>& a) {
    constexpr int TTOT = 8 * NT;
    const int g = lane >> 2, q = lane & 3;
    uint32_t scw[2];  // scales 4q .. 4q + 3 of rows g, g + 8: the offset MMAs' A
#pragma unroll
    for (int r = 0; r < 2; ++r) scw[r] = word_of(it.sc[r], q);

    uint4 bq[NT][4];
    tokens_n::load_b_runs<NT>(s.runs, sb, lane, bq);
    int s1[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int item = sb * TTOT + 8 * nt + g;
      const uint32_t* sums = reinterpret_cast<const uint32_t*>(s.bsp + 2 * item);
      int olo[4], ohi[4];
      mma16_s8u8(olo, scw[0], scw[1], sums[q]);
      mma16_s8s8(ohi, scw[0], scw[1], sums[4 + q]);
#pragma unroll
      for (int e = 0; e < 4; ++e) s1[nt][e] = -32 * (256 * ohi[e] + olo[e]);
    }

    uint32_t w[2][12];
    q6_item_words(it, w);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint32_t lo[2], hi[2];  // rows g, g + 8: sub-block 2j's and 2j + 1's elements 4q .. 4q + 3
      int sca[2], scb[2];     // their signed scales
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        lo[r] = stream::q6_level_word(w[r], 2 * j);
        hi[r] = stream::q6_level_word(w[r], 2 * j + 1);
        const uint32_t word = word_of(it.sc[r], j >> 1);
        sca[r] = int(word << (24 - 16 * (j & 1))) >> 24;
        scb[r] = int(word << (16 - 16 * (j & 1))) >> 24;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        int d0[4], d1[4];  // d[2r + c]: row g + 8r, token 8 nt + 2q + c
        mma16_u8s8(d0, lo[0], lo[1], word_of(bq[nt][j >> 1], 2 * (j & 1)));
        mma16_u8s8(d1, hi[0], hi[1], word_of(bq[nt][j >> 1], 2 * (j & 1) + 1));
#pragma unroll
        for (int e = 0; e < 4; ++e) s1[nt][e] += sca[e >> 1] * d0[e] + scb[e >> 1] * d1[e];
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float yd = s.yd[sb * TTOT + 8 * nt + 2 * q + c];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float d = __half2float(__ushort_as_half(uint16_t(it.d >> (16 * r))));
          a.acc[nt][c][r][0] = __fmaf_rn(__fmul_rn(__int2float_rn(s1[nt][2 * r + c]), d), yd, a.acc[nt][c][r][0]);
        }
      }
  }
};

}  // namespace

static_assert(LanesTiled<true>::kSumVecs == Q6LanesTiled::kSumVecs && LanesTiled<false>::kSumVecs == Q6LanesTiled::kSumVecs);
size_t kquant_tiled_smem(int groups, int tokens) {
  return tokens_n::smem_bytes(groups, tokens <= 8 ? 8 : 16, Q6LanesTiled::kSumVecs);
}

size_t kquant_tiled_staged_smem(int groups, int tokens, TensorType type, int warps) {
  const int ttot = tokens <= 8 ? 8 : 16;
  const int item_bytes = type == TensorType::Q4_K   ? LanesTiled<true>::kItemBytes
                         : type == TensorType::Q6_K ? Q6LanesTiled::kItemBytes
                                                    : LanesTiled<false>::kItemBytes;
  return tokens_n::staged_smem_bytes(groups, ttot, Q6LanesTiled::kSumVecs, warps, 2, item_bytes);
}

void launch_kquant_tiled_staged(const HeadParams& p, int warps, TensorType type, bool pdl, int num_sms,
                                cudaStream_t stream) {
  if (p.T < 1 || p.T > kMaxTokens) throw Error("launch_kquant_tiled_staged: 1 to 16 tokens per call");
  switch (type) {
    case TensorType::Q4_K: return tokens_n::launch_staged<LanesTiled<true>>(p, warps, pdl, num_sms, stream);
    case TensorType::Q5_K: return tokens_n::launch_staged<LanesTiled<false>>(p, warps, pdl, num_sms, stream);
    case TensorType::Q6_K: return tokens_n::launch_staged<Q6LanesTiled>(p, warps, pdl, num_sms, stream);
    default: throw Error("launch_kquant_tiled_staged: Q4_K, Q5_K or Q6_K heads");
  }
}

void launch_kquant_tiled(const HeadParams& p, int warps, TensorType type, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T < 1 || p.T > kMaxTokens) throw Error("launch_kquant_tiled: 1 to 16 tokens per call");
  switch (type) {
    case TensorType::Q4_K: return tokens_n::launch_tiled<LanesTiled<true>>(p, warps, pdl, num_sms, stream);
    case TensorType::Q5_K: return tokens_n::launch_tiled<LanesTiled<false>>(p, warps, pdl, num_sms, stream);
    case TensorType::Q6_K: return tokens_n::launch_tiled<Q6LanesTiled>(p, warps, pdl, num_sms, stream);
    default: throw Error("launch_kquant_tiled: Q4_K, Q5_K or Q6_K heads");
  }
}

}  // namespace lmhead::cuda
