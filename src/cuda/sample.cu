// Seeded sampling on the device (numerics.md §9): the integer weights of sample/weight_math.hpp,
// computed by the same functions as the host sampler, so the token is the host's token.
//
// One block per 512-id chunk and token. Every sum is of integers, so blocks add in any order:
//   max kernel (bias or mask only)  the largest z, by an atomic max of its ordered bits;
//   weights kernel                  each chunk's mass, the total S, and with top-p the mass per rank
//                                   bucket; its last block draws (no top-p) or finds the bucket
//                                   where the mass reaches the top-p target;
//   boundary kernel (top-p)         each chunk's mass of the buckets before the boundary, and the
//                                   boundary bucket's ids as candidates with their fine bin; its
//                                   last block orders the one fine bin where the mass crosses (a
//                                   weighted radix select over all candidates for many exact ties)
//                                   and draws.
// The draw: the chunk holding the target from the chunk masses, then that chunk's ids in id order.
// For the multi-GPU backend the weights and boundary kernels also run as one shard's half of a
// round (SampleParams::rounds_only): they leave their sums and stop before the last block, and the
// host merges every shard's sums (multi_gpu.cpp).
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/launch.hpp"
#include "sample/weight_math.hpp"

namespace lmhead::cuda {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 256;
// One chunk per block, two ids per thread: at T = 1 the kernels are latency-bound and want every SM
// busy (four chunks per block measured 17 us against 13 at T = 1, the same at T = 8: performance.md).
constexpr int kChunkIds = 512;  // sample::kChunk
constexpr int kIdsPerThread = kChunkIds / kThreads;
constexpr int kFineBins = kSampleFineBins;
constexpr int kFewCandidates = 512;  // ids of one fine bin the last block orders directly
// Bins a last block stages in shared memory for its scans: the fine bins, and the chunk masses of a
// vocabulary up to 524,288 ids (a larger one scans them in global memory).
constexpr int kStageBins = 1024;
static_assert(sizeof(SampleScratch::fine_mass) / 8 == kFineBins, "one mass per fine bin");

// The k-th id of this thread in its block's chunk.
__device__ __forceinline__ int chunk_id(int k) { return blockIdx.x * kChunkIds + k * kThreads + int(threadIdx.x); }

// The fine bin of d inside its rank bucket: the next 10 bits of d's pattern (monotone in d, like
// the bucket). Bucket 0's d <= 2^-20 all take bin 0, before the rest of that bucket.
__device__ __forceinline__ int fine_bin(double d) {
  const u64 bits = static_cast<u64>(__double_as_longlong(d));
  if (bits <= sample::kRankBaseBits) return 0;
  return int(((bits - sample::kRankBaseBits) >> 36) & (kFineBins - 1));
}
static_assert(sizeof(SampleScratch::hist) / 8 == sample::kRankBuckets, "one mass per rank bucket");

__device__ __forceinline__ u64 ordered_key(double z) {  // larger z, larger key; never 0 for a finite z
  return ~sample::descending_key(z);
}
__device__ __forceinline__ double key_value(u64 ordered) {
  const u64 bits = (ordered >> 63) ? (ordered & 0x7FFFFFFFFFFFFFFFull) : ~ordered;
  return __longlong_as_double(static_cast<long long>(bits));
}

// One id's z and whether it takes part (mask bit set, z finite).
struct Id {
  double z;
  bool in;
};
__device__ __forceinline__ Id eval(const SampleParams& p, const SampleCallParams& c, int t, int i) {
  const float x = __ldcg(p.logits + size_t(t) * p.vocab + i);
  const float b = c.has_bias ? __ldg(p.bias + i) : 0.0f;
  bool in = true;
  if (c.has_mask) in = (__ldg(p.mask + size_t(t) * c.mask_stride + (i >> 5)) >> (i & 31)) & 1u;
  // Dividing by 1 is exact: the common temperature skips the double division's instruction sequence.
  const double z = c.temperature == 1.0 ? __dadd_rn(double(x), double(b)) : sample::scaled_logit(x, b, c.temperature);
  return Id{z, in && isfinite(z)};
}

// The integer weights and rank buckets of K ids at maximum m (weight 0 for an id that is out,
// fails min-p or lies past the vocabulary; bucket kRankBuckets for one that is out or fails min-p),
// straight-line: every lane runs the same instructions, where a branch per id split the warps on
// the mask and the min-p test, and the K exp chains interleave, one constant load serving K
// operations. An id below kZeroWeightBelow has weight 0 (weight_math.hpp): the exp runs on 0 for
// it and the result is dropped, so the guards of sample::exp are never needed.
struct Weighed {
  u64 w;
  int bucket;
  double z;
};
template <int K, bool kBucket = true>
__device__ __forceinline__ void weigh(const SampleParams& p, const SampleCallParams& c, int t, const int (&ids)[K],
                                      double m, Weighed (&out)[K]) {
  double e[K], z[K];
  bool live[K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    Id id{0.0, false};
    if (ids[j] < p.vocab) id = eval(p, c, t, ids[j]);
    const double d = __dadd_rn(id.z, -m);
    live[j] = id.in && d >= sample::kZeroWeightBelow;
    z[j] = id.z;
    e[j] = live[j] ? d : 0.0;
  }
  sample::exp_in_range(e);
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const bool kept = live[j] && sample::passes_min_p(e[j], c.min_p);
    const int bucket = kBucket ? sample::rank_bucket(__dadd_rn(m, -z[j])) : 0;
    out[j] = Weighed{kept ? sample::integer_weight(e[j]) : 0, kept ? bucket : sample::kRankBuckets, z[j]};
  }
}

