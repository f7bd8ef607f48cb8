// The Q5_K head on the q8 route with the int8 tensor cores, byte-identical to numerics.md §5.
//
// Per super-block the reference needs, for every (row, token), eight lane sums
//   isum[k] = sum_j sc[j] * sum_{b<4} q5[32j+4k+b] * q8[32j+4k+b]
// and then the float chain acc[k] = fma(dq, float(isum[k]), acc[k]). One m16n8k32 MMA computes,
// for rows x tokens, a dot over 32 K positions; choosing K = {32j + 4k + b : j < 8, b < 4} makes
// it produce exactly lane k's sum, if the 6-bit scale sc[j] is folded into the weights. sc * q5
// does not fit a byte, so sc = 8 * s1 + s0 (s0, s1 < 8) and the weights go in as two u8 planes
// q5 * s0 and q5 * s1 (each <= 217; a 32-bit multiply of four packed bytes by s < 8 never carries
// between bytes): isum = 8 * D1 + D0, exact. The accumulators start at the bits of 1.5 * 2^23, so
// each D read as a float is 1.5 * 2^23 + D, and two exact float operations give float(isum) with
// no int-to-float conversion.
//
// Layout: one persistent block per SM; each warp takes tiles of 16 rows (dynamic hand-out) and
// streams them super-block by super-block through its own ring of shared-memory stages with 16-byte
// cp.async. The weights are the MMA's A (16 rows: no empty rows), the tokens its N (8 per MMA; a
// second N tile for T > 8). The activations of all tokens sit in shared memory in B-fragment order
// for the whole kernel. Thread (g, q) of a warp decodes rows g and g + 8, holds D for tokens 2q and
// 2q + 1, and runs those float chains; the scale, soft cap and argmax run in the tile's epilogue.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "cuda/device_common.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

constexpr int kBlockBytes = 176;                      // Q5_K super-block
using stream::kTileRows;  // the MMA tile's 16 rows, as in the stream layouts
constexpr int kStageBytes = kTileRows * kBlockBytes;  // 2816: one super-block of 16 rows
constexpr int kStageChunks = kStageBytes / 16;        // 176
constexpr int kCopiesPerLane = (kStageChunks + 31) / 32;  // 6

size_t act_smem_bytes(int groups, int mt) {
  return size_t(groups) * size_t(8 * mt) * (kFragPitch + 4 + 16);
}
size_t smem_bytes(int groups, int mt, int warps, int stages) {
  return act_smem_bytes(groups, mt) + size_t(warps) * stages * kStageBytes;
}

// What the epilogue and the A fragments need from one row's super-block header.
struct RowHeader {
  float d, dmin;
  uint32_t mlo, mhi;   // 6-bit mins m[0..3], m[4..7] as bytes
  uint32_t sa0, sa1;   // sc[q] = 8 * sa1 + sa0
  uint32_t sb0, sb1;   // sc[q + 4] = 8 * sb1 + sb0
};

__device__ __forceinline__ RowHeader row_header(const uint4& h, int q) {
  RowHeader r;
  r.d = f16_exact(h.x);
  r.dmin = f16_exact(h.x >> 16);
  const KScales ks = k_scales(h);
  r.mlo = ks.m_lo;
  r.mhi = ks.m_hi;
  const uint32_t scales_q = (h.y >> (8 * q)) & 0xFFu;                            // scales[q]
  const uint32_t sc_a = scales_q & 63u;                                          // sc[q]
  const uint32_t sc_b = ((h.w >> (8 * q)) & 0x0Fu) | ((scales_q >> 2) & 0x30u);  // sc[q + 4]
  r.sa0 = sc_a & 7u;
  r.sa1 = sc_a >> 3;
  r.sb0 = sc_b & 7u;
  r.sb1 = sc_b >> 3;
  return r;
}

