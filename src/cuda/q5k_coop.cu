// The Q5_K head on the q8 route for T <= 4 with the tiles shared by a whole block: the stream
// kernel's item arithmetic (q5k_lanes_math.cuh) on the stream layout, but the warps of a block
// split each 16-row tile's super-blocks among themselves. Byte-identical to numerics.md §5.
//
// Why: one warp per tile (q5k_stream.cu) hands out ~12,600 tiles to ~2,100 warps, each tile about
// 40 us of one warp's time, so when the hand-out runs dry the warps stop at random points of their
// last tile and the SMs idle for half a tile on average: ncu measured 13 % of the kernel's
// elapsed cycles with the SMs inactive. Here a block works through its tiles in lock step, so the
// last wave costs at most one tile of one block (~1/100 of the kernel).
//
// The float chain of a row (acc[k] = fma(dq, float(isum[k]), acc[k]) over the super-blocks in
// order, and the same for the mins term) is inherently sequential, so it is not split: each warp
// computes the integer sums isum, dq, dm and float(imin) of its super-blocks (everything
// expensive) into shared memory, and after a barrier 128 threads per token run the 16 x 8 chains
// of the tile over all super-blocks in order (one FMA per step), gather the eight lanes of each row
// with shuffles in llama.cpp's hsum order, and apply the scale, cap and argmax. The scratch is
// double-buffered, so one barrier per tile suffices: warps go on to the next tile's super-blocks
// while the chains of the last one run.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/per_device.hpp"
#include "cuda/q5k_lanes_math.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

using namespace lanes_math;

constexpr int kMaxWarps = 16;
constexpr int kSlotWords = 128 + 48;  // per (super-block, token): isum[16 rows][8 lanes], dq, dm, fim [16 rows]

__device__ __forceinline__ uint4 ldg_once128(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ldg_once64(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ldg_header(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ void load_item(Item& it, const uint8_t* item, int lane) {
  const int g = lane >> 2;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    it.w03[r] = ldg_once128(item + stream::kW03 + 512 * r + 16 * lane);
    it.w47[r] = ldg_once128(item + stream::kW47 + 512 * r + 16 * lane);
    it.w89[r] = ldg_once64(item + stream::kW89 + 256 * r + 8 * lane);
    it.h[r] = ldg_header(item + stream::kHeader + 16 * (g + 8 * r));
  }
}

__host__ __device__ size_t scratch_offset(int groups, int tt) { return (act_smem_bytes(groups, tt) + 15) / 16 * 16; }
size_t smem_bytes(int groups, int tt) {
  return scratch_offset(groups, tt) + 2 * size_t(groups) * tt * kSlotWords * 4;
}

// The item's sums into the scratch slot of (sb, token t): thread (g, q) holds rows g, g + 8 and
// lanes 2q, 2q + 1; the quad's four threads hold the same dq, dm, fim, so thread q == 0 stores them.
template <int TT>
__device__ __forceinline__ void store_sums(const ItemSums<TT>& s, uint32_t* slot0, int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    uint32_t* slot = slot0 + t * kSlotWords;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      *reinterpret_cast<int2*>(slot + row * 8 + 2 * q) = make_int2(s.isum[t][r][0], s.isum[t][r][1]);
      if (q == 0) {
        reinterpret_cast<float*>(slot)[128 + row] = s.dq[t][r];
        reinterpret_cast<float*>(slot)[144 + row] = s.dm[t][r];
        reinterpret_cast<float*>(slot)[160 + row] = s.fim[t][r];
      }
    }
  }
}