// This thread's ids of its block's chunk (chunk_id order).
__device__ __forceinline__ void chunk_ids(int (&ids)[kIdsPerThread]) {
#pragma unroll
  for (int k = 0; k < kIdsPerThread; ++k) ids[k] = chunk_id(k);
}

// bins[bin] += v for every active lane, one shared-memory atomic per distinct bin of the warp:
// near-flat logits put most of a block's ids into a few buckets, and a select level's candidates
// into one digit, where lane-by-lane atomics on one address serialize.
__device__ __forceinline__ void add_to_bin(u64* bins, uint32_t* counts, int bin, u64 v, bool active) {
  const unsigned lanes = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(lanes, bin);
  u64 sum = 0;
  for (unsigned m = peers; m != 0; m &= m - 1) sum += __shfl_sync(peers, v, __ffs(m) - 1);
  if ((threadIdx.x & 31) == __ffs(peers) - 1) {
    atomicAdd(&bins[bin], sum);
    if (counts != nullptr) atomicAdd(&counts[bin], uint32_t(__popc(peers)));
  }
}

// Exclusive prefix of v over the block's threads in thread order, and the block's total.
__device__ u64 block_exclusive_scan(u64 v, u64& total) {
  __shared__ u64 warp_totals[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) warp_totals[warp] = incl;
  __syncthreads();
  u64 before = 0, all = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) before += warp_totals[w];
    all += warp_totals[w];
  }
  __syncthreads();  // warp_totals is reused by the next scan
  total = all;
  return before + incl - v;
}

