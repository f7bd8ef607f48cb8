// The Q5_K head on the q8 route for T <= 2, with the weights staged in shared memory by the TMA
// unit from the stream layout (stream_layout.hpp); byte-identical to numerics.md §5.
//
// Why: the register-streaming kernel (q5k_stream.cu) keeps one 16-row item per warp in flight,
// about 45 KB per SM; ncu showed it latency-bound (DRAM 72 %, 4.9 of 8.7 cycles between issues
// waiting on global loads, only 0.7 eligible warps per scheduler). Here each warp owns a ring of S
// shared-memory stages; one lane issues one bulk copy per item (the item is 2,816 contiguous bytes
// in the tile-major stream layout) completing on the stage's mbarrier, so S - 1 items per warp
// (135 KB per SM with 16 warps and S = 4) are in flight for a handful of instructions per item.
// The warp then reads its item with four conflict-free shared loads per row (consecutive lanes,
// consecutive 16-byte slots) and runs the same item arithmetic as the stream kernel
// (q5k_lanes_math.cuh).
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "cuda/q5k_lanes_math.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

using namespace lanes_math;

constexpr int kStageBytes = stream::kItemBytes;  // 2816 = 22 x 128
static_assert(kStageBytes % 128 == 0, "TMA destinations must stay 128-byte aligned");

template <int TT, int NW, int S>
__global__ void __launch_bounds__(NW * 32, 1) q5k_tma_kernel(const HeadParams p) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t s_full[NW][S];
  __shared__ int s_item_tile[NW][S];
  __shared__ int s_item_sb[NW][S];

  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~uintptr_t(127));
  const int G = p.groups;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int V = p.vocab;
  const int ntiles = (V + kTileRows - 1) / kTileRows;
  const int total_warps = gridDim.x * NW;
  uint8_t* stages = smem + size_t(warp) * S * kStageBytes;
  const ActSmem<TT> act(smem + size_t(NW) * S * kStageBytes, G);

  if (lane == 0) {
    for (int s = 0; s < S; ++s) mbar_init(&s_full[warp][s], 1);
    mbar_init_fence();
  }
  __syncwarp();

  // Tiles: two static ones per warp, then a dynamic hand-out fetched a whole tile ahead.
  int itile = blockIdx.x * NW + warp, isb = 0;
  int next_tile = itile + total_warps;
  int pending = 0;
  if (lane == 0) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
  int issued = 0;
  auto issue = [&](int slot) {
    if (lane == 0) {
      s_item_tile[warp][slot] = itile < ntiles ? itile : -1;
      s_item_sb[warp][slot] = isb;
      if (itile < ntiles) {
        // The stage was last read through the generic proxy; order that before the async write.
        fence_proxy_async_shared();
        mbar_expect_tx(&s_full[warp][slot], kStageBytes);
        bulk_load(stages + slot * kStageBytes, p.stream_weights + (int64_t(itile) * G + isb) * stream::kItemBytes,
                  kStageBytes, &s_full[warp][slot]);
      }
    }
    if (itile < ntiles && ++isb == G) {
      isb = 0;
      itile = next_tile;
      next_tile = __shfl_sync(0xffffffffu, pending, 0);
      if (lane == 0 && next_tile < ntiles) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
    }
    ++issued;
  };
#pragma unroll
  for (int s = 0; s < S; ++s) issue(s);

  pdl_wait();
  stage_activations<TT>(p, smem + size_t(NW) * S * kStageBytes);
  __syncthreads();

  const int act_off = act_offset(lane);
  PartialBest best[TT];
  float acc[TT][2][2];
  float summs[TT][2][1];
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    best[t] = best_empty();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      summs[t][r][0] = 0.0f;
      acc[t][r][0] = acc[t][r][1] = 0.0f;
    }
  }

  uint32_t phases = 0;
  int slot = 0;
  for (;;) {
    __syncwarp();
    const int tile = s_item_tile[warp][slot];
    const int sb = s_item_sb[warp][slot];
    if (tile < 0) break;
    mbar_wait(&s_full[warp][slot], (phases >> slot) & 1u);
    phases ^= 1u << slot;

    Item it;
    load_item<false, FromShared>(it, stages + slot * kStageBytes, lane);
    __syncwarp();
    issue(slot);  // refill the stage while this item is computed from registers

    compute_item<TT>(it, sb, act, act_off, acc, summs);
    if (sb == G - 1) finish_tile<TT>(p, tile, lane, acc, summs, best);
    slot = slot + 1 == S ? 0 : slot + 1;
  }
  finish_block<TT, NW>(p, best);
}

template <int TT, int NW, int S>
void launch_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  launch_head_kernel<q5k_tma_kernel<TT, NW, S>>(dim3(num_sms), dim3(NW * 32), 128 + size_t(NW) * S * kStageBytes + act_smem_bytes(p.groups, TT), pdl, stream, p);
}

// 16 warps x 4 stages, the one ring a plan runs (the others measured: docs/performance.md,
// CUDA attempt 10).
constexpr int kWarps = 16, kStages = 4;

}  // namespace

size_t q5k_tma_smem(int groups, int tokens) {
  return 128 + size_t(kWarps) * kStages * kStageBytes + act_smem_bytes(groups, tokens);
}

void launch_q5k_tma(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T < 1 || p.T > kLanesTokens) throw Error("launch_q5k_tma: 1 or 2 tokens per call");
  if (p.T == 1) return launch_config<1, kWarps, kStages>(p, pdl, num_sms, stream);
  return launch_config<2, kWarps, kStages>(p, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
