#pragma once
// The arithmetic of one 16-row item (one super-block of a tile) with the eight float lanes in the
// MMA's N, shared by the two kernels that read the Q5_K stream layout: q5k_stream.cu (weights
// streamed into registers) and q5k_tma.cu (weights staged in shared memory by the TMA unit).
// Byte-identical to numerics.md §5; see q5k_lanes.cu for why the lanes are N.
#include <cuda_runtime.h>

#include "cuda/device_common.cuh"
#include "cuda/stream_item.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace lanes_math {

using stream::kTileRows;
constexpr int kZeroWords = 16;  // the B pairs of the threads that hold no lane


// d and dmin: the hardware conversion is exact for every non-NaN half; a NaN scale makes the
// product below a NaN, and the GPU's arithmetic returns its canonical NaN whatever the payload,
// so f16_exact's payload handling would buy nothing here.
__device__ __forceinline__ float f16_scale(uint32_t h16) {
  return __half2float(__ushort_as_half(uint16_t(h16 & 0xFFFFu)));
}

// The head of every lanes-split format's dynamic shared memory: a zero run, then the lane runs of
// `items` (super-block, token) pairs (stage_lane_runs); the format's own arrays start at tail().
__host__ __device__ inline size_t lane_runs_bytes(size_t items) { return kZeroWords * 4 + items * stream::kActWords * 4; }

struct LaneRuns {
  uint32_t* zero;  // [kZeroWords]
  uint32_t* act;   // [items][kActWords]
  int items;
  __device__ LaneRuns(uint8_t* smem, int items_)
      : zero(reinterpret_cast<uint32_t*>(smem)), act(zero + kZeroWords), items(items_) {}
  __device__ uint8_t* tail() const { return reinterpret_cast<uint8_t*>(act + size_t(items) * stream::kActWords); }
};

// Q5_K / Q4_K: after the lane runs, per (super-block, token) the sub-block sums in int16 pairs and y.d.
__host__ __device__ inline size_t act_smem_bytes(int groups, int tt) {
  const size_t items = size_t(groups) * tt;
  return lane_runs_bytes(items) + items * 16 + (items + 3) / 4 * 16;
}

template <int TT>
struct ActSmem : LaneRuns {
  uint4* bsp;  // [G][TT]
  float* yd;   // [G][TT]
  __device__ ActSmem(uint8_t* smem, int groups) : LaneRuns(smem, groups * TT) {
    bsp = reinterpret_cast<uint4*>(tail());
    yd = reinterpret_cast<float*>(bsp + items);
  }
};

// The lane runs of every format in the lanes split, from the prep kernel's q8 bytes (after
// pdl_wait; the caller synchronises the block): zero[kZeroWords], then runs[sb * TT + t][kActWords].
// B of sub-block j's MMA is zero except lane k's own K range, which only thread (g = k, q = k % 4)
// holds: in b0 (k < 4) or b1 (k >= 4). So the item's run keeps, per lane k, the register pairs
// (b0, b1) that thread holds for j = 0..7: (word(j, k), 0) for k < 4, (0, word(j, k)) for k >= 4,
// at words 16k + 2j, 16k + 2j + 1 (word (j, k) = q8 bytes 32j + 4k .. 32j + 4k + 3). Four 16-byte
// loads then give the thread all eight pairs in MMA order; every other thread loads zeros. Every
// load of a batch is issued before any store (one L2 round trip per batch, paid once per call).
template <int TT>
__device__ void stage_lane_runs(const HeadParams& p, const LaneRuns& lr) {
  uint32_t* zero = lr.zero;
  uint32_t* runs = lr.act;
  const int items = lr.items;
  for (int i = threadIdx.x; i < kZeroWords; i += blockDim.x) zero[i] = 0;
  constexpr int kBatch = 4;
  const int chunks = items * 16;
  for (int base = threadIdx.x; base < chunks; base += kBatch * blockDim.x) {
    uint4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x;
      if (i < chunks) {
        const int c = i & 15, it = i >> 4, sb = it / TT, t = it - sb * TT;
        v[u] = reinterpret_cast<const uint4*>(p.act_qs + (size_t(sb) * kMaxTokens + p.t0 + t) * kActPitch)[c];
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * blockDim.x;
      if (i < chunks) {
        const int c = i & 15, it = i >> 4;
        const int j = c >> 1, k0 = 4 * (c & 1);  // chunk c holds words (j, k0 .. k0 + 3)
        uint2* dst = reinterpret_cast<uint2*>(runs + it * stream::kActWords) + j;
        const uint32_t w[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) dst[8 * (k0 + i)] = k0 == 0 ? make_uint2(w[i], 0u) : make_uint2(0u, w[i]);
      }
    }
  }
}

