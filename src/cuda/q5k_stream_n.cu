// The Q5_K head on the q8 route for T = 3..16 with the tokens in the MMA's N, streaming the weights
// into registers from the "sub-blocks" stream layout (stream_layout.hpp); byte-identical to
// numerics.md §5.
//
// The arithmetic is q5k_mma.cu's: one m16n8k32 MMA per float lane k and 8 tokens, K = the 32
// elements of lane k over the eight sub-blocks (thread q holds sub-blocks q and q + 4), the 6-bit
// scale folded into two u8 weight planes (sc = 8 s1 + s0, q5 * s < 256 per byte, so one 32-bit
// multiply per word), accumulators started at the bits of 1.5 * 2^23 so that
// float(isum) = (8 * (M + D1) - 9M) + (M + D0) exactly, with no int-to-float conversion. What
// changed is the way in, as for the stream kernel (q5k_stream.cu): the head is re-ordered at upload
// into 2,816-byte tile-major items whose words are ordered by the thread that reads them, levels
// packed for cheap decoding; a warp loads each item with eight contiguous 16/8-byte loads per
// thread straight into registers (no shared-memory staging, no copy bookkeeping) and keeps one item
// in flight while it computes the other.
//
// The tiled order (route tiled at every T, route llamacpp from 8 tokens on) keeps the integers and rounds as
// llama.cpp's tiled K-quant matmul does: no float lanes, so the eight lanes' MMAs chain their
// accumulators (C = the previous lane's D) and one pair of plane sums per (row, token) gives the
// slab's s1 = 8 D1 + D0 exactly; then r = fma(-dmin, s2, s1 * d) and out = fma(r, y.d, out) once
// per super-block (numerics.md, "The llama.cpp route"). One float accumulator per output instead of
// eight lanes and a mins chain: fewer registers, so more warps (docs/performance.md, CUDA attempt 39).
//
// The activations sit in shared memory as B fragments: per (super-block, token) and pair of lanes
// (2i, 2i + 1), the (b0, b1) words of thread q (sub-blocks q and q + 4) in one 16-byte run; token
// runs are 80 words apart so that the two tokens of a quarter-warp hit different banks.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "cuda/device_common.cuh"
#include "cuda/stream_item.cuh"
#include "cuda/stream_layout.hpp"
#include "cuda/tokens_n.cuh"

namespace lmhead::cuda {
namespace {

using tokens_n::Acc;
using tokens_n::TokenSmem;

template <int NT>
__device__ __forceinline__ void compute_item(const Item& it, int sb, const uint32_t* s_act, const uint4* s_bsp,
                                             const float* s_yd, int lane, Acc<NT, 8>& a) {
  constexpr int TTOT = 8 * NT;
  const int q = lane & 3;
  float dq[NT][2][2];
  float row_d[2], row_dmin[2];
  uint32_t s0a[2], s1a[2], s0b[2], s1b[2];  // planes of sc[q] (a) and sc[q + 4] (b), rows g, g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4 h = it.h[r];
    const float d = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu)));
    const float dmin = __half2float(__ushort_as_half(uint16_t(h.x >> 16)));
    const KScales ks = k_scales(h);
    row_d[r] = d;
    row_dmin[r] = dmin;
    const uint32_t sca = __byte_perm(ks.sc_lo, 0u, 0x4440u | unsigned(q));
    const uint32_t scb = __byte_perm(ks.sc_hi, 0u, 0x4440u | unsigned(q));
    s0a[r] = sca & 7u;
    s1a[r] = sca >> 3;
    s0b[r] = scb & 7u;
    s1b[r] = scb >> 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int tok = 8 * nt + 2 * q + c;
        const float yd = s_yd[sb * TTOT + tok];
        const uint4 bs = s_bsp[sb * TTOT + tok];
        dq[nt][c][r] = __fmul_rn(yd, d);
        const float dm = __fmul_rn(-yd, dmin);
        a.summs[nt][c][r] = __fmaf_rn(dm, k_mins_sum(bs, ks.m_lo, ks.m_hi), a.summs[nt][c][r]);
      }
  }

  // B: token 8 nt + g's run; bq[nt][i] = (b0, b1) of lane 2i, then of lane 2i + 1.
  uint4 bq[NT][4];
  tokens_n::load_b_runs<NT>(s_act, sb, lane, bq);

  uint32_t w[2][10];
  item_words(it, w);

