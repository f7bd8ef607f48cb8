#pragma once
// Device helpers shared by the kernel files: async copies, shared loads, the int8 MMA, exact
// integer-to-float conversion, the per-logit epilogue, and the argmax partials with the last-block
// finalize. Numerics use the explicitly rounded intrinsics (__fmul_rn, __fadd_rn, __fmaf_rn), which
// nvcc never contracts or reorders.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels.hpp"
#include "ops/softcap.hpp"
#include "quant/blocks.hpp"

namespace lmhead::cuda {

// ---- memory ------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte global -> shared copy that bypasses L1 (the weights are read once).
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ void prefetch_l2(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
}

__device__ __forceinline__ uint4 lds128(const void* p) { return *static_cast<const uint4*>(p); }
// Bulk copies by the TMA unit into shared memory, completing on an mbarrier (one arrival that
// expects the bytes, then the copy's completion): the staged kernels' rings (q5k_tma.cu,
// tokens_n.cuh).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the barriers' initialisation visible to the async proxy before the first bulk copy.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
// A stage last read through the generic proxy (ordinary shared loads) is about to be overwritten by
// the async proxy: order the reads first.
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Programmatic dependent launch (Hopper): the producer lets the next kernel start early, the
// consumer waits for the producer's memory before reading it. Both are no-ops without PDL.
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// ---- numerics ----------------------------------------------------------------------------------

// f16 -> f32 exactly as quant::f16_to_f32: the hardware conversion, except that a NaN keeps its
// payload (quieted) as the host's F16C conversion does. Branch-free.
__device__ __forceinline__ float f16_exact(uint32_t h16) {
  const uint32_t h = h16 & 0xFFFFu;
  const float hw = __half2float(__ushort_as_half(uint16_t(h)));
  const uint32_t nan_bits = ((h & 0x8000u) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13);
  return (h & 0x7FFFu) > 0x7C00u ? __uint_as_float(nan_bits) : hw;
}

// llama.cpp's nearest_int (numerics.md §4): round half to even through the 1.5 * 2^23 trick.
__device__ __forceinline__ int nearest_int_dev(float f) {
  const float v = __fadd_rn(f, 12582912.0f);
  return int(__float_as_uint(v) & 0x7FFFFF) - 0x400000;
}

// An int32 accumulator started at these bits holds, read as a float, 12582912 + x for any
// |x| < 2^22: the conversion of an integer dot to float costs one subtraction.
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;

// llama.cpp adds the head bias as its own node on the matmul's output (phi2, qwen2 with
// output.bias), so every epilogue adds it, one f32 add, before apply_cap; the biased value is the
// `raw` stage.
__device__ __forceinline__ float add_head_bias(float raw, const HeadParams& p, int row) {
  return p.head_bias != nullptr ? __fadd_rn(raw, __ldg(p.head_bias + row)) : raw;
}

__device__ __forceinline__ float apply_cap(float raw, const HeadParams& p) {
  if (p.cap_mode == kCapNodes) return ops::softcap_nodes(raw, p.logit_scale, p.cap, p.inv_cap).capped;
  if (p.cap_mode == kCapFused) return ops::softcap_fused(raw, p.logit_scale, p.cap);
  return ops::scale_only(raw, p.logit_scale);
}

// hsum of the eight float lanes, as llama.cpp's hsum_float_8: [a0+a4, a1+a5, a2+a6, a3+a7], then
// (h0 + h2) + (h1 + h3).
__device__ __forceinline__ float reduce_lanes(const float (&a)[8]) {
  const float h0 = __fadd_rn(a[0], a[4]), h1 = __fadd_rn(a[1], a[5]);
  const float h2 = __fadd_rn(a[2], a[6]), h3 = __fadd_rn(a[3], a[7]);
  return __fadd_rn(__fadd_rn(h0, h2), __fadd_rn(h1, h3));
}

// ---- K-quant pieces shared by the head kernels ----------------------------------------------------

// D = A x B + C on the int8 tensor cores: m16n8k32, u8 weights (A, row) x s8 activations (B, col),
// s32 accumulators all started at c (0, or kMagicBits for the float-read trick).
__device__ __forceinline__ void mma_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1, int c) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c));
}

