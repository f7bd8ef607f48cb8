// CPU head microbenchmarks. Each full-shape line measures the machine's read ceiling in the same
// run, right before the head, and reports the ratio first:
//   ratio <r> | <GB/s> of ceiling <GB/s> | <bytes> B | median <ms> (min <ms>, max <ms>)
// The Muse-shape heads (202,048 x 6,656) are synthesized in memory (random valid blocks).
//
//   lmhead_microbench --benchmark_filter='CpuHead/q5_K'     full head, threads x tokens
//   lmhead_microbench --benchmark_filter='Kernel'           one thread, weights in L2: compute only
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "cpu/read_stream.hpp"
#include "cpu/thread_pool.hpp"
#include "lmhead/bench.hpp"
#include "quant/activation.hpp"
#include "synth/synthetic_head.hpp"

namespace lmhead::cpu {
namespace {

using synth::fill_synthetic_rows;
using synth::row_bytes_of;

constexpr int64_t kMuseVocab = 202048, kMuseHidden = 6656;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct SyntheticHead {
  TensorType type = TensorType::F32;
  int64_t vocab = 0, hidden = 0;
  std::unique_ptr<uint8_t[], FreeDeleter> weights;
  std::vector<float> gamma;
  HeadView view;
};

// One full-shape head at a time (a Q8_0 or F16 Muse head is 1.4 / 2.7 GB).
SyntheticHead& muse_head(TensorType type) {
  static SyntheticHead head;
  if (head.weights && head.type == type) return head;
  head.weights.reset();
  head.type = type;
  head.vocab = kMuseVocab;
  head.hidden = kMuseHidden;
  const uint64_t rb = row_bytes_of(type, kMuseHidden);
  head.weights.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, (rb * kMuseVocab + 4095) / 4096 * 4096)));
  fill_synthetic_rows(type, kMuseVocab, kMuseHidden, 2026, head.weights.get());
  head.gamma.assign(kMuseHidden, 1.0f);
  head.view = HeadView{};
  head.view.type = type;
  head.view.weights = head.weights.get();
  head.view.vocab = kMuseVocab;
  head.view.hidden = kMuseHidden;
  head.view.row_bytes = rb;
  head.view.gamma = head.gamma.data();
  head.view.logit_scale = 0.196116f;
  head.view.softcap = 20.0f;
  return head;
}

std::vector<float> random_hidden(int tokens, int64_t hidden) { return synth::normal_floats(size_t(tokens) * hidden, 1234); }

// A 1 GiB buffer the read ceiling streams, first touched by the same pool that reads it.
struct CeilingBuffer {
  uint64_t size = uint64_t(1) << 30;
  std::unique_ptr<uint8_t[], FreeDeleter> bytes;
  explicit CeilingBuffer(ThreadPool& pool) : bytes(static_cast<uint8_t*>(std::aligned_alloc(4096, size))) {
    pool.run([&](int w) {
      const Range r = split_range(int64_t(size), pool.size(), w, 4096);
      std::memset(bytes.get() + r.begin, 1, size_t(r.end - r.begin));
    });
  }
  // One streaming pass with the pool's threads: GB/s.
  double pass(ThreadPool& pool, const uint8_t* data, uint64_t n) {
    std::vector<uint64_t> sums(size_t(pool.size()));
    const auto start = std::chrono::steady_clock::now();
    pool.run([&](int w) {
      const Range r = split_range(int64_t(n / 4096), pool.size(), w);
      sums[size_t(w)] = avx2::read_stream(data + r.begin * 4096, uint64_t(r.end - r.begin) * 4096);
    });
    benchmark::DoNotOptimize(sums.data());
    return double(n / 4096 * 4096) / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 1e9;
  }
};

// Full head through the backend (norm, quantize, head, scale, cap, argmax), summaries only. The
// machine this was tuned on shares its cores and memory with other work, so each iteration runs a
// ceiling pass and a pass over the head's own bytes right before the forward pass, and the line
// reports the best of each (ratio = best forward GB/s over best ceiling GB/s) plus the median.
void BM_CpuHead(benchmark::State& state) {
  const auto type = TensorType(state.range(0));
  const int threads = int(state.range(1));
  const int tokens = int(state.range(2));
  const auto route = state.range(3) ? ActivationRoute::f32 : ActivationRoute::q8;
  const Isa limit = Isa(state.range(4));
  if (!cpu_supports(limit)) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  SyntheticHead& head = muse_head(type);
  const uint64_t bytes = head.view.row_bytes * uint64_t(head.vocab);
  auto backend = make_cpu_backend_limited(head.view, threads, limit);
  const std::vector<float> hidden = random_hidden(tokens, head.hidden);
  ForwardRequest req;
  req.activations = route;
  ForwardOutput out;
  ThreadPool pool(threads);
  CeilingBuffer ceiling_buffer(pool);

  backend->forward(hidden.data(), tokens, req, out);  // warm: pages, pool, scratch
  std::vector<double> ms;
  double ceiling = 0, own = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ceiling = std::max(ceiling, ceiling_buffer.pass(pool, ceiling_buffer.bytes.get(), ceiling_buffer.size));
    own = std::max(own, ceiling_buffer.pass(pool, head.weights.get(), bytes));
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    backend->forward(hidden.data(), tokens, req, out);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    benchmark::DoNotOptimize(out.summaries.data());
  }
  std::sort(ms.begin(), ms.end());
  const double best = ms.front(), median = ms[ms.size() / 2];
  const double gbps = double(bytes) / (best * 1e-3) / 1e9;
  state.counters["ratio"] = gbps / ceiling;
  state.counters["GBps"] = gbps;
  state.counters["ceiling_GBps"] = ceiling;
  state.counters["best_ms"] = best;
  char label[320];
  std::snprintf(label, sizeof label,
                "ratio %.3f | %.2f GB/s of ceiling %.2f GB/s | %s B | best %.2f ms, median %.2f, max %.2f | "
                "stream over the head's own bytes %.2f GB/s",
                gbps / ceiling, gbps, ceiling, with_commas(bytes).c_str(), best, median, ms.back(), own);
  state.SetLabel(label);
}

