// The Q6_K head on the q8 route for T <= 4, weights streamed into registers from the Q6_K stream
// layout (stream::transcode_tile_q6k), byte-identical to src/quant/vec_dot.cpp's dot_q6_K_q8_K
// (numerics.md §5b):
//   d = y.d * f32(x.d);  pos[k] = sum_j scales[2j + k / 4] * sum_b u(32j + 4k + b) * q8(...)
//   isum[k] = pos[k] - 32 * (scales[2k] * bsums[2k] + scales[2k+1] * bsums[2k+1])
//   acc[k] = fma(d, float(isum[k]), acc[k]);  result = hsum(acc)  (no mins term)
//
// The lanes split of the Q5_K kernel: per 32-element chunk j one m16n8k32 MMA with the tile's 16
// rows as A and the eight float lanes as N. A holds the unsigned levels u = q6 + 32 (0..63, the
// layout's twelve words decode them in 36 operations per row). Lane k's integer starts at its
// share of the offset, -32 times groups 2k and 2k+1's scaled bsums, not at the offset of its own
// elements: the eight totals are the same integer, but which lane holds what decides how the
// fma's round. Both C columns of a thread (lanes 2q, 2q + 1) lie in the same 16-element half of
// the chunk, so they share one signed scale, taken from the row's 16 scale bytes by two shifts;
// their offset shares use scale bytes 4q .. 4q+3, the same word q of the row's scales.
//
// kTiled (route llamacpp from 8 tokens on): the same integers, rounded as llama.cpp's tiled K-quant
// matmul does. The eight lanes' integers of a super-block add up (exactly: two per thread, then
// across the four threads of a quad) to the slab's s1, and out = fma(float(s1) * d, y.d, out) once per
// super-block; acc[t][r][0] holds `out`, identical in the quad.
#include <cuda_runtime.h>

#include "cuda/q5k_lanes_math.cuh"
#include "cuda/stream_kernel.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

using namespace lanes_math;

// Shared memory: the lane runs, then per (super-block, token) the sixteen 16-element bsums as
// int16 pairs (word m: bsums[2m] low, bsums[2m + 1] high; a thread reads words 2q, 2q + 1 in one
// 8-byte load) and y.d.
template <int TT>
struct Q6Smem : LaneRuns {
  uint32_t* bsp;  // [items][8]
  float* yd;      // [items]
  __device__ Q6Smem(uint8_t* smem, int groups) : LaneRuns(smem, groups * TT) {
    bsp = reinterpret_cast<uint32_t*>(tail());
    yd = reinterpret_cast<float*>(bsp + size_t(items) * 8);
  }
};