// The same with each accumulator started at its own value (c0, c1: row g; c2, c3: row g + 8).
__device__ __forceinline__ void mma_u8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1, int c0, int c1, int c2, int c3) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}

// m16n8k16 (K = 16: A two registers, B one), accumulators started at 0: u8 x s8 (Q6_K levels x q8),
// s8 x u8 and s8 x s8 (Q6_K scales x the bytes of the token's 16-element sums).
#define LMHEAD_MMA_K16(name, ta, tb)                                                                              \
  __device__ __forceinline__ void name(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {                       \
    asm("mma.sync.aligned.m16n8k16.row.col.s32." ta "." tb ".s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"     \
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                                           \
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));                                                                      \
  }
LMHEAD_MMA_K16(mma16_u8s8, "u8", "s8")
LMHEAD_MMA_K16(mma16_s8u8, "s8", "u8")
LMHEAD_MMA_K16(mma16_s8s8, "s8", "s8")
#undef LMHEAD_MMA_K16

// s8 weights (Q8_0) x s8 activations, accumulators started at 0.
__device__ __forceinline__ void mma_s8s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

// float(8 D1 + D0) from the two scale planes' accumulators, both started at kMagicBits (each read as
// the float M + D): 8 (M + D1) - 9M is exact (a multiple of 8 below 2^25), and adding M + D0 gives
// 8 D1 + D0, an integer below 2^24, exactly.
__device__ __forceinline__ float plane_isum(int d1, int d0) {
  return __fadd_rn(__fmaf_rn(8.0f, __int_as_float(d1), -9.0f * kMagic), __int_as_float(d0));
}

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int b) { return (w >> (8 * b)) & 0xFFu; }

// 6-bit scales and mins of a Q4_K / Q5_K block from its header words (numerics.md §3), as packed bytes.
struct KScales { uint32_t sc_lo, sc_hi, m_lo, m_hi; };
__device__ __forceinline__ KScales k_scales(const uint4& h) {
  KScales s;
  s.sc_lo = h.y & 0x3F3F3F3Fu;
  s.m_lo = h.z & 0x3F3F3F3Fu;
  s.sc_hi = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
  s.m_hi = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
  return s;
}
__device__ __forceinline__ uint32_t sc_of(const KScales& s, int j) { return byte_of(j < 4 ? s.sc_lo : s.sc_hi, j & 3); }
__device__ __forceinline__ uint32_t m_of(const KScales& s, int j) { return byte_of(j < 4 ? s.m_lo : s.m_hi, j & 3); }

// float(sum_j m[j] * (bsums[2j] + bsums[2j+1])) exactly (the Q5_K mins term, one chain): bs holds the
// eight sub-block sums as int16 pairs (prep.cu); the int32 sum starts at kMagicBits.
__device__ __forceinline__ float k_mins_sum(const uint4& bs, uint32_t m_lo, uint32_t m_hi) {
  int im = __dp2a_lo(int(bs.x), int(m_lo), kMagicBits);
  im = __dp2a_hi(int(bs.y), int(m_lo), im);
  im = __dp2a_lo(int(bs.z), int(m_hi), im);
  im = __dp2a_hi(int(bs.w), int(m_hi), im);
  return __fsub_rn(__int_as_float(im), kMagic);
}

// ---- argmax partials (select::summarize's rules: NaN ranks below every number, lowest id wins) --

__device__ __forceinline__ PartialBest best_empty() { return PartialBest{-__int_as_float(0x7f800000), -1, 0}; }

// Merge of two summaries of disjoint id sets; equals the sequential scan of their union.
__device__ __forceinline__ PartialBest best_merge(const PartialBest& a, const PartialBest& b) {
  if (a.id < 0) return b;
  if (b.id < 0) return a;
  const bool an = isnan(a.max), bn = isnan(b.max);
  if (an && bn) return a.id < b.id ? a : b;
  if (an) return b;
  if (bn) return a;
  if (a.max > b.max) return a;
  if (b.max > a.max) return b;
  PartialBest r = a.id < b.id ? a : b;  // equal (+0 == -0 too): the lower id's value, counts add
  r.count = a.count + b.count;
  return r;
}

__device__ __forceinline__ PartialBest best_single(float v, int id) { return PartialBest{v, id, 1}; }