// Arguments: type, threads, tokens, route (0 q8, 1 f32), instruction-set limit (1 avx2, 2 avx512).
void CpuHeadArgs(benchmark::internal::Benchmark* b) {
  for (int isa : {int(Isa::avx512), int(Isa::avx2)})
    for (int threads : {2, 1})
      for (int tokens : {1, 2, 4, 8, 16}) b->Args({int(TensorType::Q5_K), threads, tokens, 0, isa});
}

BENCHMARK(BM_CpuHead)->Name("CpuHead/q5_K")->Apply(CpuHeadArgs)->Iterations(7)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuHead)
    ->Name("CpuHead/other")
    ->ArgsProduct({{int(TensorType::Q4_K), int(TensorType::Q6_K), int(TensorType::Q8_0), int(TensorType::F16)},
                   {2},
                   {1, 16},
                   {0},
                   {int(Isa::avx2)}})
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuHead)
    ->Name("CpuHead/f32route")
    ->ArgsProduct({{int(TensorType::Q5_K)}, {2}, {1, 16}, {1}, {int(Isa::avx2)}})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

void BM_ReadCeiling(benchmark::State& state) {
  const int threads = int(state.range(0));
  double gbps = 0;
  for (auto _ : state) gbps = measure_cpu_read_ceiling_gbps(uint64_t(1) << 30, threads);
  state.counters["GBps"] = gbps;
}
BENCHMARK(BM_ReadCeiling)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

// One tile kernel, one thread, over 64 rows (L2-resident): the compute cost per 256 elements and
// token, with no DRAM in the way. Every iteration after the first is called as the backend calls a
// worker's later tiles (TokenActs::scratch_prepared), so a token side made once per call is not
// counted per tile. Arguments: type, tokens, route (0 q8, 1 f32, 2 route tiled: q8
// activations in llama.cpp's tiled K-quant order), instruction-set limit (1 avx2, 2 avx512).
void BM_Kernel(benchmark::State& state) {
  const auto type = TensorType(state.range(0));
  const int tokens = int(state.range(1));
  const bool tiled = state.range(2) == 2;
  const bool q8 = state.range(2) != 1;
  const Isa limit = Isa(state.range(3));
  if (!cpu_supports(limit)) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  const int64_t rows = 64, hidden = kMuseHidden;
  const uint64_t rb = row_bytes_of(type, hidden);
  std::vector<uint8_t> weights(rb * rows);
  fill_synthetic_rows(type, rows, hidden, 7, weights.data());
  const auto fmt = quant::activation_format(type, q8 ? ActivationRoute::q8 : ActivationRoute::f32);
  const size_t stride = quant::activation_bytes(fmt, hidden);
  std::vector<uint8_t> acts(stride * tokens);
  const std::vector<float> x = random_hidden(tokens, hidden);
  for (int t = 0; t < tokens; ++t) quant::quantize_activations(fmt, x.data() + t * hidden, hidden, acts.data() + t * stride);
  const KernelSet ks = kernels_for(type, limit);
  const TileKernel kernel =
      tiled ? llamacpp_kernel(quant::LlamaCppPath::tiled_kquant, type, limit) : q8 ? ks.q8 : ks.f32;
  std::vector<float> out(size_t(rows) * tokens);
  void* scratch = std::aligned_alloc(64, (kernel_scratch_bytes(hidden) + 63) / 64 * 64);
  TokenActs token_acts{acts.data(), stride, tokens};
  for (auto _ : state) {
    kernel(HeadTile{weights.data(), rb, rows, hidden}, token_acts, RawOut{out.data(), size_t(rows)}, scratch);
    token_acts.scratch_prepared = true;
    benchmark::DoNotOptimize(out.data());
  }
  std::free(scratch);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(rb * rows));
  state.counters["ns_per_256_elements_and_token"] = benchmark::Counter(
      double(state.iterations()) * double(rows) * double(hidden / 256) * tokens,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(std::string(tensor_type_name(type)) + (tiled ? " tiled " : q8 ? " q8 " : " f32 ") +
                 isa_name(q8 ? ks.q8_isa : ks.f32_isa));
}
BENCHMARK(BM_Kernel)
    ->ArgsProduct({{int(TensorType::Q5_K)}, {1, 2, 4, 8, 16}, {0}, {int(Isa::avx2), int(Isa::avx512)}});
BENCHMARK(BM_Kernel)
    ->ArgsProduct({{int(TensorType::Q4_K), int(TensorType::Q6_K), int(TensorType::Q8_0), int(TensorType::F16)},
                   {1, 4, 16},
                   {0},
                   {int(Isa::avx2)}});
BENCHMARK(BM_Kernel)->ArgsProduct({{int(TensorType::Q5_K)}, {1, 16}, {1}, {int(Isa::avx2)}});
BENCHMARK(BM_Kernel)->ArgsProduct(
    {{int(TensorType::Q4_K), int(TensorType::Q5_K), int(TensorType::Q6_K)}, {1, 4, 16}, {2}, {int(Isa::avx2)}});

}  // namespace
}  // namespace lmhead::cpu