#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t qa[2], qb[2];  // rows g, g + 8: lane k of sub-block q (a) and q + 4 (b)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      qa[r] = stream::level_word(w[r], 2 * k);
      qb[r] = stream::level_word(w[r], 2 * k + 1);
    }
    const uint32_t a1_0 = qa[0] * s1a[0], a1_1 = qa[1] * s1a[1], a1_2 = qb[0] * s1b[0], a1_3 = qb[1] * s1b[1];
    const uint32_t a0_0 = qa[0] * s0a[0], a0_1 = qa[1] * s0a[1], a0_2 = qb[0] * s0b[0], a0_3 = qb[1] * s0b[1];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint32_t b0 = word_of(bq[nt][k >> 1], 2 * (k & 1)), b1 = word_of(bq[nt][k >> 1], 2 * (k & 1) + 1);
      int d1[4], d0[4];
      mma_u8s8(d1, a1_0, a1_1, a1_2, a1_3, b0, b1, kMagicBits);
      mma_u8s8(d0, a0_0, a0_1, a0_2, a0_3, b0, b1, kMagicBits);
      // d[2r + c]: row g + 8r, token 8 nt + 2q + c.
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          a.acc[nt][c][r][k] = __fmaf_rn(dq[nt][c][r], plane_isum(d1[2 * r + c], d0[2 * r + c]), a.acc[nt][c][r][k]);
    }
  }
}

// The tiled order: per item the lanes' MMAs chained (8 D1 + D0 is the slab's s1, exact: |s1| < 2^26),
// the mins' s2 by two MMAs against the 16-element sums (tokens_n::tiled_accumulate).
template <int NT>
__device__ __forceinline__ void compute_item(const Item& it, int sb, const TokenSmem& s, int lane, Acc<NT, 1>& a) {
  const int q = lane & 3;
  const tokens_n::KRowHeaders h(it);
  uint32_t s0a[2], s1a[2], s0b[2], s1b[2];  // planes of sc[q] (a) and sc[q + 4] (b), rows g, g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t sca = __byte_perm(h.ks[r].sc_lo, 0u, 0x4440u | unsigned(q));
    const uint32_t scb = __byte_perm(h.ks[r].sc_hi, 0u, 0x4440u | unsigned(q));
    s0a[r] = sca & 7u;
    s1a[r] = sca >> 3;
    s0b[r] = scb & 7u;
    s1b[r] = scb >> 3;
  }

  uint4 bq[NT][4];
  tokens_n::load_b_runs<NT>(s.runs, sb, lane, bq);

  uint32_t w[2][10];
  item_words(it, w);

  int d1[NT][4], d0[NT][4];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t qa[2], qb[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      qa[r] = stream::level_word(w[r], 2 * k);
      qb[r] = stream::level_word(w[r], 2 * k + 1);
    }
    const uint32_t a1_0 = qa[0] * s1a[0], a1_1 = qa[1] * s1a[1], a1_2 = qb[0] * s1b[0], a1_3 = qb[1] * s1b[1];
    const uint32_t a0_0 = qa[0] * s0a[0], a0_1 = qa[1] * s0a[1], a0_2 = qb[0] * s0b[0], a0_3 = qb[1] * s0b[1];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint32_t b0 = word_of(bq[nt][k >> 1], 2 * (k & 1)), b1 = word_of(bq[nt][k >> 1], 2 * (k & 1) + 1);
      if (k == 0) {
        mma_u8s8(d1[nt], a1_0, a1_1, a1_2, a1_3, b0, b1, 0);
        mma_u8s8(d0[nt], a0_0, a0_1, a0_2, a0_3, b0, b1, 0);
      } else {
        mma_u8s8(d1[nt], a1_0, a1_1, a1_2, a1_3, b0, b1, d1[nt][0], d1[nt][1], d1[nt][2], d1[nt][3]);
        mma_u8s8(d0[nt], a0_0, a0_1, a0_2, a0_3, b0, b1, d0[nt][0], d0[nt][1], d0[nt][2], d0[nt][3]);
      }
    }
  }
  // d[2r + c]: row g + 8r, token 8 nt + 2q + c.
  int s1[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s1[nt][e] = 8 * d1[nt][e] + d0[nt][e];
  tokens_n::tiled_accumulate<NT>(s1, h, sb, s, lane, a);
}

// The activations of every (super-block, token slot) as B runs: token t's word (j, k) (q8 bytes
// 32j + 4k ..) goes to word 16 (k / 2) + 4 (j % 4) + 2 (k % 2) + j / 4 of its run.
template <int TTOT>
__device__ void stage_tokens(const HeadParams& p, uint32_t* s_act, int items) {
  tokens_n::stage_q8_runs<TTOT>(p, s_act, items,
                                [](int j, int k) { return 16 * (k >> 1) + 2 * (k & 1) + 4 * (j & 3) + (j >> 2); });
}

