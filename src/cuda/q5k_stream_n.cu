// The Q5_K head on the q8 route for T = 3..16 with the tokens in the MMA's N, streaming the weights
// into registers from the "sub-blocks" stream layout (stream_layout.hpp); byte-identical to
// numerics.md §5.
//
// The arithmetic is q5k_mma.cu's: one m16n8k32 MMA per float lane k and 8 tokens, K = the 32
// elements of lane k over the eight sub-blocks (thread q holds sub-blocks q and q + 4), the 6-bit
// scale folded into two u8 weight planes (sc = 8 s1 + s0, q5 * s < 256 per byte, so one 32-bit
// multiply per word), accumulators started at the bits of 1.5 * 2^23 so that
// float(isum) = (8 * (M + D1) - 9M) + (M + D0) exactly, with no int-to-float conversion. What
// changed is the way in, as for the stream kernel (q5k_stream.cu): the head is re-ordered at upload
// into 2,816-byte tile-major items whose words are ordered by the thread that reads them, levels
// packed for cheap decoding; a warp loads each item with eight contiguous 16/8-byte loads per
// thread straight into registers (no shared-memory staging, no copy bookkeeping) and keeps one item
// in flight while it computes the other.
//
// TILED (route tiled at every T, route llamacpp from 8 tokens on) keeps the integers and rounds as
// llama.cpp's tiled K-quant matmul does: no float lanes, so the eight lanes' MMAs chain their
// accumulators (C = the previous lane's D) and one pair of plane sums per (row, token) gives the
// slab's s1 = 8 D1 + D0 exactly; then r = fma(-dmin, s2, s1 * d) and out = fma(r, y.d, out) once
// per super-block (numerics.md, "The llama.cpp route"). One float accumulator per output instead of
// eight lanes and a mins chain: fewer registers, so more warps (docs/performance.md, CUDA attempt 39).
//
// The activations sit in shared memory as B fragments: per (super-block, token) and pair of lanes
// (2i, 2i + 1), the (b0, b1) words of thread q (sub-blocks q and q + 4) in one 16-byte run; token
// runs are 80 words apart so that the two tokens of a quarter-warp hit different banks.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.hpp"
#include "cuda/device_common.cuh"
#include "cuda/stream_item.cuh"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {
namespace {

constexpr int kTileRows = 16;
constexpr int kTokenWords = 80;  // one token's 64 words of one super-block, padded for the banks

// Shared memory: [G][TTOT][kTokenWords] B runs, then [G][TTOT] sub-block sum pairs and y.d.
size_t smem_bytes(int groups, int ttot) {
  const size_t items = size_t(groups) * ttot;
  return items * (kTokenWords * 4 + 16 + 4);
}

// TILED keeps one float per output (kLanes = 1), the vec_dot order eight lanes and a mins chain.
template <int NT, bool TILED>
struct Acc {
  static constexpr int kLanes = TILED ? 1 : 8;
  float acc[NT][2][2][kLanes];  // [N tile][token 2q + c][row g, g + 8][lane k]
  float summs[NT][2][2];
};

template <int NT>
__device__ __forceinline__ void compute_item(const Item& it, int sb, const uint32_t* s_act, const uint4* s_bsp,
                                             const float* s_yd, int lane, Acc<NT, false>& a) {
  constexpr int TTOT = 8 * NT;
  const int g = lane >> 2, q = lane & 3;
  float dq[NT][2][2];
  float row_d[2], row_dmin[2];
  uint32_t s0a[2], s1a[2], s0b[2], s1b[2];  // planes of sc[q] (a) and sc[q + 4] (b), rows g, g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4 h = it.h[r];
    const float d = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu)));
    const float dmin = __half2float(__ushort_as_half(uint16_t(h.x >> 16)));
    const KScales ks = k_scales(h);
    row_d[r] = d;
    row_dmin[r] = dmin;
    const uint32_t sca = __byte_perm(ks.sc_lo, 0u, 0x4440u | unsigned(q));
    const uint32_t scb = __byte_perm(ks.sc_hi, 0u, 0x4440u | unsigned(q));
    s0a[r] = sca & 7u;
    s1a[r] = sca >> 3;
    s0b[r] = scb & 7u;
    s1b[r] = scb >> 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int tok = 8 * nt + 2 * q + c;
        const float yd = s_yd[sb * TTOT + tok];
        const uint4 bs = s_bsp[sb * TTOT + tok];
        dq[nt][c][r] = __fmul_rn(yd, d);
        const float dm = __fmul_rn(-yd, dmin);
        a.summs[nt][c][r] = __fmaf_rn(dm, k_mins_sum(bs, ks.m_lo, ks.m_hi), a.summs[nt][c][r]);
      }
  }

  // B: token 8 nt + g's run; bq[nt][i] = (b0, b1) of lane 2i, then of lane 2i + 1.
  uint4 bq[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint32_t* run = s_act + (sb * TTOT + 8 * nt + g) * kTokenWords + 4 * q;
#pragma unroll
    for (int i = 0; i < 4; ++i) bq[nt][i] = lds128(run + 16 * i);
  }

  uint32_t w[2][10];
  item_words(it, w);

