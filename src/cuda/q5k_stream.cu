// The Q5_K head on the q8 route for T <= 4, streaming the weights straight into registers from a
// transcoded copy of the head (stream_layout.hpp), byte-identical to numerics.md §5. Q4_K heads run
// the same kernel (kQ4): the same lane structure with 4-bit levels, and the four float lanes of
// the mins term that src/quant/vec_dot.cpp documents for Q4_K.
//
// The arithmetic is the lanes kernel's (q5k_lanes.cu): per sub-block j one m16n8k32 MMA with the
// 16 rows of a tile as A (raw 5-bit levels) and the eight float lanes k as N, so D[row][k] is lane
// k's 4-element sum of sub-block j; isum[k] += sc[j] * D in int32, then the exact chain
// acc[k] = fma(dq, float(isum[k]), acc[k]).
//
// What changed is the way in. The lanes kernel staged every super-block through shared memory
// (six cp.async per lane plus their address arithmetic, then 22 scalar shared loads per thread:
// ncu showed the shared-memory pipe 65 % busy and about 420 warp instructions per 16-row item).
// Here the upload re-orders the head into tile-major items (stream_layout.hpp) in which the words
// a thread needs are contiguous: a row costs a thread two 16-byte loads, one 8-byte load and the
// 16-byte header, every load instruction of a warp reads one contiguous run of whole lines, and
// nothing passes through shared memory. Each warp keeps one item (16 rows x one super-block) in
// flight in registers while it computes the previous one.
//
// The activations (q8 of every super-block and token, 256 bytes each) sit in shared memory as
// 16-byte runs of one lane k over four sub-blocks; B of the MMA is zero except where the fragment's
// K range is lane k = n, so the thread that owns that slot loads the run and every other thread
// loads from a block of zeros.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "cuda/device_common.cuh"
#include "cuda/q5k_lanes_math.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

using namespace lanes_math;

// D register buffers per warp: while one item is computed, D - 1 are in flight. kQ4: a Q4_K head
// (stream::transcode_tile_q4k), the same lane structure with 4-bit levels and four min lanes.
template <int TT, int NW, int D, bool kQ4>
__global__ void __launch_bounds__(NW * 32, 1) q5k_stream_kernel(const HeadParams p) {
  constexpr int kItemBytes = kQ4 ? stream::kQ4ItemBytes : stream::kItemBytes;
  extern __shared__ __align__(16) uint8_t smem[];

  const int G = p.groups;
  const ActSmem<TT> act(smem, G);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int total_warps = gridDim.x * NW;
  const uint8_t* weights = p.stream_weights;

  // The load cursor runs D items ahead of the computation.
  ItemWalk walk(p, blockIdx.x * NW + warp, total_warps, lane);
  Item buf[D];
  int buf_tile[D], buf_sb[D];
  auto load_next = [&](int d) {
    buf_tile[d] = walk.tile;
    buf_sb[d] = walk.sb;
    if (walk.done()) return;
    load_item<kQ4>(buf[d], weights + (int64_t(walk.tile) * G + walk.sb) * kItemBytes, lane);
    walk.step(p, lane);
  };
#pragma unroll
  for (int d = 0; d < D; ++d) load_next(d);

  pdl_wait();
  stage_activations<TT>(p, smem);
  __syncthreads();

  const int act_off = act_offset(lane);
  PartialBest best[TT];
  float acc[TT][2][2];  // [token][row g, g+8][lane 2q + c]
  float summs[TT][2][kMinLanes<kQ4>];
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    best[t] = best_empty();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int i = 0; i < kMinLanes<kQ4>; ++i) summs[t][r][i] = 0.0f;
      acc[t][r][0] = acc[t][r][1] = 0.0f;
    }
  }

  bool more = buf_tile[0] < walk.ntiles;
  while (more) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int tile = buf_tile[d], sb = buf_sb[d];
      if (tile >= walk.ntiles) { more = false; break; }
      compute_item<TT, kQ4>(buf[d], sb, act, act_off, acc, summs);
      load_next(d);
      if (sb == G - 1) finish_tile<TT, kQ4>(p, tile, lane, acc, summs, best);
    }
  }

  finish_block<TT, NW>(p, best);
}

template <int TT, int NW, int D, bool kQ4>
void launch_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  launch_head_kernel<q5k_stream_kernel<TT, NW, D, kQ4>>(dim3(num_sms), dim3(NW * 32), act_smem_bytes(p.groups, TT), pdl, stream, p);
}

// warps picks (warps per block, register buffers per warp) for T <= 2: 16 -> (16, 2), 12 -> (12, 3),
// 8 -> (8, 4); T = 3, 4 run 8 warps with 2 buffers (more accumulators per thread).
template <bool kQ4>
void launch_typed(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  switch (p.T * 100 + warps) {
    case 116: return launch_config<1, 16, 2, kQ4>(p, pdl, num_sms, stream);
    case 112: return launch_config<1, 12, 3, kQ4>(p, pdl, num_sms, stream);
    case 108: return launch_config<1, 8, 4, kQ4>(p, pdl, num_sms, stream);
    case 216: return launch_config<2, 16, 2, kQ4>(p, pdl, num_sms, stream);
    case 212: return launch_config<2, 12, 3, kQ4>(p, pdl, num_sms, stream);
    case 208: return launch_config<2, 8, 4, kQ4>(p, pdl, num_sms, stream);
    default: break;
  }
  if (p.T == 3) return launch_config<3, 8, 2, kQ4>(p, pdl, num_sms, stream);
  return launch_config<4, 8, 2, kQ4>(p, pdl, num_sms, stream);
}

}  // namespace

size_t q5k_stream_smem(int groups, int tokens) { return act_smem_bytes(groups, tokens); }

void launch_q5k_stream(const HeadParams& p, int warps, bool q4k, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T < 1 || p.T > kStreamMaxTokens) throw Error("launch_q5k_stream: 1 to 4 tokens per call");
  if (warps != 8 && warps != 12 && warps != 16) throw Error("launch_q5k_stream: 8, 12 or 16 warps per block");
  if (q4k) launch_typed<true>(p, warps, pdl, num_sms, stream);
  else launch_typed<false>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
