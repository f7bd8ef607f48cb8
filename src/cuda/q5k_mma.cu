// The Q5_K head on the q8 route with the int8 tensor cores, byte-identical to numerics.md §5.
//
// Per super-block the reference needs, for every (row, token), eight lane sums
//   isum[k] = sum_j sc[j] * sum_{b<4} q5[32j+4k+b] * q8[32j+4k+b]
// and then the float chain acc[k] = fma(dq, float(isum[k]), acc[k]). One m16n8k32 MMA computes,
// for tokens x rows, a dot over 32 K positions; choosing K = {32j + 4k + b : j < 8, b < 4} makes
// it produce exactly lane k's sum, if the 6-bit scale sc[j] is folded into the weights. sc * q5
// does not fit a byte, so sc = 8 * s1 + s0 (s0, s1 < 8) and the weights go in as two u8 planes
// q5 * s0 and q5 * s1 (each <= 217, and a 32-bit multiply of four packed bytes by s < 8 never
// carries between bytes): isum = 8 * D1 + D0, exact. The accumulators start at the bits of
// 1.5 * 2^23, so each D read as a float is 1.5 * 2^23 + D and two exact float operations give
// float(isum) with no int-to-float conversion.
//
// Layout: one persistent block per SM; each warp takes tiles of 8 rows (dynamic hand-out) and
// streams them super-block by super-block through its own ring of shared-memory stages with 16-byte
// cp.async; the activations of all tokens sit in shared memory for the whole kernel. Tokens are
// the MMA's M (16; rows 8..15 are empty for T <= 8), the tile's 8 rows its N. Thread (g, q) of the
// warp holds D for tokens g, g+8 and rows 2q, 2q+1, and runs their float chains; the scale, soft
// cap and argmax run in the tile's epilogue.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/device_common.cuh"

namespace lmhead::cuda {
namespace {

constexpr int kBlockBytes = 176;                    // Q5_K super-block
constexpr int kTileRows = 8;
constexpr int kStageBytes = kTileRows * kBlockBytes;  // 1408: one super-block of 8 rows
constexpr int kStageChunks = kStageBytes / 16;        // 88

__device__ __forceinline__ void mma_s8u8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kMagicBits));
}

size_t act_smem_bytes(int groups, int mt) {
  const size_t ts = size_t(8 * mt);
  return size_t(groups) * ts * (kActPitch + 4 + 16);
}
size_t smem_bytes(int groups, int mt, int warps, int stages) {
  return act_smem_bytes(groups, mt) + size_t(warps) * stages * kStageBytes;
}

