// Selection beyond the fused argmax, over the capped logits the head kernel stored: top-k per
// 4096-id chunk (the host merges the chunk lists with select::merge) and the sums of exponentials
// in select::sum_exp's order (sequential inside each 512-id chunk; the host adds the chunk sums in
// id order). Also the node route's intermediate stages and the tanh sweep test hook.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/cuda_check.hpp"
#include "cuda/device_common.cuh"

namespace lmhead::cuda {
namespace {

constexpr int kTopKThreads = 512;

// Sort key: larger is better. Value descending (+0 and -0 equal, as the host's comparison treats
// them), then id ascending; NaN never becomes a candidate (key 0).
__device__ __forceinline__ unsigned long long topk_key(float v, int id) {
  if (isnan(v)) return 0ull;
  uint32_t bits = __float_as_uint(v);
  if (bits == 0x80000000u) bits = 0;
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | (0xFFFFFFFFu - uint32_t(id));
}

__global__ void __launch_bounds__(kTopKThreads) topk_kernel(const SelectParams p) {
  __shared__ unsigned long long keys[kTopKChunk];
  const int chunk = blockIdx.x, t = blockIdx.y;
  const int begin = chunk * kTopKChunk;
  const float* row = p.logits + size_t(t) * p.vocab;
  for (int i = threadIdx.x; i < kTopKChunk; i += blockDim.x) {
    const int id = begin + i;
    keys[i] = id < p.vocab ? topk_key(row[id], id) : 0ull;
  }
  __syncthreads();
  // Bitonic sort, descending.
  for (int size = 2; size <= kTopKChunk; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < kTopKChunk; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const bool descending = (i & size) == 0;
          const unsigned long long a = keys[i], b = keys[j];
          if (descending ? (a < b) : (a > b)) { keys[i] = b; keys[j] = a; }
        }
      }
      __syncthreads();
    }
  }
  const int nchunks = (p.vocab + kTopKChunk - 1) / kTopKChunk;
  int2* out = p.candidates + (size_t(t) * nchunks + chunk) * p.k_chunk;
  for (int i = threadIdx.x; i < p.k_chunk; i += blockDim.x) {
    const unsigned long long k = keys[i];
    if (k == 0ull) { out[i] = make_int2(-1, 0); continue; }
    const int id = int(0xFFFFFFFFu - uint32_t(k & 0xFFFFFFFFull));
    out[i] = make_int2(id, __float_as_int(row[id]));
  }
}

// One warp per (chunk, token): the lanes compute 32 exponentials at a time, lane 0 adds them in id
// order, so the chunk's double equals the host's left-to-right loop given the same exp values.
__global__ void __launch_bounds__(32) sum_exp_kernel(const SelectParams p) {
  const int chunk = blockIdx.x, t = blockIdx.y, lane = threadIdx.x;
  const int begin = chunk * kSumExpChunk;
  const int end = min(p.vocab, begin + kSumExpChunk);
  const float* row = p.logits + size_t(t) * p.vocab;
  const double mx = double(p.max_in[t]);
  double s = 0.0;
  for (int base = begin; base < end; base += 32) {
    const int id = base + lane;
    const double e = id < end ? exp(__dsub_rn(double(row[id]), mx)) : 0.0;
    const int n = min(32, end - base);
    for (int i = 0; i < n; ++i) {
      const double v = __shfl_sync(0xffffffffu, e, i);
      s = __dadd_rn(s, v);
    }
  }
  const int nchunks = (p.vocab + kSumExpChunk - 1) / kSumExpChunk;
  if (lane == 0) p.chunk_sums[size_t(t) * nchunks + chunk] = s;
}

__global__ void stage_nodes_kernel(const float* raw, size_t n, float s, float cap, float inv_cap, int mode,
                                   float* scaled, float* divided, float* tanhed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float r = raw[i];
    if (mode == kCapNodes) {
      const ops::CapNodes c = ops::softcap_nodes(r, s, cap, inv_cap);
      scaled[i] = c.scaled;
      divided[i] = c.div;
      tanhed[i] = c.tanh;
    } else {
      const float v = __fmul_rn(r, s);
      const float d = __fdiv_rn(v, cap);
      scaled[i] = v;
      divided[i] = d;
      tanhed[i] = ops::portable_tanhf(d);
    }
  }
}

__global__ void tanh_sweep_kernel(uint64_t first, uint64_t count, uint32_t* out) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < count; i += uint64_t(gridDim.x) * blockDim.x)
    out[i] = __float_as_uint(ops::portable_tanhf(__uint_as_float(uint32_t(first + i))));
}

}  // namespace

void launch_topk(const SelectParams& p, cudaStream_t stream) {
  const int nchunks = (p.vocab + kTopKChunk - 1) / kTopKChunk;
  topk_kernel<<<dim3(nchunks, p.T), kTopKThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH("topk_kernel");
}

void launch_sum_exp(const SelectParams& p, cudaStream_t stream) {
  const int nchunks = (p.vocab + kSumExpChunk - 1) / kSumExpChunk;
  sum_exp_kernel<<<dim3(nchunks, p.T), 32, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH("sum_exp_kernel");
}

void launch_stage_nodes(const float* raw, int vocab, int T, float logit_scale, float cap, float inv_cap, int cap_mode,
                        float* scaled, float* div, float* tanh_out, cudaStream_t stream) {
  const size_t n = size_t(vocab) * T;
  const int blocks = int(std::min<size_t>((n + 255) / 256, 4096));
  stage_nodes_kernel<<<blocks, 256, 0, stream>>>(raw, n, logit_scale, cap, inv_cap, cap_mode, scaled, div, tanh_out);
  CUDA_CHECK_LAUNCH("stage_nodes_kernel");
}

void launch_tanh_sweep(uint64_t first, uint64_t count, uint32_t* out, cudaStream_t stream) {
  tanh_sweep_kernel<<<4096, 256, 0, stream>>>(first, count, out);
  CUDA_CHECK_LAUNCH("tanh_sweep_kernel");
}

}  // namespace lmhead::cuda
