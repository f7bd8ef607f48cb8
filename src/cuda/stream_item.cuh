#pragma once
// Loading one 16-row item of a stream layout (stream_layout.hpp) into registers: every load is a
// contiguous run of the warp (whole 128-byte lines), read once, so it skips L1; the 16-byte row
// headers go through L1. The Q5_K / Q4_K and Q6_K items and the tile walk are here; the Q8_0 item
// lives with its kernel and uses the same load helpers.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels.hpp"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {

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

__device__ __forceinline__ uint32_t ldg_header32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

// One item's registers for rows g and g + 8 (r) of the thread: the packed level words (Q5_K: W0..W9
// in w03, w47, w89; Q4_K: W0..W7 in w03, w47) and the row headers.
struct Item {
  uint4 w03[2], w47[2];
  uint2 w89[2];
  uint4 h[2];
};

// A Q5_K item's ten packed words W0..W9 of rows g, g + 8 (stream::level_word decodes them).
__device__ __forceinline__ void item_words(const Item& it, uint32_t (&w)[2][10]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    w[r][0] = it.w03[r].x; w[r][1] = it.w03[r].y; w[r][2] = it.w03[r].z; w[r][3] = it.w03[r].w;
    w[r][4] = it.w47[r].x; w[r][5] = it.w47[r].y; w[r][6] = it.w47[r].z; w[r][7] = it.w47[r].w;
    w[r][8] = it.w89[r].x; w[r][9] = it.w89[r].y;
  }
}

// Where an item's bytes are read from: global memory, each byte once (the register stream kernels),
// or a shared-memory stage that a bulk copy filled (the staged kernels: q5k_tma.cu, tokens_n.cuh).
// The same offsets either way; in shared memory the warp's consecutive 16-byte loads are
// conflict-free and the row headers broadcast to the four threads of a row.
struct FromGlobal {
  __device__ static uint4 v128(const uint8_t* p) { return ldg_once128(p); }
  __device__ static uint2 v64(const uint8_t* p) { return ldg_once64(p); }
  __device__ static uint4 header(const uint8_t* p) { return ldg_header(p); }
  __device__ static uint32_t header32(const uint8_t* p) { return ldg_header32(p); }
};
struct FromShared {
  __device__ static uint4 v128(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
  __device__ static uint2 v64(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }
  __device__ static uint4 header(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
  __device__ static uint32_t header32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
};

template <bool kQ4, class Src = FromGlobal>
__device__ __forceinline__ void load_item(Item& it, const uint8_t* item, int lane) {
  const int g = lane >> 2;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if constexpr (kQ4) {
      it.w03[r] = Src::v128(item + stream::kQ4W03 + 512 * r + 16 * lane);
      it.w47[r] = Src::v128(item + stream::kQ4W47 + 512 * r + 16 * lane);
      it.h[r] = Src::header(item + stream::kQ4Header + 16 * (g + 8 * r));
    } else {
      it.w03[r] = Src::v128(item + stream::kW03 + 512 * r + 16 * lane);
      it.w47[r] = Src::v128(item + stream::kW47 + 512 * r + 16 * lane);
      it.w89[r] = Src::v64(item + stream::kW89 + 256 * r + 8 * lane);
      it.h[r] = Src::header(item + stream::kHeader + 16 * (g + 8 * r));
    }
  }
}

// One Q6_K item's registers for rows g and g + 8 (stream::transcode_tile_q6k): the twelve packed level
// words per row, the row's sixteen signed scales, and the f16 d of both rows (q6k_stream.cu,
// kquant_tiled.cu).
struct Q6Item {
  uint4 w[3][2];  // [W0..3, W4..7, W8..11][row g, g + 8]
  uint4 sc[2];
  uint32_t d;     // f16 d of rows g (low half) and g + 8
};

template <class Src = FromGlobal>
__device__ __forceinline__ void load_q6_item(Q6Item& it, const uint8_t* item, int lane) {
  const int g = lane >> 2;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int s = 0; s < 3; ++s) it.w[s][r] = Src::v128(item + 1024 * s + 512 * r + 16 * lane);
    it.sc[r] = Src::header(item + stream::kQ6Scales + 16 * (g + 8 * r));
  }
  it.d = Src::header32(item + stream::kQ6D + 4 * g);
}

// The twelve level words of rows g, g + 8 (stream::q6_level_word decodes them).
__device__ __forceinline__ void q6_item_words(const Q6Item& it, uint32_t (&w)[2][12]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      w[r][4 * s + 0] = it.w[s][r].x; w[r][4 * s + 1] = it.w[s][r].y;
      w[r][4 * s + 2] = it.w[s][r].z; w[r][4 * s + 3] = it.w[s][r].w;
    }
}

// A warp's walk over the items (tile, super-block) of a head: two static tiles per warp, then tiles
// from p.tile_counter, each fetched a whole tile before it is needed (the last block's finalize
// resets the counter). The whole warp steps together.
struct ItemWalk {
  int tile, sb = 0, next_tile, pending = 0;
  int ntiles, total_warps;
  __device__ ItemWalk(const HeadParams& p, int warp_index, int total_warps_, int lane)
      : tile(warp_index), next_tile(warp_index + total_warps_), ntiles((p.vocab + stream::kTileRows - 1) / stream::kTileRows),
        total_warps(total_warps_) {
    if (lane == 0) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
  }
  __device__ bool done() const { return tile >= ntiles; }
  __device__ void step(const HeadParams& p, int lane) {
    if (++sb < p.groups) return;
    sb = 0;
    tile = next_tile;
    next_tile = __shfl_sync(0xffffffffu, pending, 0);
    if (lane == 0 && next_tile < ntiles) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
  }
};

}  // namespace lmhead::cuda
