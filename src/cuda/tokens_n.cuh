#pragma once
// The tokens-in-N kernel body: every MMA puts 8 tokens (one token tile; two for T > 8) in its N, so a
// thread's results are rows g, g + 8 of tokens 8 nt + 2q + c, and each warp walks whole 16-row tiles
// of a stream layout with D items in flight in registers (kernel), or S items staged in shared
// memory by bulk copies (staged_kernel, below). Shared by the formats that compute this
// way (a format F is the layout, the activations' arrangement in shared memory and the item's
// arithmetic):
//
//   struct F {
//     using Item;                                  // stream_item.cuh; Src: FromGlobal or FromShared
//     template <class Src> static void load(Item&, const uint8_t* item, int lane);
//     static constexpr int kItemBytes, kLanes;     // kLanes: float accumulators per output
//     static constexpr int kSumVecs;               // 16-byte token sums per (super-block, token)
//     static const uint8_t* weights(const HeadParams&);
//     template <int TTOT> static void stage_runs(const HeadParams&, uint32_t* runs, int items);
//     template <int TTOT> static void stage_sums(const HeadParams&, const TokenSmem&, int items);
//     template <int NT> static void compute(const Item&, int sb, const TokenSmem&, int lane, Acc<NT, kLanes>&);
//   };
//
// q5k_stream_n.cu: the sub-blocks layout in vec_dot's order and in llama.cpp's tiled order;
// kquant_tiled.cu: the lanes layout in the tiled order (Q4_K, Q5_K, Q6_K).
#include <cuda_runtime.h>

#include "cuda/device_common.cuh"
#include "cuda/launch.hpp"
#include "cuda/stream_item.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda::tokens_n {

constexpr int kTileRows = 16;
constexpr int kRunWords = 64;  // one token's 64 words of one super-block

// Word `word` of B run `run` (run = super-block * TTOT + token slot). Runs of odd slots have their
// 16-byte chunks' position bit 2 flipped: the eight threads of a 16-byte load phase (tokens g,
// g + 1; q = 0..3) then read eight different bank groups with no padding between runs, which keeps
// the runs of 16 tokens small enough to leave room for the staged kernel's rings.
__device__ __forceinline__ int run_word(int run, int word) { return run * kRunWords + (word ^ ((run & 1) << 4)); }

// Shared memory: [G][TTOT][kRunWords] B runs, then [G][TTOT][sum_vecs] token sums and [G][TTOT] y.d.
inline size_t smem_bytes(int groups, int ttot, int sum_vecs = 1) {
  const size_t items = size_t(groups) * ttot;
  return items * (kRunWords * 4 + 16 * sum_vecs + 4);
}

struct TokenSmem {
  uint32_t* runs;  // [G][TTOT][kRunWords]
  uint4* bsp;      // [G][TTOT][kSumVecs]: vec_dot's Q5_K the sub-block sums as int16 pairs (prep.cu);
                   // the tiled order the 16-element sums' low and high bytes (stage_token_sums16)
  float* yd;       // [G][TTOT]
};

// L float accumulators per output (vec_dot's eight lanes, or the tiled order's one chain) and the
// mins chains of vec_dot's order.
template <int NT, int L>
struct Acc {
  float acc[NT][2][2][L];  // [N tile][token 2q + c][row g, g + 8][lane k]
  float summs[NT][2][2];
  __device__ void reset(int nt, int c, int r) {
    summs[nt][c][r] = 0.0f;
#pragma unroll
    for (int k = 0; k < L; ++k) acc[nt][c][r][k] = 0.0f;
  }
};