// Fills ActSmem (Q5_K / Q4_K): the lane runs, y.d and the sub-block sums.
template <int TT>
__device__ void stage_activations(const HeadParams& p, uint8_t* smem) {
  const ActSmem<TT> a(smem, p.groups);
  stage_lane_runs<TT>(p, a);
  for (int i = threadIdx.x; i < a.items; i += blockDim.x) {
    const int sb = i / TT, t = i - sb * TT;
    a.yd[i] = p.act_d[size_t(sb) * kMaxTokens + p.t0 + t];
    a.bsp[i] = *reinterpret_cast<const uint4*>(p.act_bsp + (size_t(sb) * kMaxTokens + p.t0 + t) * 4);
  }
}

// This thread's B pairs of one item and token: four 16-byte shared loads (zeros for the threads
// that hold no lane, act_off < 0).
__device__ __forceinline__ void load_b_pairs(const uint32_t* run, const uint32_t* zero, int act_off, uint4 (&bp)[4]) {
  const uint32_t* src = act_off >= 0 ? run + act_off : zero;
#pragma unroll
  for (int i = 0; i < 4; ++i) bp[i] = lds128(src + 4 * i);
}

// act_off: where this thread's B pairs start in an item's run (16 g when g % 4 == q, else -1: the
// thread reads zeros).
__device__ __forceinline__ int act_offset(int lane) {
  const int g = lane >> 2, q = lane & 3;
  return (g & 3) == q ? 16 * g : -1;
}

// The mins term's float lanes: Q5_K sums all eight sub-blocks' mins into one chain, Q4_K keeps four
// (lane t: sub-blocks 2t and 2t + 1), reduced (m0 + m2) + (m1 + m3) at the end (vec_dot.cpp).
template <bool kQ4>
constexpr int kMinLanes = kQ4 ? 4 : 1;

// One item's numbers for rows g, g + 8 (r), tokens t and lanes 2q + c: the integer lane sums
// isum, dq = y.d * d, and the mins term's dm = -y.d * dmin and float(imin) per min lane (exact).
template <int TT, bool kQ4 = false>
struct ItemSums {
  int isum[TT][2][2];
  float dq[TT][2], dm[TT][2], fim[TT][2][kMinLanes<kQ4>];
};

// kQ4: the item holds Q4_K levels (stream::transcode_tile_q4k): W0..W7 in w03, w47.
template <int TT, bool kQ4 = false>
__device__ __forceinline__ void item_sums(const Item& it, int sb, const ActSmem<TT>& a, int act_off,
                                          ItemSums<TT, kQ4>& out) {
  float (&dq)[TT][2] = out.dq;
  uint32_t sc_lo[2], sc_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4 h = it.h[r];
    const float d = f16_scale(h.x), dmin = f16_scale(h.x >> 16);
    const KScales ks = k_scales(h);
    const uint32_t mlo = ks.m_lo, mhi = ks.m_hi;
    sc_lo[r] = ks.sc_lo;
    sc_hi[r] = ks.sc_hi;
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      const float yd = a.yd[sb * TT + t];
      const uint4 bs = a.bsp[sb * TT + t];
      dq[t][r] = __fmul_rn(yd, d);
      out.dm[t][r] = __fmul_rn(-yd, dmin);
      if constexpr (kQ4) {
        // bs word t' holds the sums of sub-blocks 2t', 2t' + 1; m[2t'], m[2t' + 1] are bytes of mlo / mhi.
        out.fim[t][r][0] = __fsub_rn(__int_as_float(__dp2a_lo(int(bs.x), int(mlo), kMagicBits)), kMagic);
        out.fim[t][r][1] = __fsub_rn(__int_as_float(__dp2a_hi(int(bs.y), int(mlo), kMagicBits)), kMagic);
        out.fim[t][r][2] = __fsub_rn(__int_as_float(__dp2a_lo(int(bs.z), int(mhi), kMagicBits)), kMagic);
        out.fim[t][r][3] = __fsub_rn(__int_as_float(__dp2a_hi(int(bs.w), int(mhi), kMagicBits)), kMagic);
      } else {
        out.fim[t][r][0] = k_mins_sum(bs, mlo, mhi);
      }
    }
  }

  // B: the (b0, b1) register pairs of sub-blocks 2i, 2i + 1 in bp[t][i].
  uint4 bp[TT][4];
#pragma unroll
  for (int t = 0; t < TT; ++t) load_b_pairs(a.act + (sb * TT + t) * stream::kActWords, a.zero, act_off, bp[t]);

  int (&isum)[TT][2][2] = out.isum;
#pragma unroll
  for (int t = 0; t < TT; ++t)
#pragma unroll
    for (int r = 0; r < 2; ++r) isum[t][r][0] = isum[t][r][1] = 0;

  uint32_t w[2][10];
  item_words(it, w);

