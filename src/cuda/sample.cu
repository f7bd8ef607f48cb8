// Seeded sampling on the device (numerics.md §9): the integer weights of sample/weight_math.hpp,
// computed by the same functions as the host sampler, so the token is the host's token.
//
// One block per 512-id chunk and token. Every sum is of integers, so blocks add in any order:
//   max kernel (bias or mask only)  the largest z, by an atomic max of its ordered bits;
//   weights kernel                  each chunk's mass, the total S, and with top-p the mass per rank
//                                   bucket; its last block draws (no top-p) or finds the bucket
//                                   where the mass reaches the top-p target;
//   boundary kernel (top-p)         each chunk's mass of the buckets before the boundary, and the
//                                   boundary bucket's ids as candidates; its last block orders
//                                   the candidates just far enough (a weighted radix select on
//                                   (z descending, id ascending)) and draws.
// The draw: the chunk holding the target from the chunk masses, then that chunk's ids in id order.
#include <cuda_runtime.h>

#include "cuda/cuda_check.hpp"
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "sample/weight_math.hpp"

namespace lmhead::cuda {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 256;
constexpr int kChunkIds = 512;  // sample::kChunk: two ids per thread in the draw's walk
constexpr int kIdsPerThread = kChunkIds / kThreads;
// Chunks per block of the per-id kernels. One (two ids per thread): at T = 1 the kernels are
// latency-bound and want every SM busy; four (one wave at T = 8) measured 17 us against 13 at T = 1
// and the same at T = 8 (docs/performance.md).
constexpr int kChunksPerBlock = 1;
constexpr int kFineBins = 1024;
constexpr int kFewCandidates = 512;  // ids of one fine bin the last block orders directly
static_assert(sizeof(SampleScratch::fine_mass) / 8 == kFineBins, "one mass per fine bin");

// The id of slot (q, k) of this thread: chunk q of the block, k-th of its ids in that chunk.
__device__ __forceinline__ int slot_id(int q, int k) {
  return (blockIdx.x * kChunksPerBlock + q) * kChunkIds + k * kThreads + int(threadIdx.x);
}

// The fine bin of d inside its rank bucket: the next 10 bits of d's pattern (monotone in d, like
// the bucket). Bucket 0's d <= 2^-20 all take bin 0, before the rest of that bucket.
__device__ __forceinline__ int fine_bin(double d) {
  const u64 bits = static_cast<u64>(__double_as_longlong(d));
  constexpr u64 kBase = 0x3EB0000000000000ull;  // 2^-20, as sample::rank_bucket
  if (bits <= kBase) return 0;
  return int(((bits - kBase) >> 36) & (kFineBins - 1));
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

// The id's integer weight and rank bucket at maximum m (0 when it is out or fails min-p).
struct Weighed {
  u64 w;
  int bucket;
  double z;
};
template <bool kBucket = true>
__device__ __forceinline__ Weighed weigh(const SampleParams& p, const SampleCallParams& c, int t, int i, double m) {
  const Id e = eval(p, c, t, i);
  if (!e.in) return Weighed{0, sample::kRankBuckets, e.z};
  const double w = sample::exp(__dadd_rn(e.z, -m));
  if (!sample::passes_min_p(w, c.min_p)) return Weighed{0, sample::kRankBuckets, e.z};
  return Weighed{sample::integer_weight(w), kBucket ? sample::rank_bucket(__dadd_rn(m, -e.z)) : 0, e.z};
}

__device__ __forceinline__ u64 warp_sum(u64 v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
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
// blocks' global writes are visible to it after the fences.
__device__ bool last_block(SampleScratch& s, int which) {
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&s.blocks_done[which], 1u) == gridDim.x - 1;
  __syncthreads();
  if (is_last) __threadfence();
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
// the final set (top-p: its bucket and rank).
template <class Member>
__device__ void draw(const SampleParams& p, const SampleCallParams& c, int t, double m, u64 total, Member member) {
  __shared__ int s_chunk;
  __shared__ u64 s_rest;
  const int chunks = (p.vocab + kChunkIds - 1) / kChunkIds;
  const u64 target = sample::draw_target(sample::random128(c.seed, c.position + t, sample::Stream::draw), total);
  const u64* mass = p.chunk_mass + size_t(t) * chunks;
  // Each thread owns a run of consecutive chunks, so the scan keeps id order.
  const int per = (chunks + kThreads - 1) / kThreads, first = threadIdx.x * per;
  u64 mine = 0;
  for (int k = first; k < min(chunks, first + per); ++k) mine += __ldcg(mass + k);
  u64 all;
  u64 before = block_exclusive_scan(mine, all);
  if (threadIdx.x == 0) s_chunk = -1;
  __syncthreads();
  if (before <= target && target < before + mine) {
    for (int k = first; k < min(chunks, first + per); ++k) {
      const u64 w = __ldcg(mass + k);
      if (target < before + w) { s_chunk = k; s_rest = target - before; break; }
      before += w;
    }
  }
  __syncthreads();
  const int chunk = s_chunk;
  if (chunk < 0) { finish(p, t, -1, kSampleOnHost); return; }  // cannot happen: the masses sum to total
  // Thread j owns ids 2j and 2j + 1 of the chunk: the scan over threads is the id-order scan.
  const int base = chunk * kChunkIds + kIdsPerThread * threadIdx.x;
  u64 w[kIdsPerThread];
  u64 sum = 0;
#pragma unroll
  for (int j = 0; j < kIdsPerThread; ++j) {
    const int i = base + j;
    w[j] = 0;
    if (i < p.vocab) {
      const Weighed x = weigh(p, c, t, i, m);
      if (member(i, x)) w[j] = x.w;
    }
    sum += w[j];
  }
  __shared__ int s_found;
  if (threadIdx.x == 0) s_found = -1;
  before = block_exclusive_scan(sum, all);  // its barriers publish s_found's reset
  const u64 rest = s_rest;
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

// The block's four chunk masses into chunk_mass (chunks past the vocabulary skipped); returns their
// sum in thread 0.
__device__ u64 store_chunk_masses(const u64 (&part)[kChunksPerBlock], u64* chunk_mass, int chunks) {
  __shared__ u64 sums[kChunksPerBlock][kThreads / 32];
  for (int q = 0; q < kChunksPerBlock; ++q) {
    const u64 v = warp_sum(part[q]);
    if ((threadIdx.x & 31) == 0) sums[q][threadIdx.x >> 5] = v;
  }
  __syncthreads();
  u64 total = 0;
  if (threadIdx.x == 0)
    for (int q = 0; q < kChunksPerBlock; ++q) {
      u64 m = 0;
      for (int w = 0; w < kThreads / 32; ++w) m += sums[q][w];
      const int chunk = blockIdx.x * kChunksPerBlock + q;
      if (chunk < chunks) chunk_mass[chunk] = m;
      total += m;
    }
  return total;
}

__global__ void __launch_bounds__(kThreads) sample_max_kernel(const SampleParams p) {
  pdl_launch_dependents();  // the next sampling kernel may take SMs as this one's blocks finish
  pdl_wait();                // the previous kernel's memory (logits, maximum, scratch) is visible
  const int t = blockIdx.y;
  const SampleCallParams c = *p.call;
  u64 best = 0;
  for (int q = 0; q < kChunksPerBlock; ++q)
    for (int k = 0; k < kIdsPerThread; ++k) {
      const int i = slot_id(q, k);
      if (i >= p.vocab) continue;
      const Id e = eval(p, c, t, i);
      if (e.in) best = max(best, ordered_key(e.z));
    }
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  if ((threadIdx.x & 31) == 0 && best != 0) atomicMax(&p.scratch[t].max_key, best);
}

// kTopP: the per-bucket masses (p.top_p); without them the bucket is never computed.
template <bool kTopP>
__global__ void __launch_bounds__(kThreads) sample_weights_kernel(const SampleParams p) {
  pdl_launch_dependents();  // the next sampling kernel may take SMs as this one's blocks finish
  pdl_wait();                // the previous kernel's memory (logits, maximum, scratch) is visible
  __shared__ u64 hist[sample::kRankBuckets];
  const int t = blockIdx.y;
  const int chunks = (p.vocab + kChunkIds - 1) / kChunkIds;
  const SampleCallParams c = *p.call;
  SampleScratch& s = p.scratch[t];
  const double m = token_max(p, c, t);
  const bool valid = isfinite(m);
  if (kTopP)
    for (int b = threadIdx.x; b < sample::kRankBuckets; b += kThreads) hist[b] = 0;
  __syncthreads();
  u64 part[kChunksPerBlock] = {};
  if (valid) {
    Weighed x[kChunksPerBlock][kIdsPerThread];
#pragma unroll
    for (int q = 0; q < kChunksPerBlock; ++q)
#pragma unroll
      for (int k = 0; k < kIdsPerThread; ++k) {
        const int i = slot_id(q, k);
        x[q][k] = Weighed{0, 0, 0};
        if (i < p.vocab) x[q][k] = weigh<kTopP>(p, c, t, i, m);
        part[q] += x[q][k].w;
      }
    if (kTopP)
#pragma unroll
      for (int q = 0; q < kChunksPerBlock; ++q)
#pragma unroll
        for (int k = 0; k < kIdsPerThread; ++k) add_to_bin(hist, nullptr, x[q][k].bucket, x[q][k].w, x[q][k].w != 0);
  }
  const u64 block_mass = store_chunk_masses(part, p.chunk_mass + size_t(t) * chunks, chunks);
  if (threadIdx.x == 0 && block_mass != 0) atomicAdd(&s.total, block_mass);
  if (kTopP)
    for (int b = threadIdx.x; b < sample::kRankBuckets; b += kThreads)
      if (hist[b] != 0) atomicAdd(&s.hist[b], hist[b]);
  if (!last_block(s, 0)) return;

  const u64 total = __ldcg(&s.total);
  if (!valid || total == 0) {
    // No id takes part (mask, NaN) or the head's maximum is not finite: the host decides. With
    // top-p the boundary kernel's last block raises the flag.
    finish(p, t, -1, p.max_kernel && !valid ? kSampleNothingAllowed : kSampleOnHost);
    if (!kTopP) token_done(p);
    return;
  }
  if (!kTopP) {
    draw(p, c, t, m, total, [](int, const Weighed&) { return true; });
    token_done(p);
    return;
  }
  // Top-p: the first bucket (rank order) where the running mass reaches the target.
  const u64 target = sample::top_p_target(total, c.top_p);
  constexpr int kPer = sample::kRankBuckets / kThreads;
  u64 mine = 0;
  for (int b = 0; b < kPer; ++b) mine += __ldcg(&s.hist[threadIdx.x * kPer + b]);
  u64 all;
  u64 before = block_exclusive_scan(mine, all);
  if (before < target && target <= before + mine) {
    for (int b = threadIdx.x * kPer; b < (threadIdx.x + 1) * kPer; ++b) {
      const u64 h = __ldcg(&s.hist[b]);
      if (target <= before + h) {
        s.boundary = b;
        s.mass_below = before;
        s.rest = target - before;
        break;
      }
      before += h;
    }
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
  __shared__ u64 red_u64[kThreads / 32][2];
  __shared__ uint32_t red_u32[kThreads / 32][2];
  // The candidates' smallest and largest key and id: the bytes before the first difference are fixed.
  u64 kmin = ~0ull, kmax = 0;
  uint32_t imin = ~0u, imax = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const u64 k = cand[i].key;
    kmin = min(kmin, k);
    kmax = max(kmax, k);
  }
  for (int o = 16; o > 0; o >>= 1) {
    kmin = min(kmin, __shfl_xor_sync(0xffffffffu, kmin, o));
    kmax = max(kmax, __shfl_xor_sync(0xffffffffu, kmax, o));
  }
  if ((threadIdx.x & 31) == 0) { red_u64[threadIdx.x >> 5][0] = kmin; red_u64[threadIdx.x >> 5][1] = kmax; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 0; w < kThreads / 32; ++w) { kmin = min(kmin, red_u64[w][0]); kmax = max(kmax, red_u64[w][1]); }
    s_key = kmin;
    s_rest = rest;
    s_done = 0;
    // Level L < 8: byte L of the key from the top; L >= 8: byte L - 8 of the id.
    s_level = kmin == kmax ? 8 : __clzll(kmin ^ kmax) / 8;
  }
  __syncthreads();
  if (s_level == 8) {  // every key equal: the id decides
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t id = uint32_t(cand[i].id);
      imin = min(imin, id);
      imax = max(imax, id);
    }
    for (int o = 16; o > 0; o >>= 1) {
      imin = min(imin, __shfl_xor_sync(0xffffffffu, imin, o));
      imax = max(imax, __shfl_xor_sync(0xffffffffu, imax, o));
    }
    if ((threadIdx.x & 31) == 0) { red_u32[threadIdx.x >> 5][0] = imin; red_u32[threadIdx.x >> 5][1] = imax; }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < kThreads / 32; ++w) { imin = min(imin, red_u32[w][0]); imax = max(imax, red_u32[w][1]); }
      s_id = imin;
      s_level = imin == imax ? 12 : 8 + __clz(imin ^ imax) / 8;
      if (imin == imax) s_done = 1;
    }
    __syncthreads();
  } else if (threadIdx.x == 0) {
    s_id = 0;
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

// The threshold among the candidates of one fine bin, few enough to hold in shared memory: each
// candidate's mass before it (rank order) by a loop over the others; the one whose mass crosses
// `rest` is the threshold. Integer sums: the loop order does not matter.
__device__ Threshold select_in_fine_bin(const SampleCandidate* cand, int n, int fine, u64 rest) {
  __shared__ SampleCandidate few[kFewCandidates];
  __shared__ uint32_t s_few;
  __shared__ Threshold s_th;
  if (threadIdx.x == 0) {
    s_few = 0;
    s_th = Threshold{0, 0};  // replaced below: some candidate's mass always crosses rest
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads)
    if (cand[i].fine == fine) few[atomicAdd(&s_few, 1u)] = cand[i];
  __syncthreads();
  const int m = int(s_few);
  for (int i = threadIdx.x; i < m; i += kThreads) {
    const SampleCandidate x = few[i];
    u64 before = 0;
    for (int j = 0; j < m; ++j)
      if (few[j].key < x.key || (few[j].key == x.key && few[j].id < x.id)) before += few[j].weight;
    if (before < rest && rest <= before + x.weight) s_th = Threshold{x.key, uint32_t(x.id)};
  }
  __syncthreads();
  return s_th;
}

__global__ void __launch_bounds__(kThreads) sample_boundary_kernel(const SampleParams p) {
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
  u64 part[kChunksPerBlock] = {};
  Weighed x[kChunksPerBlock][kIdsPerThread];
  u64 mine = 0;
#pragma unroll
  for (int q = 0; q < kChunksPerBlock; ++q)
#pragma unroll
    for (int k = 0; k < kIdsPerThread; ++k) {
      const int i = slot_id(q, k);
      x[q][k] = Weighed{0, sample::kRankBuckets, 0};
      if (valid && i < p.vocab) x[q][k] = weigh(p, c, t, i, m);
      if (x[q][k].w != 0 && x[q][k].bucket < boundary) part[q] += x[q][k].w;
      mine += x[q][k].w != 0 && x[q][k].bucket == boundary ? 1 : 0;
    }
  // The block's candidates take one range of the buffer: one global atomic per block.
  __shared__ uint32_t s_first;
  u64 block_count;
  uint32_t slot = uint32_t(block_exclusive_scan(mine, block_count));
  if (threadIdx.x == 0 && block_count != 0) s_first = atomicAdd(&s.n_candidates, uint32_t(block_count));
  __syncthreads();
#pragma unroll
  for (int q = 0; q < kChunksPerBlock; ++q)
#pragma unroll
    for (int k = 0; k < kIdsPerThread; ++k) {
      const Weighed& w = x[q][k];
      if (w.w == 0 || w.bucket != boundary) continue;
      const int fine = fine_bin(__dadd_rn(m, -w.z));
      atomicAdd(&s.fine_mass[fine], w.w);
      atomicAdd(&s.fine_count[fine], 1u);
      const uint32_t at = s_first + slot++;
      if (at < uint32_t(kSampleCandidates)) cands[at] = SampleCandidate{sample::descending_key(w.z), w.w, slot_id(q, k), fine};
    }
  // The final set's chunk masses; the boundary ids at or before the threshold are added below.
  store_chunk_masses(part, p.chunk_mass + size_t(t) * chunks, chunks);
  if (!last_block(s, 1)) return;
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
  // The fine bin where the boundary bucket's mass reaches the rest of the target.
  __shared__ int s_fine;
  __shared__ u64 s_rest;
  const u64 rest = __ldcg(&s.rest);
  constexpr int kPer = kFineBins / kThreads;
  u64 fine_mine = 0;
  for (int b = 0; b < kPer; ++b) fine_mine += __ldcg(&s.fine_mass[threadIdx.x * kPer + b]);
  u64 all;
  u64 before = block_exclusive_scan(fine_mine, all);
  if (before < rest && rest <= before + fine_mine)
    for (int b = threadIdx.x * kPer; b < (threadIdx.x + 1) * kPer; ++b) {
      const u64 h = __ldcg(&s.fine_mass[b]);
      if (rest <= before + h) { s_fine = b; s_rest = rest - before; break; }
      before += h;
    }
  __syncthreads();
  const int fine = s_fine;
  const Threshold th = __ldcg(&s.fine_count[fine]) <= uint32_t(kFewCandidates)
                           ? select_in_fine_bin(cands, int(n), fine, s_rest)
                           : weighted_select(cands, int(n), rest);  // many exact ties: the radix walk
  // The boundary ids at or before the threshold join the final set's chunk masses.
  u64 joined = 0;
  for (int k = threadIdx.x; k < int(n); k += kThreads) {
    const SampleCandidate& cand = cands[k];
    if (!at_or_before(cand.key, uint32_t(cand.id), th)) continue;
    atomicAdd(p.chunk_mass + size_t(t) * chunks + cand.id / kChunkIds, cand.weight);
    joined += cand.weight;
  }
  u64 joined_all;
  block_exclusive_scan(joined, joined_all);
  __threadfence();
  __syncthreads();
  const u64 final_total = __ldcg(&s.mass_below) + joined_all;
  draw(p, c, t, m, final_total, [&](int i, const Weighed& w) {
    return w.w != 0 && (w.bucket < boundary || (w.bucket == boundary && at_or_before(sample::descending_key(w.z), uint32_t(i), th)));
  });
  token_done(p);
}

template <auto Kernel>
void launch_one(dim3 grid, const SampleParams& p, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = p.pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, Kernel, p));
}

}  // namespace

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  const int chunks = (p.vocab + kChunkIds - 1) / kChunkIds;
  const dim3 grid(unsigned((chunks + kChunksPerBlock - 1) / kChunksPerBlock), unsigned(p.T));
  if (p.max_kernel) launch_one<sample_max_kernel>(grid, p, stream);
  if (p.top_p) launch_one<sample_weights_kernel<true>>(grid, p, stream);
  else launch_one<sample_weights_kernel<false>>(grid, p, stream);
  if (p.top_p) launch_one<sample_boundary_kernel>(grid, p, stream);
}

}  // namespace lmhead::cuda