// Every (super-block, token slot)'s 16 q8 chunks into its B run (after pdl_wait; the caller
// synchronises the block); slots past T get zeros (their columns are computed and dropped).
// place(j, k) is word (j, k)'s position in the run (word (j, k) = q8 bytes 32j + 4k .. + 3; run_word
// swizzles it). Each thread has eight chunk loads in flight at once: the staging stands between the
// prep kernel and the first MMA of every block, and one L2 round trip per chunk made it several
// microseconds longer for every token tile.
template <int TTOT, class Place>
__device__ __forceinline__ void stage_q8_runs(const HeadParams& p, uint32_t* runs, int items, Place place) {
  constexpr int kBatch = 8;
  const int n = items * 16;
  for (int base = threadIdx.x; base < n; base += kBatch * blockDim.x) {
    uint4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * blockDim.x;
      const int c = i & 15, it = i >> 4, sb = it / TTOT, t = it - sb * TTOT;
      v[b] = make_uint4(0u, 0u, 0u, 0u);
      if (i < n && t < p.T) v[b] = reinterpret_cast<const uint4*>(p.act_qs + (size_t(sb) * kMaxTokens + t) * kActPitch)[c];
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * blockDim.x;
      if (i < n) {
        const int c = i & 15, it = i >> 4;
        const int j = c >> 1, k0 = 4 * (c & 1);
        const uint32_t wv[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
#pragma unroll
        for (int u = 0; u < 4; ++u) runs[run_word(it, place(j, k0 + u))] = wv[u];
      }
    }
  }
}

// Thread (g, q)'s B fragments of super-block sb: bq[nt][i] holds its 16 bytes of chunk i of token
// 8 nt + g's run (words 4q .. 4q + 3 of each 16-word chunk), the layout both stage_runs write.
template <int NT>
__device__ __forceinline__ void load_b_runs(const uint32_t* runs, int sb, int lane, uint4 (&bq)[NT][4]) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int run = sb * 8 * NT + 8 * nt + g;
#pragma unroll
    for (int i = 0; i < 4; ++i) bq[nt][i] = lds128(runs + run_word(run, 16 * i + 4 * q));
  }
}

// The row headers of an item's rows g, g + 8 (r) for a Q4_K / Q5_K item: d, dmin and the 6-bit scales
// and mins as packed bytes.
struct KRowHeaders {
  float d[2], dmin[2];
  KScales ks[2];
  __device__ explicit KRowHeaders(const Item& it) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      d[r] = __half2float(__ushort_as_half(uint16_t(it.h[r].x & 0xFFFFu)));
      dmin[r] = __half2float(__ushort_as_half(uint16_t(it.h[r].x >> 16)));
      ks[r] = k_scales(it.h[r]);
    }
  }
};

// The tiled order's float steps of one item (Q4_K, Q5_K: numerics.md, "Route tiled"): s1[nt][2r + c]
// is the super-block's exact scaled sum of row g + 8r and token 8 nt + 2q + c; s2 = sum_j m[j] *
// (bsums[2j] + bsums[2j + 1]) is two m16n8k16 MMAs per token tile, A = the row's mins with K = the
// sixteen 16-element groups (group s takes m[s / 2]; the 6-bit mins fit s8), B = the low (unsigned)
// and high (signed) bytes of the token's sixteen 16-element sums (stage_token_sums16), so s2 =
// 256 O_hi + O_lo exactly (|s2| < 2^22); then r = fma(-dmin, float(s2), float(s1) * d) and
// out = fma(r, y.d, out).
template <int NT>
__device__ __forceinline__ void tiled_accumulate(const int (&s1)[NT][4], const KRowHeaders& h, int sb,
                                                 const TokenSmem& s, int lane, Acc<NT, 1>& a) {
  constexpr int TTOT = 8 * NT;
  const int g = lane >> 2, q = lane & 3;
  // Thread q's A word: groups 4q .. 4q + 3 take m[2q], m[2q], m[2q + 1], m[2q + 1].
  const unsigned pick = (q & 1) ? 0x3322u : 0x1100u;
  const uint32_t ma0 = __byte_perm(q < 2 ? h.ks[0].m_lo : h.ks[0].m_hi, 0u, pick);
  const uint32_t ma1 = __byte_perm(q < 2 ? h.ks[1].m_lo : h.ks[1].m_hi, 0u, pick);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint32_t* sums = reinterpret_cast<const uint32_t*>(s.bsp + 2 * (sb * TTOT + 8 * nt + g));
    int olo[4], ohi[4];  // [2r + c]: row g + 8r, token 8 nt + 2q + c
    mma16_s8u8(olo, ma0, ma1, sums[q]);
    mma16_s8s8(ohi, ma0, ma1, sums[4 + q]);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float yd = s.yd[sb * TTOT + 8 * nt + 2 * q + c];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int s2 = 256 * ohi[2 * r + c] + olo[2 * r + c];
        const float rr = __fmaf_rn(-h.dmin[r], __int2float_rn(s2), __fmul_rn(__int2float_rn(s1[nt][2 * r + c]), h.d[r]));
        a.acc[nt][c][r][0] = __fmaf_rn(rr, yd, a.acc[nt][c][r][0]);
      }
    }
  }
}