template <int TT>
__global__ void __launch_bounds__(kMaxWarps * 32, 1) q5k_coop_kernel(const HeadParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ PartialBest s_best[kMaxWarps][kMaxTokens];
  __shared__ PartialBest s_cta[kMaxTokens];

  const int G = p.groups, V = p.vocab;
  const int nw = blockDim.x >> 5;
  const ActSmem<TT> act(smem, G);
  uint32_t* scratch = reinterpret_cast<uint32_t*>(smem + scratch_offset(G, TT));
  const int buf_words = G * TT * kSlotWords;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ntiles = (V + kTileRows - 1) / kTileRows;
  const uint8_t* weights = p.stream_weights;
  // This warp's super-blocks of every tile: warp, warp + nw, ...
  const int my_items = warp < G ? (G - 1 - warp) / nw + 1 : 0;

  // The load cursor walks this warp's items of the block's tiles (blockIdx.x, + gridDim.x, ...).
  int load_tile = blockIdx.x, load_k = 0;
  Item buf0, buf1;
  int sb0 = 0, sb1 = 0;
  auto load_next = [&](Item& b, int& sb) {
    sb = warp + load_k * nw;
    if (load_tile >= ntiles || my_items == 0) return;
    load_item(b, weights + (int64_t(load_tile) * G + sb) * stream::kItemBytes, lane);
    if (++load_k == my_items) { load_k = 0; load_tile += gridDim.x; }
  };
  load_next(buf0, sb0);
  load_next(buf1, sb1);

  pdl_wait();
  stage_activations<TT>(p, smem);
  __syncthreads();

  const int act_off = act_offset(lane);
  PartialBest best[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) best[t] = best_empty();

  int parity = 0;  // which register buffer holds the next item to compute
  for (int tile = blockIdx.x, n = 0; tile < ntiles; tile += gridDim.x, ++n) {
    uint32_t* S = scratch + (n & 1) * buf_words;
    for (int k = 0; k < my_items; ++k) {
      ItemSums<TT> s;
      if (parity == 0) {
        const int sb = sb0;
        item_sums<TT>(buf0, sb, act, act_off, s);
        load_next(buf0, sb0);
        store_sums<TT>(s, S + sb * TT * kSlotWords, lane);
      } else {
        const int sb = sb1;
        item_sums<TT>(buf1, sb, act, act_off, s);
        load_next(buf1, sb1);
        store_sums<TT>(s, S + sb * TT * kSlotWords, lane);
      }
      parity ^= 1;
    }
    __syncthreads();

    // The chains: thread i runs lane i % 8 of row (i / 8) % 16 of token i / 128 (whole warps).
    for (int i = threadIdx.x; i < 128 * TT; i += blockDim.x) {
      const int t = i >> 7, row = (i >> 3) & 15, ln = i & 7;
      const uint32_t* slot = S + t * kSlotWords;
      float acc = 0.0f, summs = 0.0f;
      for (int sb = 0; sb < G; ++sb, slot += TT * kSlotWords) {
        const float* f = reinterpret_cast<const float*>(slot);
        acc = __fmaf_rn(f[128 + row], __int2float_rn(int(slot[row * 8 + ln])), acc);
        summs = __fmaf_rn(f[144 + row], f[160 + row], summs);
      }
      // hsum in llama.cpp's order: h[l] = a[l] + a[l + 4], then (h0 + h2) + (h1 + h3).
      const float h = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 4));
      const float hh = __fadd_rn(h, __shfl_xor_sync(0xffffffffu, h, 2));
      const float sum = __fadd_rn(hh, __shfl_xor_sync(0xffffffffu, hh, 1));
      const float raw = __fadd_rn(sum, summs);
      const int id = tile * kTileRows + row;
      if (ln == 0 && id < V && t < p.T) {
        const float capped = apply_cap(raw, p);
        p.logits[size_t(t) * V + id] = capped;
        if (p.raw) p.raw[size_t(t) * V + id] = raw;
#pragma unroll
        for (int tt = 0; tt < TT; ++tt)
          if (tt == t) best[tt] = best_merge(best[tt], best_single(capped, id));
      }
    }
  }

#pragma unroll
  for (int t = 0; t < TT; ++t) {
    PartialBest b = best[t];
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) b = best_merge(b, best_shfl_xor(b, m));
    if (lane == 0) s_best[warp][t] = b;
  }
  __syncthreads();
  if (threadIdx.x < TT) {
    PartialBest b = best_empty();
    for (int w = 0; w < nw; ++w) b = best_merge(b, s_best[w][threadIdx.x]);
    s_cta[threadIdx.x] = b;
  }
  __syncthreads();
  publish_and_finalize(p, s_cta);
}

template <int TT>
void launch_config(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  auto kernel = q5k_coop_kernel<TT>;
  static OncePerDevice configured;
  configured.run([&](int device) {
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attrs{};
    CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    optin - int(attrs.sharedSizeBytes)));
  });
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(num_sms);
  cfg.blockDim = dim3(warps * 32);
  cfg.dynamicSmemBytes = smem_bytes(p.groups, TT);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

}  // namespace

int q5k_coop_warps(int groups) {
  // The most warps (8..16) that split a tile's super-blocks evenly; else the fewest idle slots.
  int best = 16, best_waste = 1 << 30;
  for (int w = 16; w >= 8; --w) {
    const int waste = (groups + w - 1) / w * w - groups;
    if (waste < best_waste) { best_waste = waste; best = w; }
  }
  return best;
}

size_t q5k_coop_smem(int groups, int tokens) { return smem_bytes(groups, tokens); }

void launch_q5k_coop(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  const int warps = q5k_coop_warps(p.groups);
  switch (p.T) {
    case 1: return launch_config<1>(p, warps, pdl, num_sms, stream);
    case 2: return launch_config<2>(p, warps, pdl, num_sms, stream);
    case 3: return launch_config<3>(p, warps, pdl, num_sms, stream);
    case 4: return launch_config<4>(p, warps, pdl, num_sms, stream);
    default: throw Error("launch_q5k_coop: 1 to 4 tokens per call");
  }
}

}  // namespace lmhead::cuda
