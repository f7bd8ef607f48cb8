#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common.hpp"

namespace lmhead::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string tokens = "1,2,4,8,16";
  int repeat = 0;  // 0: as many as fit in about a second, at least 5
  bool json = false;
  RouteArgs route;
  SampleArgs sample;
  bool verify = false;  // time Engine::verify of T - 1 drafts (all accepted) instead of run
  ModelArgs model_args;
  BackendOptions backend;
};

std::vector<int> parse_token_list(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int t = std::stoi(item, &used);
      if (used != item.size() || t < 1 || t > 4096) throw std::invalid_argument(item);
      out.push_back(t);
    } catch (const std::exception&) {
      throw Error("--tokens must be a comma-separated list of counts from 1 to 4096, got '" + item + "'");
    }
  }
  if (out.empty()) throw Error("--tokens is empty");
  return out;
}

int bench(const BenchArgs& a) {
  const std::vector<int> token_counts = parse_token_list(a.tokens);
  RunOptions route = a.route.options();
  route.sampling = a.sample.options();
  // Sampling and verification are timed next to the argmax-only call in the same run, so their
  // cost is a ratio of like with like.
  const bool compare = a.sample.active() || a.verify;
  auto model = Model::open(a.model, a.model_args.options());
  const HeadConfig& c = model->config();
  const EngineOptions eo = a.backend.engine_options();
  Engine engine(model, eo);
  const int threads = eo.threads > 0 ? eo.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  // The ceiling is measured here, in the same run, so the ratio compares like with like.
  double ceiling;
  std::string ceiling_what;
  if (eo.backend == BackendKind::cuda) {
    ceiling = measure_cuda_read_ceiling_gbps(uint64_t(4) << 30);
    ceiling_what = "device read-only stream of 4 GiB";
  } else {
    ceiling = measure_cpu_read_ceiling_gbps(uint64_t(1) << 30, threads);
    ceiling_what = "AVX2 read stream of 1 GiB, " + std::to_string(threads) + " thread(s)";
  }

  nlohmann::json rows = nlohmann::json::array();
  if (!a.json)
    std::printf("bench %s: %s head %s x %s, %s B per pass, backend %s, input %s, activations %s, softcap %s, route %s, top-k %d%s; "
                "ceiling %.2f GB/s (%s)\n", a.model.c_str(),
                std::string(tensor_type_name(c.head_type)).c_str(), with_commas(c.vocab).c_str(),
                with_commas(c.hidden).c_str(), with_commas(c.head_bytes).c_str(), engine.backend_name().c_str(),
                a.route.input.c_str(), a.route.activations.c_str(), a.route.softcap.c_str(), a.route.route.c_str(), a.route.top_k,
                a.route.logprobs ? ", logprobs" : "", ceiling, ceiling_what.c_str());
  // Several GPUs: the one-GPU engine runs in the same process and run, so the ratio compares like
  // with like (same clocks, same inputs).
  std::unique_ptr<Engine> one_gpu;
  if (eo.backend == BackendKind::cuda && eo.gpus > 1 && eo.nccl_ranks <= 1) {
    EngineOptions single = eo;
    single.gpus = 1;
    single.shards = 0;
    one_gpu = std::make_unique<Engine>(model, single);
  }
  // The options as asked (`plain`: the argmax-only call of the same T instead).
  auto options_for = [&](bool plain) {
    RunOptions ro = route;
    ro.top_k = static_cast<int>(std::min<int64_t>(ro.top_k, c.vocab));
    if (plain) ro.sampling = {};
    return ro;
  };
  // The call as asked. Verification checks drafts the target accepts, so the whole verification runs.
  auto make_call = [&](Engine& e, const std::vector<float>& hidden, int T, RunResult& last, bool plain) {
    const RunOptions ro = options_for(plain);
    std::vector<int32_t> draft;
    if (a.verify && !plain) {
      const RunResult r = e.run(hidden, T, ro);
      for (int t = 0; t + 1 < T; ++t) draft.push_back(r.choices[size_t(t)].sampled);
    }
    return [&e, &hidden, T, &last, ro, draft, verifying = a.verify && !plain]() {
      if (verifying) last = e.verify(hidden, draft, ro).run;
      else last = e.run(hidden, T, ro);
    };
  };
  // Times the call and, given `plain_ms`, the argmax-only call interleaved round by round in ABBA
  // order, so the machine's drift (a VM's neighbours, clocks) lands on both alike and their ratio
  // compares like with like. Returns the call's sorted times; the argmax-only call's go to
  // `plain_ms`, the median of each round's ratio of the two to `paired_ratio`.
  auto time_runs = [&](Engine& e, const std::vector<float>& hidden, int T, RunResult& last,
                       std::vector<double>* plain_ms = nullptr, double* paired_ratio = nullptr) {
    const bool with_plain = plain_ms != nullptr;
    RunResult plain_last;
    std::vector<std::function<void()>> calls = {make_call(e, hidden, T, last, false)};
    if (with_plain) calls.push_back(make_call(e, hidden, T, plain_last, true));
    for (auto& call : calls) call();  // warm-up: pages in the mapping, fills caches
    std::vector<std::vector<double>> ms(calls.size());
    const auto bench_start = std::chrono::steady_clock::now();
    for (size_t round = 0;; ++round) {
      for (size_t j = 0; j < calls.size(); ++j) {
        const size_t k = round % 2 == 0 ? j : calls.size() - 1 - j;
        const auto t0 = std::chrono::steady_clock::now();
        calls[k]();
        ms[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      const size_t runs = ms[0].size();
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - bench_start).count();
      if (a.repeat > 0 ? int(runs) >= a.repeat : (runs >= 5 && elapsed > 1.0) || runs >= 1000) break;
    }
    if (with_plain && paired_ratio != nullptr) {
      // Each round's two calls ran next to each other: the median of their ratios also cancels
      // drift slower than a round, where the ratio of the medians only cancels it on average.
      std::vector<double> ratios;
      for (size_t r = 0; r < ms[0].size(); ++r) ratios.push_back(ms[0][r] / ms[1][r]);
      std::sort(ratios.begin(), ratios.end());
      *paired_ratio = ratios[ratios.size() / 2];
    }
    for (auto& v : ms) std::sort(v.begin(), v.end());
    if (with_plain) *plain_ms = ms[1];
    // The timed calls run without per-stage timing (on the GPU its event nodes cost a few
    // microseconds and stop the head kernel from starting under the prep); one more call reports
    // the stage split.
    RunOptions profiled = options_for(false);
    profiled.stage_times = true;
    last = e.run(hidden, T, profiled);
    return ms[0];
  };
  for (int T : token_counts) {
    const std::vector<float> hidden = synthetic_hidden_states(T, c.hidden, 1234 + T);
    RunResult last;
    std::vector<double> plain_ms;
    double paired = 0;
    const std::vector<double> ms = time_runs(engine, hidden, T, last, compare ? &plain_ms : nullptr, &paired);
    const double median = ms[ms.size() / 2], lo = ms.front(), hi = ms.back();
    const double plain_median = compare ? plain_ms[plain_ms.size() / 2] : 0.0;
    const double gbps = double(c.head_bytes) / (median * 1e-3) / 1e9;
    const double ratio = gbps / ceiling;
    nlohmann::json stages = nlohmann::json::object();
    for (const StageTime& s : last.times) stages[s.label] = s.ms;
    rows.push_back({{"tokens", T}, {"threads", threads}, {"input", a.route.input}, {"activations", a.route.activations},
                    {"softcap", a.route.softcap}, {"route", a.route.route}, {"llamacpp_path", last.llamacpp_path},
                    {"llamacpp_reproduced", last.reproduces_llamacpp}, {"top_k", a.route.top_k}, {"logprobs", a.route.logprobs}, {"backend", engine.backend_name()}, {"median_ms", median},
                    {"min_ms", lo}, {"max_ms", hi}, {"runs", ms.size()}, {"bytes", c.head_bytes}, {"gbps", gbps},
                    {"ceiling_gbps", ceiling}, {"ratio", ratio}, {"stages_ms", stages},
                    {"device_bytes", engine.device_bytes()}});
    if (compare) {
      rows.back()["sampling"] = {{"temperature", route.sampling.temperature}, {"top_k", route.sampling.top_k},
                                 {"top_p", route.sampling.top_p}, {"min_p", route.sampling.min_p},
                                 {"verify", a.verify}};
      rows.back()["argmax_only_median_ms"] = plain_median;
      rows.back()["cost_vs_argmax_only"] = median / plain_median;
      rows.back()["cost_vs_argmax_only_paired"] = paired;
    }
    double one_median = 0, exchange_ms = 0;
    if (one_gpu) {
      RunResult one_last;
      const std::vector<double> one_ms = time_runs(*one_gpu, hidden, T, one_last);
      one_median = one_ms[one_ms.size() / 2];
      for (const StageTime& s : last.times)
        if (s.label.rfind("exchange", 0) == 0) exchange_ms += s.ms;
      if (one_last.choices.size() != last.choices.size() || one_last.choices[0].argmax != last.choices[0].argmax)
        throw Error("bench: the " + std::to_string(eo.gpus) + "-GPU and one-GPU engines chose different tokens");
      rows.back()["one_gpu_median_ms"] = one_median;
      rows.back()["ratio_to_one_gpu"] = median / one_median;
      rows.back()["exchange_ms"] = exchange_ms;
      rows.back()["exchange_share"] = exchange_ms / median;
    }
    if (!a.json) {
      std::printf("ratio %.3f | T=%-2d threads=%d | median %8.3f ms (min %.3f, max %.3f, %zu runs) | %s B | %7.2f GB/s | ceiling %.2f GB/s\n",
                  ratio, T, threads, median, lo, hi, ms.size(), with_commas(c.head_bytes).c_str(), gbps, ceiling);
      if (compare)
        std::printf("          %s: %.3f ms vs argmax-only %.3f ms, interleaved in the same run: x%.4f (median of the "
                    "rounds' ratios x%.4f)\n",
                    a.verify ? "verification of T-1 drafts" : "sampling", median, plain_median, median / plain_median, paired);
      if (engine.device_bytes() > 0)
        std::printf("          head bytes held on the GPU: %s\n", with_commas(engine.device_bytes()).c_str());
      std::printf("          stages (one profiled run):");
      for (const StageTime& s : last.times) std::printf("  %s %.3f ms", s.label.c_str(), s.ms);
      std::printf("\n");
      if (one_gpu)
        std::printf("gpus %d | T=%-2d | %d GPUs %8.3f ms | 1 GPU %8.3f ms | ratio to 1 GPU %.3f | exchange %.4f ms "
                    "(%.1f %% of the %d-GPU time)\n",
                    eo.gpus, T, eo.gpus, median, one_median, median / one_median, exchange_ms,
                    100.0 * exchange_ms / median, eo.gpus);
    }
  }
  if (a.json) std::printf("%s\n", nlohmann::json{{"model", a.model}, {"ceiling_gbps", ceiling},
                                                 {"ceiling", ceiling_what}, {"results", rows}}.dump(2).c_str());
  return 0;
}

}  // namespace

Action register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Time the whole tail per token count against a read ceiling measured in the same run");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("MODEL", a->model, "GGUF checkpoint")->required();
  cmd->add_option("--tokens", a->tokens, "comma-separated token counts")->capture_default_str();
  cmd->add_option("--repeat", a->repeat, "timed runs per count (0: about one second, at least 5)")->check(CLI::Range(0, 100000));
  cmd->add_flag("--json", a->json, "print one JSON object");
  add_route_options(*cmd, a->route);
  add_sample_options(*cmd, a->sample);
  cmd->add_flag("--verify", a->verify, "time speculative verification of T - 1 drafts (all accepted) against the plain call");
  add_model_options(*cmd, a->model_args);
  add_backend_options(*cmd, a->backend);
  return [a]() { return bench(*a); };
}

}  // namespace lmhead::cli
