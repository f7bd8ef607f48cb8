// The Q5_K head on the q8 route for T <= 4, streaming the weights straight into registers from a
// transcoded copy of the head (stream_layout.hpp), byte-identical to numerics.md §5.
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
#include "cuda/per_device.hpp"
#include "cuda/device_common.cuh"
#include "cuda/q5k_lanes_math.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

using namespace lanes_math;

// Weights are read once: no L1 allocation. The header goes through L1, because the even block's
// header load brings in the 32-byte sector that the odd block's header load reads next.
// kWide adds the L2::256B hint: L2 fetches 256-byte blocks from DRAM (fewer, larger requests).
template <bool kWide>
__device__ __forceinline__ uint4 ldg_once128(const void* p) {
  uint4 v;
  if constexpr (kWide)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
template <bool kWide>
__device__ __forceinline__ uint2 ldg_once64(const void* p) {
  uint2 v;
  if constexpr (kWide)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ldg_header(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

template <bool kWide>
__device__ __forceinline__ void load_item(Item& it, const uint8_t* item, int lane) {
  const int g = lane >> 2;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    it.lo[r] = ldg_once128<kWide>(item + stream::kLo + 512 * r + 16 * lane);
    it.hi[r] = ldg_once128<kWide>(item + stream::kHi + 512 * r + 16 * lane);
    it.qh[r] = ldg_once64<kWide>(item + stream::kQh + 256 * r + 8 * lane);
    it.h[r] = ldg_header(item + stream::kHeader + 16 * (g + 8 * r));
  }
}

template <int TT, int NW, bool kWide>
__global__ void __launch_bounds__(NW * 32, 1) q5k_stream_kernel(const HeadParams p) {
  extern __shared__ __align__(16) uint8_t smem[];

  const int G = p.groups;
  const ActSmem<TT> act(smem, G);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int V = p.vocab;
  const int ntiles = (V + kTileRows - 1) / kTileRows;
  const int pairs = (G + 1) / 2;
  const int total_warps = gridDim.x * NW;
  const uint8_t* weights = p.stream_weights;
  auto item_ptr = [&](int tile, int sb) { return weights + (int64_t(tile) * G + sb) * stream::kItemBytes; };

  // Tiles: two static ones per warp, then a dynamic hand-out fetched a whole tile ahead.
  int load_tile = blockIdx.x * NW + warp;
  int next_tile = load_tile + total_warps;
  int pending = 0;
  if (lane == 0) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
  int load_pair = 0;
  auto advance = [&]() {
    if (++load_pair == pairs) {
      load_pair = 0;
      load_tile = next_tile;
      next_tile = __shfl_sync(0xffffffffu, pending, 0);
      if (lane == 0 && next_tile < ntiles) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
    }
  };

  Item even, odd;
  int item_tile = load_tile, item_pair = 0;
  if (load_tile < ntiles) {
    load_item<kWide>(even, item_ptr(load_tile, 0), lane);
    if (1 < G) load_item<kWide>(odd, item_ptr(load_tile, 1), lane);
  }
  advance();

  pdl_wait();
  stage_activations<TT>(p, smem);
  __syncthreads();

  // B slots this thread owns: b0 carries lane g's words when g == q, b1 when g == q + 4.
  const int act_off0 = g == q ? g * 4 : -1;
  const int act_off1 = g == q + 4 ? g * 4 : -1;

  PartialBest best[TT];
  float acc[TT][2][2];  // [token][row g, g+8][lane 2q + c]
  float summs[TT][2];
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    best[t] = best_empty();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      summs[t][r] = 0.0f;
      acc[t][r][0] = acc[t][r][1] = 0.0f;
    }
  }

  while (item_tile < ntiles) {
    const int tile = item_tile, pair = item_pair;
    compute_item<TT>(even, 2 * pair, act, act_off0, act_off1, acc, summs);
    const bool loading = load_tile < ntiles;
    if (loading) load_item<kWide>(even, item_ptr(load_tile, 2 * load_pair), lane);
    if (2 * pair + 1 < G)
      compute_item<TT>(odd, 2 * pair + 1, act, act_off0, act_off1, acc, summs);
    if (loading && 2 * load_pair + 1 < G) load_item<kWide>(odd, item_ptr(load_tile, 2 * load_pair + 1), lane);
    item_tile = load_tile;
    item_pair = load_pair;
    if (loading) advance();

    if (pair == pairs - 1) finish_tile<TT>(p, tile, lane, acc, summs, best);
  }

  finish_block<TT, NW>(p, best);
}

template <int TT, int NW, bool kWide>
void launch_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  auto kernel = q5k_stream_kernel<TT, NW, kWide>;
  static OncePerDevice configured;
  configured.run([&](int device) {
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - 8192));
  });
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(num_sms);
  cfg.blockDim = dim3(NW * 32);
  cfg.dynamicSmemBytes = act_smem_bytes(p.groups, TT);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <bool kWide>
void launch_tokens(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  const bool w16 = warps >= 16;
  switch (p.T) {
    case 1: return w16 ? launch_config<1, 16, kWide>(p, pdl, num_sms, stream)
                       : launch_config<1, 8, kWide>(p, pdl, num_sms, stream);
    case 2: return w16 ? launch_config<2, 16, kWide>(p, pdl, num_sms, stream)
                       : launch_config<2, 8, kWide>(p, pdl, num_sms, stream);
    case 3: return launch_config<3, 8, kWide>(p, pdl, num_sms, stream);
    default: return launch_config<4, 8, kWide>(p, pdl, num_sms, stream);
  }
}

}  // namespace

size_t q5k_stream_smem(int groups, int tokens) { return act_smem_bytes(groups, tokens); }

void launch_q5k_stream(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T < 1 || p.T > kStreamMaxTokens) throw Error("launch_q5k_stream: 1 to 4 tokens per call");
  if (p.stream_wide) launch_tokens<true>(p, warps, pdl, num_sms, stream);
  else launch_tokens<false>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