// The first of n bins (in order) whose running mass exceeds x, and the mass before it, for every
// thread of the block; bin -1 when the bins' total is x or less. The bins are read from `stage`
// (shared memory, n <= capacity) after `global` is copied there when it is not null; a block
// that cannot stage them reads `global` where it is. The copy has every load in flight at once,
// where a thread walking its run of global bins waited for each in turn. Each thread scans a run
// of consecutive bins, so the block scan keeps the bins' order.
struct Crossing {
  int bin;
  u64 before;
};
__device__ void copy_to_stage(const u64* global, u64* stage, int n) {
#pragma unroll 4
  for (int b = threadIdx.x; b < n; b += kThreads) stage[b] = __ldcg(global + b);
}
__device__ Crossing first_bin_over(const u64* global, u64* stage, int capacity, int n, u64 x) {
  __shared__ Crossing s_cross;
  const bool staged = stage != nullptr && n <= capacity;
  if (staged && global != nullptr) copy_to_stage(global, stage, n);
  const u64* bins = staged ? stage : global;
  const int per = (n + kThreads - 1) / kThreads, first = threadIdx.x * per, last = min(n, first + per);
  if (threadIdx.x == 0) s_cross = Crossing{-1, 0};
  __syncthreads();  // the staged bins (and s_cross's reset) are visible
  u64 mine = 0;
  for (int b = first; b < last; ++b) mine += staged ? bins[b] : __ldcg(bins + b);
  u64 all;
  u64 before = block_exclusive_scan(mine, all);
  if (before <= x && x < before + mine)
    for (int b = first; b < last; ++b) {
      const u64 h = staged ? bins[b] : __ldcg(bins + b);
      if (x < before + h) { s_cross = Crossing{b, before}; break; }
      before += h;
    }
  __syncthreads();
  const Crossing found = s_cross;
  __syncthreads();  // every thread has it before a next call resets it or reuses the stage
  return found;
}

// The block's smallest and largest v, in every thread.
template <class T>
__device__ void block_min_max(T& lo, T& hi) {
  __shared__ T s_lo[kThreads / 32], s_hi[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if ((threadIdx.x & 31) == 0) { s_lo[threadIdx.x >> 5] = lo; s_hi[threadIdx.x >> 5] = hi; }
  __syncthreads();
  for (int w = 0; w < kThreads / 32; ++w) { lo = min(lo, s_lo[w]); hi = max(hi, s_hi[w]); }
  __syncthreads();
}

// The token's maximum z: the head's maximum scaled (no bias, no mask: z is monotone in the logit),
// or the max kernel's. NaN when nothing takes part.
__device__ double token_max(const SampleParams& p, const SampleCallParams& c, int t) {
  if (p.max_kernel) {
    const u64 k = __ldcg(&p.scratch[t].max_key);
    return k == 0 ? __longlong_as_double(0x7FF8000000000000ll) : key_value(k);
  }
  return sample::scaled_logit(__ldcg(p.max_in + t), 0.0f, c.temperature);
}

// The last of the token's blocks to finish (counter `which` of its scratch) goes on; its earlier
// blocks' global writes are visible to it after the fences. Thread 0 alone fences, after the
// barrier that orders its block's writes before it (a fence is cumulative), as cooperative groups'
// grid sync does: one sequentially consistent fence per block, not one per warp (the time is the
// wait for the block's own writes to land, either way: performance.md).
__device__ bool last_block(SampleScratch& s, int which) {
  __shared__ bool is_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // release: this block's writes before its count
    is_last = atomicAdd(&s.blocks_done[which], 1u) == gridDim.x - 1;
    if (is_last) __threadfence();  // acquire: the other blocks' writes before this block's reads
  }
  __syncthreads();
  return is_last;
}

__device__ void finish(const SampleParams& p, int t, int32_t id, SampleStatus status) {
  if (threadIdx.x != 0) return;
  p.sampled[t] = id;
  p.status[t] = status;
}

// Thread 0 of a token's last block, after its answer: the last token to finish raises the call's
// done flag (the fences put every token's answer in host memory before it).
__device__ void token_done(const SampleParams& p) {
  if (threadIdx.x != 0) return;
  __threadfence_system();
  if (atomicAdd(&p.scratch[0].tokens_done, 1u) != unsigned(p.T) - 1 || p.done_flag == nullptr) return;
  const unsigned seq = *p.call_seq + 1;
  *p.call_seq = seq;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned*>(p.done_flag) = seq;
}