#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint32_t wq[2], wq4[2];  // rows g, g + 8: lane q and lane q + 4 of sub-block j
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (kQ4) {
        wq[r] = stream::q4_level_word(w[r][j], 0);
        wq4[r] = stream::q4_level_word(w[r][j], 1);
      } else {
        wq[r] = stream::level_word(w[r], 2 * j);
        wq4[r] = stream::level_word(w[r], 2 * j + 1);
      }
    }
    const int s0 = int(__byte_perm((j < 4) ? sc_lo[0] : sc_hi[0], 0u, 0x4440u | unsigned(j & 3)));
    const int s1 = int(__byte_perm((j < 4) ? sc_lo[1] : sc_hi[1], 0u, 0x4440u | unsigned(j & 3)));
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      int dd[4];
      mma_u8s8(dd, wq[0], wq[1], wq4[0], wq4[1], word_of(bp[t][j >> 1], 2 * (j & 1)), word_of(bp[t][j >> 1], 2 * (j & 1) + 1),
               0);
      isum[t][0][0] += s0 * dd[0];
      isum[t][0][1] += s0 * dd[1];
      isum[t][1][0] += s1 * dd[2];
      isum[t][1][1] += s1 * dd[3];
    }
  }
}

// The item's step of the float chains (numerics.md §5): summs[i] += dm * imin[i], acc[k] += dq * isum[k].
template <int TT, bool kQ4 = false>
__device__ __forceinline__ void compute_item(const Item& it, int sb, const ActSmem<TT>& a, int act_off,
                                             float (&acc)[TT][2][2], float (&summs)[TT][2][kMinLanes<kQ4>]) {
  ItemSums<TT, kQ4> s;
  item_sums<TT, kQ4>(it, sb, a, act_off, s);
#pragma unroll
  for (int t = 0; t < TT; ++t)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int i = 0; i < kMinLanes<kQ4>; ++i) summs[t][r][i] = __fmaf_rn(s.dm[t][r], s.fim[t][r][i], summs[t][r][i]);
#pragma unroll
      for (int c = 0; c < 2; ++c)
        acc[t][r][c] = __fmaf_rn(s.dq[t][r], __int2float_rn(s.isum[t][r][c]), acc[t][r][c]);
    }
}

// After a tile's last super-block: the eight lanes of each row meet (shuffles within the quad),
// hsum (+ the mins term's kMins lanes, reduced as vec_dot.cpp does; none for Q6_K and Q8_0, whose
// result is the hsum itself) give the raw logit, then scale, cap, store and the running argmax.
template <int kMins>
constexpr int kMinSlots = kMins > 0 ? kMins : 1;

template <int TT, int kMins>
__device__ __forceinline__ void finish_lanes_tile(const HeadParams& p, int tile, int lane, float (&acc)[TT][2][2],
                                                  float (&summs)[TT][2][kMinSlots<kMins>], PartialBest (&best)[TT]) {
  const int g = lane >> 2, q = lane & 3, V = p.vocab;
#pragma unroll
  for (int t = 0; t < TT; ++t)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lanes8[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) lanes8[k] = __shfl_sync(0xffffffffu, acc[t][r][k & 1], (lane & ~3) | (k >> 1));
      float raw = reduce_lanes(lanes8);
      if constexpr (kMins == 1) raw = __fadd_rn(raw, summs[t][r][0]);
      if constexpr (kMins == 4)
        raw = __fadd_rn(raw, __fadd_rn(__fadd_rn(summs[t][r][0], summs[t][r][2]), __fadd_rn(summs[t][r][1], summs[t][r][3])));
      const int row = tile * kTileRows + g + 8 * r;
      if (q == 0 && row < V && t < p.tc) {
        const float biased = add_head_bias(raw, p, row);
        const float capped = apply_cap(biased, p);
        p.logits[size_t(p.t0 + t) * V + row] = capped;
        if (p.raw) p.raw[size_t(p.t0 + t) * V + row] = biased;
        best[t] = best_merge(best[t], best_single(capped, row));
      }
#pragma unroll
      for (int i = 0; i < kMinSlots<kMins>; ++i) summs[t][r][i] = 0.0f;
      acc[t][r][0] = acc[t][r][1] = 0.0f;
    }
}

// The float lanes of a thread for the formats without a mins term (Q6_K, Q8_0): zeroed at the
// start, finished per tile with the hsum alone.
template <int TT>
struct PlainLanes {
  float acc[TT][2][2];  // [token][row g, g+8][lane 2q + c]
  __device__ PlainLanes() {
#pragma unroll
    for (int t = 0; t < TT; ++t)
#pragma unroll
      for (int r = 0; r < 2; ++r) acc[t][r][0] = acc[t][r][1] = 0.0f;
  }
  __device__ void finish(const HeadParams& p, int tile, int lane, PartialBest (&best)[TT]) {
    float no_mins[TT][2][1];
    finish_lanes_tile<TT, 0>(p, tile, lane, acc, no_mins, best);
  }
};

template <int TT, bool kQ4 = false>
__device__ __forceinline__ void finish_tile(const HeadParams& p, int tile, int lane, float (&acc)[TT][2][2],
                                            float (&summs)[TT][2][kMinLanes<kQ4>], PartialBest (&best)[TT]) {
  finish_lanes_tile<TT, kMinLanes<kQ4>>(p, tile, lane, acc, summs, best);
}

}  // namespace lanes_math
}  // namespace lmhead::cuda
