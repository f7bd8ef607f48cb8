// A checkpoint's head: the mapped GGUF file, the head's configuration from metadata
// (numerics.md §2) and zero-copy views of its tensors.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gguf/gguf.hpp"
#include "model/arch_rules.hpp"
#include "lmhead/lmhead.hpp"

namespace lmhead {

struct Model::Impl {
  std::string path;
  std::unique_ptr<gguf::File> file;
  HeadConfig config;
  const uint8_t* head = nullptr;
  std::vector<float> gamma;  // copied: hidden floats, so its alignment never depends on the file
  std::vector<float> beta;       // output_norm.bias (LayerNorm + bias), else empty
  std::vector<float> head_bias;  // output.bias, vocab floats, else empty
  std::vector<std::string_view> tokens;
};

namespace {

using model::Apply;
using model::ArchRule;

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string_view type_name(MetadataOverride::Type t) {
  switch (t) {
    case MetadataOverride::Type::int_value: return "int";
    case MetadataOverride::Type::float_value: return "float";
    case MetadataOverride::Type::bool_value: return "bool";
    case MetadataOverride::Type::str_value: return "str";
  }
  return "?";
}

// The checkpoint's metadata as the rule sees it: the file's key-values with the overrides on top.
class Metadata {
 public:
  Metadata(const gguf::File& f, const std::vector<MetadataOverride>& overrides) : f_(f), overrides_(overrides) {}

  const MetadataOverride* override_for(std::string_view key) const {
    const MetadataOverride* found = nullptr;  // the last one given wins, as in llama.cpp
    for (const MetadataOverride& o : overrides_)
      if (o.key == key) found = &o;
    return found;
  }

  // A float key (llama.cpp reads these as f32): false when absent. An override must be a float.
  bool number(const std::string& key, double& value, ValueSource& from) const {
    if (const MetadataOverride* o = override_for(key)) {
      if (o->type != MetadataOverride::Type::float_value)
        throw Error("override " + quoted(o->text()) + " has type " + std::string(type_name(o->type)) + ", but " +
                    quoted(key) + " is a float: use " + key + "=float:VALUE");
      value = o->f;
      from = ValueSource::override_kv;
      return true;
    }
    if (const gguf::Value* v = f_.find(key)) {
      value = v->as_number(key);
      from = ValueSource::file;
      return true;
    }
    return false;
  }

  bool string(const std::string& key, std::string& value, ValueSource& from) const {
    if (const MetadataOverride* o = override_for(key)) {
      if (o->type != MetadataOverride::Type::str_value)
        throw Error("override " + quoted(o->text()) + " has type " + std::string(type_name(o->type)) + ", but " +
                    quoted(key) + " is a string: use " + key + "=str:VALUE");
      value = o->s;
      from = ValueSource::override_kv;
      return true;
    }
    if (const gguf::Value* v = f_.find(key)) {
      value = std::string(v->as_string(key));
      from = ValueSource::file;
      return true;
    }
    return false;
  }

  const gguf::File& file() const { return f_; }