// The draw, by the last block: the target from the token's random bits, the chunk whose mass
// holds it, then that chunk's ids in id order. `member(i, weighed)` says whether a weighed id is in
// the final set (top-p: its bucket and rank). The chunk masses are scanned in `stage` (`capacity`
// bins of shared memory), already there when `masses_staged`, else copied from global memory.
template <class Member>
__device__ void draw(const SampleParams& p, const SampleCallParams& c, int t, double m, u64 total, Member member,
                     u64* stage, int capacity, bool masses_staged) {
  const int chunks = (p.vocab + kChunkIds - 1) / kChunkIds;
  const u64 target = sample::draw_target(sample::random128(c.seed, c.position + t, sample::Stream::draw), total);
  const Crossing cross =
      first_bin_over(masses_staged ? nullptr : p.chunk_mass + size_t(t) * chunks, stage, capacity, chunks, target);
  const int chunk = cross.bin;
  if (chunk < 0) { finish(p, t, -1, kSampleOnHost); return; }  // cannot happen: the masses sum to total
  const u64 rest = target - cross.before;
  // Thread j owns ids 2j and 2j + 1 of the chunk: the scan over threads is the id-order scan.
  const int base = chunk * kChunkIds + kIdsPerThread * threadIdx.x;
  int ids[kIdsPerThread];
#pragma unroll
  for (int j = 0; j < kIdsPerThread; ++j) ids[j] = base + j;
  Weighed x[kIdsPerThread];
  weigh(p, c, t, ids, m, x);
  u64 w[kIdsPerThread];
  u64 sum = 0;
#pragma unroll
  for (int j = 0; j < kIdsPerThread; ++j) {
    w[j] = x[j].w != 0 && member(ids[j], x[j]) ? x[j].w : 0;
    sum += w[j];
  }
  __shared__ int s_found;
  if (threadIdx.x == 0) s_found = -1;
  u64 all;
  u64 before = block_exclusive_scan(sum, all);  // its barriers publish s_found's reset
  if (before <= rest && rest < before + sum) {
#pragma unroll
    for (int j = 0; j < kIdsPerThread; ++j) {
      if (rest < before + w[j]) { s_found = base + j; break; }
      before += w[j];
    }
  }
  __syncthreads();
  // One write of the answer to mapped memory; -1 cannot happen (the chunk's mass holds the target).
  finish(p, t, s_found, s_found >= 0 ? kSampled : kSampleOnHost);
}

__global__ void __launch_bounds__(kThreads) sample_max_kernel(const SampleParams p) {
  pdl_launch_dependents();  // the next sampling kernel may take SMs as this one's blocks finish
  pdl_wait();                // the previous kernel's memory (logits, maximum, scratch) is visible
  const int t = blockIdx.y;
  const SampleCallParams c = *p.call;
  u64 best = 0;
  for (int k = 0; k < kIdsPerThread; ++k) {
    const int i = chunk_id(k);
    if (i >= p.vocab) continue;
    const Id e = eval(p, c, t, i);
    if (e.in) best = max(best, ordered_key(e.z));
  }
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  if ((threadIdx.x & 31) == 0 && best != 0) atomicMax(&p.scratch[t].max_key, best);
}

