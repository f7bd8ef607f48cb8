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

#include "cuda/q5k_lanes_math.cuh"
#include "cuda/stream_kernel.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

using namespace lanes_math;

// kQ4: a Q4_K head (stream::transcode_tile_q4k), the same lane structure with 4-bit levels and four
// min lanes.
template <bool kQ4>
struct KQuantStream {
  static constexpr int kItemBytes = kQ4 ? stream::kQ4ItemBytes : stream::kItemBytes;
  using Item = lmhead::cuda::Item;
  __device__ static void load(Item& it, const uint8_t* item, int lane) { load_item<kQ4>(it, item, lane); }
  __host__ __device__ static size_t smem_bytes(int groups, int tt) { return act_smem_bytes(groups, tt); }
  template <int TT>
  __device__ static void stage(const HeadParams& p, uint8_t* smem) { stage_activations<TT>(p, smem); }

  template <int TT>
  struct State {
    ActSmem<TT> act;
    int act_off;
    float acc[TT][2][2];  // [token][row g, g+8][lane 2q + c]
    float summs[TT][2][kMinLanes<kQ4>];
    __device__ State(uint8_t* smem, int groups, int lane) : act(smem, groups), act_off(act_offset(lane)) {
#pragma unroll
      for (int t = 0; t < TT; ++t)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int i = 0; i < kMinLanes<kQ4>; ++i) summs[t][r][i] = 0.0f;
          acc[t][r][0] = acc[t][r][1] = 0.0f;
        }
    }
    __device__ void compute(const Item& it, int sb) { compute_item<TT, kQ4>(it, sb, act, act_off, acc, summs); }
    __device__ void finish(const HeadParams& p, int tile, int lane, PartialBest (&best)[TT]) {
      finish_tile<TT, kQ4>(p, tile, lane, acc, summs, best);
    }
  };
};

}  // namespace

size_t q5k_stream_smem(int groups, int tokens) { return act_smem_bytes(groups, tokens); }

void launch_q5k_stream(const HeadParams& p, int warps, bool q4k, bool pdl, int num_sms, cudaStream_t stream) {
  // Passes of up to two tokens: Q5_K runs T >= 3 in its tokens-in-N kernel; Q4_K's two passes of
  // two beat one of four (docs/performance.md).
  if (q4k) launch_stream<KQuantStream<true>, 2>(p, warps, pdl, num_sms, stream);
  else launch_stream<KQuantStream<false>, 2>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