// y.d and the low and high bytes of the sixteen 16-element sums of every (super-block, token slot)
// (the tiled order's formats; kSumVecs = 2: the low bytes' four words, then the high bytes'); slots
// past T get zeros (their columns are computed and dropped). A sum is at most 16 * 128 in magnitude,
// so its high byte (sum >> 8) fits s8 and sum = 256 hi + lo.
template <int TTOT>
__device__ void stage_token_sums16(const HeadParams& p, const TokenSmem& s, int items) {
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int sb = i / TTOT, t = i - sb * TTOT;
    const bool real = t < p.T;
    s.yd[i] = real ? p.act_d[size_t(sb) * kMaxTokens + t] : 0.0f;
    uint32_t lo[4] = {0u, 0u, 0u, 0u}, hi[4] = {0u, 0u, 0u, 0u};
    if (real) {
      const uint4* q8 = reinterpret_cast<const uint4*>(p.act_qs + (size_t(sb) * kMaxTokens + t) * kActPitch);
#pragma unroll
      for (int m = 0; m < 16; ++m) {
        const uint4 v = q8[m];
        int sum = 0;
#pragma unroll
        for (int w = 0; w < 4; ++w) sum = __dp4a(int(word_of(v, w)), 0x01010101, sum);
        lo[m >> 2] |= (uint32_t(sum) & 0xFFu) << (8 * (m & 3));
        hi[m >> 2] |= (uint32_t(sum >> 8) & 0xFFu) << (8 * (m & 3));
      }
    }
    s.bsp[2 * i] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    s.bsp[2 * i + 1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  }
}