// The two orders on the sub-blocks layout, as tokens_n.cuh's formats.
struct SubblocksFormat {
  using Item = lmhead::cuda::Item;
  template <class Src = FromGlobal>
  __device__ static void load(Item& it, const uint8_t* item, int lane) {
    load_item<false, Src>(it, item, lane);
  }
  static constexpr int kItemBytes = stream::kItemBytes;
  static constexpr int kSumVecs = 1;
  template <int TTOT>
  __device__ static void stage_sums(const HeadParams& p, const TokenSmem& s, int items) {
    tokens_n::stage_token_sums<TTOT>(p, s, items);
  }
  __device__ static const uint8_t* weights(const HeadParams& p) { return p.stream_n_weights; }
  template <int TTOT>
  __device__ static void stage_runs(const HeadParams& p, uint32_t* runs, int items) { stage_tokens<TTOT>(p, runs, items); }
};
struct VecDotOrder : SubblocksFormat {
  static constexpr int kLanes = 8;
  template <int NT>
  __device__ static void compute(const Item& it, int sb, const TokenSmem& s, int lane, Acc<NT, 8>& a) {
    compute_item<NT>(it, sb, s.runs, s.bsp, s.yd, lane, a);
  }
};
struct TiledOrder : SubblocksFormat {
  static constexpr int kLanes = 1;
  static constexpr int kSumVecs = 2;  // tokens_n::stage_token_sums16 (the mins MMAs' B)
  template <int TTOT>
  __device__ static void stage_sums(const HeadParams& p, const TokenSmem& s, int items) {
    tokens_n::stage_token_sums16<TTOT>(p, s, items);
  }
  template <int NT>
  __device__ static void compute(const Item& it, int sb, const TokenSmem& s, int lane, Acc<NT, 1>& a) {
    compute_item<NT>(it, sb, s, lane, a);
  }
};

}  // namespace

size_t q5k_stream_n_smem(int groups, int tokens, bool llamacpp_tiled) {
  return tokens_n::smem_bytes(groups, tokens <= 8 ? 8 : 16, llamacpp_tiled ? TiledOrder::kSumVecs : VecDotOrder::kSumVecs);
}
size_t q5k_stream_n_staged_smem(int groups, int tokens, bool llamacpp_tiled, int warps) {
  const int sum_vecs = llamacpp_tiled ? TiledOrder::kSumVecs : VecDotOrder::kSumVecs;
  return tokens_n::staged_smem_bytes(groups, tokens <= 8 ? 8 : 16, sum_vecs, warps, 2, SubblocksFormat::kItemBytes);
}

// The same with the items staged by bulk copies (tokens_n::staged_kernel). vec_dot's order above 8
// tokens runs 8 warps, as above.
void launch_q5k_stream_n_staged(const HeadParams& p, int warps, bool llamacpp_tiled, bool pdl, int num_sms,
                                cudaStream_t stream) {
  if (p.T < 1 || p.T > kMaxTokens) throw Error("launch_q5k_stream_n_staged: 1 to 16 tokens per call");
  if (llamacpp_tiled) return tokens_n::launch_staged<TiledOrder>(p, warps, pdl, num_sms, stream);
  return tokens_n::launch_staged<VecDotOrder, true>(p, warps, pdl, num_sms, stream);
}

// warps: 8, 12 or 16 per block for T <= 8 (one tile of 8 tokens); T > 8 runs two tiles with 8 warps
// (the vec_dot order's 64 float accumulators per thread). The tiled order: tokens_n::launch_tiled.
void launch_q5k_stream_n(const HeadParams& p, int warps, bool llamacpp_tiled, bool pdl, int num_sms,
                         cudaStream_t stream) {
  if (p.T < 1 || p.T > kMaxTokens) throw Error("launch_q5k_stream_n: 1 to 16 tokens per call");
  if (llamacpp_tiled) return tokens_n::launch_tiled<TiledOrder>(p, warps, pdl, num_sms, stream);
  if (p.T > 8) return tokens_n::launch<VecDotOrder, 2, 8, 2>(p, pdl, num_sms, stream);
  if (warps >= 16) return tokens_n::launch<VecDotOrder, 1, 16, 2>(p, pdl, num_sms, stream);
  if (warps >= 12) return tokens_n::launch<VecDotOrder, 1, 12, 2>(p, pdl, num_sms, stream);
  return tokens_n::launch<VecDotOrder, 1, 8, 2>(p, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
