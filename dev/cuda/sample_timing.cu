// The sampling kernels (src/cuda/sample.cu) timed alone, and the atomic patterns they are built
// from, to find what a sampled call's extra microseconds are (issue 16: T=1 top-p and T=8 sampled
// verification cost more than the kernels' arithmetic predicts, and cutting that arithmetic
// changed nothing: performance.md, "Tenth session").
//
// 1. launch_sample on near-flat logits of the Muse shape (202,048 ids; about 90 % of the ids in a
//    0.9 top-p prefix, as the synthetic head gives), T = 1, 2, 4 and 8, temperature alone and with
//    top-p 0.9 and 0.5, each call's tokens checked against the host sampler at 16 positions first.
//    Per call: the scratch memset and the kernels, back to back on one stream, against the memset
//    alone.
// 2. The per-block patterns of those kernels, each in a kernel of the same grid (395 blocks of 256
//    threads per token): one same-address add per block (the total), the last-block counter, the
//    top-p histogram flush (about 300 adds per block into the same 300 words), the flush into eight
//    copies of the histogram. Per launch, against an empty kernel of the same grid.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels.hpp"
#include "lmhead/lmhead.hpp"
#include "sample/sampler.hpp"

using namespace lmhead;
using u64 = unsigned long long;

namespace {

constexpr int kVocab = 202048;
constexpr int kThreads = 256;
constexpr int kBlocks = (kVocab + 511) / 512;

__global__ void empty_kernel() {}

__global__ void total_kernel(u64* total) {
  if (threadIdx.x == 0) atomicAdd(total + blockIdx.y * 16, u64(blockIdx.x + 1));
}

__device__ bool last_block(unsigned* counter) {
  __shared__ bool is_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
    if (is_last) __threadfence();
  }
  __syncthreads();
  return is_last;
}

__global__ void counter_kernel(unsigned* counters) {
  unsigned* counter = counters + blockIdx.y * 32;
  if (last_block(counter) && threadIdx.x == 0) *counter = 0;
}

__global__ void total_counter_kernel(u64* total, unsigned* counters) {
  if (threadIdx.x == 0) atomicAdd(total + blockIdx.y * 16, u64(blockIdx.x + 1));
  unsigned* counter = counters + blockIdx.y * 32;
  if (last_block(counter) && threadIdx.x == 0) *counter = 0;
}

// copies = 1: every block adds into the same 300 words of a 2,048-word histogram; 8: into one of
// eight histograms (blockIdx.x % 8).
__global__ void hist_kernel(u64* hist, unsigned* counters, int copies) {
  u64* h = hist + (size_t(blockIdx.y) * 8 + blockIdx.x % copies) * 2048;
  for (int b = threadIdx.x; b < 2048; b += kThreads)
    if (b >= 600 && b < 900) atomicAdd(h + b, u64(b));
  unsigned* counter = counters + blockIdx.y * 32;
  if (last_block(counter) && threadIdx.x == 0) *counter = 0;
}