// MT: N tiles of 8 tokens (1 for T <= 8, 2 above). CT: token columns per lane that can be valid
// (1 when T == 1, else 2).
template <int MT, int CT, int NW, int S>
__global__ void __launch_bounds__(NW * 32, 1) q5k_mma_kernel(const HeadParams p) {
  static_assert(S >= 2, "at least double buffering");
  constexpr int TS = 8 * MT;  // token slots in shared memory
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ PartialBest s_best[NW][kMaxTokens];
  __shared__ int s_item_tile[NW][S];
  __shared__ int s_item_sb[NW][S];

  const int G = p.groups;
  uint8_t* s_frag = smem;                                                            // [G][TS][kFragPitch]
  float* s_yd = reinterpret_cast<float*>(smem + size_t(G) * TS * kFragPitch);        // [G][TS]
  uint32_t* s_bsp = reinterpret_cast<uint32_t*>(s_yd + G * TS);                      // [G][TS][4]
  uint8_t* s_stage = reinterpret_cast<uint8_t*>(s_bsp + G * TS * 4);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int V = p.vocab;
  const int ntiles = (V + kTileRows - 1) / kTileRows;
  const int total_warps = gridDim.x * NW;
  uint8_t* stages = s_stage + warp * (S * kStageBytes);

  // This lane's share of a stage: chunks lane + 32 i (row (lane + 32 i) / 11), as byte offsets
  // from the tile's first row, fixed for the whole kernel.
  int src_off[kCopiesPerLane];
#pragma unroll
  for (int i = 0; i < kCopiesPerLane; ++i) {
    const int c = lane + 32 * i;
    const int row = c / 11, piece = c - 11 * row;
    src_off[i] = int(row * p.row_stride) + piece * 16;
  }

  // ---- weight stream: items (tile, super-block) in order, S - 1 ahead of the compute ----
  int itile = blockIdx.x * NW + warp, isb = 0, issued = 0;
  int next_tile = 0;  // lane 0: the tile after itile, requested when itile's first item is issued
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

  // ---- activations: wait for the prep kernel, then keep every token's q8 in shared memory ----
  pdl_wait();
  {
    constexpr int kChunksPerToken = kFragPitch / 16;  // 20
    const int frag_chunks = G * TS * kChunksPerToken;
    // Loads of a batch issued before its stores: a few L2 round trips per block, not one per chunk.
    constexpr int kBatch = 8;
    for (int base = threadIdx.x; base < frag_chunks; base += kBatch * blockDim.x) {
      uint4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * blockDim.x;
        if (i < frag_chunks) {
          const int c = i % kChunksPerToken, gt = i / kChunksPerToken, gi = gt / TS, t = gt - gi * TS;
          v[u] = *reinterpret_cast<const uint4*>(p.act_frag + (size_t(gi) * kMaxTokens + t) * kFragPitch + 16 * c);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = base + u * blockDim.x;
        if (i < frag_chunks) {
          const int c = i % kChunksPerToken, gt = i / kChunksPerToken, gi = gt / TS, t = gt - gi * TS;
          *reinterpret_cast<uint4*>(s_frag + (size_t(gi) * TS + t) * kFragPitch + 16 * c) = v[u];
        }
      }
    }
    for (int i = threadIdx.x; i < G * TS; i += blockDim.x) {
      const int gi = i / TS, t = i - gi * TS;
      s_yd[i] = p.act_d[size_t(gi) * kMaxTokens + t];
      *reinterpret_cast<uint4*>(s_bsp + 4 * i) =
          *reinterpret_cast<const uint4*>(p.act_bsp + (size_t(gi) * kMaxTokens + t) * 4);
    }
  }
  __syncthreads();

  PartialBest best[MT][CT];
  float acc[MT][CT][2][8];
  float summs[MT][CT][2];
#pragma unroll
  for (int nt = 0; nt < MT; ++nt)
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      best[nt][c] = best_empty();
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        summs[nt][c][rr] = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[nt][c][rr][k] = 0.0f;
      }
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

    // Rows g and g + 8: header, high bits, and the qs halves of sub-blocks q and q + 4.
    RowHeader rh[2];
    uint4 qh[2][2], qa[2][2], qb[2][2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const uint8_t* rb = st + (g + 8 * rr) * kBlockBytes;
      rh[rr] = row_header(lds128(rb), q);
      qh[rr][0] = lds128(rb + 16);
      qh[rr][1] = lds128(rb + 32);
      qa[rr][0] = lds128(rb + 48 + 32 * p0);
      qa[rr][1] = lds128(rb + 48 + 32 * p0 + 16);
      qb[rr][0] = lds128(rb + 48 + 32 * (p0 + 2));
      qb[rr][1] = lds128(rb + 48 + 32 * (p0 + 2) + 16);
    }

    // Mins and multipliers of the (row, token) pairs this lane owns: tokens 2q + c (+ 8).
    float dq[MT][CT][2];