template <int MT, int NW, int S>
__global__ void __launch_bounds__(NW * 32, 1) q5k_mma_kernel(const HeadParams p) {
  static_assert(S >= 2, "at least double buffering");
  constexpr int TS = 8 * MT;  // token slots in shared memory
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ PartialBest s_best[NW][kMaxTokens];
  __shared__ PartialBest s_cta[kMaxTokens];
  __shared__ int s_item_tile[NW][S];
  __shared__ int s_item_sb[NW][S];

  const int G = p.groups;
  int8_t* s_qs = reinterpret_cast<int8_t*>(smem);
  float* s_d = reinterpret_cast<float*>(smem + size_t(G) * TS * kActPitch);
  uint32_t* s_bsp = reinterpret_cast<uint32_t*>(s_d + G * TS);
  uint8_t* s_stage = reinterpret_cast<uint8_t*>(s_bsp + G * TS * 4);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int V = p.vocab;
  const int ntiles = (V + kTileRows - 1) / kTileRows;
  const int total_warps = gridDim.x * NW;
  uint8_t* stages = s_stage + warp * (S * kStageBytes);

  // ---- weight stream: items (tile, super-block) in order, S - 1 ahead of the compute ----
  int itile = blockIdx.x * NW + warp, isb = 0, issued = 0;
  auto issue = [&]() {
    const int slot = issued % S;
    if (lane == 0) {
      s_item_tile[warp][slot] = itile < ntiles ? itile : -1;
      s_item_sb[warp][slot] = isb;
    }
    if (itile < ntiles) {
      uint8_t* dst = stages + slot * kStageBytes;
      const int64_t r0 = int64_t(itile) * kTileRows;
      for (int c = lane; c < kStageChunks; c += 32) {
        const int row = c / 11, piece = c - row * 11;
        int64_t r = r0 + row;
        if (r >= V) r = V - 1;
        cp_async16(dst + row * kBlockBytes + piece * 16,
                   p.weights + r * p.row_stride + int64_t(isb) * kBlockBytes + piece * 16);
      }
      if (++isb == G) {
        isb = 0;
        int next = 0;
        if (lane == 0) next = int(atomicAdd(p.tile_counter, 1u)) + total_warps;
        itile = __shfl_sync(0xffffffffu, next, 0);
      }
    }
    cp_async_commit();
    ++issued;
  };

  if (p.prefetch_l2 && itile < ntiles && lane < kTileRows) {
    const int64_t r = int64_t(itile) * kTileRows + lane;
    if (r < V) prefetch_l2_bulk(p.weights + r * p.row_stride, uint32_t(p.row_stride));
  }
  for (int s = 0; s < S - 1; ++s) issue();

  // ---- activations: wait for the prep kernel, then keep every token's q8 in shared memory ----
  pdl_wait();
  {
    const int qs_chunks = G * TS * 16;  // 16 chunks of 16 B per (group, token)
    for (int i = threadIdx.x; i < qs_chunks; i += blockDim.x) {
      const int c = i & 15, gt = i >> 4, gi = gt / TS, t = gt - gi * TS;
      *reinterpret_cast<uint4*>(s_qs + (size_t(gi) * TS + t) * kActPitch + 16 * c) =
          *reinterpret_cast<const uint4*>(p.act_qs + (size_t(gi) * kMaxTokens + t) * kActPitch + 16 * c);
    }
    for (int i = threadIdx.x; i < G * TS; i += blockDim.x) {
      const int gi = i / TS, t = i - gi * TS;
      s_d[i] = p.act_d[size_t(gi) * kMaxTokens + t];
      *reinterpret_cast<uint4*>(s_bsp + 4 * i) =
          *reinterpret_cast<const uint4*>(p.act_bsp + (size_t(gi) * kMaxTokens + t) * 4);
    }
  }
  __syncthreads();

  PartialBest best[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) best[m] = best_empty();
  float acc[2 * MT][8];
  float summs[2 * MT];
#pragma unroll
  for (int pr = 0; pr < 2 * MT; ++pr) {
    summs[pr] = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[pr][k] = 0.0f;
  }

  const int p0 = q >> 1;         // qs 32-byte half-row of sub-block q (and q + 4 at p0 + 2)
  const int nib = (q & 1) * 4;   // low or high nibbles
  int slot = 0;
  for (;;) {
    issue();
    cp_async_wait<S - 1>();
    __syncwarp();
    const int tile = s_item_tile[warp][slot];
    const int sb = s_item_sb[warp][slot];
    if (tile < 0) break;
    const uint8_t* st = stages + slot * kStageBytes;

    // Epilogue rows 2q, 2q+1: d, dmin and the 6-bit mins; the mins' float chain first.
    float dq[2 * MT];
    {
      const uint4 hr[2] = {lds128(st + (2 * q) * kBlockBytes), lds128(st + (2 * q + 1) * kBlockBytes)};
#pragma unroll
      for (int pr = 0; pr < 2 * MT; ++pr) {
        const uint4 h = hr[pr & 1];
        const int tok = g + 8 * (pr >> 1);
        const float yd = s_d[sb * TS + tok];
        dq[pr] = __fmul_rn(yd, f16_exact(h.x));
        const float dm = __fmul_rn(-yd, f16_exact(h.x >> 16));
        const uint32_t mlo = h.z & 0x3F3F3F3Fu;
        const uint32_t mhi = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
        const uint4 bs = lds128(s_bsp + 4 * (sb * TS + tok));
        int im = __dp2a_lo(int(bs.x), int(mlo), kMagicBits);
        im = __dp2a_hi(int(bs.y), int(mlo), im);
        im = __dp2a_lo(int(bs.z), int(mhi), im);
        im = __dp2a_hi(int(bs.w), int(mhi), im);
        summs[pr] = __fmaf_rn(dm, __fsub_rn(__int_as_float(im), kMagic), summs[pr]);
      }
    }

    // B fragments come from row g: sub-blocks q and q + 4.
    const uint8_t* rg = st + g * kBlockBytes;
    const uint4 hg = lds128(rg);
    const uint4 qh[2] = {lds128(rg + 16), lds128(rg + 32)};
    const uint4 qa[2] = {lds128(rg + 48 + 32 * p0), lds128(rg + 48 + 32 * p0 + 16)};
    const uint4 qb[2] = {lds128(rg + 48 + 32 * (p0 + 2)), lds128(rg + 48 + 32 * (p0 + 2) + 16)};
    const uint32_t scales_q = (hg.y >> (8 * q)) & 0xFFu;                                // scales[q]
    const uint32_t sc_a = scales_q & 63u;                                               // sc[q]
    const uint32_t sc_b = ((hg.w >> (8 * q)) & 0x0Fu) | ((scales_q >> 2) & 0x30u);      // sc[q + 4]
    const uint32_t s0a = sc_a & 7u, s1a = sc_a >> 3, s0b = sc_b & 7u, s1b = sc_b >> 3;

    // A fragments: token g (and g + 8), elements 32q + 4k.. and 128 + 32q + 4k..
    const int8_t* ag = s_qs + (size_t(sb) * TS + g) * kActPitch;
    const uint4 a_lo[2] = {lds128(ag + 32 * q), lds128(ag + 32 * q + 16)};
    const uint4 a_hi[2] = {lds128(ag + 128 + 32 * q), lds128(ag + 128 + 32 * q + 16)};
    uint4 a8_lo[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    uint4 a8_hi[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    if constexpr (MT == 2) {
      const int8_t* ag8 = ag + 8 * kActPitch;
      a8_lo[0] = lds128(ag8 + 32 * q);
      a8_lo[1] = lds128(ag8 + 32 * q + 16);
      a8_hi[0] = lds128(ag8 + 128 + 32 * q);
      a8_hi[1] = lds128(ag8 + 128 + 32 * q + 16);
    }

#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t tq = word_of(qh[k >> 2], k & 3) >> q;
      const uint32_t q5a = ((word_of(qa[k >> 2], k & 3) >> nib) & 0x0F0F0F0Fu) | ((tq << 4) & 0x10101010u);
      const uint32_t q5b = ((word_of(qb[k >> 2], k & 3) >> nib) & 0x0F0F0F0Fu) | (tq & 0x10101010u);
      const uint32_t a[4] = {word_of(a_lo[k >> 2], k & 3), word_of(a8_lo[k >> 2], k & 3),
                             word_of(a_hi[k >> 2], k & 3), word_of(a8_hi[k >> 2], k & 3)};
      int d1[4], d0[4];
      mma_s8u8(d1, a, q5a * s1a, q5b * s1b);
      mma_s8u8(d0, a, q5a * s0a, q5b * s0b);
#pragma unroll
      for (int pr = 0; pr < 2 * MT; ++pr) {
        // (8 * (M + D1) - 9M) is exact (a multiple of 8 below 2^25); adding M + D0 gives 8 D1 + D0.
        const float u = __fmaf_rn(8.0f, __int_as_float(d1[pr]), -9.0f * kMagic);
        const float isum = __fadd_rn(u, __int_as_float(d0[pr]));
        acc[pr][k] = __fmaf_rn(dq[pr], isum, acc[pr][k]);
      }
    }
    __syncwarp();

    if (sb == G - 1) {
#pragma unroll
      for (int pr = 0; pr < 2 * MT; ++pr) {
        const float raw = __fadd_rn(reduce_lanes(acc[pr]), summs[pr]);
        const int row = tile * kTileRows + 2 * q + (pr & 1);
        const int tok = g + 8 * (pr >> 1);
        if (row < V && tok < p.T) {
          const float capped = apply_cap(raw, p);
          p.logits[size_t(tok) * V + row] = capped;
          if (p.raw) p.raw[size_t(tok) * V + row] = raw;
          best[pr >> 1] = best_merge(best[pr >> 1], best_single(capped, row));
        }
        summs[pr] = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[pr][k] = 0.0f;
      }
    }
    slot = slot + 1 == S ? 0 : slot + 1;
  }
  cp_async_wait_all();

  // ---- argmax: lanes of one token group, then warps, then blocks (last block finalizes) ----
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    best[m] = best_merge(best[m], best_shfl_xor(best[m], 1));
    best[m] = best_merge(best[m], best_shfl_xor(best[m], 2));
    if (q == 0) s_best[warp][g + 8 * m] = best[m];
  }
  __syncthreads();
  if (threadIdx.x < TS) {
    PartialBest b = best_empty();
    for (int w = 0; w < NW; ++w) b = best_merge(b, s_best[w][threadIdx.x]);
    s_cta[threadIdx.x] = b;
  }
  __syncthreads();
  publish_and_finalize(p, s_cta);
}

