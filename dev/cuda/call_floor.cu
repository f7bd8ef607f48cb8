// What a one-token call costs besides reading the head (issue 18: T = 1 at 0.92 of the read
// ceiling leaves about 18 us over the bare read of the Muse head; performance.md, CUDA "What is
// left"). Three measurements, medians of many calls:
//
// 1. The floor of any call: a graph of one kernel that raises a flag in mapped host memory,
//    replayed and polled as the backend polls its done flag (launch, one kernel, the flag's trip).
// 2. The cuda backend's T = 1 argmax call on Q5_K heads of the Muse hidden size with 512 to
//    202,048 rows: wall time and the backend's host phases (copy into the mapped input, graph
//    launch, wait for the flag, the rest). The head's bytes grow 400-fold; what does not grow with
//    them is the call's fixed part.
// 3. The same calls waiting on the stream (cudaStreamSynchronize) instead of polling the flag.
// 4. Inside the Muse head's kernel (one copy, then both copies): every block's start, activations
//    staged, last warp done and exit (TestHooks::block_clock, %globaltimer), so the kernel's own
//    start and end can be told apart from its streaming.
//
// Every head's argmax is checked against the scalar backend before anything is timed.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/kernels.hpp"
#include "synth/splitmix64.hpp"
#include "synth/synthetic_head.hpp"

using namespace lmhead;