#pragma unroll
    for (int nt = 0; nt < MT; ++nt)
#pragma unroll
      for (int c = 0; c < CT; ++c) {
        const int tok = 2 * q + c + 8 * nt;
        const float yd = s_yd[sb * TS + tok];
        const uint4 bs = lds128(s_bsp + 4 * (sb * TS + tok));
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          dq[nt][c][rr] = __fmul_rn(yd, rh[rr].d);
          const float dm = __fmul_rn(-yd, rh[rr].dmin);
          summs[nt][c][rr] = __fmaf_rn(dm, k_mins_sum(bs, rh[rr].mlo, rh[rr].mhi), summs[nt][c][rr]);
        }
      }

    // B fragments of token g (+ 8): (lo, hi) word pairs for k = 0..7.
    uint4 bq[MT][4];
#pragma unroll
    for (int nt = 0; nt < MT; ++nt) {
      const uint8_t* fb = s_frag + (size_t(sb) * TS + g + 8 * nt) * kFragPitch + q * 80;
#pragma unroll
      for (int i = 0; i < 4; ++i) bq[nt][i] = lds128(fb + 16 * i);
    }

#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t q5a[2], q5b[2];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const uint32_t tq = word_of(qh[rr][k >> 2], k & 3) >> q;
        q5a[rr] = ((word_of(qa[rr][k >> 2], k & 3) >> nib) & 0x0F0F0F0Fu) | ((tq << 4) & 0x10101010u);
        q5b[rr] = ((word_of(qb[rr][k >> 2], k & 3) >> nib) & 0x0F0F0F0Fu) | (tq & 0x10101010u);
      }
      const uint32_t a1_0 = q5a[0] * rh[0].sa1, a1_1 = q5a[1] * rh[1].sa1;
      const uint32_t a1_2 = q5b[0] * rh[0].sb1, a1_3 = q5b[1] * rh[1].sb1;
      const uint32_t a0_0 = q5a[0] * rh[0].sa0, a0_1 = q5a[1] * rh[1].sa0;
      const uint32_t a0_2 = q5b[0] * rh[0].sb0, a0_3 = q5b[1] * rh[1].sb0;
#pragma unroll
      for (int nt = 0; nt < MT; ++nt) {
        const uint32_t b0 = word_of(bq[nt][k >> 1], 2 * (k & 1)), b1 = word_of(bq[nt][k >> 1], 2 * (k & 1) + 1);
        int d1[4], d0[4];
        mma_u8s8(d1, a1_0, a1_1, a1_2, a1_3, b0, b1, kMagicBits);
        mma_u8s8(d0, a0_0, a0_1, a0_2, a0_3, b0, b1, kMagicBits);
        // d[2 rr + c]: row g + 8 rr, token 2q + c.
#pragma unroll
        for (int c = 0; c < CT; ++c)
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            acc[nt][c][rr][k] = __fmaf_rn(dq[nt][c][rr], plane_isum(d1[2 * rr + c], d0[2 * rr + c]), acc[nt][c][rr][k]);
          }
      }
    }
    __syncwarp();

    if (sb == G - 1) {
#pragma unroll
      for (int nt = 0; nt < MT; ++nt)
#pragma unroll
        for (int c = 0; c < CT; ++c)
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            const float raw = __fadd_rn(reduce_lanes(acc[nt][c][rr]), summs[nt][c][rr]);
            const int row = tile * kTileRows + g + 8 * rr;
            const int tok = 2 * q + c + 8 * nt;
            if (row < V && tok < p.T) {
              const float biased = add_head_bias(raw, p, row);
              const float capped = apply_cap(biased, p);
              p.logits[size_t(tok) * V + row] = capped;
              if (p.raw) p.raw[size_t(tok) * V + row] = biased;
              best[nt][c] = best_merge(best[nt][c], best_single(capped, row));
            }
            summs[nt][c][rr] = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; ++k) acc[nt][c][rr][k] = 0.0f;
          }
    }
    slot = slot + 1 == S ? 0 : slot + 1;
  }
  cp_async_wait_all();

  // ---- argmax: lanes of one token column (same q), then warps, then blocks ----
