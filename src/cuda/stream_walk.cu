// A measuring tool, not a head: the register stream kernel (stream_kernel.cuh) walking the Q5_K
// stream layout with the real item loads, buffers and tile hand-out, but with the arithmetic
// replaced by an XOR of the loaded words. Its time is the ceiling of this access pattern with this
// many bytes in flight; the gap between it and the Q5_K kernel is the cost of the arithmetic and
// its latency, the gap between it and the read ceiling is the cost of the pattern. Selected by
// Tuning::stream_walk_only (the logits it leaves are meaningless); bench/cuda_bench.cpp prints it.
#include <cuda_runtime.h>

#include "cuda/stream_kernel.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

struct WalkOnly {
  static constexpr int kItemBytes = stream::kItemBytes;
  using Item = lmhead::cuda::Item;
  __device__ static void load(Item& it, const uint8_t* item, int lane) { load_item<false>(it, item, lane); }
  __host__ __device__ static size_t smem_bytes(int, int) { return 16; }
  template <int TT>
  __device__ static void stage(const HeadParams&, uint8_t*) {}

  template <int TT>
  struct State {
    uint32_t x = 0;
    __device__ State(uint8_t*, int, int) {}
    __device__ void compute(const Item& it, int) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        x ^= it.w03[r].x ^ it.w03[r].y ^ it.w03[r].z ^ it.w03[r].w ^ it.w47[r].x ^ it.w47[r].y ^ it.w47[r].z ^
             it.w47[r].w ^ it.w89[r].x ^ it.w89[r].y ^ it.h[r].x ^ it.h[r].y ^ it.h[r].z ^ it.h[r].w;
    }
    __device__ void finish(const HeadParams& p, int tile, int lane, PartialBest (&)[TT]) {
      if (x == 0x9E3779B9u) p.logits[tile * stream::kTileRows + (lane & 15)] = 0.0f;  // keeps every load alive
    }
  };
};

}  // namespace

void launch_stream_walk(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  launch_stream<WalkOnly>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
