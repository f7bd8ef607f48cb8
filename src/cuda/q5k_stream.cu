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
// Here the upload re-orders each 176-byte block so that the ten words thread q of a quad needs
// (qs words 8p + q, 8p + q + 4 and qh words q, q + 4) are contiguous: one row costs a thread two
// 16-byte loads, one 8-byte load and the 16-byte header, every load instruction of a warp covers
// whole 32-byte sectors, and nothing passes through shared memory. Each warp keeps one item (16
// rows x one super-block) in flight in registers while it computes the previous one, and can
// prefetch a few items further ahead into L2 (no registers needed for those).
//
// The activations (q8 of every super-block and token, 256 bytes each) sit in shared memory as
// 16-byte runs of one lane k over four sub-blocks; B of the MMA is zero except where the fragment's
// K range is lane k = n, so the thread that owns that slot loads the run and every other thread
// loads from a block of zeros.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/per_device.hpp"
#include "cuda/device_common.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

constexpr int kTileRows = 16;
constexpr int kZeroWords = 48;  // a zero run plus the 32-word stride to its second half

__device__ __forceinline__ void mma_lanes(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

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

// One item's registers for rows g and g + 8: qs words (p0, k), (p0, k+4), (p1, k), (p1, k+4) in
// lo, the same for p2, p3 in hi, qh words k and k + 4 in qh, the header in h (k = q).
struct Item {
  uint4 lo[2], hi[2];
  uint2 qh[2];
  uint4 h[2];
};

template <int kParity, bool kWide>
__device__ __forceinline__ void load_item(Item& it, const uint8_t* const (&rows)[2], int sb, int q) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint8_t* b = rows[r] + sb * stream::kBlockBytes;
    if (kParity == 0) {
      it.lo[r] = ldg_once128<kWide>(b + stream::kEvenLo + 16 * q);
      it.hi[r] = ldg_once128<kWide>(b + stream::kEvenHi + 16 * q);
      it.qh[r] = ldg_once64<kWide>(b + stream::kEvenQh + 8 * q);
      it.h[r] = ldg_header(b + stream::kEvenHeader);
    } else {
      it.h[r] = ldg_header(b + stream::kOddHeader);
      it.qh[r] = ldg_once64<kWide>(b + stream::kOddQh + 8 * q);
      it.hi[r] = ldg_once128<kWide>(b + stream::kOddHi + 16 * q);
      it.lo[r] = ldg_once128<kWide>(b + stream::kOddLo + 16 * q);
    }
  }
}

// d and dmin: the hardware conversion is exact for every non-NaN half; a NaN scale makes the
// product below a NaN, and the GPU's arithmetic returns its canonical NaN whatever the payload,
// so f16_exact's payload handling would buy nothing here.
__device__ __forceinline__ float f16_scale(uint32_t h16) {
  return __half2float(__ushort_as_half(uint16_t(h16 & 0xFFFFu)));
}

template <int TT>
__device__ __forceinline__ void compute_item(const Item& it, int sb, const uint32_t* s_act, const uint32_t* s_zero,
                                             const float* s_yd, const uint4* s_bsp, int act_off0, int act_off1,
                                             float (&acc)[TT][2][2], float (&summs)[TT][2]) {
  float dq[TT][2];
  uint32_t sc_lo[2], sc_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4 h = it.h[r];
    const float d = f16_scale(h.x), dmin = f16_scale(h.x >> 16);
    const uint32_t mlo = h.z & 0x3F3F3F3Fu;
    const uint32_t mhi = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
    sc_lo[r] = h.y & 0x3F3F3F3Fu;
    sc_hi[r] = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      const float yd = s_yd[sb * TT + t];
      const uint4 bs = s_bsp[sb * TT + t];
      dq[t][r] = __fmul_rn(yd, d);
      const float dm = __fmul_rn(-yd, dmin);
      int im = __dp2a_lo(int(bs.x), int(mlo), kMagicBits);
      im = __dp2a_hi(int(bs.y), int(mlo), im);
      im = __dp2a_lo(int(bs.z), int(mhi), im);
      im = __dp2a_hi(int(bs.w), int(mhi), im);
      summs[t][r] = __fmaf_rn(dm, __fsub_rn(__int_as_float(im), kMagic), summs[t][r]);
    }
  }

  // B: words of lane k = g for sub-blocks 0..3 and 4..7 (slot b0 when g == q, b1 when g == q + 4).
  uint4 b0[TT][2], b1[TT][2];
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    const uint32_t* run = s_act + (sb * TT + t) * stream::kActWords;
    const uint32_t* p0 = act_off0 >= 0 ? run + act_off0 : s_zero;
    const uint32_t* p1 = act_off1 >= 0 ? run + act_off1 : s_zero;
    b0[t][0] = lds128(p0);
    b0[t][1] = lds128(p0 + 32);
    b1[t][0] = lds128(p1);
    b1[t][1] = lds128(p1 + 32);
  }

  int isum[TT][2][2];
