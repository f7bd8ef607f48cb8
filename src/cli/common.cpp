#include "common.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

namespace lmhead::cli {

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total ? total : 1), tty_(isatty(STDERR_FILENO)) {}

void ProgressBar::update(uint64_t done) {
  const int percent = static_cast<int>(done * 100 / total_);
  if (percent == last_percent_) return;
  // Without a terminal, print every 10 % on its own line so logs stay readable.
  if (!tty_ && percent / 10 == last_percent_ / 10 && last_percent_ >= 0) return;
  last_percent_ = percent;
  const int width = 30, filled = percent * width / 100;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::fprintf(stderr, tty_ ? "\r%s [%s] %3d%% (%s / %s B)" : "%s [%s] %3d%% (%s / %s B)\n", label_.c_str(),
               bar.c_str(), percent, with_commas(done).c_str(), with_commas(total_).c_str());
  std::fflush(stderr);
}

void ProgressBar::finish() {
  update(total_);
  if (tty_) std::fprintf(stderr, "\n");
}

EngineOptions BackendOptions::engine_options() const {
  EngineOptions o;
  if (!parse(backend, o.backend)) throw Error("unknown backend '" + backend + "' (scalar, cpu, cuda)");
  o.threads = threads;
  o.gpus = gpus;
  o.shards = shards;
  o.nccl_rank = nccl_rank;
  o.nccl_ranks = nccl_ranks;
  o.nccl_id_file = nccl_id;
  o.cuda_second_layout = cuda_second_layout;
  return o;
}

ModelOptions ModelArgs::options() const {
  ModelOptions m;
  for (const std::string& text : override_kv) m.overrides.push_back(MetadataOverride::parse(text));
  return m;
}

void add_model_options(CLI::App& cmd, ModelArgs& o) {
  cmd.add_option("--override-kv", o.override_kv,
                 "KEY=TYPE:VALUE (llama.cpp's syntax; TYPE int, float, bool or str): replace a metadata value "
                 "before the architecture's rule reads it, e.g. granite.logit_scale=float:8 or "
                 "general.architecture=str:llama; may be repeated")
      ->allow_extra_args(false);  // one KEY=TYPE:VALUE per occurrence, so a MODEL after it stays positional
}

RunOptions RouteArgs::options() const {
  RunOptions r;
  if (!parse(input, r.input)) throw Error("unknown --input '" + input + "' (hidden or normed)");
  if (!parse(activations, r.activations)) throw Error("unknown --activations '" + activations + "'");
  if (!parse(softcap, r.softcap)) throw Error("unknown --softcap '" + softcap + "'");
  if (!parse(route, r.route)) throw Error("unknown --route '" + route + "' (vec_dot or llamacpp)");
  r.top_k = top_k;
  r.logprobs = logprobs;
  return r;
}

