// The host sampler alone, per token, on the capped logits of a real head (issue 16): one thread
// against the engine's way of spreading it over a pool.
//
//   LMHEAD_SAMPLE_MODEL=/tmp/muse.gguf lmhead_microbench --benchmark_filter='Sample/'
//   LMHEAD_SAMPLE_MODEL=/tmp/muse.gguf lmhead_microbench --benchmark_filter='SampledCall'
//
// Arguments: config (0: temperature 1, 1: temperature 1 + top-p 0.9, 2: + top-k 40), threads
// (1: sample_token on the calling thread), T (tokens per sample_tokens call). Times are per token.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cpu/thread_pool.hpp"
#include "lmhead/lmhead.hpp"
#include "lmhead/synthetic.hpp"
#include "sample/sampler.hpp"

namespace lmhead {
namespace {

constexpr int kRows = 8;

struct Rows {
  int64_t vocab = 0;
  std::vector<float> logits;  // kRows x vocab
};

const Rows* rows() {
  static const std::unique_ptr<Rows> r = [] {
    const char* path = std::getenv("LMHEAD_SAMPLE_MODEL");
    if (path == nullptr) return std::unique_ptr<Rows>();
    auto model = Model::open(path);
    Engine engine(model, {.backend = BackendKind::cpu});
    RunOptions o;
    o.want_logits = true;
    const RunResult run = engine.run(synthetic_hidden_states(kRows, model->config().hidden, 7), kRows, o);
    auto out = std::make_unique<Rows>();
    out->vocab = model->config().vocab;
    out->logits = run.logits;
    return out;
  }();
  return r.get();
}

void BM_Sample(benchmark::State& state) {
  const Rows* r = rows();
  if (r == nullptr) {
    state.SkipWithError("set LMHEAD_SAMPLE_MODEL to a model file (lmhead make /tmp/muse.gguf)");
    return;
  }
  SamplingOptions o;
  o.temperature = 1.0f;
  if (state.range(0) >= 1) o.top_p = 0.9f;
  if (state.range(0) >= 2) o.top_k = 40;
  const int threads = int(state.range(1));
  const int T = int(state.range(2));
  cpu::ThreadPool pool(threads);
  sample::Workers workers{pool.size(), [&](const std::function<void(int)>& task) { pool.run(task); }};
  std::vector<int32_t> out(static_cast<size_t>(T), -1);
  int64_t position = 0;
  for (auto _ : state) {
    const int first = int(position % (kRows - T + 1));
    sample::sample_tokens(r->logits.data() + size_t(first) * size_t(r->vocab), r->vocab, T, o, first, out.data(),
                          threads > 1 ? &workers : nullptr);
    benchmark::DoNotOptimize(out.data());
    ++position;
  }
  state.SetItemsProcessed(state.iterations() * T);
}
BENCHMARK(BM_Sample)
    ->Name("Sample")
    ->ArgNames({"config", "threads", "T"})
    ->ArgsProduct({{0, 1, 2}, {1, 2}, {1, 8}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Whole engine calls (2 threads, T tokens), the kinds interleaved call by call so that the VM's
// drift lands on all of them alike (lmhead bench times one kind after the other): argmax only,
// the same call returning the logits (what the backend pays for sampling on the host), temperature
// 1, temperature 1 + top-p 0.9. Counters: each kind's median ms and its ratio to argmax only.
void BM_SampledCall(benchmark::State& state) {
  const char* path = std::getenv("LMHEAD_SAMPLE_MODEL");
  if (path == nullptr) {
    state.SkipWithError("set LMHEAD_SAMPLE_MODEL to a model file (lmhead make /tmp/muse.gguf)");
    return;
  }
  const int T = int(state.range(0));
  auto model = Model::open(path);
  Engine engine(model, {.backend = BackendKind::cpu, .threads = 2});
  const std::vector<float> hidden = synthetic_hidden_states(T, model->config().hidden, 1234 + T);
  std::vector<RunOptions> kinds(4);
  kinds[1].want_logits = true;
  kinds[2].sampling.temperature = 1.0f;
  kinds[3].sampling.temperature = 1.0f;
  kinds[3].sampling.top_p = 0.9f;
  for (const RunOptions& o : kinds) engine.run(hidden, T, o);  // pages the mapping in
  std::vector<std::vector<double>> ms(kinds.size());
  size_t turn = 0;
  for (auto _ : state) {
    for (size_t j = 0; j < kinds.size(); ++j) {
      const size_t k = (turn + j) % kinds.size();  // rotating order: no kind always follows another
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(engine.run(hidden, T, kinds[k]));
      ms[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    ++turn;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double plain = median(ms[0]);
  const char* names[] = {"argmax", "logits", "temp", "topp"};
  for (size_t k = 0; k < kinds.size(); ++k) {
    state.counters[std::string(names[k]) + "_ms"] = median(ms[k]);
    if (k > 0) state.counters[std::string(names[k]) + "_x"] = median(ms[k]) / plain;
  }
}
BENCHMARK(BM_SampledCall)->Name("SampledCall")->ArgName("T")->Arg(1)->Arg(8)->Iterations(40)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lmhead