// y.d and the sub-block sum pairs of every (super-block, token slot) (vec_dot's Q5_K; kSumVecs = 1);
// slots past T get zeros (their columns are computed and dropped).
template <int TTOT>
__device__ void stage_token_sums(const HeadParams& p, const TokenSmem& s, int items) {
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int sb = i / TTOT, t = i - sb * TTOT;
    const bool real = t < p.T;
    s.yd[i] = real ? p.act_d[size_t(sb) * kMaxTokens + t] : 0.0f;
    s.bsp[i] = real ? *reinterpret_cast<const uint4*>(p.act_bsp + (size_t(sb) * kMaxTokens + t) * 4)
                    : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Row g + 8r, token 8 nt + 2q + c of a finished tile: the eight lanes and the mins term (L = 1: the
// one chain) give the raw logit, then scale, cap, store and the running argmax.
template <int L>
__device__ __forceinline__ void finish_row(const HeadParams& p, int tile, int lane, int nt, int c, int r,
                                           const float (&lanes)[L], float summs, PartialBest& best) {
  const int g = lane >> 2, q = lane & 3, V = p.vocab;
  float raw;
  if constexpr (L == 1) raw = lanes[0];
  else raw = __fadd_rn(reduce_lanes(lanes), summs);
  const int row = tile * kTileRows + g + 8 * r;
  const int tok = 8 * nt + 2 * q + c;
  if (row < V && tok < p.T) {
    const float biased = add_head_bias(raw, p, row);
    const float capped = apply_cap(biased, p);
    p.logits[size_t(tok) * V + row] = capped;
    if (p.raw) p.raw[size_t(tok) * V + row] = biased;
    best = best_merge(best, best_single(capped, row));
  }
}

// Token 8 nt + 2q + c lives in the threads with that q: merge over g (lanes q, q + 4, ..., q + 28),
// then over the warps, then the last block's finalize.
template <int NT, int NW>
__device__ void finish_tokens(const HeadParams& p, PartialBest (&best)[NT][2], PartialBest (*s_best)[kMaxTokens],
                              int warp, int lane) {
  const int g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      PartialBest b = best[nt][c];
#pragma unroll
      for (int m = 4; m < 32; m <<= 1) b = best_merge(b, best_shfl_xor(b, m));
      if (g == 0) s_best[warp][8 * nt + 2 * q + c] = b;
    }
  merge_warps_and_finalize(p, s_best, NW, p.T);
}

// D register buffers per warp: while one item is computed, D - 1 are in flight.
template <class F, int NT, int NW, int D>
__global__ void __launch_bounds__(NW * 32, 1) kernel(const HeadParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ PartialBest s_best[NW][kMaxTokens];
  stamp_block(p, 0);
  constexpr int TTOT = 8 * NT;
  constexpr int L = F::kLanes;

  const int G = p.groups;
  const int items = G * TTOT;
  TokenSmem s;
  s.runs = reinterpret_cast<uint32_t*>(smem);
  s.bsp = reinterpret_cast<uint4*>(s.runs + size_t(items) * kRunWords);
  s.yd = reinterpret_cast<float*>(s.bsp + size_t(items) * F::kSumVecs);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int total_warps = gridDim.x * NW;
  const uint8_t* weights = F::weights(p);

  // The first loads are issued before the wait for the prep kernel, which they do not depend on.
  ItemWalk walk(p, blockIdx.x * NW + warp, total_warps, lane);
  typename F::Item buf[D];
  int buf_tile[D], buf_sb[D];
  auto load_next = [&](int d) {
    buf_tile[d] = walk.tile;
    buf_sb[d] = walk.sb;
    if (walk.done()) return;
    F::load(buf[d], weights + (int64_t(walk.tile) * G + walk.sb) * F::kItemBytes, lane);
    walk.step(p, lane);
  };
#pragma unroll
  for (int d = 0; d < D; ++d) load_next(d);

  pdl_wait();
  F::template stage_runs<TTOT>(p, s.runs, items);
  F::template stage_sums<TTOT>(p, s, items);
  __syncthreads();
  stamp_block(p, 1);

  PartialBest best[NT][2];
  Acc<NT, L> a;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      best[nt][c] = best_empty();
#pragma unroll
      for (int r = 0; r < 2; ++r) a.reset(nt, c, r);
    }

  bool more = buf_tile[0] < walk.ntiles;
  while (more) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int tile = buf_tile[d], sb = buf_sb[d];
      if (tile >= walk.ntiles) { more = false; break; }
      F::template compute<NT>(buf[d], sb, s, lane, a);
      load_next(d);
      if (sb == G - 1) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              finish_row<L>(p, tile, lane, nt, c, r, a.acc[nt][c][r], a.summs[nt][c][r], best[nt][c]);
              a.reset(nt, c, r);
            }
      }
    }
  }

  finish_tokens<NT, NW>(p, best, s_best, warp, lane);
}

template <class F, int NT, int NW, int D>
void launch(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  launch_head_kernel<kernel<F, NT, NW, D>>(dim3(num_sms), dim3(NW * 32), smem_bytes(p.groups, 8 * NT, F::kSumVecs), pdl,
                                           stream, p);
}

