// The Q5_K head on the q8 route for one or two tokens, on the int8 tensor cores, byte-identical to
// numerics.md §5 (the same float chain as q5k_mma.cu; only the integer sums are found another way).
//
// With one token the tokens-in-N kernel wastes its N and still has to fold the 6-bit scales into
// the weights (two planes, two multiplies per weight word). Here N holds the eight float lanes k
// instead: for sub-block j, A = the raw 5-bit levels of 16 rows (K = the sub-block's 32 elements)
// and B[K][n] = q8[32j + K] when K / 4 == n, else 0. Then D[row][k] is exactly the 4-element sum
// of lane k in sub-block j, the scale is applied after the MMA (isum[k] += sc[j] * D, exact int32),
// and one conversion per (row, k) feeds acc[k] = fma(dq, float(isum[k]), acc[k]). B is the same
// for every row, so it is built once per super-block by the prep kernel (mostly zeros) and kept in
// shared memory. Per 16-row super-block a warp runs 8 MMAs per token and decodes each weight word
// once, with compile-time shifts.
//
// Thread (g, q) of a warp decodes rows g and g + 8, holds D for lanes k = 2q, 2q + 1, and keeps
// their chains; the tile's epilogue gathers the eight lanes of each row with shuffles.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "cuda/device_common.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

constexpr int kBlockBytes = 176;
using stream::kTileRows;  // the MMA tile's 16 rows, as in the stream layouts
constexpr int kStageBytes = kTileRows * kBlockBytes;  // 2816
constexpr int kStageChunks = kStageBytes / 16;        // 176
constexpr int kCopiesPerLane = (kStageChunks + 31) / 32;
constexpr int kLanesBytes = 32 * kLanesPitch;         // one token's B fragments of one super-block

__device__ __forceinline__ uint32_t lds32(const void* p) { return *static_cast<const uint32_t*>(p); }

// [G][TT] floats of y.d are padded to 16 bytes so the arrays after them stay 16-byte aligned.
size_t yd_floats(int groups, int tt) { return (size_t(groups) * tt + 3) / 4 * 4; }
size_t smem_bytes(int groups, int tt, int warps, int stages) {
  return size_t(groups) * tt * (kLanesBytes + 16) + yd_floats(groups, tt) * 4 + size_t(warps) * stages * kStageBytes;
}