// kTopP: the per-bucket masses (p.top_p); without them the bucket is never computed.
template <bool kTopP>
__global__ void __launch_bounds__(kThreads, kTopP ? 6 : 8) sample_weights_kernel(const SampleParams p) {
  pdl_launch_dependents();  // the next sampling kernel may take SMs as this one's blocks finish
  pdl_wait();                // the previous kernel's memory (logits, maximum, scratch) is visible
  // Top-p: the block's mass per rank bucket, then the last block's stage for the buckets' scan;
  // without top-p the last block's stage for the chunk masses' scan.
  constexpr int kBins = kTopP ? sample::kRankBuckets : kStageBins;
  __shared__ u64 hist[kBins];
  const int t = blockIdx.y;
  const int chunks = (p.vocab + kChunkIds - 1) / kChunkIds;
  const SampleCallParams c = *p.call;
  SampleScratch& s = p.scratch[t];
  const double m = token_max(p, c, t);
  const bool valid = isfinite(m);
  if (kTopP)
    for (int b = threadIdx.x; b < sample::kRankBuckets; b += kThreads) hist[b] = 0;
  __syncthreads();
  u64 part = 0;
  if (valid) {
    int ids[kIdsPerThread];
    chunk_ids(ids);
    Weighed x[kIdsPerThread];
    weigh<kIdsPerThread, kTopP>(p, c, t, ids, m, x);
#pragma unroll
    for (int k = 0; k < kIdsPerThread; ++k) {
      part += x[k].w;
      if (kTopP) add_to_bin(hist, nullptr, x[k].bucket, x[k].w, x[k].w != 0);
    }
  }
  u64 chunk_mass;
  block_exclusive_scan(part, chunk_mass);
  if (threadIdx.x == 0) {
    p.chunk_mass[size_t(t) * chunks + blockIdx.x] = chunk_mass;
    if (chunk_mass != 0) atomicAdd(&s.total, chunk_mass);
  }
  if (kTopP)
    for (int b = threadIdx.x; b < sample::kRankBuckets; b += kThreads)
      if (hist[b] != 0) atomicAdd(&s.hist[b], hist[b]);
  if (p.rounds_only || !last_block(s, 0)) return;

  const u64 total = __ldcg(&s.total);
  if (!valid || total == 0) {
    // No id takes part (mask, NaN) or the head's maximum is not finite: the host decides. With
    // top-p the boundary kernel's last block raises the flag.
    finish(p, t, -1, p.max_kernel && !valid ? kSampleNothingAllowed : kSampleOnHost);
    if (!kTopP) token_done(p);
    return;
  }
  if (!kTopP) {
    draw(p, c, t, m, total, [](int, const Weighed&) { return true; }, hist, kBins, false);
    token_done(p);
    return;
  }
  // Top-p: the first bucket (rank order) where the running mass reaches the target (>= 1).
  const u64 target = sample::top_p_target(total, c.top_p);
  const Crossing cross = first_bin_over(s.hist, hist, kBins, sample::kRankBuckets, target - 1);
  if (threadIdx.x == 0) {
    s.boundary = cross.bin;
    s.mass_below = cross.before;
    s.rest = target - cross.before;
  }
}