#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t qa[2], qb[2];  // rows g, g + 8: lane k of sub-block q (a) and q + 4 (b)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      qa[r] = stream::level_word(w[r], 2 * k);
      qb[r] = stream::level_word(w[r], 2 * k + 1);
    }
    const uint32_t a1_0 = qa[0] * s1a[0], a1_1 = qa[1] * s1a[1], a1_2 = qb[0] * s1b[0], a1_3 = qb[1] * s1b[1];
    const uint32_t a0_0 = qa[0] * s0a[0], a0_1 = qa[1] * s0a[1], a0_2 = qb[0] * s0b[0], a0_3 = qb[1] * s0b[1];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint32_t b0 = word_of(bq[nt][k >> 1], 2 * (k & 1)), b1 = word_of(bq[nt][k >> 1], 2 * (k & 1) + 1);
      int d1[4], d0[4];
      mma_u8s8(d1, a1_0, a1_1, a1_2, a1_3, b0, b1, kMagicBits);
      mma_u8s8(d0, a0_0, a0_1, a0_2, a0_3, b0, b1, kMagicBits);
      // d[2r + c]: row g + 8r, token 8 nt + 2q + c.
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          a.acc[nt][c][r][k] = __fmaf_rn(dq[nt][c][r], plane_isum(d1[2 * r + c], d0[2 * r + c]), a.acc[nt][c][r][k]);
    }
  }
}