struct Timer {
  cudaEvent_t a, b;
  Timer() { CUDA_CHECK(cudaEventCreate(&a)); CUDA_CHECK(cudaEventCreate(&b)); }
  ~Timer() { cudaEventDestroy(a); cudaEventDestroy(b); }
  template <class F>
  double us_per(int n, cudaStream_t s, F f) {  // mean of n back-to-back calls, after 20 warm-up calls
    for (int i = 0; i < 20; ++i) f();
    CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < n; ++i) f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return 1000.0 * ms / n;
  }
};

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no usable GPU: skipped\n");
    return 0;
  }
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kMaxT = 8;
  // Near-flat logits, as the synthetic Muse head's (its capped logits span a few units).
  std::vector<float> logits(size_t(kMaxT) * kVocab), maxima(kMaxT);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (float& x : logits) x = u(rng);
  for (int t = 0; t < kMaxT; ++t)
    maxima[size_t(t)] = *std::max_element(logits.begin() + size_t(t) * kVocab, logits.begin() + size_t(t + 1) * kVocab);

  float *d_logits, *d_max;
  cuda::SampleCallParams* d_call;
  cuda::SampleScratch* d_scratch;
  u64* d_chunk_mass;
  cuda::SampleCandidate* d_cands;
  int32_t *d_sampled, *d_status;
  unsigned* d_seq;
  CUDA_CHECK(cudaMalloc(&d_logits, logits.size() * 4));
  CUDA_CHECK(cudaMalloc(&d_max, kMaxT * 4));
  CUDA_CHECK(cudaMalloc(&d_call, sizeof(cuda::SampleCallParams)));
  CUDA_CHECK(cudaMalloc(&d_scratch, kMaxT * sizeof(cuda::SampleScratch)));
  CUDA_CHECK(cudaMalloc(&d_chunk_mass, size_t(kMaxT) * kBlocks * 8));
  CUDA_CHECK(cudaMalloc(&d_cands, size_t(kMaxT) * cuda::kSampleCandidates * sizeof(cuda::SampleCandidate)));
  CUDA_CHECK(cudaMalloc(&d_sampled, kMaxT * 4));
  CUDA_CHECK(cudaMalloc(&d_status, kMaxT * 4));
  CUDA_CHECK(cudaMalloc(&d_seq, 4));
  CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_max, maxima.data(), kMaxT * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(d_seq, 0, 4));

  Timer timer;
  const int n = 500;
  int mismatches = 0;
  std::printf("sampling kernels alone (launch_sample, no PDL), mean of %d back-to-back calls\n", n);
  const double memset_us = timer.us_per(n, s, [&] {
    CUDA_CHECK(cudaMemsetAsync(d_scratch, 0, kMaxT * sizeof(cuda::SampleScratch), s));
  });
  std::printf("  scratch memset alone: %.2f us\n", memset_us);
  for (int T : {1, 2, 4, 8})
    for (float top_p : {1.0f, 0.9f, 0.5f}) {
      cuda::SampleCallParams call;
      call.temperature = 1.0;
      call.top_p = top_p;
      call.seed = 11;
      call.position = 100;
      cuda::SampleParams p;
      p.logits = d_logits;
      p.max_in = d_max;
      p.call = d_call;
      p.scratch = d_scratch;
      p.chunk_mass = d_chunk_mass;
      p.candidates = d_cands;
      p.sampled = d_sampled;
      p.status = d_status;
      p.call_seq = d_seq;
      p.vocab = kVocab;
      p.T = T;
      p.top_p = top_p < 1.0f ? 1 : 0;
      auto one = [&] {
        CUDA_CHECK(cudaMemsetAsync(d_scratch, 0, kMaxT * sizeof(cuda::SampleScratch), s));
        cuda::launch_sample(p, s);
      };
      // Check first: the device's tokens against the host sampler's on the same logits, at 16
      // positions (the last one stays for the timing).
      for (int64_t position = 100; position < 116; ++position) {
        call.position = position;
        CUDA_CHECK(cudaMemcpy(d_call, &call, sizeof call, cudaMemcpyHostToDevice));
        one();
        CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<int32_t> got(static_cast<size_t>(T)), status(static_cast<size_t>(T));
        CUDA_CHECK(cudaMemcpy(got.data(), d_sampled, size_t(T) * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(status.data(), d_status, size_t(T) * 4, cudaMemcpyDeviceToHost));
        SamplingOptions o;
        o.temperature = 1.0f;
        o.top_p = top_p;
        o.seed = 11;
        for (int t = 0; t < T; ++t) {
          const int32_t want =
              sample::sample_token(logits.data() + size_t(t) * kVocab, kVocab, o, nullptr, position + t);
          if (status[size_t(t)] != cuda::kSampled || got[size_t(t)] != want) {
            std::printf("  MISMATCH T=%d top-p %.2f token %d: device %d (status %d), host %d\n", T, top_p, t,
                        got[size_t(t)], status[size_t(t)], want);
            ++mismatches;
          }
        }
      }
      const double us = timer.us_per(n, s, one);
      std::printf("  T=%d temperature 1, top-p %.2f: %.2f us per call, %.2f us over the memset\n", T, top_p, us,
                  us - memset_us);
    }

  u64* d_words;
  unsigned* d_counters;
  CUDA_CHECK(cudaMalloc(&d_words, size_t(kMaxT) * 8 * 2048 * 8));
  CUDA_CHECK(cudaMalloc(&d_counters, size_t(kMaxT) * 32 * 4));
  CUDA_CHECK(cudaMemset(d_words, 0, size_t(kMaxT) * 8 * 2048 * 8));
  CUDA_CHECK(cudaMemset(d_counters, 0, size_t(kMaxT) * 32 * 4));
  std::printf("block patterns, grid %d x T blocks of %d threads, mean of %d back-to-back launches\n", kBlocks,
              kThreads, n);
  for (int T : {1, 8}) {
    const dim3 grid(kBlocks, unsigned(T));
    const double empty = timer.us_per(n, s, [&] { empty_kernel<<<grid, kThreads, 0, s>>>(); });
    const double total = timer.us_per(n, s, [&] { total_kernel<<<grid, kThreads, 0, s>>>(d_words); });
    const double counter = timer.us_per(n, s, [&] { counter_kernel<<<grid, kThreads, 0, s>>>(d_counters); });
    const double both =
        timer.us_per(n, s, [&] { total_counter_kernel<<<grid, kThreads, 0, s>>>(d_words, d_counters); });
    const double hist1 = timer.us_per(n, s, [&] { hist_kernel<<<grid, kThreads, 0, s>>>(d_words, d_counters, 1); });
    const double hist8 = timer.us_per(n, s, [&] { hist_kernel<<<grid, kThreads, 0, s>>>(d_words, d_counters, 8); });
    CUDA_CHECK(cudaGetLastError());
    std::printf("  T=%d: empty %.2f us; over it: one add per block %.2f, last-block counter %.2f, both %.2f, "
                "histogram flush %.2f, into 8 copies %.2f\n",
                T, empty, total - empty, counter - empty, both - empty, hist1 - empty, hist8 - empty);
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  if (mismatches != 0) {
    std::printf("%d tokens differ from the host sampler: the timings above are not results\n", mismatches);
    return 1;
  }
  std::printf("every token matched the host sampler\n");
  return 0;
}
