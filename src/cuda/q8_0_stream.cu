// The Q8_0 head on the q8 route for T <= 4, weights streamed into registers from the Q8_0 stream
// layout (stream::transcode_tile_q8_0), byte-identical to src/quant/vec_dot.cpp's dot_q8_0_q8_0:
//   per 32-element block: dprod = f32(w.d) * f32(a.d);  acc[k] = fma(dprod, float(isum[k]), acc[k])
//   with isum[k] = sum_b w.qs[4k + b] * a.qs[4k + b];  result = hsum(acc)
//
// The lanes split of the Q5_K kernel with the block as the sub-block: per block one m16n8k32 s8 x
// s8 MMA with the tile's 16 rows as A (the quants as they are) and the eight float lanes as N gives
// every isum[k] of the block at once; the float chain then runs per block (eight per item), not per
// super-block, with its own d product.
#include <cuda_runtime.h>

#include "cuda/q5k_lanes_math.cuh"
#include "cuda/stream_kernel.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

using namespace lanes_math;

// Shared memory: the lane runs, then per (item of 256 elements, token) the eight blocks' f32(a.d).
template <int TT>
struct Q80Smem : LaneRuns {
  float* ad;  // [items][8]
  __device__ Q80Smem(uint8_t* smem, int groups) : LaneRuns(smem, groups * TT), ad(reinterpret_cast<float*>(tail())) {}
};

struct Q80Stream {
  static constexpr int kItemBytes = stream::kQ80ItemBytes;
  struct Item {
    uint4 w[4][2];  // [W(4s) .. W(4s + 3)][row g, g + 8]
    uint4 d[2];     // the eight blocks' f16 d of rows g, g + 8
  };
  __device__ static void load(Item& it, const uint8_t* item, int lane) {
    const int g = lane >> 2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int s = 0; s < 4; ++s) it.w[s][r] = ldg_once128(item + 1024 * s + 512 * r + 16 * lane);
      it.d[r] = ldg_header(item + stream::kQ80D + 16 * (g + 8 * r));
    }
  }
  __host__ __device__ static size_t smem_bytes(int groups, int tt) {
    const size_t items = size_t(groups) * tt;
    return lane_runs_bytes(items) + items * 8 * 4;
  }
  template <int TT>
  __device__ static void stage(const HeadParams& p, uint8_t* smem) {
    const Q80Smem<TT> a(smem, p.groups);
    stage_lane_runs<TT>(p, a);
    for (int i = threadIdx.x; i < a.items * 8; i += blockDim.x) {
      const int it = i >> 3, b = i & 7, sb = it / TT, t = it - sb * TT;
      a.ad[i] = p.act_d[(size_t(sb) * 8 + b) * kMaxTokens + p.t0 + t];
    }
  }

  template <int TT>
  struct State : PlainLanes<TT> {
    using PlainLanes<TT>::acc;
    Q80Smem<TT> act;
    int act_off;
    __device__ State(uint8_t* smem, int groups, int lane) : act(smem, groups), act_off(act_offset(lane)) {}

    __device__ void compute(const Item& it, int sb) {
      uint4 bp[TT][4], ad[TT][2];
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        const int item = sb * TT + t;
        load_b_pairs(act.act + item * stream::kActWords, act.zero, act_off, bp[t]);
        ad[t][0] = lds128(act.ad + item * 8);
        ad[t][1] = lds128(act.ad + item * 8 + 4);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        // Operand a = 2j + h (lane q + 4h of block j) is word a % 4 of section a / 4.
        uint32_t wq[2], wq4[2];
        float dw[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          wq[r] = word_of(it.w[j >> 1][r], 2 * (j & 1));
          wq4[r] = word_of(it.w[j >> 1][r], 2 * (j & 1) + 1);
          dw[r] = f16_scale(word_of(it.d[r], j >> 1) >> (16 * (j & 1)));
        }
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          int dd[4];
          mma_s8s8(dd, wq[0], wq[1], wq4[0], wq4[1], word_of(bp[t][j >> 1], 2 * (j & 1)),
                   word_of(bp[t][j >> 1], 2 * (j & 1) + 1));
          const float a_d = __uint_as_float(word_of(ad[t][j >> 2], j & 3));
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float dprod = __fmul_rn(dw[r], a_d);
#pragma unroll
            for (int c = 0; c < 2; ++c) acc[t][r][c] = __fmaf_rn(dprod, __int2float_rn(dd[2 * r + c]), acc[t][r][c]);
          }
        }
      }
    }
  };
};

}  // namespace

size_t q8_0_stream_smem(int groups, int tokens) { return Q80Stream::smem_bytes(groups, tokens); }

void launch_q8_0_stream(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  launch_stream<Q80Stream, kStreamMaxTokens>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