// The tiled order: per item the lanes' MMAs chained (8 D1 + D0 is the slab's s1, exact: |s1| < 2^26),
// the mins' s2 from the sub-block sums (exact: |s2| < 2^22, so k_mins_sum's float is float(s2)).
template <int NT>
__device__ __forceinline__ void compute_item(const Item& it, int sb, const uint32_t* s_act, const uint4* s_bsp,
                                             const float* s_yd, int lane, Acc<NT, true>& a) {
  constexpr int TTOT = 8 * NT;
  const int g = lane >> 2, q = lane & 3;
  float row_d[2], row_dmin[2];
  uint32_t m_lo[2], m_hi[2];
  uint32_t s0a[2], s1a[2], s0b[2], s1b[2];  // planes of sc[q] (a) and sc[q + 4] (b), rows g, g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4 h = it.h[r];
    row_d[r] = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu)));
    row_dmin[r] = __half2float(__ushort_as_half(uint16_t(h.x >> 16)));
    const KScales ks = k_scales(h);
    m_lo[r] = ks.m_lo;
    m_hi[r] = ks.m_hi;
    const uint32_t sca = __byte_perm(ks.sc_lo, 0u, 0x4440u | unsigned(q));
    const uint32_t scb = __byte_perm(ks.sc_hi, 0u, 0x4440u | unsigned(q));
    s0a[r] = sca & 7u;
    s1a[r] = sca >> 3;
    s0b[r] = scb & 7u;
    s1b[r] = scb >> 3;
  }

  uint4 bq[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const uint32_t* run = s_act + (sb * TTOT + 8 * nt + g) * kTokenWords + 4 * q;
#pragma unroll
    for (int i = 0; i < 4; ++i) bq[nt][i] = lds128(run + 16 * i);
  }

  uint32_t w[2][10];
  item_words(it, w);

  int d1[NT][4], d0[NT][4];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t qa[2], qb[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      qa[r] = stream::level_word(w[r], 2 * k);
      qb[r] = stream::level_word(w[r], 2 * k + 1);
    }
    const uint32_t a1_0 = qa[0] * s1a[0], a1_1 = qa[1] * s1a[1], a1_2 = qb[0] * s1b[0], a1_3 = qb[1] * s1b[1];
    const uint32_t a0_0 = qa[0] * s0a[0], a0_1 = qa[1] * s0a[1], a0_2 = qb[0] * s0b[0], a0_3 = qb[1] * s0b[1];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint32_t b0 = word_of(bq[nt][k >> 1], 2 * (k & 1)), b1 = word_of(bq[nt][k >> 1], 2 * (k & 1) + 1);
      if (k == 0) {
        mma_u8s8(d1[nt], a1_0, a1_1, a1_2, a1_3, b0, b1, 0);
        mma_u8s8(d0[nt], a0_0, a0_1, a0_2, a0_3, b0, b1, 0);
      } else {
        mma_u8s8(d1[nt], a1_0, a1_1, a1_2, a1_3, b0, b1, d1[nt][0], d1[nt][1], d1[nt][2], d1[nt][3]);
        mma_u8s8(d0[nt], a0_0, a0_1, a0_2, a0_3, b0, b1, d0[nt][0], d0[nt][1], d0[nt][2], d0[nt][3]);
      }
    }
  }
  // d[2r + c]: row g + 8r, token 8 nt + 2q + c.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int tok = 8 * nt + 2 * q + c;
      const float yd = s_yd[sb * TTOT + tok];
      const uint4 bs = s_bsp[sb * TTOT + tok];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int s1 = 8 * d1[nt][2 * r + c] + d0[nt][2 * r + c];
        const float rr = __fmaf_rn(-row_dmin[r], k_mins_sum(bs, m_lo[r], m_hi[r]),
                                   __fmul_rn(__int2float_rn(s1), row_d[r]));
        a.acc[nt][c][r][0] = __fmaf_rn(rr, yd, a.acc[nt][c][r][0]);
      }
    }
}

// The activations of every (super-block, token slot) as B runs, sub-block sum pairs and y.d (after
// pdl_wait; the caller synchronises the block).
template <int TTOT>
__device__ void stage_tokens(const HeadParams& p, uint32_t* s_act, uint4* s_bsp, float* s_yd, int items) {
  // Token t's word (j, k) (q8 bytes 32j + 4k ..) goes to word 16 (k / 2) + 4 (j % 4) + 2 (k % 2) + j / 4
  // of its run; tokens past T get zeros (their columns are computed and dropped).
  for (int i = threadIdx.x; i < items * 16; i += blockDim.x) {
    const int c = i & 15, it = i >> 4, sb = it / TTOT, t = it - sb * TTOT;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (t < p.T) v = reinterpret_cast<const uint4*>(p.act_qs + (size_t(sb) * kMaxTokens + t) * kActPitch)[c];
    const int j = c >> 1, k0 = 4 * (c & 1);
    uint32_t* run = s_act + size_t(it) * kTokenWords + 4 * (j & 3) + (j >> 2);
    const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int k = k0 + u;
      run[16 * (k >> 1) + 2 * (k & 1)] = wv[u];
    }
  }
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int sb = i / TTOT, t = i - sb * TTOT;
    const bool real = t < p.T;
    s_yd[i] = real ? p.act_d[size_t(sb) * kMaxTokens + t] : 0.0f;
    s_bsp[i] = real ? *reinterpret_cast<const uint4*>(p.act_bsp + (size_t(sb) * kMaxTokens + t) * 4)
                    : make_uint4(0u, 0u, 0u, 0u);
  }
}