template <bool kTiled>
struct Q6Stream {
  static constexpr int kItemBytes = stream::kQ6ItemBytes;
  using Item = Q6Item;
  __device__ static void load(Item& it, const uint8_t* item, int lane) { load_q6_item(it, item, lane); }
  __host__ __device__ static size_t smem_bytes(int groups, int tt) {
    const size_t items = size_t(groups) * tt;
    return lane_runs_bytes(items) + items * (8 * 4 + 4);
  }
  template <int TT>
  __device__ static void stage(const HeadParams& p, uint8_t* smem) {
    const Q6Smem<TT> a(smem, p.groups);
    stage_lane_runs<TT>(p, a);
    for (int i = threadIdx.x; i < a.items * 8; i += blockDim.x) {
      const int it = i >> 3, m = i & 7, sb = it / TT, t = it - sb * TT;
      const int8_t* q8 = p.act_qs + (size_t(sb) * kMaxTokens + p.t0 + t) * kActPitch + 32 * m;
      const uint4 lo = *reinterpret_cast<const uint4*>(q8), hi = *reinterpret_cast<const uint4*>(q8 + 16);
      int s0 = 0, s1 = 0;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        s0 = __dp4a(int(word_of(lo, w)), 0x01010101, s0);
        s1 = __dp4a(int(word_of(hi, w)), 0x01010101, s1);
      }
      a.bsp[i] = (uint32_t(s0) & 0xFFFFu) | (uint32_t(s1) << 16);
    }
    for (int i = threadIdx.x; i < a.items; i += blockDim.x) {
      const int sb = i / TT, t = i - sb * TT;
      a.yd[i] = p.act_d[size_t(sb) * kMaxTokens + p.t0 + t];
    }
  }

  template <int TT>
  struct State : PlainLanes<TT> {
    using PlainLanes<TT>::acc;
    Q6Smem<TT> act;
    int act_off, q;
    int up[2];  // left shift that puts scale byte 2h + q / 2 of a word at the top
    __device__ State(uint8_t* smem, int groups, int lane) : act(smem, groups), act_off(act_offset(lane)), q(lane & 3) {
#pragma unroll
      for (int h = 0; h < 2; ++h) up[h] = 24 - 8 * (2 * h + (q >> 1));
    }

    __device__ void compute(const Item& it, int sb) {
      float dq[TT][2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float d = f16_scale(it.d >> (16 * r));
#pragma unroll
        for (int t = 0; t < TT; ++t) dq[t][r] = __fmul_rn(act.yd[sb * TT + t], d);
      }
      uint4 bp[TT][4];
      uint2 bs[TT];
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        const int item = sb * TT + t;
        load_b_pairs(act.act + item * stream::kActWords, act.zero, act_off, bp[t]);
        bs[t] = *reinterpret_cast<const uint2*>(act.bsp + item * 8 + 2 * q);
      }
      uint32_t w[2][12];
      q6_item_words(it, w);
      int isum[TT][2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int scw = int(word_of(it.sc[r], q));  // signed scales 4q .. 4q+3 of the row
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          isum[t][r][0] = -32 * __dp2a_lo(int(bs[t].x), scw, 0);
          isum[t][r][1] = -32 * __dp2a_hi(int(bs[t].y), scw, 0);
        }
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t wq[2], wq4[2];
        int s[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          wq[r] = stream::q6_level_word(w[r], 2 * j);
          wq4[r] = stream::q6_level_word(w[r], 2 * j + 1);
          s[r] = int(word_of(it.sc[r], j >> 1) << up[j & 1]) >> 24;  // arithmetic shift: the signed byte
        }
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          int dd[4];
          mma_u8s8(dd, wq[0], wq[1], wq4[0], wq4[1], word_of(bp[t][j >> 1], 2 * (j & 1)),
                   word_of(bp[t][j >> 1], 2 * (j & 1) + 1), 0);
          isum[t][0][0] += s[0] * dd[0];
          isum[t][0][1] += s[0] * dd[1];
          isum[t][1][0] += s[1] * dd[2];
          isum[t][1][1] += s[1] * dd[3];
        }
      }
      if constexpr (kTiled) {
#pragma unroll
        for (int t = 0; t < TT; ++t)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            int s1 = isum[t][r][0] + isum[t][r][1];
            s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
            s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
            const float d = f16_scale(it.d >> (16 * r));
            acc[t][r][0] = __fmaf_rn(__fmul_rn(__int2float_rn(s1), d), act.yd[sb * TT + t], acc[t][r][0]);
          }
      } else {
#pragma unroll
        for (int t = 0; t < TT; ++t)
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int c = 0; c < 2; ++c) acc[t][r][c] = __fmaf_rn(dq[t][r], __int2float_rn(isum[t][r][c]), acc[t][r][c]);
      }
    }

    __device__ void finish(const HeadParams& p, int tile, int lane, PartialBest (&best)[TT]) {
      if constexpr (!kTiled) {
        PlainLanes<TT>::finish(p, tile, lane, best);
      } else {
        const int g = lane >> 2, V = p.vocab;
#pragma unroll
        for (int t = 0; t < TT; ++t)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = tile * kTileRows + g + 8 * r;
            if (q == 0 && row < V && t < p.tc) {
              const float biased = add_head_bias(acc[t][r][0], p, row);
              const float capped = apply_cap(biased, p);
              p.logits[size_t(p.t0 + t) * V + row] = capped;
              if (p.raw) p.raw[size_t(p.t0 + t) * V + row] = biased;
              best[t] = best_merge(best[t], best_single(capped, row));
            }
            acc[t][r][0] = acc[t][r][1] = 0.0f;
          }
      }
    }
  };
};

}  // namespace

size_t q6k_stream_smem(int groups, int tokens) { return Q6Stream<false>::smem_bytes(groups, tokens); }

void launch_q6k_stream(const HeadParams& p, int warps, bool llamacpp_tiled, bool pdl, int num_sms, cudaStream_t stream) {
  if (llamacpp_tiled) return launch_stream<Q6Stream<true>, kStreamMaxTokens>(p, warps, pdl, num_sms, stream);
  launch_stream<Q6Stream<false>, kStreamMaxTokens>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