// The candidates' weighted select: the smallest (key, id) such that the candidates at or before it
// weigh at least `rest`. Radix steps of 8 bits over key then id, from the first byte where the
// candidates differ; a step whose chosen digit holds one candidate ends the walk.
struct Threshold {
  u64 key;
  uint32_t id;
};
__device__ Threshold weighted_select(const SampleCandidate* cand, int n, u64 rest) {
  __shared__ u64 digit_mass[256];
  __shared__ uint32_t digit_count[256];
  __shared__ u64 s_key, s_rest;
  __shared__ uint32_t s_id;
  __shared__ int s_level, s_done;
  // The candidates' smallest and largest key and id: the bytes before the first difference are fixed.
  u64 kmin = ~0ull, kmax = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    kmin = min(kmin, cand[i].key);
    kmax = max(kmax, cand[i].key);
  }
  block_min_max(kmin, kmax);
  if (threadIdx.x == 0) {
    s_key = kmin;
    s_id = 0;
    s_rest = rest;
    s_done = 0;
    // Level L < 8: byte L of the key from the top; L >= 8: byte L - 8 of the id.
    s_level = kmin == kmax ? 8 : __clzll(kmin ^ kmax) / 8;
  }
  if (kmin == kmax) {  // every key equal: the id decides
    uint32_t imin = ~0u, imax = 0;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      imin = min(imin, uint32_t(cand[i].id));
      imax = max(imax, uint32_t(cand[i].id));
    }
    block_min_max(imin, imax);
    if (threadIdx.x == 0) {
      s_id = imin;
      s_level = imin == imax ? 12 : 8 + __clz(imin ^ imax) / 8;
    }
  }
  __syncthreads();
  for (;;) {
    const int level = s_level;
    if (s_done || level >= 12) break;
    const u64 pkey = s_key;
    const uint32_t pid = s_id;
    for (int d = threadIdx.x; d < 256; d += kThreads) { digit_mass[d] = 0; digit_count[d] = 0; }
    __syncthreads();
    for (int base = 0; base < n; base += kThreads) {  // whole warps in every iteration (add_to_bin)
      const int i = base + threadIdx.x;
      bool match = i < n;
      int digit = 0;
      u64 weight = 0;
      if (match) {
        const u64 k = cand[i].key;
        const uint32_t id = uint32_t(cand[i].id);
        weight = cand[i].weight;
        if (level < 8) {
          const int shift = 56 - 8 * level;
          match = level == 0 || (k >> (shift + 8)) == (pkey >> (shift + 8));
          digit = int((k >> shift) & 0xFF);
        } else {
          const int shift = 24 - 8 * (level - 8);
          match = k == pkey && (level == 8 || (id >> (shift + 8)) == (pid >> (shift + 8)));
          digit = int((id >> shift) & 0xFF);
        }
      }
      add_to_bin(digit_mass, digit_count, digit, weight, match);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 r = s_rest;
      int d = 0;
      for (; d < 255; ++d) {
        if (r <= digit_mass[d]) break;
        r -= digit_mass[d];
      }
      s_rest = r;
      if (level < 8) {
        const int shift = 56 - 8 * level;
        const u64 high = level == 0 ? 0 : (pkey >> (shift + 8)) << (shift + 8);
        s_key = high | (u64(d) << shift);
      } else {
        const int shift = 24 - 8 * (level - 8);
        const uint32_t high = level == 8 ? 0 : (pid >> (shift + 8)) << (shift + 8);
        s_id = high | (uint32_t(d) << shift);
      }
      s_level = level + 1;
      if (digit_count[d] == 1) s_done = 2;  // one candidate: find it below
    }
    __syncthreads();
  }
  if (s_done == 2) {  // the one candidate with the chosen prefix is the threshold
    const int level = s_level;  // bytes fixed so far
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const u64 k = cand[i].key;
      const uint32_t id = uint32_t(cand[i].id);
      bool match;
      if (level <= 8) match = (k >> (64 - 8 * level)) == (s_key >> (64 - 8 * level));
      else match = k == s_key && (id >> (32 - 8 * (level - 8))) == (s_id >> (32 - 8 * (level - 8)));
      if (match) { s_key = k; s_id = id; }
    }
    __syncthreads();
  }
  return Threshold{s_key, s_id};
}

__device__ __forceinline__ bool at_or_before(u64 key, uint32_t id, const Threshold& th) {
  return key < th.key || (key == th.key && id <= th.id);
}

// The threshold among the m candidates of one fine bin, few enough to hold in shared memory: each
// candidate's mass before it (rank order) by a loop over the others; the one whose mass crosses
// `rest` is the threshold. Integer sums: the loop order does not matter.
__device__ Threshold threshold_among(const SampleCandidate* few, int m, u64 rest) {
  __shared__ Threshold s_th;
  if (threadIdx.x == 0) s_th = Threshold{0, 0};  // replaced below: some candidate's mass always crosses rest
  __syncthreads();
  for (int i = threadIdx.x; i < m; i += kThreads) {
    const SampleCandidate x = few[i];
    u64 before = 0;
    for (int j = 0; j < m; ++j)
      if (few[j].key < x.key || (few[j].key == x.key && few[j].id < x.id)) before += few[j].weight;
    if (before < rest && rest <= before + x.weight) s_th = Threshold{x.key, uint32_t(x.id)};
  }
  __syncthreads();
  const Threshold th = s_th;
  __syncthreads();
  return th;
}

// Candidates each thread of the last block loads at once (all in flight before any is used).
constexpr int kCandidateBatch = 4;