// Row g + 8r, token 8 nt + 2q + c of a finished tile: the eight lanes and the mins term (TILED: the
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
template <int NT, int NW, bool TILED, int D>
__global__ void __launch_bounds__(NW * 32, 1) q5k_stream_n_kernel(const HeadParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ PartialBest s_best[NW][kMaxTokens];
  constexpr int TTOT = 8 * NT;

  const int G = p.groups;
  const int items = G * TTOT;
  uint32_t* s_act = reinterpret_cast<uint32_t*>(smem);
  uint4* s_bsp = reinterpret_cast<uint4*>(s_act + size_t(items) * kTokenWords);
  float* s_yd = reinterpret_cast<float*>(s_bsp + items);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int total_warps = gridDim.x * NW;
  const uint8_t* weights = p.stream_n_weights;

  ItemWalk walk(p, blockIdx.x * NW + warp, total_warps, lane);
  Item buf[D];
  int buf_tile[D], buf_sb[D];
  auto load_next = [&](int d) {
    buf_tile[d] = walk.tile;
    buf_sb[d] = walk.sb;
    if (walk.done()) return;
    load_item<false>(buf[d], weights + (int64_t(walk.tile) * G + walk.sb) * stream::kItemBytes, lane);
    walk.step(p, lane);
  };
#pragma unroll
  for (int d = 0; d < D; ++d) load_next(d);

  pdl_wait();
  stage_tokens<TTOT>(p, s_act, s_bsp, s_yd, items);
  __syncthreads();

  PartialBest best[NT][2];
  Acc<NT, TILED> a;
  constexpr int L = Acc<NT, TILED>::kLanes;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      best[nt][c] = best_empty();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        a.summs[nt][c][r] = 0.0f;
#pragma unroll
        for (int k = 0; k < L; ++k) a.acc[nt][c][r][k] = 0.0f;
      }
    }

  bool more = buf_tile[0] < walk.ntiles;
  while (more) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int tile = buf_tile[d], sb = buf_sb[d];
      if (tile >= walk.ntiles) { more = false; break; }
      compute_item<NT>(buf[d], sb, s_act, s_bsp, s_yd, lane, a);
      load_next(d);
      if (sb == G - 1) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              finish_row<L>(p, tile, lane, nt, c, r, a.acc[nt][c][r], a.summs[nt][c][r], best[nt][c]);
              a.summs[nt][c][r] = 0.0f;
#pragma unroll
              for (int k = 0; k < L; ++k) a.acc[nt][c][r][k] = 0.0f;
            }
      }
    }
  }

  finish_tokens<NT, NW>(p, best, s_best, warp, lane);
}

template <int NT, int NW, bool TILED = false, int D = 2>
void launch_config(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream) {
  launch_head_kernel<q5k_stream_n_kernel<NT, NW, TILED, D>>(dim3(num_sms), dim3(NW * 32), smem_bytes(p.groups, 8 * NT), pdl,
                                                         stream, p);
}

}  // namespace

size_t q5k_stream_n_smem(int groups, int tokens) { return smem_bytes(groups, tokens <= 8 ? 8 : 16); }
// warps: 8, 12 or 16 per block for T <= 8 (one tile of 8 tokens); T > 8 runs two tiles with 8 warps
// (the vec_dot order's 64 float accumulators per thread). The tiled order: `warps` at one or two
// token tiles, with 2, 3 or 4 item buffers per warp (16 x 2, 12 x 3, 8 x 4: the same bytes in flight
// per block as the register file allows).
void launch_q5k_stream_n(const HeadParams& p, int warps, bool llamacpp_tiled, bool pdl, int num_sms,
                         cudaStream_t stream) {
  if (p.T < 1 || p.T > kMaxTokens) throw Error("launch_q5k_stream_n: 1 to 16 tokens per call");
  if (llamacpp_tiled) {
    if (p.T > 8) {
      if (warps >= 16) return launch_config<2, 16, true, 2>(p, pdl, num_sms, stream);
      if (warps >= 12) return launch_config<2, 12, true, 3>(p, pdl, num_sms, stream);
      return launch_config<2, 8, true, 4>(p, pdl, num_sms, stream);
    }
    if (warps >= 16) return launch_config<1, 16, true, 2>(p, pdl, num_sms, stream);
    if (warps >= 12) return launch_config<1, 12, true, 3>(p, pdl, num_sms, stream);
    return launch_config<1, 8, true, 4>(p, pdl, num_sms, stream);
  }
  if (p.T > 8) return launch_config<2, 8>(p, pdl, num_sms, stream);
  if (warps >= 16) return launch_config<1, 16>(p, pdl, num_sms, stream);
  if (warps >= 12) return launch_config<1, 12>(p, pdl, num_sms, stream);
  return launch_config<1, 8>(p, pdl, num_sms, stream);
}

}  // namespace lmhead::cuda