__device__ __forceinline__ PartialBest best_shfl_xor(const PartialBest& b, int mask) {
  PartialBest o;
  o.max = __shfl_xor_sync(0xffffffffu, b.max, mask);
  o.id = __shfl_xor_sync(0xffffffffu, b.id, mask);
  o.count = __shfl_xor_sync(0xffffffffu, b.count, mask);
  return o;
}

static __device__ void publish_and_finalize(const HeadParams& p, PartialBest* cta_best);

// HeadParams::block_clock's stamp `which` of this block, by thread 0 (one predictable branch when
// the hook is off).
__device__ __forceinline__ void stamp_block(const HeadParams& p, int which) {
  if (p.block_clock == nullptr || threadIdx.x != 0 || blockIdx.x >= unsigned(kBlockClockBlocks)) return;
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  p.block_clock[4 * blockIdx.x + which] = ns;
}

// The block's summary per token: s_best[w][t] holds warp w's (w < nw, t < ntok), merged in warp
// order; then publish_and_finalize. Every thread of the block calls it.
static __device__ void merge_warps_and_finalize(const HeadParams& p, const PartialBest (*s_best)[kMaxTokens], int nw,
                                                int ntok) {
  __shared__ PartialBest s_cta[kMaxTokens];
  __syncthreads();
  if (int(threadIdx.x) < ntok) {
    PartialBest b = best_empty();
    for (int w = 0; w < nw; ++w) b = best_merge(b, s_best[w][threadIdx.x]);
    s_cta[threadIdx.x] = b;
  }
  __syncthreads();
  publish_and_finalize(p, s_cta);
}

// The same when every lane of a warp holds a partial summary of each of TT tokens.
template <int TT, int NW>
__device__ void finish_block(const HeadParams& p, const PartialBest (&best)[TT]) {
  __shared__ PartialBest s_best[NW][kMaxTokens];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    PartialBest b = best[t];
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) b = best_merge(b, best_shfl_xor(b, m));
    if (lane == 0) s_best[warp][t] = b;
  }
  merge_warps_and_finalize(p, s_best, NW, TT);
}