__global__ void __launch_bounds__(kThreads, 5) sample_boundary_kernel(const SampleParams p) {
  pdl_launch_dependents();  // the next sampling kernel may take SMs as this one's blocks finish
  pdl_wait();                // the previous kernel's memory (logits, maximum, scratch) is visible
  const int t = blockIdx.y;
  const int chunks = (p.vocab + kChunkIds - 1) / kChunkIds;
  const SampleCallParams c = *p.call;
  SampleScratch& s = p.scratch[t];
  const double m = token_max(p, c, t);
  const u64 total = __ldcg(&s.total);
  const bool valid = isfinite(m) && total != 0;  // else the weights kernel wrote the answer
  const int boundary = __ldcg(&s.boundary);
  SampleCandidate* cands = p.candidates + size_t(t) * kSampleCandidates;
  u64 part = 0;  // the chunk's mass below the boundary bucket
  Weighed x[kIdsPerThread];
  int ids[kIdsPerThread];
  chunk_ids(ids);
  if (valid) weigh(p, c, t, ids, m, x);
  u64 mine = 0;
#pragma unroll
  for (int k = 0; k < kIdsPerThread; ++k) {
    if (!valid) x[k] = Weighed{0, sample::kRankBuckets, 0};
    if (x[k].w != 0 && x[k].bucket < boundary) part += x[k].w;
    mine += x[k].w != 0 && x[k].bucket == boundary ? 1 : 0;
  }
  // The block's candidates take one range of the buffer: one global atomic per block.
  __shared__ uint32_t s_first;
  u64 block_count;
  uint32_t slot = uint32_t(block_exclusive_scan(mine, block_count));
  if (threadIdx.x == 0 && block_count != 0) s_first = atomicAdd(&s.n_candidates, uint32_t(block_count));
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kIdsPerThread; ++k) {
    if (x[k].w == 0 || x[k].bucket != boundary) continue;
    const int fine = fine_bin(__dadd_rn(m, -x[k].z));
    atomicAdd(&s.fine_mass[fine], x[k].w);
    atomicAdd(&s.fine_count[fine], 1u);
    const uint32_t at = s_first + slot++;
    if (at < uint32_t(kSampleCandidates)) cands[at] = SampleCandidate{sample::descending_key(x[k].z), x[k].w, chunk_id(k), fine};
  }
  // The final set's chunk masses; the boundary ids at or before the threshold are added below.
  u64 chunk_mass;
  block_exclusive_scan(part, chunk_mass);
  if (threadIdx.x == 0) p.chunk_mass[size_t(t) * chunks + blockIdx.x] = chunk_mass;
  if (p.rounds_only || !last_block(s, 1)) return;
  if (!valid) {
    token_done(p);
    return;
  }
  const uint32_t n = __ldcg(&s.n_candidates);
  if (n > uint32_t(kSampleCandidates)) {  // more ids in the boundary bucket than room: the host draws
    finish(p, t, -1, kSampleOnHost);
    token_done(p);
    return;
  }
  // The fine bin where the boundary bucket's mass reaches the rest of the target (>= 1).
  __shared__ u64 stage[kStageBins];
  static_assert(kFineBins <= kStageBins, "the fine bins are scanned in the stage");
  const u64 rest = __ldcg(&s.rest);
  const Crossing cross = first_bin_over(s.fine_mass, stage, kStageBins, kFineBins, rest - 1);
  const int fine_x = cross.bin;
  const bool few_ties = __ldcg(&s.fine_count[fine_x]) <= uint32_t(kFewCandidates);
  // The boundary ids at or before the threshold join the final set's chunk masses, added in shared
  // memory when the masses fit there. A candidate's fine bin decides it unless it shares the
  // threshold's: fine bins are monotone in max - z, so a lower one ranks before the threshold and
  // a higher one after it. One pass over the candidates joins the lower bins and gathers the
  // threshold's bin into shared memory; only that bin's candidates compare keys.
  u64* masses = p.chunk_mass + size_t(t) * chunks;
  const bool staged = chunks <= kStageBins;
  u64 joined = 0;
  auto join = [&](const SampleCandidate& cand) {
    if (staged) atomicAdd(stage + cand.id / kChunkIds, cand.weight);
    else atomicAdd(masses + cand.id / kChunkIds, cand.weight);
    joined += cand.weight;
  };
  __shared__ SampleCandidate few[kFewCandidates];
  __shared__ uint32_t s_few;
  if (staged) copy_to_stage(masses, stage, chunks);
  if (threadIdx.x == 0) s_few = 0;
  __syncthreads();
  for (int base = 0; base < int(n); base += kThreads * kCandidateBatch) {
    SampleCandidate cand[kCandidateBatch];
#pragma unroll
    for (int j = 0; j < kCandidateBatch; ++j) {
      const int k = base + j * kThreads + int(threadIdx.x);
      cand[j].fine = kFineBins;  // past the end: out
      if (k < int(n)) cand[j] = cands[k];
    }
#pragma unroll
    for (int j = 0; j < kCandidateBatch; ++j) {
      if (cand[j].fine < fine_x) join(cand[j]);
      else if (cand[j].fine == fine_x && few_ties) few[atomicAdd(&s_few, 1u)] = cand[j];
    }
  }
  __syncthreads();
  Threshold th;
  if (few_ties) {
    const int m_few = int(s_few);
    th = threshold_among(few, m_few, rest - cross.before);
    for (int i = threadIdx.x; i < m_few; i += kThreads)
      if (at_or_before(few[i].key, uint32_t(few[i].id), th)) join(few[i]);
  } else {  // many exact ties: the radix walk over every candidate, then a pass for the threshold's bin
    th = weighted_select(cands, int(n), rest);
    for (int k = threadIdx.x; k < int(n); k += kThreads) {
      const SampleCandidate cand = cands[k];
      if (cand.fine == fine_x && at_or_before(cand.key, uint32_t(cand.id), th)) join(cand);
    }
  }
  u64 joined_all;
  block_exclusive_scan(joined, joined_all);
  if (!staged) __threadfence();
  __syncthreads();
  const u64 final_total = __ldcg(&s.mass_below) + joined_all;
  draw(p, c, t, m, final_total, [&](int i, const Weighed& w) {
    return w.bucket < boundary || (w.bucket == boundary && at_or_before(sample::descending_key(w.z), uint32_t(i), th));
  }, stage, kStageBins, staged);
  token_done(p);
}

}  // namespace

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned((p.vocab + kChunkIds - 1) / kChunkIds), unsigned(p.T)), block(kThreads);
  const bool pdl = p.pdl != 0;
  if (p.max_kernel) launch_maybe_pdl<sample_max_kernel>(grid, block, 0, pdl, stream, p);
  if (p.top_p) launch_maybe_pdl<sample_weights_kernel<true>>(grid, block, 0, pdl, stream, p);
  else launch_maybe_pdl<sample_weights_kernel<false>>(grid, block, 0, pdl, stream, p);
  if (p.top_p) launch_maybe_pdl<sample_boundary_kernel>(grid, block, 0, pdl, stream, p);
}

void launch_sample_round(const SampleParams& p, int round, cudaStream_t stream) {
  if (!p.rounds_only || round < 1 || round > 3 || (round == 3 && !p.top_p) || (round == 1 && !p.max_kernel))
    throw Error("launch_sample_round: round 1 (with the max kernel), 2, or 3 with top-p, of a rounds-only call");
  const dim3 grid(unsigned((p.vocab + kChunkIds - 1) / kChunkIds), unsigned(p.T)), block(kThreads);
  if (round == 1) launch_maybe_pdl<sample_max_kernel>(grid, block, 0, false, stream, p);
  else if (round == 3) launch_maybe_pdl<sample_boundary_kernel>(grid, block, 0, false, stream, p);
  else if (p.top_p) launch_maybe_pdl<sample_weights_kernel<true>>(grid, block, 0, false, stream, p);
  else launch_maybe_pdl<sample_weights_kernel<false>>(grid, block, 0, false, stream, p);
}

}  // namespace lmhead::cuda