template <int MT, int NW, int S>
void launch_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  auto kernel = q5k_mma_kernel<MT, NW, S>;
  const size_t smem = smem_bytes(p.groups, MT, NW, S);
  // Raised once to the most any head can ask for (never during a graph capture: the first call of
  // every shape runs uncaptured).
  static bool configured = false;
  if (!configured) {
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - 8192));
    configured = true;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(num_sms);
  cfg.blockDim = dim3(NW * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <int MT>
bool dispatch(const HeadParams& p, const MmaConfig& c, int num_sms, cudaStream_t stream) {
  if (c.warps == 8 && c.stages == 6) { launch_config<MT, 8, 6>(p, c.pdl, num_sms, stream); return true; }
  if (c.warps == 8 && c.stages == 8) { launch_config<MT, 8, 8>(p, c.pdl, num_sms, stream); return true; }
  if (c.warps == 12 && c.stages == 6) { launch_config<MT, 12, 6>(p, c.pdl, num_sms, stream); return true; }
  if (c.warps == 16 && c.stages == 4) { launch_config<MT, 16, 4>(p, c.pdl, num_sms, stream); return true; }
  return false;
}

}  // namespace

bool q5k_mma_supported(const MmaConfig& c) {
  return (c.warps == 8 && (c.stages == 6 || c.stages == 8)) || (c.warps == 12 && c.stages == 6) ||
         (c.warps == 16 && c.stages == 4);
}

size_t q5k_mma_smem(int groups, int tokens, const MmaConfig& c) {
  return smem_bytes(groups, tokens > 8 ? 2 : 1, c.warps, c.stages);
}

void launch_q5k_mma(const HeadParams& p, const MmaConfig& c, int num_sms, cudaStream_t stream) {
  const bool ok = p.T > 8 ? dispatch<2>(p, c, num_sms, stream) : dispatch<1>(p, c, num_sms, stream);
  if (!ok)
    throw Error("q5k_mma: no kernel built for " + std::to_string(c.warps) + " warps x " + std::to_string(c.stages) +
                " stages");
}

}  // namespace lmhead::cuda