// The tiled order's configurations: one token tile for T <= 8, two above; `warps` 16, 12 or 8 with 2,
// 3 or 4 item buffers (the bytes in flight the register file allows; docs/performance.md, CUDA
// attempt 39).
template <class F>
void launch_tiled(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  if (p.T > 8) {
    if (warps >= 16) return launch<F, 2, 16, 2>(p, pdl, num_sms, stream);
    if (warps >= 12) return launch<F, 2, 12, 3>(p, pdl, num_sms, stream);
    return launch<F, 2, 8, 4>(p, pdl, num_sms, stream);
  }
  if (warps >= 16) return launch<F, 1, 16, 2>(p, pdl, num_sms, stream);
  if (warps >= 12) return launch<F, 1, 12, 3>(p, pdl, num_sms, stream);
  return launch<F, 1, 8, 4>(p, pdl, num_sms, stream);
}

// ---- the staged variant: items brought into shared memory by bulk copies ------------------------
//
// The register kernel above keeps D - 1 items per warp in flight in registers, and the registers
// bound D (16 warps x 2 buffers; performance.md, CUDA attempts 39, 40: most stalls wait on the item
// loads). Here each warp owns a ring of S shared-memory stages: one lane starts one bulk copy per
// item (an item is kItemBytes contiguous bytes of the stream layout) completing on the stage's
// mbarrier; the warp copies a full stage into registers, hands the stage back to the next copy and
// computes, so S items per warp are in flight for a few instructions each, and S is what the shared
// memory beside the token runs allows, chosen at launch. The arithmetic, the walk and the epilogue
// are the register kernel's, so the bytes are too.
template <class F>
constexpr int stage_bytes() {
  return (F::kItemBytes + 15) / 16 * 16;  // bulk copies need 16-byte aligned ends
}
constexpr int kMaxStages = 8;

inline size_t staged_smem_bytes(int groups, int ttot, int sum_vecs, int warps, int stages, int item_bytes) {
  return 128 + size_t(warps) * stages * size_t((item_bytes + 15) / 16 * 16) + smem_bytes(groups, ttot, sum_vecs);
}

template <class F, int NT, int NW>
__global__ void __launch_bounds__(NW * 32, 1) staged_kernel(const HeadParams p, int S) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ PartialBest s_best[NW][kMaxTokens];
  __shared__ __align__(8) uint64_t s_full[NW][kMaxStages];
  __shared__ int s_slot_tile[NW][kMaxStages];
  __shared__ int s_slot_sb[NW][kMaxStages];
  constexpr int TTOT = 8 * NT;
  constexpr int L = F::kLanes;
  constexpr int kStage = stage_bytes<F>();
  stamp_block(p, 0);

  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~uintptr_t(127));
  const int G = p.groups;
  const int items = G * TTOT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int total_warps = gridDim.x * NW;
  uint8_t* stages = smem + size_t(warp) * S * kStage;
  TokenSmem s;
  s.runs = reinterpret_cast<uint32_t*>(smem + size_t(NW) * S * kStage);
  s.bsp = reinterpret_cast<uint4*>(s.runs + size_t(items) * kRunWords);
  s.yd = reinterpret_cast<float*>(s.bsp + size_t(items) * F::kSumVecs);
  const uint8_t* weights = F::weights(p);

  if (lane == 0) {
    for (int i = 0; i < S; ++i) mbar_init(&s_full[warp][i], 1);
    mbar_init_fence();
  }
  __syncwarp();

  // The first S copies start before the wait for the prep kernel, which they do not depend on.
  ItemWalk walk(p, blockIdx.x * NW + warp, total_warps, lane);
  auto issue = [&](int slot) {
    if (lane == 0) {
      s_slot_tile[warp][slot] = walk.tile;
      s_slot_sb[warp][slot] = walk.sb;
      if (!walk.done()) {
        fence_proxy_async_shared();
        mbar_expect_tx(&s_full[warp][slot], F::kItemBytes);
        bulk_load(stages + slot * kStage, weights + (int64_t(walk.tile) * G + walk.sb) * F::kItemBytes, F::kItemBytes,
                  &s_full[warp][slot]);
      }
    }
    if (!walk.done()) walk.step(p, lane);
  };
  for (int i = 0; i < S; ++i) issue(i);

  pdl_wait();
  F::template stage_runs<TTOT>(p, s.runs, items);
  F::template stage_sums<TTOT>(p, s, items);
  __syncthreads();
  stamp_block(p, 1);

  PartialBest best[NT][2];
  Acc<NT, L> a;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      best[nt][c] = best_empty();