#pragma unroll
  for (int t = 0; t < TT; ++t)
#pragma unroll
    for (int r = 0; r < 2; ++r) isum[t][r][0] = isum[t][r][1] = 0;

#pragma unroll
  for (int j = 0; j < 8; ++j) {
    constexpr uint32_t kLow = 0x0F0F0F0Fu;
    const int p = j >> 1;
    uint32_t wq[2], wq4[2];  // rows g, g + 8: lane q and lane q + 4 of sub-block j
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint4& src = p < 2 ? it.lo[r] : it.hi[r];
      const uint32_t qs_q = word_of(src, 2 * (p & 1)), qs_q4 = word_of(src, 2 * (p & 1) + 1);
      wq[r] = ((qs_q >> (4 * (j & 1))) & kLow) | (((it.qh[r].x >> j) & 0x01010101u) << 4);
      wq4[r] = ((qs_q4 >> (4 * (j & 1))) & kLow) | (((it.qh[r].y >> j) & 0x01010101u) << 4);
    }
    const int s0 = int(__byte_perm((j < 4) ? sc_lo[0] : sc_hi[0], 0u, 0x4440u | unsigned(j & 3)));
    const int s1 = int(__byte_perm((j < 4) ? sc_lo[1] : sc_hi[1], 0u, 0x4440u | unsigned(j & 3)));
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      int dd[4];
      mma_lanes(dd, wq[0], wq[1], wq4[0], wq4[1], word_of(b0[t][j >> 2], j & 3), word_of(b1[t][j >> 2], j & 3));
      isum[t][0][0] += s0 * dd[0];
      isum[t][0][1] += s0 * dd[1];
      isum[t][1][0] += s1 * dd[2];
      isum[t][1][1] += s1 * dd[3];
    }
  }
#pragma unroll
  for (int t = 0; t < TT; ++t)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 2; ++c)
        acc[t][r][c] = __fmaf_rn(dq[t][r], __int2float_rn(isum[t][r][c]), acc[t][r][c]);
}

size_t smem_bytes(int groups, int tt) {
  const size_t items = size_t(groups) * tt;
  return kZeroWords * 4 + items * (stream::kActWords * 4 + 16) + (items + 3) / 4 * 16;
}

