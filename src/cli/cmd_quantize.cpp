// `lmhead quantize SRC DST --type TYPE`: one tensor (or a checkpoint's head) through llama.cpp's
// reference quantizers (numerics.md §3b), streamed row chunk by row chunk so a multi-GB f32 head
// never sits in memory twice: a client of lmhead/quantize.hpp, with a progress bar and a report.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "common.hpp"
#include "lmhead/quantize.hpp"

namespace lmhead::cli {
namespace {

struct QuantizeArgs {
  std::string src, dst, type;
  int threads = 0;
  bool allow_requantize = false, quiet = false, json = false;
};

int run_quantize(const QuantizeArgs& a) {
  TensorType to;
  if (!parse_tensor_type(a.type, to)) throw Error("unknown --type '" + a.type + "' (q4_K, q5_K, q6_K, q8_0, f16, bf16, f32)");
  const TensorTypeInfo* to_info = tensor_type_info(to);
  if (!to_info->head_supported)
    throw Error("--type " + a.type + ": lmhead has no reference quantizer for it (q4_K, q5_K, q6_K, q8_0, f16, bf16, f32)");
  const Quantizer quantizer(a.src, {.type = to, .threads = a.threads, .allow_requantize = a.allow_requantize});
  const QuantizeInfo& q = quantizer.info();

  const auto start = std::chrono::steady_clock::now();
  std::optional<ProgressBar> bar;
  quantizer.write(a.dst, [&](uint64_t done, uint64_t total) {
    if (a.quiet) return;
    if (!bar) bar.emplace("quantizing " + q.tensor + " to " + std::string(to_info->name), total);
    bar->update(done);
  });
  if (bar) bar->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (a.json) {
    nlohmann::json j = {{"src", a.src}, {"dst", a.dst}, {"tensor", q.tensor},
                        {"whole_checkpoint", q.whole_checkpoint}, {"from_type", std::string(tensor_type_name(q.from))},
                        {"to_type", std::string(to_info->name)}, {"rows", q.rows}, {"cols", q.cols},
                        {"bytes_before", q.bytes_before}, {"bytes_after", q.bytes_after}, {"row_bytes", q.row_bytes},
                        {"threads", q.threads}, {"seconds", seconds}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %s [%lld x %lld] %s -> %s, %s B -> %s B (%s B per row), %.1f s\n", a.dst.c_str(),
                q.tensor.c_str(), static_cast<long long>(q.rows), static_cast<long long>(q.cols),
                std::string(tensor_type_name(q.from)).c_str(), std::string(to_info->name).c_str(),
                with_commas(q.bytes_before).c_str(), with_commas(q.bytes_after).c_str(), with_commas(q.row_bytes).c_str(), seconds);
  }
  return 0;
}

}  // namespace

Action register_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize",
                                 "Quantize a tensor (or a checkpoint's head) with llama.cpp's reference quantizers "
                                 "(no importance matrix): Q4_K, Q5_K, Q6_K, Q8_0 blocks byte-equal to ggml's");
  auto a = std::make_shared<QuantizeArgs>();
  cmd->add_option("SRC", a->src,
                  "FILE.gguf:TENSOR (F32, F16 or BF16): that tensor; or a checkpoint: its head, every other tensor "
                  "and all metadata copied as they are")->required();
  cmd->add_option("DST", a->dst,
                  "output .gguf: the tensor under the same name, or the checkpoint with its head requantized "
                  "(written under a temporary name, renamed when complete)")->required();
  cmd->add_option("--type", a->type, "q4_K, q5_K, q6_K, q8_0, f16, bf16 or f32")->required();
  cmd->add_option("--threads", a->threads, "threads (0: all hardware threads)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--allow-requantize", a->allow_requantize, "accept an already quantized source (dequantized first)");
  cmd->add_flag("--quiet", a->quiet, "no progress bar");
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a]() {
    try {
      return run_quantize(*a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lmhead quantize: error: %s\n", e.what());
      return 2;
    }
  };
}

}  // namespace lmhead::cli
