// A checkpoint's head: the mapped GGUF file, the head's configuration from metadata
// (numerics.md §2) and zero-copy views of its tensors.
#include <cmath>
#include <cstring>
#include <string>

#include "gguf/gguf.hpp"
#include "lmhead/lmhead.hpp"

namespace lmhead {

struct Model::Impl {
  std::string path;
  std::unique_ptr<gguf::File> file;
  HeadConfig config;
  const uint8_t* head = nullptr;
  std::vector<float> gamma;  // copied: hidden floats, so its alignment never depends on the file
  std::vector<std::string_view> tokens;
};

namespace {

const gguf::Value* find_arch_key(const gguf::File& f, const std::string& arch, const char* suffix,
                                 std::string& key) {
  key = arch + "." + suffix;
  return f.find(key);
}

float finite_metadata_float(const gguf::Value& v, const std::string& key) {
  const double d = v.as_number(key);
  if (!std::isfinite(d)) throw Error("metadata key '" + key + "' is not a finite number");
  return static_cast<float>(d);
}

void check_shape_key(const gguf::File& f, const std::string& arch, const char* suffix, int64_t actual,
                     const char* what) {
  std::string key;
  if (const gguf::Value* v = find_arch_key(f, arch, suffix, key)) {
    const uint64_t declared = v->as_u64(key);
    if (declared != static_cast<uint64_t>(actual))
      throw Error("metadata key '" + key + "' says " + std::to_string(declared) + " but the head's " +
                  what + " is " + std::to_string(actual));
  }
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = gguf::File::open(path);
  const gguf::File& f = *impl->file;
  HeadConfig& c = impl->config;

  const gguf::Value* arch = f.find("general.architecture");
  if (!arch) throw Error(path + ": metadata key 'general.architecture' is missing");
  c.architecture = std::string(arch->as_string("general.architecture"));

  const gguf::TensorInfo* head = f.find_tensor("output.weight");
  if (head) {
    c.head_tensor = "output.weight";
  } else {
    head = f.find_tensor("token_embd.weight");
    if (!head) throw Error(path + ": no head tensor: neither 'output.weight' nor 'token_embd.weight' is present");
    c.head_tensor = "token_embd.weight";
    c.tied = true;
  }
  if (head->dims[2] != 1 || head->dims[3] != 1)
    throw Error(path + ": head tensor '" + c.head_tensor + "' must be 2-D [hidden, vocab]");
  c.hidden = head->dims[0];
  c.vocab = head->dims[1];
  c.head_type = head->type;
  const TensorTypeInfo* info = tensor_type_info(head->type);
  if (!info || !info->head_supported)
    throw Error(path + ": head tensor '" + c.head_tensor + "' has type " +
                std::string(info ? info->name : "unknown") +
                ", which lmhead cannot run (supported: q4_K, q5_K, q6_K, q8_0, f16, bf16, f32)");
  if (c.vocab > INT32_MAX) throw Error(path + ": vocabulary of " + std::to_string(c.vocab) + " rows exceeds 2^31-1");
  c.row_bytes = static_cast<uint64_t>(c.hidden / info->block_elems * info->block_bytes);
  c.head_bytes = head->nbytes;
  impl->head = head->data;

  const gguf::TensorInfo* norm = f.find_tensor("output_norm.weight");
  if (!norm) throw Error(path + ": tensor 'output_norm.weight' (the final RMSNorm's gamma) is missing");
  if (norm->type != TensorType::F32)
    throw Error(path + ": tensor 'output_norm.weight' must be f32, found " + std::string(tensor_type_name(norm->type)));
  if (norm->elements() != c.hidden || norm->dims[0] != c.hidden)
    throw Error(path + ": tensor 'output_norm.weight' has " + std::to_string(norm->elements()) +
                " elements, the head's hidden size is " + std::to_string(c.hidden));
  impl->gamma.resize(c.hidden);
  std::memcpy(impl->gamma.data(), norm->data, c.hidden * sizeof(float));
  for (int64_t i = 0; i < c.hidden; ++i)
    if (!std::isfinite(impl->gamma[i]))
      throw Error(path + ": tensor 'output_norm.weight' holds a non-finite value (" + std::to_string(impl->gamma[i]) +
                  ") at index " + std::to_string(i));

  check_shape_key(f, c.architecture, "embedding_length", c.hidden, "hidden size");
  check_shape_key(f, c.architecture, "vocab_size", c.vocab, "vocabulary");

  std::string key;
  if (const gguf::Value* v = find_arch_key(f, c.architecture, "logit_scale", key)) {
    c.logit_scale = finite_metadata_float(*v, key);
  } else if (c.architecture == "muse-glimmer") {
    // Fail closed: a muse-glimmer head without its scale would produce plausible but wrong logits.
    throw Error(path + ": metadata key '" + key + "' is missing; a muse-glimmer checkpoint must state its logit scale");
  } else {
    c.logit_scale = 1.0f;
    c.logit_scale_is_default = true;
  }
  if (const gguf::Value* v = find_arch_key(f, c.architecture, "final_logit_softcapping", key)) {
    c.softcap = finite_metadata_float(*v, key);
    if (c.softcap < 0) throw Error(path + ": metadata key '" + key + "' is negative");
  } else {
    c.softcap = 30.0f;  // llama.cpp's default
    c.softcap_is_default = true;
  }
  if (const gguf::Value* v = find_arch_key(f, c.architecture, "attention.layer_norm_rms_epsilon", key)) {
    c.eps = finite_metadata_float(*v, key);
    if (c.eps < 0) throw Error(path + ": metadata key '" + key + "' is negative");
  } else {
    c.eps = 1e-5f;
    c.eps_is_default = true;
  }

  if (const gguf::Value* v = f.find("tokenizer.ggml.tokens")) {
    if (v->type != gguf::ValueType::array || v->array_type != gguf::ValueType::string)
      throw Error(path + ": metadata key 'tokenizer.ggml.tokens' must be an array of strings");
    impl->tokens = v->strings;  // ids past the table (padded vocabularies) show as ids only
  }
  return std::make_shared<const Model>(std::move(impl));
}

const HeadConfig& Model::config() const { return impl_->config; }
const std::string& Model::path() const { return impl_->path; }
const uint8_t* Model::head_weights() const { return impl_->head; }
const float* Model::norm_weight() const { return impl_->gamma.data(); }
bool Model::has_token_texts() const { return !impl_->tokens.empty(); }
std::string_view Model::token_text(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(impl_->tokens.size())) return {};
  return impl_->tokens[id];
}

ByteBill byte_bill(const HeadConfig& c) {
  ByteBill b;
  const uint64_t logits = static_cast<uint64_t>(c.vocab) * sizeof(float);
  b.weights = c.head_bytes;
  b.normed = static_cast<uint64_t>(c.hidden) * sizeof(float);
  b.logits = logits;
  b.softcap_nodes = 4 * 2 * logits;  // four nodes, each reads and writes every logit
  b.softcap_one_pass = 2 * logits;
  b.argmax = logits;
  return b;
}

}  // namespace lmhead