namespace {

constexpr int64_t kHidden = 6656;

__global__ void raise_flag(unsigned* flag, const unsigned* seq_in, unsigned* seq) {
  const unsigned v = *seq_in + 1;
  *seq = v;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned*>(flag) = v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Medians over `calls` T = 1 calls of the block stamps' spread, in us from the first block's start.
void block_clock_report(Backend& gpu, const float* hidden, const char* what, int calls) {
  cuda::Tuning tuning = cuda::get_tuning(gpu);
  tuning.hooks.block_clock = true;
  cuda::set_tuning(gpu, tuning);
  ForwardRequest req;
  ForwardOutput out;
  for (int i = 0; i < 5; ++i) gpu.forward(hidden, 1, req, out);
  enum { kStartSpread, kStagedMed, kStagedMax, kDoneMin, kDoneMed, kDoneMax, kExitMax, kMerge, kN };
  std::vector<std::vector<double>> v(kN);
  int blocks = 0;
  for (int c = 0; c < calls; ++c) {
    gpu.forward(hidden, 1, req, out);
    const std::vector<uint64_t> st = cuda::last_block_clock(gpu);
    std::vector<double> s0, s1, s2, s3;
    int n = 0;
    for (int b = 0; b < cuda::kBlockClockBlocks && st[4 * b] != 0; ++b, ++n) {
      s0.push_back(double(st[4 * b]));
      s1.push_back(double(st[4 * b + 1]));
      s2.push_back(double(st[4 * b + 2]));
      s3.push_back(double(st[4 * b + 3]));
    }
    blocks = n;
    if (n == 0) {  // a kernel without the start stamps (only the stream and tokens-in-N kernels have them)
      std::printf("| %s | the plan's kernel (%s) stamps no block start |\n", what, cuda::kernel_name(cuda::last_call(gpu).kernel));
      tuning.hooks.block_clock = false;
      cuda::set_tuning(gpu, tuning);
      return;
    }
    const double t0 = *std::min_element(s0.begin(), s0.end());
    auto us = [&](double ns) { return (ns - t0) / 1000.0; };
    v[kStartSpread].push_back(us(*std::max_element(s0.begin(), s0.end())));
    v[kStagedMed].push_back(us(median(s1)));
    v[kStagedMax].push_back(us(*std::max_element(s1.begin(), s1.end())));
    v[kDoneMin].push_back(us(*std::min_element(s2.begin(), s2.end())));
    v[kDoneMed].push_back(us(median(s2)));
    v[kDoneMax].push_back(us(*std::max_element(s2.begin(), s2.end())));
    v[kExitMax].push_back(us(*std::max_element(s3.begin(), s3.end())));
    v[kMerge].push_back((*std::max_element(s3.begin(), s3.end()) - *std::max_element(s2.begin(), s2.end())) / 1000.0);
  }
  tuning.hooks.block_clock = false;
  cuda::set_tuning(gpu, tuning);
  std::printf("| %s | %d | %.1f | %.1f / %.1f | %.1f / %.1f / %.1f | %.1f | %.1f |\n", what, blocks, median(v[kStartSpread]),
              median(v[kStagedMed]), median(v[kStagedMax]), median(v[kDoneMin]), median(v[kDoneMed]), median(v[kDoneMax]),
              median(v[kExitMax]), median(v[kMerge]));
}

struct Head {
  std::vector<uint8_t> weights;
  std::vector<float> gamma;
  HeadView view;
};

// The rows `lmhead make` writes (synth::fill_synthetic_rows: random Q5_K blocks with small finite
// factors, whose capped logits stay inside the cap, as a trained head's do).
Head make_q5k_head(int64_t vocab, uint64_t seed) {
  const uint64_t row_bytes = synth::row_bytes_of(TensorType::Q5_K, kHidden);
  Head h;
  h.weights.resize(size_t(vocab) * row_bytes);
  synth::fill_synthetic_rows(TensorType::Q5_K, vocab, kHidden, seed, h.weights.data());
  h.gamma.resize(kHidden);
  synth::SplitMix64 gamma_rng{seed};
  for (auto& g : h.gamma) g = 0.5f + gamma_rng.unit24();
  h.view.type = TensorType::Q5_K;
  h.view.weights = h.weights.data();
  h.view.vocab = vocab;
  h.view.hidden = kHidden;
  h.view.row_bytes = row_bytes;
  h.view.gamma = h.gamma.data();
  h.view.eps = 1e-5f;
  h.view.logit_scale = 0.196116f;
  h.view.softcap = 20.0f;
  return h;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no usable GPU: skipped\n");
    return 0;
  }
  using clock = std::chrono::steady_clock;
  auto us_since = [](clock::time_point a) { return std::chrono::duration<double, std::micro>(clock::now() - a).count(); };

  // 1. One kernel raising a mapped flag, as a replayed graph, polled.
  {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned *flag = nullptr, *d_seq = nullptr;
    CUDA_CHECK(cudaHostAlloc(&flag, 64, cudaHostAllocMapped));
    *flag = 0;
    CUDA_CHECK(cudaMalloc(&d_seq, 4));
    CUDA_CHECK(cudaMemset(d_seq, 0, 4));
    unsigned* d_flag = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_flag), flag, 0));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    raise_flag<<<1, 1, 0, s>>>(d_flag, d_seq, d_seq);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<double> wall;
    for (int i = 0; i < 3000; ++i) {
      const unsigned before = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
      const auto t0 = clock::now();
      CUDA_CHECK(cudaGraphLaunch(exec, s));
      while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == before) {
      }
      if (i >= 500) wall.push_back(us_since(t0));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::printf("floor: a replayed graph of one kernel raising a mapped flag, polled: median %.1f us (2,500 calls)\n",
                median(wall));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaFree(d_seq));
    CUDA_CHECK(cudaFreeHost(flag));
    CUDA_CHECK(cudaStreamDestroy(s));
  }

  // 2. and 3. The backend's T = 1 calls over heads of growing vocabulary.
  std::printf("| rows | head MB | call median us | copy / launch / wait / rest us | waiting on the stream instead, us per call |\n"
              "| --- | --- | --- | --- | --- |\n");
  int failures = 0;
  for (const int64_t vocab : {int64_t(512), int64_t(4096), int64_t(32768), int64_t(202048)}) {
    Head h = make_q5k_head(vocab, 5);
    const std::vector<float> hidden = synth::normal_floats(kHidden, 9);
    auto gpu = make_cuda_backend(h.view, 1);
    auto ref = make_scalar_backend(h.view);
    ForwardRequest req;
    ForwardOutput out, want;
    ref->forward(hidden.data(), 1, req, want);
    for (int i = 0; i < 10; ++i) gpu->forward(hidden.data(), 1, req, out);
    if (out.summaries[0].argmax != want.summaries[0].argmax || out.summaries[0].max != want.summaries[0].max) {
      std::printf("MISMATCH at %lld rows: cuda argmax %d (max %a), scalar %d (max %a)\n", (long long)vocab,
                  out.summaries[0].argmax, double(out.summaries[0].max), want.summaries[0].argmax,
                  double(want.summaries[0].max));
      ++failures;
      continue;
    }
    const int runs = vocab > 100000 ? 500 : 3000;
    std::vector<double> wall, copy, launch, wait, rest;
    for (int i = 0; i < runs; ++i) {
      const auto t0 = clock::now();
      gpu->forward(hidden.data(), 1, req, out);
      wall.push_back(us_since(t0));
      const cuda::CallInfo c = cuda::last_call(*gpu);
      copy.push_back(c.copy_us);
      launch.push_back(c.launch_us);
      wait.push_back(c.wait_us);
      rest.push_back(c.total_us - c.copy_us - c.launch_us - c.wait_us);
    }
    // Waiting on the stream instead of the flag.
    cuda::Tuning tuning = cuda::get_tuning(*gpu);
    tuning.hooks.poll_done = false;
    cuda::set_tuning(*gpu, tuning);
    for (int i = 0; i < 5; ++i) gpu->forward(hidden.data(), 1, req, out);
    const auto t0 = clock::now();
    const int back = 200;
    for (int i = 0; i < back; ++i) gpu->forward(hidden.data(), 1, req, out);
    const double per_call = us_since(t0) / back;
    std::printf("| %lld | %.1f | %.1f | %.1f / %.1f / %.1f / %.1f | %.1f |\n", (long long)vocab,
                double(vocab) * double(h.view.row_bytes) / 1e6, median(wall), median(copy), median(launch), median(wait),
                median(rest), per_call);
    if (vocab == 202048) {
      tuning.hooks.poll_done = true;
      cuda::set_tuning(*gpu, tuning);
      std::printf("\nInside the head kernel, T = 1, medians of 100 calls, us from the first block's start:\n"
                  "| head copies | blocks | last block started | activations staged median / last | last warp done "
                  "first / median / last block | last exit | last warp done to last exit |\n"
                  "| --- | --- | --- | --- | --- | --- | --- |\n");
      block_clock_report(*gpu, hidden.data(), "one (default)", 100);
      HeadView both = h.view;
      both.cuda_second_layout = true;
      gpu.reset();
      auto gpu2 = make_cuda_backend(both, 1);
      ForwardOutput check;
      gpu2->forward(hidden.data(), 1, req, check);
      if (check.summaries[0].argmax != want.summaries[0].argmax) {
        std::printf("MISMATCH with both copies: cuda argmax %d, scalar %d\n", check.summaries[0].argmax,
                    want.summaries[0].argmax);
        ++failures;
      } else {
        block_clock_report(*gpu2, hidden.data(), "both", 100);
      }
    }
  }
  if (failures) std::printf("%d heads did not match the scalar backend\n", failures);
  return failures ? 1 : 0;
}