template <int TT, int NW, int S>
__global__ void __launch_bounds__(NW * 32, 1) q5k_lanes_kernel(const HeadParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int s_item_tile[NW][S];
  __shared__ int s_item_sb[NW][S];

  const int G = p.groups;
  uint8_t* s_b = smem;                                                                // [G][TT][32][80]
  float* s_yd = reinterpret_cast<float*>(smem + size_t(G) * TT * kLanesBytes);        // [G][TT]
  uint32_t* s_bsp = reinterpret_cast<uint32_t*>(s_yd + (G * TT + 3) / 4 * 4);       // [G][TT][4]
  uint8_t* s_stage = reinterpret_cast<uint8_t*>(s_bsp + G * TT * 4);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int V = p.vocab;
  const int ntiles = (V + kTileRows - 1) / kTileRows;
  const int total_warps = gridDim.x * NW;
  uint8_t* stages = s_stage + warp * (S * kStageBytes);

  int src_off[kCopiesPerLane];
#pragma unroll
  for (int i = 0; i < kCopiesPerLane; ++i) {
    const int c = lane + 32 * i;
    const int row = c / 11, piece = c - 11 * row;
    src_off[i] = int(row * p.row_stride) + piece * 16;
  }

  int itile = blockIdx.x * NW + warp, isb = 0, issued = 0;
  int next_tile = 0;
  const uint8_t* tile_base = p.weights + int64_t(itile) * kTileRows * p.row_stride;
  auto issue = [&]() {
    const int slot = issued % S;
    if (lane == 0) {
      s_item_tile[warp][slot] = itile < ntiles ? itile : -1;
      s_item_sb[warp][slot] = isb;
    }
    if (itile < ntiles) {
      if (isb == 0 && lane == 0) next_tile = int(atomicAdd(p.tile_counter, 1u)) + total_warps;
      uint8_t* dst = stages + slot * kStageBytes;
      if ((itile + 1) * kTileRows <= V) {
        const uint8_t* base = tile_base + isb * kBlockBytes;
#pragma unroll
        for (int i = 0; i < kCopiesPerLane; ++i)
          if (lane + 32 * i < kStageChunks) cp_async16(dst + 16 * (lane + 32 * i), base + src_off[i]);
      } else {  // the last, partial tile: rows past the vocabulary repeat the last row
        for (int c = lane; c < kStageChunks; c += 32) {
          const int row = c / 11, piece = c - 11 * row;
          const int64_t r = min(int64_t(itile) * kTileRows + row, int64_t(V) - 1);
          cp_async16(dst + 16 * c, p.weights + r * p.row_stride + isb * kBlockBytes + piece * 16);
        }
      }
      if (++isb == G) {
        isb = 0;
        itile = __shfl_sync(0xffffffffu, next_tile, 0);
        tile_base = p.weights + int64_t(itile) * kTileRows * p.row_stride;
      }
    }
    cp_async_commit();
    ++issued;
  };
  for (int s = 0; s < S - 1; ++s) issue();

  pdl_wait();
  {
    constexpr int kChunks = kLanesBytes / 16;
    const int chunks = G * TT * kChunks;
    // Every load of a batch is issued before any store, so a block waits a few L2 round trips for
    // its activations, not one per loop iteration (this prologue is paid once per call, by all SMs).
    constexpr int kBatch = 8;
    for (int base = threadIdx.x; base < chunks; base += kBatch * blockDim.x) {
      uint4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * blockDim.x;
        if (i < chunks) {
          const int c = i % kChunks, gt = i / kChunks, gi = gt / TT, t = gt - gi * TT;
          v[u] = reinterpret_cast<const uint4*>(p.act_lanes + (size_t(gi) * kLanesTokens + t) * kLanesBytes)[c];
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * blockDim.x;
        if (i < chunks) reinterpret_cast<uint4*>(s_b)[i] = v[u];
      }
    }
    for (int i = threadIdx.x; i < G * TT; i += blockDim.x) {
      const int gi = i / TT, t = i - gi * TT;
      s_yd[i] = p.act_d[size_t(gi) * kMaxTokens + t];
      *reinterpret_cast<uint4*>(s_bsp + 4 * i) =
          *reinterpret_cast<const uint4*>(p.act_bsp + (size_t(gi) * kMaxTokens + t) * 4);
    }
  }
  __syncthreads();

  PartialBest best[TT];
  float acc[TT][2][2];   // [token][row g, g+8][lane 2q + c]
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

  int slot = 0;
  for (;;) {
    issue();
    cp_async_wait<S - 1>();
    __syncwarp();
    const int tile = s_item_tile[warp][slot];
    const int sb = s_item_sb[warp][slot];
    if (tile < 0) break;
    const uint8_t* st = stages + slot * kStageBytes;

    // Rows g and g + 8: header, the two high-bit words and eight qs words this lane's K covers.
    float d[2], dmin[2];
    uint32_t mlo[2], mhi[2], sc_lo[2], sc_hi[2], qh0[2], qh1[2], qs0[2][4], qs1[2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* rb = st + (g + 8 * r) * kBlockBytes;
      const uint4 h = lds128(rb);
      d[r] = f16_exact(h.x);
      dmin[r] = f16_exact(h.x >> 16);
      const KScales ks = k_scales(h);
      mlo[r] = ks.m_lo;
      mhi[r] = ks.m_hi;
      sc_lo[r] = ks.sc_lo;
      sc_hi[r] = ks.sc_hi;
      qh0[r] = lds32(rb + 16 + 4 * q);
      qh1[r] = lds32(rb + 32 + 4 * q);
#pragma unroll
      for (int pp = 0; pp < 4; ++pp) {
        qs0[r][pp] = lds32(rb + 48 + 32 * pp + 4 * q);
        qs1[r][pp] = lds32(rb + 48 + 32 * pp + 16 + 4 * q);
      }
    }

    // Mins and multipliers per (token, row).
    float dq[TT][2];
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      const float yd = s_yd[sb * TT + t];
      const uint4 bs = lds128(s_bsp + 4 * (sb * TT + t));
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        dq[t][r] = __fmul_rn(yd, d[r]);
        const float dm = __fmul_rn(-yd, dmin[r]);
        summs[t][r] = __fmaf_rn(dm, k_mins_sum(bs, mlo[r], mhi[r]), summs[t][r]);
      }
    }

    // B fragments of this lane: (b0, b1) for each sub-block j.
    uint4 bq[TT][4];
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      const uint8_t* fb = s_b + (size_t(sb) * TT + t) * kLanesBytes + lane * kLanesPitch;
#pragma unroll
      for (int i = 0; i < 4; ++i) bq[t][i] = lds128(fb + 16 * i);
    }

    int isum[TT][2][2];
