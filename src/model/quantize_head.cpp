// lmhead/quantize.hpp: a tensor, or a checkpoint's head, through llama.cpp's reference quantizers
// (numerics.md §3b, src/quant/quantize.cpp). In the model layer because it knows both the GGUF file
// and which tensor is a checkpoint's head.
#include "lmhead/quantize.hpp"

#include <cstring>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "gguf/gguf.hpp"
#include "lmhead/lmhead.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"

namespace lmhead {
namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::vector<int64_t> dims_of(const gguf::TensorInfo& t) {
  return std::vector<int64_t>(t.dims, t.dims + std::max<uint32_t>(t.n_dims, 1));
}

}  // namespace

struct Quantizer::Impl {
  QuantizeInfo info;
  std::unique_ptr<gguf::File> file;  // the source tensors the writer's fills read
  gguf::Writer writer;
};

Quantizer::Quantizer(const std::string& src_spec, const QuantizeOptions& options) : impl_(std::make_unique<Impl>()) {
  const TensorType to = options.type;
  const TensorTypeInfo* to_info = tensor_type_info(to);
  if (to_info == nullptr || !to_info->head_supported)
    throw Error(std::string(tensor_type_name(to)) + ": lmhead has no reference quantizer for it (q4_K, q5_K, q6_K, q8_0, f16, bf16, f32)");

  // FILE.gguf:TENSOR names one tensor; a bare checkpoint means its head, copied with everything else.
  std::string path = src_spec, tensor_name;
  const size_t colon = src_spec.rfind(':');
  if (colon != std::string::npos && ends_with(std::string_view(src_spec).substr(0, colon), ".gguf")) {
    path = src_spec.substr(0, colon);
    tensor_name = src_spec.substr(colon + 1);
    if (tensor_name.empty()) throw Error("SRC '" + src_spec + "': empty tensor name after ':' (FILE.gguf:TENSOR)");
  }
  const bool whole_checkpoint = tensor_name.empty();
  if (whole_checkpoint) tensor_name = Model::open(path)->config().head_tensor;
  impl_->file = gguf::File::open(path);
  const gguf::File& file = *impl_->file;
  const gguf::TensorInfo* src = file.find_tensor(tensor_name);
  if (src == nullptr) throw Error("SRC '" + src_spec + "': no tensor named '" + tensor_name + "' in " + path);
  const TensorTypeInfo* from_info = tensor_type_info(src->type);
  const bool float_source = src->type == TensorType::F32 || src->type == TensorType::F16 || src->type == TensorType::BF16;
  if (!float_source && !(options.allow_requantize && from_info && from_info->head_supported))
    throw Error("tensor '" + tensor_name + "' is " + std::string(tensor_type_name(src->type)) +
                (from_info && from_info->head_supported
                     ? ": quantizing already quantized weights compounds the error; pass --allow-requantize to do it anyway"
                     : ": lmhead quantizes from F32, F16 or BF16 (or a head type with --allow-requantize)"));
  const int64_t cols = src->dims[0], rows = src->elements() / cols;
  if (cols % to_info->block_elems != 0)
    throw Error("tensor '" + tensor_name + "' rows hold " + std::to_string(cols) + " values, not a whole number of " +
                std::string(to_info->name) + " blocks of " + std::to_string(to_info->block_elems));
  const uint64_t dst_row_bytes = uint64_t(cols / to_info->block_elems * to_info->block_bytes);
  const int threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  // The writer asks for whole rows in chunks; the chunk's rows are split over the threads.
  auto fill_quantized = [to, cols, dst_row_bytes, threads, src](uint8_t* dst, uint64_t offset, uint64_t nbytes) {
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

  gguf::Writer& w = impl_->writer;
  if (whole_checkpoint) {
    for (const gguf::KeyValue& kv : file.metadata()) w.add_value(std::string(kv.key), kv.value);
    for (const gguf::TensorInfo& t : file.tensors()) {
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

  impl_->info = {.tensor = tensor_name, .whole_checkpoint = whole_checkpoint, .from = src->type, .to = to,
                 .rows = rows, .cols = cols, .bytes_before = src->nbytes, .bytes_after = dst_row_bytes * uint64_t(rows),
                 .row_bytes = dst_row_bytes, .threads = threads};
}

Quantizer::~Quantizer() = default;

const QuantizeInfo& Quantizer::info() const { return impl_->info; }

void Quantizer::write(const std::string& dst, const std::function<void(uint64_t done, uint64_t total)>& progress) const {
  impl_->writer.write(dst, progress);
}

}  // namespace lmhead
