// `lmhead quantize SRC DST --type TYPE`: one tensor (or a checkpoint's head) through llama.cpp's
// reference quantizers (numerics.md §3b, src/quant/quantize.cpp), streamed row chunk by row chunk
// so a multi-GB f32 head never sits in memory twice.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <mutex>
#include <thread>

#include "cli/common.hpp"
#include "gguf/gguf.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"

namespace lmhead::cli {
namespace {

struct QuantizeArgs {
  std::string src, dst, type;
  int threads = 0;
  bool allow_requantize = false, quiet = false, json = false;
};

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::vector<int64_t> dims_of(const gguf::TensorInfo& t) {
  return std::vector<int64_t>(t.dims, t.dims + std::max<uint32_t>(t.n_dims, 1));
}

int run_quantize(const QuantizeArgs& a) {
  TensorType to;
  if (!parse_tensor_type(a.type, to)) throw Error("unknown --type '" + a.type + "' (q4_K, q5_K, q6_K, q8_0, f16, bf16, f32)");
  const TensorTypeInfo* to_info = tensor_type_info(to);
  if (!to_info->head_supported)
    throw Error("--type " + a.type + ": lmhead has no reference quantizer for it (q4_K, q5_K, q6_K, q8_0, f16, bf16, f32)");

  // FILE.gguf:TENSOR names one tensor; a bare checkpoint means its head, copied with everything else.
  std::string path = a.src, tensor_name;
  const size_t colon = a.src.rfind(':');
  if (colon != std::string::npos && ends_with(std::string_view(a.src).substr(0, colon), ".gguf")) {
    path = a.src.substr(0, colon);
    tensor_name = a.src.substr(colon + 1);
    if (tensor_name.empty()) throw Error("SRC '" + a.src + "': empty tensor name after ':' (FILE.gguf:TENSOR)");
  }
  const bool whole_checkpoint = tensor_name.empty();
  if (whole_checkpoint) tensor_name = Model::open(path)->config().head_tensor;
  auto file = gguf::File::open(path);
  const gguf::TensorInfo* src = file->find_tensor(tensor_name);
  if (src == nullptr) throw Error("SRC '" + a.src + "': no tensor named '" + tensor_name + "' in " + path);
  const TensorTypeInfo* from_info = tensor_type_info(src->type);
  const bool float_source = src->type == TensorType::F32 || src->type == TensorType::F16 || src->type == TensorType::BF16;
  if (!float_source && !(a.allow_requantize && from_info && from_info->head_supported))
    throw Error("tensor '" + tensor_name + "' is " + std::string(tensor_type_name(src->type)) +
                (from_info && from_info->head_supported
                     ? ": quantizing already quantized weights compounds the error; pass --allow-requantize to do it anyway"
                     : ": lmhead quantizes from F32, F16 or BF16 (or a head type with --allow-requantize)"));
  const int64_t cols = src->dims[0], rows = src->elements() / cols;
  if (cols % to_info->block_elems != 0)
    throw Error("tensor '" + tensor_name + "' rows hold " + std::to_string(cols) + " values, not a whole number of " +
                std::string(to_info->name) + " blocks of " + std::to_string(to_info->block_elems));
  const uint64_t dst_row_bytes = uint64_t(cols / to_info->block_elems * to_info->block_bytes);
  const int threads = a.threads > 0 ? a.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  // The writer asks for whole rows in chunks; the chunk's rows are split over the threads.
  auto fill_quantized = [&, src](uint8_t* dst, uint64_t offset, uint64_t nbytes) {
    const int64_t first = int64_t(offset / dst_row_bytes), count = int64_t(nbytes / dst_row_bytes);
    auto work = [&](int k) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = first + k; r < first + count; r += threads) {
        quant::dequantize_row(src->type, src->data + uint64_t(r) * src->row_bytes, row.data(), cols);
        quant::quantize_row(to, row.data(), dst + uint64_t(r - first) * dst_row_bytes, cols);
      }
    };
    std::vector<std::thread> pool;
    std::exception_ptr failure;
    std::mutex m;
    for (int k = 0; k < threads; ++k)
      pool.emplace_back([&, k] {
        try { work(k); } catch (...) { std::lock_guard<std::mutex> lock(m); if (!failure) failure = std::current_exception(); }
      });
    for (auto& th : pool) th.join();
    if (failure) std::rethrow_exception(failure);
  };

  gguf::Writer w;
  if (whole_checkpoint) {
    for (const gguf::KeyValue& kv : file->metadata()) w.add_value(std::string(kv.key), kv.value);
    for (const gguf::TensorInfo& t : file->tensors()) {
      if (t.name == tensor_name) {
        w.add_tensor(std::string(t.name), to, dims_of(t), fill_quantized);
        continue;
      }
      const uint8_t* data = t.data;
      w.add_tensor(std::string(t.name), t.type, dims_of(t),
                   [data](uint8_t* dst, uint64_t offset, uint64_t nbytes) { std::memcpy(dst, data + offset, nbytes); });
    }
  } else {
    w.add_tensor(tensor_name, to, dims_of(*src), fill_quantized);
  }

  const auto start = std::chrono::steady_clock::now();
  std::optional<ProgressBar> bar;
  w.write(a.dst, [&](uint64_t done, uint64_t total) {
    if (a.quiet) return;
    if (!bar) bar.emplace("quantizing " + tensor_name + " to " + std::string(to_info->name), total);
    bar->update(done);
  });
  if (bar) bar->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const uint64_t bytes_after = dst_row_bytes * uint64_t(rows);
  if (a.json) {
    nlohmann::json j = {{"src", a.src}, {"dst", a.dst}, {"tensor", tensor_name},
                        {"whole_checkpoint", whole_checkpoint}, {"from_type", std::string(tensor_type_name(src->type))},
                        {"to_type", std::string(to_info->name)}, {"rows", rows}, {"cols", cols},
                        {"bytes_before", src->nbytes}, {"bytes_after", bytes_after}, {"row_bytes", dst_row_bytes},
                        {"threads", threads}, {"seconds", seconds}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %s [%lld x %lld] %s -> %s, %s B -> %s B (%s B per row), %.1f s\n", a.dst.c_str(),
                tensor_name.c_str(), static_cast<long long>(rows), static_cast<long long>(cols),
                std::string(tensor_type_name(src->type)).c_str(), std::string(to_info->name).c_str(),
                with_commas(src->nbytes).c_str(), with_commas(bytes_after).c_str(), with_commas(dst_row_bytes).c_str(), seconds);
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