#pragma unroll
      for (int r = 0; r < 2; ++r) a.reset(nt, c, r);
    }

  uint32_t phases = 0;
  for (int slot = 0;;) {
    __syncwarp();
    const int tile = s_slot_tile[warp][slot], sb = s_slot_sb[warp][slot];
    if (tile >= walk.ntiles) break;
    mbar_wait(&s_full[warp][slot], (phases >> slot) & 1u);
    phases ^= 1u << slot;
    typename F::Item it;
    F::template load<FromShared>(it, stages + slot * kStage, lane);
    __syncwarp();
    issue(slot);  // refill the stage while this item is computed from registers
    F::template compute<NT>(it, sb, s, lane, a);
    if (sb == G - 1) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            finish_row<L>(p, tile, lane, nt, c, r, a.acc[nt][c][r], a.summs[nt][c][r], best[nt][c]);
            a.reset(nt, c, r);
          }
    }
    slot = slot + 1 == S ? 0 : slot + 1;
  }

  finish_tokens<NT, NW>(p, best, s_best, warp, lane);
}

// The most stages per warp (up to kMaxStages) that fit the device's shared memory next to the token
// runs, or 0 when not even two do.
template <class F>
int staged_stages(int groups, int ttot, int warps, size_t smem_optin) {
  for (int st = kMaxStages; st >= 2; --st)
    if (staged_smem_bytes(groups, ttot, F::kSumVecs, warps, st, F::kItemBytes) + 8192 <= smem_optin) return st;
  return 0;
}

template <class F, int NT, int NW>
void launch_staged_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  const int S = staged_stages<F>(p.groups, 8 * NT, NW, smem_optin_of_current_device());
  if (S == 0) throw Error("tokens_n staged kernel: two stages per warp do not fit the shared memory");
  launch_head_kernel<staged_kernel<F, NT, NW>>(dim3(num_sms), dim3(NW * 32),
                                               staged_smem_bytes(p.groups, 8 * NT, F::kSumVecs, NW, S, F::kItemBytes), pdl,
                                               stream, p, S);
}

// warps: 16, 12 or 8 per block, one token tile for T <= 8, two above (kTwoTilesAt8Warps: two tiles
// always with 8 warps, for a format whose accumulators need the registers of 8).
template <class F, bool kTwoTilesAt8Warps = false>
void launch_staged(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream) {
  if constexpr (kTwoTilesAt8Warps) {
    if (p.T > 8) return launch_staged_config<F, 2, 8>(p, pdl, num_sms, stream);
  } else if (p.T > 8) {
    if (warps >= 16) return launch_staged_config<F, 2, 16>(p, pdl, num_sms, stream);
    if (warps >= 12) return launch_staged_config<F, 2, 12>(p, pdl, num_sms, stream);
    return launch_staged_config<F, 2, 8>(p, pdl, num_sms, stream);
  }
  if (warps >= 16) return launch_staged_config<F, 1, 16>(p, pdl, num_sms, stream);
  if (warps >= 12) return launch_staged_config<F, 1, 12>(p, pdl, num_sms, stream);
  return launch_staged_config<F, 1, 8>(p, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda::tokens_n