// Every head kernel ends here with its block's summary per token of the pass in cta_best[0..tc).
// The block publishes it; the last block to finish merges all blocks' partials, finds the lowest
// tied ids from the stored logits when a maximum is shared, writes the per-token results and resets
// the counters for the next launch. Must be called by every thread of the block.
static __device__ void publish_and_finalize(const HeadParams& p, PartialBest* cta_best /* shared, [kMaxTokens] */) {
  __shared__ unsigned s_last;
  __shared__ int s_found;
  __shared__ int s_ids[kMaxTied];
  const int tid = threadIdx.x;
  if (tid < p.tc) p.partials[blockIdx.x * kMaxTokens + p.t0 + tid] = cta_best[tid];
  // Thread 0 alone fences, after the barrier that orders the block's writes before it (a fence is
  // cumulative), as cooperative groups' grid sync does: one fence per block, not one per warp.
  __syncthreads();
  stamp_block(p, 2);
  if (tid == 0) {
    __threadfence();  // release: the partials before the count
    s_last = (atomicAdd(p.done_counter, 1u) == gridDim.x - 1) ? 1u : 0u;
    if (s_last) __threadfence();  // acquire: every block's partials before the merge reads them
  }
  __syncthreads();
  if (!s_last) {
    stamp_block(p, 3);
    return;
  }
  const int nwarps = blockDim.x / 32;
  // One warp per token, each lane a strided subset of the blocks, then a shuffle tree: best_merge of
  // disjoint id sets is associative and commutative, so any grouping equals the sequential scan. (A
  // single thread walking all blocks waited one L2 round trip per block: ~132 in a row per call.)
  for (int j = tid >> 5; j < p.tc; j += nwarps) {
    PartialBest b = best_empty();
    for (unsigned c = tid & 31; c < gridDim.x; c += 32) {
      const PartialBest* src = &p.partials[c * kMaxTokens + p.t0 + j];
      PartialBest o;
      o.max = __ldcg(&src->max);
      o.id = __ldcg(&src->id);
      o.count = __ldcg(&src->count);
      b = best_merge(b, o);
    }
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) b = best_merge(b, best_shfl_xor(b, m));
    if ((tid & 31) == 0) cta_best[j] = b;
  }
  __syncthreads();
  // Lowest tied ids of a shared maximum, in id order: the vocabulary is cut into one contiguous
  // segment per warp; each warp scans its segment with several 16-byte loads in flight per lane
  // and keeps its first `want` hits (a warp prefix sum puts them in id order), stopping as soon as
  // it has them; the per-warp lists, concatenated in warp order, are in id order. (One block
  // walking the ids 512 at a time, two barriers per step, took up to ~0.5 ms per token when a
  // few ids tie far apart, e.g. logits saturated at the cap.)
  __shared__ int s_warp_ids[32][kMaxTied];
  __shared__ int s_warp_found[32];
  const int warp = tid >> 5, lane = tid & 31;
  constexpr int kSteps = 4;  // float4 loads in flight per lane
  const bool aligned = p.vocab % 4 == 0;
  for (int j = 0; j < p.tc; ++j) {
    const int t = p.t0 + j;
    const PartialBest b = cta_best[j];
    int n_found = b.count <= 1 ? 1 : 0;
    if (b.count > 1) {
      const int want = b.count < kMaxTied ? b.count : kMaxTied;
      const float* row = p.logits + size_t(t) * p.vocab;
      const int seg = (p.vocab + nwarps * 512 - 1) / (nwarps * 512) * 512;
      const int lo = min(p.vocab, warp * seg), hi = min(p.vocab, lo + seg);
      int found = 0;
      for (int base = lo; base < hi && found < want; base += kSteps * 128) {
        unsigned hits[kSteps];
#pragma unroll
        for (int u = 0; u < kSteps; ++u) {
          const int id0 = base + 128 * u + 4 * lane;
          float v[4];
          if (aligned && id0 + 3 < hi) {
            const float4 f = __ldcg(reinterpret_cast<const float4*>(row + id0));
            v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = id0 + e < hi ? __ldcg(row + id0 + e) : 0.0f;
          }
          hits[u] = 0;
#pragma unroll
          for (int e = 0; e < 4; ++e) hits[u] |= (id0 + e < hi && v[e] == b.max) ? (1u << e) : 0u;
        }
#pragma unroll
        for (int u = 0; u < kSteps; ++u) {
          const int mine = __popc(hits[u]);
          int before = mine;  // inclusive prefix sum over the lanes
#pragma unroll
          for (int m = 1; m < 32; m <<= 1) {
            const int o = __shfl_up_sync(0xffffffffu, before, m);
            if (lane >= m) before += o;
          }
          int slot = found + before - mine;
          for (unsigned h = hits[u]; h != 0 && slot < want; h &= h - 1, ++slot)
            s_warp_ids[warp][slot] = base + 128 * u + 4 * lane + __ffs(h) - 1;
          found = min(want, found + __shfl_sync(0xffffffffu, before, 31));
        }
      }
      if (lane == 0) s_warp_found[warp] = found;
      __syncthreads();
      if (tid == 0) {
        for (int w = 0; w < nwarps && n_found < want; ++w)
          for (int i = 0; i < s_warp_found[w] && n_found < want; ++i) s_ids[n_found++] = s_warp_ids[w][i];
        s_found = n_found;
      }
    }
    if (tid == 0) {
      TokenResult& r = p.results[t];
      r.max = b.max;
      r.argmax = b.id;
      r.tie_count = b.count;
      r.n_tied = b.count <= 1 ? 1 : s_found;
      if (b.count <= 1) r.tied[0] = b.id;
      else for (int i = 0; i < s_found; ++i) r.tied[i] = s_ids[i];
      p.max_out[t] = b.max;
    }
    __syncthreads();
  }
  if (tid == 0) {
    *p.done_counter = 0;
    *p.tile_counter = 0;
    // The host may wait on this flag instead of on the stream (it sees the flag a few microseconds
    // before the stream reports completion); the fence puts the results in host memory first.
    if (p.done_flag != nullptr && p.t0 + p.tc == p.T) {
      const unsigned seq = *p.call_seq + 1;
      *p.call_seq = seq;
      __threadfence_system();
      *reinterpret_cast<volatile unsigned*>(p.done_flag) = seq;
    }
  }
  stamp_block(p, 3);
}

}  // namespace lmhead::cuda
