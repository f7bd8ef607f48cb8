#pragma once
// The register stream kernel: one body for every head format that has a lanes-split stream layout
// (stream_layout.hpp). A format F supplies its item (the registers of one 16-row item), how a
// thread loads it, how the block stages the activations, and the per-thread state that folds an
// item into the exact float chains and finishes a tile:
//
//   struct F {
//     static constexpr int kItemBytes;
//     struct Item;
//     static void load(Item&, const uint8_t* item, int lane);
//     static size_t smem_bytes(int groups, int tt);
//     template <int TT> static void stage(const HeadParams&, uint8_t* smem);   // after pdl_wait
//     template <int TT> struct State {
//       State(uint8_t* smem, int groups, int lane);
//       void compute(const Item&, int sb);
//       void finish(const HeadParams&, int tile, int lane, PartialBest (&best)[TT]);
//     };
//   };
//
// Instantiated by q5k_stream.cu (Q5_K, Q4_K), q6k_stream.cu and q8_0_stream.cu.
#include <cuda_runtime.h>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.hpp"
#include "cuda/stream_item.cuh"

namespace lmhead::cuda {

// D register buffers per warp: while one item is computed, D - 1 are in flight.
template <class F, int TT, int NW, int D>
__global__ void __launch_bounds__(NW * 32, 1) stream_head_kernel(const HeadParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  stamp_block(p, 0);
  const int G = p.groups;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // The load cursor runs D items ahead of the computation; the first loads are issued before the
  // wait for the prep kernel (programmatic dependent launch), which they do not depend on.
  ItemWalk walk(p, blockIdx.x * NW + warp, gridDim.x * NW, lane);
  typename F::Item buf[D];
  int buf_tile[D], buf_sb[D];
  auto load_next = [&](int d) {
    buf_tile[d] = walk.tile;
    buf_sb[d] = walk.sb;
    if (walk.done()) return;
    F::load(buf[d], p.stream_weights + (int64_t(walk.tile) * G + walk.sb) * F::kItemBytes, lane);
    walk.step(p, lane);
  };
#pragma unroll
  for (int d = 0; d < D; ++d) load_next(d);

  pdl_wait();
  F::template stage<TT>(p, smem);
  __syncthreads();
  stamp_block(p, 1);

  typename F::template State<TT> state(smem, G, lane);
  PartialBest best[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) best[t] = best_empty();

  bool more = buf_tile[0] < walk.ntiles;
  while (more) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int tile = buf_tile[d], sb = buf_sb[d];
      if (tile >= walk.ntiles) { more = false; break; }
      state.compute(buf[d], sb);
      load_next(d);
      if (sb == G - 1) state.finish(p, tile, lane, best);
    }
  }

  finish_block<TT, NW>(p, best);
}

template <class F, int TT, int NW, int D>
void launch_stream_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  launch_head_kernel<stream_head_kernel<F, TT, NW, D>>(dim3(num_sms), dim3(NW * 32), F::smem_bytes(p.groups, TT), pdl,
                                                       stream, p);
}

// One pass over the weights for the p.tc tokens from p.t0 (at most MaxTT: 2 or kStreamMaxTokens;
// only the configurations a plan runs are built).
// warps picks (warps per block, register buffers per warp) for T <= 2: 16 -> (16, 2), 12 -> (12, 3),
// 8 -> (8, 4); T = 3, 4 run 8 warps with 2 buffers (more accumulators per thread).
template <class F, int MaxTT>
void launch_stream(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  static_assert(MaxTT == 2 || MaxTT == kStreamMaxTokens);
  if (p.tc < 1 || p.tc > MaxTT) throw Error("stream kernel: 1 to " + std::to_string(MaxTT) + " tokens per pass");
  if (warps != 8 && warps != 12 && warps != 16) throw Error("stream kernel: 8, 12 or 16 warps per block");
  switch (p.tc * 100 + warps) {
    case 116: return launch_stream_config<F, 1, 16, 2>(p, pdl, num_sms, stream);
    case 112: return launch_stream_config<F, 1, 12, 3>(p, pdl, num_sms, stream);
    case 108: return launch_stream_config<F, 1, 8, 4>(p, pdl, num_sms, stream);
    case 216: return launch_stream_config<F, 2, 16, 2>(p, pdl, num_sms, stream);
    case 212: return launch_stream_config<F, 2, 12, 3>(p, pdl, num_sms, stream);
    case 208: return launch_stream_config<F, 2, 8, 4>(p, pdl, num_sms, stream);
    default: break;
  }
  if constexpr (MaxTT > 2) {
    if (p.tc == 3) return launch_stream_config<F, 3, 8, 2>(p, pdl, num_sms, stream);
    return launch_stream_config<F, 4, 8, 2>(p, pdl, num_sms, stream);
  }
}

}  // namespace lmhead::cuda