 private:
  const gguf::File& f_;
  const std::vector<MetadataOverride>& overrides_;
};

void check_shape_key(const gguf::File& f, const std::string& arch, const char* suffix, int64_t actual,
                     const char* what) {
  const std::string key = arch + "." + suffix;
  if (const gguf::Value* v = f.find(key)) {
    const uint64_t declared = v->as_u64(key);
    if (declared != static_cast<uint64_t>(actual))
      throw Error("metadata key '" + key + "' says " + std::to_string(declared) + " but the head's " +
                  what + " is " + std::to_string(actual));
  }
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// "is not a finite number (nan)", "is negative (-1)", "is 0": the words a refusal starts with.
std::string value_text(double v) {
  if (!std::isfinite(v)) return "is not a finite number (" + fmt(v) + ")";
  if (v < 0) return "is negative (" + fmt(v) + ")";
  return "is " + fmt(v);
}

std::string apply_text(Apply a) { return std::string(model::to_string(a)); }

// The rule an unknown architecture gets when the user states both values by override: the scale
// multiplied, the cap applied when nonzero, RMSNorm, output.weight or the tied embedding.
ArchRule stated_rule(std::string_view arch) {
  return ArchRule{arch, model::ScaleOp::multiply, Apply::always, true, 0.0f, Apply::if_nonzero, 0.0f,
                  model::FinalNorm::rms, model::HeadBias::none, model::HeadTensor::output_or_tied,
                  "stated by overrides"};
}

std::string unknown_architecture(const std::string& path, const std::string& arch) {
  return path + ": architecture '" + arch + "' has no rule in lmhead (docs/architectures.md lists the " +
         "architectures it knows); lmhead does not guess a logit scale or a soft cap. State the rule with " +
         "--override-kv " + arch + ".logit_scale=float:SCALE --override-kv " + arch +
         ".final_logit_softcapping=float:CAP (CAP 0: no cap), or take a known architecture's rule with " +
         "--override-kv general.architecture=str:NAME (API: ModelOptions::overrides, " +
         "MetadataOverride::parse(\"KEY=TYPE:VALUE\"))";
}

// The logit scale the backends multiply by (numerics.md §2).
void apply_scale_rule(const std::string& path, const ArchRule& rule, const Metadata& meta, HeadConfig& c) {
  const std::string key = c.architecture + ".logit_scale";
  c.logit_scale = 1.0f;
  c.logit_scale_stated = 1.0f;
  if (rule.scale_apply == Apply::never) {
    c.logit_scale_rule = "never";
    c.logit_scale_from = ValueSource::not_applied;
    return;
  }
  c.logit_scale_rule = std::string(model::to_string(rule.scale_op)) + ", " + apply_text(rule.scale_apply);
  double v = 0;
  ValueSource from = ValueSource::arch_default;
  if (!meta.number(key, v, from)) {
    if (rule.scale_required)
      throw Error(path + ": metadata key '" + key + "' is missing; a " + c.architecture +
                  " checkpoint must state its logit scale (" + std::string(rule.source) + " reads it as required)");
    v = rule.scale_default;
    from = ValueSource::arch_default;
  }
  const float f = static_cast<float>(v);
  const bool zero_is_none = rule.scale_apply == Apply::if_nonzero && f == 0.0f;
  if (!std::isfinite(f) || f < 0.0f || (f == 0.0f && !zero_is_none))
    throw Error(path + ": metadata key '" + key + "' " + value_text(v) + "; " + c.architecture + "'s graph " +
                (rule.scale_op == model::ScaleOp::divide ? "divides" : "multiplies") + " the logits by it (" +
                std::string(rule.source) + "), so lmhead refuses a zero, negative or non-finite scale " +
                "(a negative one reverses the argmax)");
  c.logit_scale_stated = f;
  c.logit_scale_from = from;
  if (zero_is_none) return;  // llama.cpp: `if (f_logit_scale)`, 0 means no scaling
  c.logit_scale = rule.scale_op == model::ScaleOp::divide ? 1.0f / f : f;
}

void apply_cap_rule(const std::string& path, const ArchRule& rule, const Metadata& meta, HeadConfig& c) {
  const std::string key = c.architecture + ".final_logit_softcapping";
  c.softcap = 0.0f;
  c.softcap_rule = apply_text(rule.cap_apply);
  if (rule.cap_apply == Apply::never) {
    c.softcap_from = ValueSource::not_applied;
    return;
  }
  double v = 0;
  ValueSource from = ValueSource::arch_default;
  if (!meta.number(key, v, from)) {
    v = rule.cap_default;
    from = ValueSource::arch_default;
  }
  const float f = static_cast<float>(v);
  if (!std::isfinite(f) || f < 0.0f || (f == 0.0f && rule.cap_apply == Apply::always))
    throw Error(path + ": metadata key '" + key + "' " + value_text(v) + "; " + c.architecture +
                "'s graph applies the cap " + (rule.cap_apply == Apply::always ? "whatever its value" : "when nonzero") +
                " (" + std::string(rule.source) + "), so lmhead refuses a " +
                (rule.cap_apply == Apply::always ? "zero, " : "") + "negative or non-finite cap");
  c.softcap = f;
  c.softcap_from = from;
}

void apply_eps_rule(const std::string& path, const ArchRule& rule, const Metadata& meta, HeadConfig& c) {
  c.eps_key = c.architecture + (rule.norm == model::FinalNorm::rms ? ".attention.layer_norm_rms_epsilon"
                                                                   : ".attention.layer_norm_epsilon");
  double v = 0;
  ValueSource from = ValueSource::arch_default;
  if (meta.number(c.eps_key, v, from)) {
    if (!std::isfinite(v)) throw Error(path + ": metadata key '" + c.eps_key + "' is not a finite number");
    if (v < 0) throw Error(path + ": metadata key '" + c.eps_key + "' is negative");
    c.eps = static_cast<float>(v);
  } else {
    c.eps = 1e-5f;
    from = ValueSource::arch_default;
  }
  c.eps_from = from;
}

// A 1-D F32 tensor copied out of the mapping (so its alignment never depends on the file),
// refused by name when its type, shape or a value is not what the head needs.
std::vector<float> f32_vector(const std::string& path, const gguf::TensorInfo& t, const std::string& name,
                              const std::string& what, int64_t want, const std::string& want_what) {
  if (t.type != TensorType::F32)
    throw Error(path + ": tensor '" + name + "' (" + what + ") must be f32, found " + std::string(tensor_type_name(t.type)));
  if (t.elements() != want || t.dims[0] != want)
    throw Error(path + ": tensor '" + name + "' (" + what + ") has " + std::to_string(t.elements()) +
                " elements, the head's " + want_what + " is " + std::to_string(want));
  std::vector<float> v(static_cast<size_t>(want));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw Error(path + ": tensor '" + name + "' holds a non-finite value (" + std::to_string(v[i]) + ") at index " +
                  std::to_string(i));
  return v;
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::shared_ptr<const Model> Model::open(const std::string& path, const ModelOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = gguf::File::open(path);
  const gguf::File& f = *impl->file;
  HeadConfig& c = impl->config;
  const Metadata meta(f, options.overrides);
  for (const MetadataOverride& o : options.overrides) c.overrides.push_back(o.text());

  ValueSource arch_from;
  if (!meta.string("general.architecture", c.architecture, arch_from))
    throw Error(path + ": metadata key 'general.architecture' is missing");
  ArchRule stated;
  const ArchRule* rule = model::find_arch_rule(c.architecture);
  if (!rule) {
    const bool scale_stated = meta.override_for(c.architecture + ".logit_scale") != nullptr;
    const bool cap_stated = meta.override_for(c.architecture + ".final_logit_softcapping") != nullptr;
    if (!scale_stated || !cap_stated) throw Error(unknown_architecture(path, c.architecture));
    stated = stated_rule(c.architecture);
    rule = &stated;
  }
  c.rule_source = std::string(rule->source);
  c.final_norm = std::string(model::to_string(rule->norm));

  const gguf::TensorInfo* head = nullptr;
  if (rule->head != model::HeadTensor::tied_only) head = f.find_tensor("output.weight");
  if (head) {
    c.head_tensor = "output.weight";
  } else {
    if (rule->head == model::HeadTensor::output_only)
      throw Error(path + ": no head tensor: 'output.weight' is missing (" + c.architecture +
                  " has no tied-embedding fallback in " + std::string(rule->source) + ")");
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

  {
    const gguf::TensorInfo* ob = rule->bias == model::HeadBias::none ? nullptr : f.find_tensor("output.bias");
    if (rule->bias == model::HeadBias::required && !ob)
      throw Error(path + ": tensor 'output.bias' (the head's bias) is missing; " + std::string(rule->source) + " requires it");
    if (ob) {
      impl->head_bias = f32_vector(path, *ob, "output.bias", "the head's bias", c.vocab, "vocabulary");
      c.has_head_bias = true;
    }
  }

  const gguf::TensorInfo* norm = f.find_tensor("output_norm.weight");
  if (!norm) throw Error(path + ": tensor 'output_norm.weight' (the final norm's gamma) is missing");
  impl->gamma = f32_vector(path, *norm, "output_norm.weight", "the final norm's gamma", c.hidden, "hidden size");
  if (rule->norm == model::FinalNorm::layer_bias) {
    const gguf::TensorInfo* nb = f.find_tensor("output_norm.bias");
    if (!nb)
      throw Error(path + ": tensor 'output_norm.bias' (the final LayerNorm's bias) is missing; " +
                  std::string(rule->source) + " requires it");
    impl->beta = f32_vector(path, *nb, "output_norm.bias", "the final LayerNorm's bias", c.hidden, "hidden size");
    c.has_norm_bias = true;
  }

  check_shape_key(f, c.architecture, "embedding_length", c.hidden, "hidden size");
  check_shape_key(f, c.architecture, "vocab_size", c.vocab, "vocabulary");

  apply_scale_rule(path, *rule, meta, c);
  apply_cap_rule(path, *rule, meta, c);
  apply_eps_rule(path, *rule, meta, c);
  c.logit_scale_is_default = c.logit_scale_from == ValueSource::arch_default;
  c.softcap_is_default = c.softcap_from == ValueSource::arch_default;
  c.eps_is_default = c.eps_from == ValueSource::arch_default;

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
const float* Model::norm_bias() const { return impl_->beta.empty() ? nullptr : impl_->beta.data(); }
const float* Model::head_bias() const { return impl_->head_bias.empty() ? nullptr : impl_->head_bias.data(); }
bool Model::has_token_texts() const { return !impl_->tokens.empty(); }
std::string_view Model::token_text(int64_t id) const {
  if (id < 0 || id >= static_cast<int64_t>(impl_->tokens.size())) return {};
  return impl_->tokens[id];
}

MetadataOverride MetadataOverride::parse(std::string_view text) {
  // llama.cpp's syntax: KEY=TYPE:VALUE, TYPE in int, float, bool, str.
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw Error("override '" + std::string(text) + "': expected KEY=TYPE:VALUE (TYPE int, float, bool or str)");
  MetadataOverride o;
  o.key = std::string(text.substr(0, eq));
  const std::string_view rest = text.substr(eq + 1);
  const size_t colon = rest.find(':');
  const std::string_view type = colon == std::string_view::npos ? rest : rest.substr(0, colon);
  if (colon == std::string_view::npos)
    throw Error("override '" + std::string(text) + "': expected KEY=TYPE:VALUE (TYPE int, float, bool or str)");
  const std::string value(rest.substr(colon + 1));
  auto bad = [&](const char* what) {
    return Error("override '" + std::string(text) + "': '" + value + "' is not " + what);
  };
  if (type == "int") {
    o.type = Type::int_value;
    char* end = nullptr;
    errno = 0;
    o.i = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE) throw bad("an integer");
  } else if (type == "float") {
    o.type = Type::float_value;
    char* end = nullptr;
    o.f = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') throw bad("a number");
  } else if (type == "bool") {
    o.type = Type::bool_value;
    if (value == "true") o.b = true;
    else if (value == "false") o.b = false;
    else throw bad("true or false");
  } else if (type == "str") {
    o.type = Type::str_value;
    if (value.size() > 127) throw Error("override '" + o.key + "': a str value is at most 127 bytes (llama.cpp's limit)");
    o.s = value;
  } else {
    throw Error("override '" + std::string(text) + "': unknown type '" + std::string(type) +
                "' (int, float, bool or str)");
  }
  return o;
}

std::string MetadataOverride::text() const {
  switch (type) {
    case Type::int_value: return key + "=int:" + std::to_string(i);
    case Type::float_value: return key + "=float:" + fmt(f);
    case Type::bool_value: return key + "=bool:" + (b ? "true" : "false");
    case Type::str_value: return key + "=str:" + s;
  }
  return key;
}

std::string_view to_string(ValueSource v) {
  switch (v) {
    case ValueSource::file: return "file";
    case ValueSource::arch_default: return "default";
    case ValueSource::override_kv: return "override";
    case ValueSource::not_applied: return "not applied";
  }
  return "?";
}

std::string_view to_string(InputKind k) { return k == InputKind::normed ? "normed" : "hidden"; }
bool parse(std::string_view s, InputKind& k) {
  if (s == "hidden") { k = InputKind::hidden; return true; }
  if (s == "normed") { k = InputKind::normed; return true; }
  return false;
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
  b.head_bias = c.has_head_bias ? logits : 0;
  const double weights_count = double(c.vocab) * double(c.hidden);
  b.bits_per_weight = weights_count > 0 ? double(c.head_bytes) * 8.0 / weights_count : 0.0;
  const TensorTypeInfo* q4 = tensor_type_info(TensorType::Q4_K);
  if (c.hidden % q4->block_elems == 0)
    b.q4_k_weights = static_cast<uint64_t>(c.vocab) * static_cast<uint64_t>(c.hidden / q4->block_elems) * q4->block_bytes;
  return b;
}

ByteBill byte_bill(const HeadConfig& c, BackendKind backend, SoftcapRoute softcap) {
  ByteBill b = byte_bill(c);
  b.cap_passes = backend == BackendKind::scalar;
  b.logits_stored = backend != BackendKind::cpu;
  b.moved = b.weights + b.normed + b.head_bias + (b.logits_stored ? b.logits : 0);
  if (b.cap_passes) {
    // With no cap the scale is still its own node: one read and one write of every logit.
    const uint64_t cap = c.softcap == 0.0f ? 2 * b.logits
                         : softcap == SoftcapRoute::nodes ? b.softcap_nodes : b.softcap_one_pass;
    b.moved += cap + b.argmax;
  }
  return b;
}

}  // namespace lmhead