#pragma unroll
  for (int nt = 0; nt < MT; ++nt)
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      PartialBest b = best[nt][c];
      b = best_merge(b, best_shfl_xor(b, 4));
      b = best_merge(b, best_shfl_xor(b, 8));
      b = best_merge(b, best_shfl_xor(b, 16));
      if (g == 0) s_best[warp][2 * q + c + 8 * nt] = b;
    }
  if (CT == 1 && g == 0) {  // columns 2q + 1 hold no valid token when T == 1
#pragma unroll
    for (int nt = 0; nt < MT; ++nt) s_best[warp][2 * q + 1 + 8 * nt] = best_empty();
  }
  merge_warps_and_finalize(p, s_best, NW, TS);
}

template <int MT, int CT, int NW, int S>
void launch_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  launch_head_kernel<q5k_mma_kernel<MT, CT, NW, S>>(dim3(num_sms), dim3(NW * 32), smem_bytes(p.groups, MT, NW, S), pdl,
                                                   stream, p);
}

// The kernels built: T <= 8 with 8 / 12 / 16 warps (ring depth 4 / 3 / 3), T > 8 with 8 warps
// (ring depth 3): what fits next to the activations in 227 KB of shared memory.
struct Built { int warps, stages; };
constexpr Built kOneTile[] = {{8, 4}, {12, 3}, {16, 3}};
constexpr Built kTwoTiles[] = {{8, 3}};

Built pick(int tokens, int warps) {
  if (tokens > 8) return kTwoTiles[0];  // 12 warps would spill the 72 accumulators per thread
  for (const Built& b : kOneTile)
    if (b.warps == warps) return b;
  return kOneTile[1];
}

}  // namespace

bool q5k_mma_supported(const MmaConfig& c) { return c.warps == 8 || c.warps == 12 || c.warps == 16; }

size_t q5k_mma_smem(int groups, int tokens, const MmaConfig& c) {
  const Built b = pick(tokens, c.warps);
  return smem_bytes(groups, tokens > 8 ? 2 : 1, b.warps, b.stages);
}

void launch_q5k_mma(const HeadParams& p, const MmaConfig& c, int num_sms, cudaStream_t stream) {
  const Built b = pick(p.T, c.warps);
  if (p.T > 8) return launch_config<2, 2, 8, 3>(p, c.pdl, num_sms, stream);
  if (p.T == 1) {
    if (b.warps == 8) return launch_config<1, 1, 8, 4>(p, c.pdl, num_sms, stream);
    if (b.warps == 12) return launch_config<1, 1, 12, 3>(p, c.pdl, num_sms, stream);
    return launch_config<1, 1, 16, 3>(p, c.pdl, num_sms, stream);
  }
  if (b.warps == 8) return launch_config<1, 2, 8, 4>(p, c.pdl, num_sms, stream);
  if (b.warps == 12) return launch_config<1, 2, 12, 3>(p, c.pdl, num_sms, stream);
  return launch_config<1, 2, 16, 3>(p, c.pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