#pragma unroll
    for (int t = 0; t < TT; ++t)
#pragma unroll
      for (int r = 0; r < 2; ++r) isum[t][r][0] = isum[t][r][1] = 0;

#pragma unroll
    for (int j = 0; j < 8; ++j) {
      constexpr uint32_t kLow = 0x0F0F0F0Fu;
      uint32_t w0[2], w1[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t lo0 = (qs0[r][j >> 1] >> (4 * (j & 1))) & kLow;
        const uint32_t lo1 = (qs1[r][j >> 1] >> (4 * (j & 1))) & kLow;
        w0[r] = lo0 | (((qh0[r] >> j) & 0x01010101u) << 4);
        w1[r] = lo1 | (((qh1[r] >> j) & 0x01010101u) << 4);
      }
      const uint32_t sc_g = (((j < 4) ? sc_lo[0] : sc_hi[0]) >> (8 * (j & 3))) & 0xFFu;
      const uint32_t sc_g8 = (((j < 4) ? sc_lo[1] : sc_hi[1]) >> (8 * (j & 3))) & 0xFFu;
#pragma unroll
      for (int t = 0; t < TT; ++t) {
        int dd[4];
        mma_u8s8(dd, w0[0], w0[1], w1[0], w1[1], word_of(bq[t][j >> 1], 2 * (j & 1)),
                      word_of(bq[t][j >> 1], 2 * (j & 1) + 1), 0);
        // dd[2r + c]: row g + 8r, lane 2q + c.
        isum[t][0][0] += int(sc_g) * dd[0];
        isum[t][0][1] += int(sc_g) * dd[1];
        isum[t][1][0] += int(sc_g8) * dd[2];
        isum[t][1][1] += int(sc_g8) * dd[3];
      }
    }
#pragma unroll
    for (int t = 0; t < TT; ++t)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          acc[t][r][c] = __fmaf_rn(dq[t][r], __int2float_rn(isum[t][r][c]), acc[t][r][c]);
    __syncwarp();

    if (sb == G - 1) {
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
            const float biased = add_head_bias(raw, p, row);
            const float capped = apply_cap(biased, p);
            p.logits[size_t(t) * V + row] = capped;
            if (p.raw) p.raw[size_t(t) * V + row] = biased;
            best[t] = best_merge(best[t], best_single(capped, row));
          }
          summs[t][r] = 0.0f;
          acc[t][r][0] = acc[t][r][1] = 0.0f;
        }
    }
    slot = slot + 1 == S ? 0 : slot + 1;
  }
  cp_async_wait_all();
  finish_block<TT, NW>(p, best);
}

template <int TT, int NW, int S>
void launch_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  launch_head_kernel<q5k_lanes_kernel<TT, NW, S>>(dim3(num_sms), dim3(NW * 32), smem_bytes(p.groups, TT, NW, S), pdl, stream, p);
}

}  // namespace

// One token: 16 warps, ring depth 3; two tokens: 8 warps, ring depth 3 (shared memory).
size_t q5k_lanes_smem(int groups, int tokens) {
  return tokens <= 1 ? smem_bytes(groups, 1, 16, 3) : smem_bytes(groups, 2, 8, 3);
}

void launch_q5k_lanes(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T <= 1) return launch_config<1, 16, 3>(p, pdl, num_sms, stream);
  return launch_config<2, 8, 3>(p, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