void add_route_options(CLI::App& cmd, RouteArgs& o) {
  cmd.add_option("--input", o.input,
                 "hidden (the last layer's output: the final norm runs first) or normed (already through the "
                 "final norm, e.g. HF's hidden_states[-1] or llama.cpp's embeddings: the norm is skipped)")
      ->check(CLI::IsMember({"hidden", "normed"}))->capture_default_str();
  cmd.add_option("--activations", o.activations, "q8 (llama.cpp's CPU route, byte-exact) or f32")
      ->check(CLI::IsMember({"q8", "f32"}))->capture_default_str();
  cmd.add_option("--softcap", o.softcap, "nodes (llama.cpp's graph, byte-exact) or fused (one formula)")
      ->check(CLI::IsMember({"nodes", "fused"}))->capture_default_str();
  cmd.add_option("--route", o.route,
                 "vec_dot (ggml's vec_dot order at every T, batch-invariant), llamacpp (what llama.cpp's x86 CPU "
                 "backend computes for this head type and token count: tiled, repacked, sgemm paths) or tiled "
                 "(llama.cpp's tiled K-quant order at every T for Q4_K/Q5_K/Q6_K heads, batch-invariant; the fast "
                 "route on the GPU from 2 tokens)")
      ->check(CLI::IsMember({"vec_dot", "llamacpp", "tiled"}))->capture_default_str();
  cmd.add_option("--top-k", o.top_k, "candidates per token (0: argmax only)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  cmd.add_flag("--logprobs", o.logprobs, "log_softmax of the argmax and the top-k");
}

bool SampleArgs::active() const {
  return temperature != 0 || top_p != 1 || min_p != 0 || top_k != 0 || !logit_bias.empty() || !allowed_mask.empty();
}

SamplingOptions SampleArgs::options() const {
  SamplingOptions s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.seed = seed;
  s.position = position;
  size_t start = 0;
  while (start < logit_bias.size()) {
    size_t end = logit_bias.find(',', start);
    if (end == std::string::npos) end = logit_bias.size();
    const std::string item = logit_bias.substr(start, end - start);
    const size_t eq = item.find('=');
    try {
      if (eq == std::string::npos) throw std::invalid_argument(item);
      size_t used_id = 0, used_value = 0;
      const long long id = std::stoll(item.substr(0, eq), &used_id);
      const float value = std::stof(item.substr(eq + 1), &used_value);
      if (used_id != eq || used_value != item.size() - eq - 1 || id < INT32_MIN || id > INT32_MAX)
        throw std::invalid_argument(item);
      s.logit_bias.emplace_back(int32_t(id), value);
    } catch (const std::exception&) {
      throw Error("--logit-bias takes ID=VALUE,... (e.g. 13=-100,42=2.5), got '" + item + "'");
    }
    start = end + 1;
  }
  if (!allowed_mask.empty()) {
    FILE* f = std::fopen(allowed_mask.c_str(), "rb");
    if (f == nullptr) throw Error("cannot open the allowed-token mask '" + allowed_mask + "': " + std::strerror(errno));
    std::vector<uint8_t> bytes;
    uint8_t buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
    std::fclose(f);
    if (bytes.size() % 4 != 0)
      throw Error("allowed-token mask '" + allowed_mask + "' has " + std::to_string(bytes.size()) +
                  " bytes, not a whole number of little-endian 32-bit words");
    s.allowed.resize(bytes.size() / 4);
    for (size_t i = 0; i < s.allowed.size(); ++i)
      s.allowed[i] = uint32_t(bytes[4 * i]) | uint32_t(bytes[4 * i + 1]) << 8 | uint32_t(bytes[4 * i + 2]) << 16 |
                     uint32_t(bytes[4 * i + 3]) << 24;
  }
  return s;
}

void add_sample_options(CLI::App& cmd, SampleArgs& o) {
  cmd.add_option("--temperature", o.temperature, "sampling temperature (0: greedy; numerics.md §9)")->capture_default_str();
  cmd.add_option("--sample-top-k", o.top_k, "sample among the k most likely ids (0: off; not the reported --top-k)");
  cmd.add_option("--top-p", o.top_p, "sample among the most likely ids until their mass reaches P, in (0, 1]");
  cmd.add_option("--min-p", o.min_p, "sample among ids with p >= MIN_P * p_max, in [0, 1]");
  cmd.add_option("--logit-bias", o.logit_bias, "ID=VALUE,...: added to those ids' capped logits before sampling");
  cmd.add_option("--allowed-mask", o.allowed_mask,
                 "FILE: allowed ids as a bitmask of little-endian 32-bit words, bit (id % 32) of word id / 32 "
                 "(a grammar engine's int32 bitmask written raw, e.g. numpy's tofile); ceil(V/32) words for "
                 "every token or T x that");
  cmd.add_option("--seed", o.seed, "random stream key (the draw depends only on seed and position)");
  cmd.add_option("--position", o.position, "the first token's position (token t draws at P + t)");
}

std::vector<PathRange> llamacpp_path_ranges(const HeadConfig& c) {
  constexpr int kLastChange = 9;  // every switch in llama.cpp 0c1e570 is at T <= 8
  std::vector<PathRange> out;
  for (int t = 1; t <= kLastChange; ++t) {
    std::string why;
    const std::string p = llamacpp_path(c, t, &why);
    if (!out.empty() && out.back().path == p) continue;
    if (!out.empty()) out.back().last = t - 1;
    out.push_back({t, 0, p, why});
  }
  return out;
}

void add_backend_options(CLI::App& cmd, BackendOptions& o) {
  cmd.add_option("--backend", o.backend, "scalar (reference), cpu (fastest CPU kernels) or cuda")
      ->check(CLI::IsMember({"scalar", "cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--threads", o.threads, "CPU threads (0: all hardware threads)")->check(CLI::Range(0, 1024));
  cmd.add_option("--gpus", o.gpus, "GPUs for the cuda backend")->check(CLI::Range(1, 64))->capture_default_str();
  cmd.add_option("--shards", o.shards,
                 "split the vocabulary into N shards, each its own backend instance, merged by exchanging "
                 "per-token summaries (0: automatic); same bytes for any N")->check(CLI::Range(0, 64));
  cmd.add_option("--nccl-rank", o.nccl_rank, "one process per GPU: this process's rank (0 .. --nccl-ranks - 1)")
      ->check(CLI::Range(0, 4095));
  cmd.add_option("--nccl-ranks", o.nccl_ranks, "one process per GPU: how many ranks (processes) share the head")
      ->check(CLI::Range(0, 4096));
  cmd.add_option("--nccl-id", o.nccl_id, "one process per GPU: FILE where rank 0 writes NCCL's unique id (fresh per launch)");
  cmd.add_flag("--cuda-second-layout", o.cuda_second_layout,
               "cuda, Q5_K: hold a second copy of the head on each GPU for faster 1- and 2-token calls");
}

void make_checkpoint(const std::string& path, const MakeOptions& o) {
  SyntheticCheckpoint c = o.head;
  if (!parse_tensor_type(o.type, c.type)) throw Error("unknown head type '" + o.type + "'");
  std::optional<ProgressBar> bar;
  write_synthetic_checkpoint(path, c, [&](uint64_t done, uint64_t total) {
    if (o.quiet) return;
    if (!bar) bar.emplace("writing " + path, total);
    bar->update(done);
  });
  if (bar) bar->finish();
}

void print_byte_bill(const HeadConfig& c, uint64_t file_bytes) {
  const ByteBill b = byte_bill(c);
  std::printf("byte bill per token (numerics.md §10):\n");
  std::printf("  %-38s %16s B\n", "head weights read", with_commas(b.weights).c_str());
  std::printf("  %-38s %16s B\n", "normed activations read", with_commas(b.normed).c_str());
  if (b.head_bias) std::printf("  %-38s %16s B\n", "head bias read", with_commas(b.head_bias).c_str());
  std::printf("  %-38s %16s B\n", "logits written", with_commas(b.logits).c_str());
  std::printf("  %-38s %16s B\n", "four-node soft cap, 4 x (read+write)", with_commas(b.softcap_nodes).c_str());
  std::printf("  %-38s %16s B\n", "one-pass soft cap", with_commas(b.softcap_one_pass).c_str());
  std::printf("  %-38s %16s B (0 when fused)\n", "argmax reading capped logits", with_commas(b.argmax).c_str());
  std::printf("what each backend moves per token (argmax only):\n");
  for (BackendKind k : {BackendKind::scalar, BackendKind::cpu, BackendKind::cuda}) {
    const ByteBill m = byte_bill(c, k, SoftcapRoute::nodes);
    std::printf("  %-44s %10s B (%.2f %% of it the head's weights)\n",
                (std::string(to_string(k)) + (m.cap_passes ? ": stage by stage, node cap" : m.logits_stored
                                                  ? ": fused epilogue, logits stored once" : ": fused epilogue"))
                    .c_str(),
                with_commas(m.moved).c_str(), 100.0 * double(m.weights) / double(m.moved));
  }
  std::printf("derived:\n");
  std::printf("  %-38s %16.4f\n", "bits per weight", b.bits_per_weight);
  if (file_bytes > 0)
    std::printf("  %-38s %15.2f %%\n", "head's share of the file", 100.0 * double(b.weights) / double(file_bytes));
  if (b.q4_k_weights > 0 && c.head_type != TensorType::Q4_K)
    std::printf("  %-38s %16s B (%+.1f %% of the head's reads)\n", "the same head as Q4_K would read",
                with_commas(b.q4_k_weights).c_str(), 100.0 * (double(b.q4_k_weights) - double(b.weights)) / double(b.weights));
}

void print_stage_times(const std::vector<StageTime>& times, bool table) {
  double total = 0;
  for (const StageTime& s : times) total += s.ms;
  if (!table) {
    std::printf("time:");
    for (const StageTime& s : times) std::printf("  %s %.3f ms", s.label.c_str(), s.ms);
    std::printf("  (total %.3f ms)\n", total);
    return;
  }
  std::printf("stage times:\n");
  for (const StageTime& s : times)
    std::printf("  %-40s %10.3f ms  %5.1f %%\n", s.label.c_str(), s.ms, total > 0 ? 100.0 * s.ms / total : 0.0);
  std::printf("  %-40s %10.3f ms\n", "total", total);
}

}  // namespace lmhead::cli