template <int TT, int NW, bool kWide>
__global__ void __launch_bounds__(NW * 32, 1) q5k_stream_kernel(const HeadParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ PartialBest s_best[NW][kMaxTokens];
  __shared__ PartialBest s_cta[kMaxTokens];

  const int G = p.groups;
  const int items = G * TT;
  uint32_t* s_zero = reinterpret_cast<uint32_t*>(smem);                            // [kZeroWords]
  uint32_t* s_act = s_zero + kZeroWords;                                             // [G][TT][64]
  uint4* s_bsp = reinterpret_cast<uint4*>(s_act + size_t(items) * stream::kActWords);  // [G][TT]
  float* s_yd = reinterpret_cast<float*>(s_bsp + items);                               // [G][TT]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int V = p.vocab;
  const int ntiles = (V + kTileRows - 1) / kTileRows;
  const int pairs = (G + 1) / 2;
  const int total_warps = gridDim.x * NW;
  const uint8_t* weights = p.stream_weights;
  const int64_t stride = p.stream_row_stride;

  // Tiles: two static ones per warp, then a dynamic hand-out fetched a whole tile ahead.
  int load_tile = blockIdx.x * NW + warp;
  int next_tile = load_tile + total_warps;
  int pending = 0;
  if (lane == 0) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
  int load_pair = 0;
  const uint8_t* rows[2];
  auto set_rows = [&](int tile) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = min(int64_t(tile) * kTileRows + g + 8 * r, int64_t(V) - 1);
      rows[r] = weights + row * stride;
    }
  };
  // One pair of blocks of 16 rows into L2, `stream_prefetch` pairs ahead of the register loads:
  // lane l takes block l / 16 of row l % 16, one prefetch per 128-byte line it touches. (A bulk
  // prefetch per row was slower: its operands must be warp-uniform, so the compiler loops over the
  // lanes.)
  auto prefetch = [&](int tile, int pair) {
    if (p.stream_prefetch <= 0) return;
    int pf_pair = pair + p.stream_prefetch, pf_tile = tile;
    if (pf_pair >= pairs) { pf_pair -= pairs; pf_tile = next_tile; }
    if (pf_pair >= pairs || pf_tile >= ntiles) return;
    const int64_t row = int64_t(pf_tile) * kTileRows + (lane & 15);
    const int blk = 2 * pf_pair + (lane >> 4);
    if (row >= V || blk >= G) return;
    const uint8_t* b = weights + row * stride + int64_t(blk) * stream::kBlockBytes;
    prefetch_l2(b);
    prefetch_l2(b + 128);
    prefetch_l2(b + stream::kBlockBytes - 1);
  };
  auto advance = [&]() {
    if (++load_pair == pairs) {
      load_pair = 0;
      load_tile = next_tile;
      next_tile = __shfl_sync(0xffffffffu, pending, 0);
      if (lane == 0 && next_tile < ntiles) pending = int(atomicAdd(p.tile_counter, 1u)) + 2 * total_warps;
      set_rows(load_tile);
    }
  };

  Item even, odd;
  int item_tile = load_tile, item_pair = 0;
  set_rows(load_tile);
  if (load_tile < ntiles) {
    load_item<0, kWide>(even, rows, 0, q);
    if (1 < G) load_item<1, kWide>(odd, rows, 1, q);
    prefetch(load_tile, 0);
  }
  advance();

  pdl_wait();
  for (int i = threadIdx.x; i < kZeroWords; i += blockDim.x) s_zero[i] = 0;
  {
    // q8 bytes 32j + 4k .. 32j + 4k + 3 (word (j, k)) go to word (j / 4) * 32 + k * 4 + j % 4 of the
    // item's run: each lane k's words for sub-blocks 0..3 and 4..7 become 16-byte runs. Every load
    // of a batch is issued before any store (one L2 round trip per batch, paid once per call).
    constexpr int kBatch = 4;
    const int chunks = items * 16;
    for (int base = threadIdx.x; base < chunks; base += kBatch * blockDim.x) {
      uint4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * blockDim.x;
        if (i < chunks) {
          const int c = i & 15, it = i >> 4, sb = it / TT, t = it - sb * TT;
          v[u] = reinterpret_cast<const uint4*>(p.act_qs + (size_t(sb) * kMaxTokens + t) * kActPitch)[c];
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * blockDim.x;
        if (i < chunks) {
          const int c = i & 15, it = i >> 4;
          const int j = c >> 1, k0 = 4 * (c & 1);
          uint32_t* dst = s_act + it * stream::kActWords + (j >> 2) * 32 + (j & 3);
          dst[(k0 + 0) * 4] = v[u].x;
          dst[(k0 + 1) * 4] = v[u].y;
          dst[(k0 + 2) * 4] = v[u].z;
          dst[(k0 + 3) * 4] = v[u].w;
        }
      }
    }
    for (int i = threadIdx.x; i < items; i += blockDim.x) {
      const int sb = i / TT, t = i - sb * TT;
      s_yd[i] = p.act_d[size_t(sb) * kMaxTokens + t];
      s_bsp[i] = *reinterpret_cast<const uint4*>(p.act_bsp + (size_t(sb) * kMaxTokens + t) * 4);
    }
  }
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
    compute_item<TT>(even, 2 * pair, s_act, s_zero, s_yd, s_bsp, act_off0, act_off1, acc, summs);
    const bool loading = load_tile < ntiles;
    if (loading) load_item<0, kWide>(even, rows, 2 * load_pair, q);
    if (2 * pair + 1 < G)
      compute_item<TT>(odd, 2 * pair + 1, s_act, s_zero, s_yd, s_bsp, act_off0, act_off1, acc, summs);
    if (loading) {
      if (2 * load_pair + 1 < G) load_item<1, kWide>(odd, rows, 2 * load_pair + 1, q);
      prefetch(load_tile, load_pair);
    }
    item_tile = load_tile;
    item_pair = load_pair;
    if (loading) advance();

    if (pair == pairs - 1) {
#pragma unroll
      for (int t = 0; t < TT; ++t)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float lanes8[8];
#pragma unroll
          for (int k = 0; k < 8; ++k) lanes8[k] = __shfl_sync(0xffffffffu, acc[t][r][k & 1], (lane & ~3) | (k >> 1));
          const float raw = __fadd_rn(reduce_lanes(lanes8), summs[t][r]);
          const int row = tile * kTileRows + g + 8 * r;
          if (q == 0 && row < V && t < p.T) {
            const float capped = apply_cap(raw, p);
            p.logits[size_t(t) * V + row] = capped;
            if (p.raw) p.raw[size_t(t) * V + row] = raw;
            best[t] = best_merge(best[t], best_single(capped, row));
          }
          summs[t][r] = 0.0f;
          acc[t][r][0] = acc[t][r][1] = 0.0f;
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
    for (int w = 0; w < NW; ++w) b = best_merge(b, s_best[w][threadIdx.x]);
    s_cta[threadIdx.x] = b;
  }
  __syncthreads();
  publish_and_finalize(p, s_cta);
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
  cfg.dynamicSmemBytes = smem_bytes(p.groups, TT);
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

size_t q5k_stream_smem(int groups, int tokens) { return smem_bytes(groups, tokens); }

void launch_q5k_stream(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T < 1 || p.T > kStreamMaxTokens) throw Error("launch_q5k_stream: 1 to 4 tokens per call");
  if (p.stream_wide) launch_tokens<true>(p, warps, pdl, num_sms, stream);
  else launch_tokens<false>(p, warps, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
