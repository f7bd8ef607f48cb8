// The C API over the C++ engine. Every entry point catches everything: a C caller cannot unwind a
// C++ exception, so each failure becomes a return code plus this thread's message.
#include "lmhead/lmhead.h"

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "lmhead/lmhead.hpp"
#include "sample/sampler.hpp"
#include "sample/verify.hpp"

struct lmhead_model {
  std::shared_ptr<const lmhead::Model> model;
  std::string head_type;  // a stable const char* for lmhead_model_info
};

struct lmhead_engine {
  std::shared_ptr<const lmhead::Model> model;  // keeps the mapping alive if the model handle closes first
  std::unique_ptr<lmhead::Engine> engine;
  std::string backend_name;
};

namespace {

thread_local std::string t_last_error;

int fail(int code, std::string message) {
  try {
    t_last_error = std::move(message);
  } catch (...) {
    // Out of memory for the message itself: the code still tells the caller what class it was.
  }
  return code;
}

// Runs f, turning any exception into (code, message). `code` is the class an lmhead::Error gets
// at this entry point: the engine's Error type does not say whose fault it was, the caller does.
template <class F>
int guarded(int code, F&& f) {
  try {
    f();
    return LMHEAD_OK;
  } catch (const std::bad_alloc&) {
    return fail(LMHEAD_ERR_RUNTIME, "out of memory");
  } catch (const lmhead::InputError& e) {
    return fail(LMHEAD_ERR_INPUT, e.what());
  } catch (const lmhead::Error& e) {
    return fail(code, e.what());
  } catch (const std::exception& e) {
    return fail(LMHEAD_ERR_RUNTIME, e.what());
  } catch (...) {
    return fail(LMHEAD_ERR_RUNTIME, "unknown failure");
  }
}

// A struct that starts with its own size. `earlier`: the sizes of its layouts before fields were
// appended (a caller built against an older header); any other size is a caller built against a
// header this library does not know.
template <class T>
bool known_size(const T* s, const char* what, std::initializer_list<size_t> earlier = {}) {
  if (s->size == sizeof(T)) return true;
  for (size_t e : earlier)
    if (s->size == e) return true;
  fail(LMHEAD_ERR_ARGUMENT, std::string(what) + ".size is " + std::to_string(s->size) + ", this library (lmhead " +
                                lmhead_version() + ") knows " + std::to_string(sizeof(T)) +
                                ": set it to sizeof(" + what + ") and rebuild against this library's lmhead.h");
  return false;
}

// The caller's struct as this library's layout: the fields its size covers, the defaults already in
// `out` for the tail an older header did not have.
template <class T>
bool read_sized(const T* s, const char* what, std::initializer_list<size_t> earlier, T& out) {
  if (!known_size(s, what, earlier)) return false;
  std::memcpy(static_cast<void*>(&out), s, s->size);
  out.size = sizeof(T);
  return true;
}

// The layouts of lmhead 0.1.0, before sampling was added.
constexpr size_t kRunOptionsV1 = offsetof(lmhead_run_options, sampling);
constexpr size_t kRunOptionsV2 = offsetof(lmhead_run_options, route);
constexpr size_t kRunOutputsV1 = offsetof(lmhead_run_outputs, sampled);

}  // namespace

extern "C" {

const char* lmhead_last_error(void) { return t_last_error.c_str(); }

const char* lmhead_version(void) { return LMHEAD_VERSION_STRING; }

int lmhead_model_open(const char* path, lmhead_model** out) { return lmhead_model_open_ex(path, nullptr, out); }

int lmhead_model_open_ex(const char* path, const lmhead_model_options* options, lmhead_model** out) {
  if (!out) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_model_open: out is NULL");
  *out = nullptr;
  if (!path) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_model_open: path is NULL");
  if (options && !known_size(options, "lmhead_model_options")) return LMHEAD_ERR_ARGUMENT;
  lmhead::ModelOptions mo;
  if (options && options->override_count) {
    if (!options->overrides) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_model_open: override_count > 0 but overrides is NULL");
    const int rc = guarded(LMHEAD_ERR_ARGUMENT, [&] {
      for (size_t i = 0; i < options->override_count; ++i) {
        if (!options->overrides[i]) throw lmhead::Error("override " + std::to_string(i) + " is NULL");
        mo.overrides.push_back(lmhead::MetadataOverride::parse(options->overrides[i]));
      }
    });
    if (rc) return rc;
  }
  return guarded(LMHEAD_ERR_MODEL, [&] {
    auto m = std::make_unique<lmhead_model>();
    m->model = lmhead::Model::open(path, mo);
    m->head_type = std::string(lmhead::tensor_type_name(m->model->config().head_type));
    *out = m.release();
  });
}

void lmhead_model_close(lmhead_model* model) { delete model; }

int64_t lmhead_model_vocab(const lmhead_model* model) { return model ? model->model->config().vocab : 0; }

int64_t lmhead_model_hidden(const lmhead_model* model) { return model ? model->model->config().hidden : 0; }

int lmhead_model_get_info(const lmhead_model* model, lmhead_model_info* info) {
  if (!model || !info) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_model_get_info: model or info is NULL");
  if (!known_size(info, "lmhead_model_info")) return LMHEAD_ERR_ARGUMENT;
  const lmhead::HeadConfig& c = model->model->config();
  info->architecture = c.architecture.c_str();
  info->head_type = model->head_type.c_str();
  info->head_tensor = c.head_tensor.c_str();
  info->vocab = c.vocab;
  info->hidden = c.hidden;
  info->logit_scale = c.logit_scale;
  info->softcap = c.softcap;
  info->eps = c.eps;
  info->logit_scale_rule = c.logit_scale_rule.c_str();
  info->softcap_rule = c.softcap_rule.c_str();
  info->final_norm = c.final_norm.c_str();
  info->rule_source = c.rule_source.c_str();
  return LMHEAD_OK;
}

const char* lmhead_model_token_text(const lmhead_model* model, int64_t id, size_t* length) {
  if (length) *length = 0;
  if (!model || !model->model->has_token_texts() || id < 0 || id >= model->model->config().vocab) return nullptr;
  const std::string_view s = model->model->token_text(id);
  if (length) *length = s.size();
  return s.data();
}

void lmhead_engine_options_init(lmhead_engine_options* options) {
  if (!options) return;
  std::memset(options, 0, sizeof *options);
  options->size = sizeof *options;
  options->backend = "cpu";
  options->gpus = 1;
}

int lmhead_engine_create(const lmhead_model* model, const char* backend, int threads, lmhead_engine** out) {
  lmhead_engine_options o;
  lmhead_engine_options_init(&o);
  o.backend = backend;
  o.threads = threads;
  return lmhead_engine_create_ex(model, &o, out);
}

int lmhead_engine_create_ex(const lmhead_model* model, const lmhead_engine_options* options, lmhead_engine** out) {
  if (!out) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_create: out is NULL");
  *out = nullptr;
  if (!model) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_create: model is NULL");
  if (!options) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_create: options is NULL");
  if (!known_size(options, "lmhead_engine_options")) return LMHEAD_ERR_ARGUMENT;
  lmhead::EngineOptions eo;
  const char* backend = options->backend ? options->backend : "cpu";
  if (!lmhead::parse(backend, eo.backend))
    return fail(LMHEAD_ERR_ARGUMENT, std::string("unknown backend '") + backend + "' (scalar, cpu or cuda)");
  if (options->threads < 0) return fail(LMHEAD_ERR_ARGUMENT, "threads must be 0 (all) or positive, got " + std::to_string(options->threads));
  if (options->gpus < 0) return fail(LMHEAD_ERR_ARGUMENT, "gpus must be 0, 1 or more, got " + std::to_string(options->gpus));
  eo.threads = options->threads;
  eo.gpus = options->gpus > 0 ? options->gpus : 1;
  eo.shards = options->shards;
  return guarded(LMHEAD_ERR_RUNTIME, [&] {
    auto e = std::make_unique<lmhead_engine>();
    e->model = model->model;
    e->engine = std::make_unique<lmhead::Engine>(e->model, eo);
    e->backend_name = e->engine->backend_name();
    *out = e.release();
  });
}

void lmhead_engine_destroy(lmhead_engine* engine) { delete engine; }

const char* lmhead_engine_backend_name(const lmhead_engine* engine) { return engine ? engine->backend_name.c_str() : ""; }

void lmhead_run_options_init(lmhead_run_options* options) {
  if (!options) return;
  std::memset(options, 0, sizeof *options);
  options->size = sizeof *options;
}

void lmhead_sampling_options_init(lmhead_sampling_options* options) {
  if (!options) return;
  std::memset(options, 0, sizeof *options);
  options->size = sizeof *options;
  options->top_p = 1.0f;
}

int lmhead_engine_run(lmhead_engine* engine, const float* hidden, int tokens, int32_t* argmax, float* logits) {
  lmhead_run_outputs o;
  std::memset(&o, 0, sizeof o);
  o.size = sizeof o;
  o.argmax = argmax;
  o.logits = logits;
  return lmhead_engine_run_ex(engine, hidden, tokens, nullptr, &o);
}

}  // extern "C"

namespace {
// on_device: hidden is GPU memory written on cuda_stream (lmhead_engine_run_device).
int run_checked(lmhead_engine* engine, const float* hidden, int tokens, const lmhead_run_options* options,
                lmhead_run_outputs* outputs, bool on_device, void* cuda_stream);
}  // namespace

extern "C" {

int lmhead_engine_run_ex(lmhead_engine* engine, const float* hidden, int tokens, const lmhead_run_options* options,
                         lmhead_run_outputs* outputs) {
  return run_checked(engine, hidden, tokens, options, outputs, false, nullptr);
}

int lmhead_engine_run_device(lmhead_engine* engine, const float* device_hidden, int tokens, void* cuda_stream,
                             const lmhead_run_options* options, lmhead_run_outputs* outputs) {
  return run_checked(engine, device_hidden, tokens, options, outputs, true, cuda_stream);
}

}  // extern "C"

namespace {

// The caller's run options (NULL: the defaults) in the engine's terms. Returns LMHEAD_OK or the
// code of what it refused (with the message set).
int to_run_options(const lmhead_run_options* caller_options, const lmhead::HeadConfig& c, int tokens,
                   lmhead::RunOptions& ro) {
  lmhead_run_options options;
  lmhead_run_options_init(&options);
  if (caller_options && !read_sized(caller_options, "lmhead_run_options", {kRunOptionsV1, kRunOptionsV2}, options))
    return LMHEAD_ERR_ARGUMENT;
  switch (options.input) {
    case LMHEAD_INPUT_HIDDEN: ro.input = lmhead::InputKind::hidden; break;
    case LMHEAD_INPUT_NORMED: ro.input = lmhead::InputKind::normed; break;
    default: return fail(LMHEAD_ERR_ARGUMENT, "unknown input kind " + std::to_string(options.input) + " (LMHEAD_INPUT_*)");
  }
  switch (options.activations) {
    case LMHEAD_ACTIVATIONS_Q8: ro.activations = lmhead::ActivationRoute::q8; break;
    case LMHEAD_ACTIVATIONS_F32: ro.activations = lmhead::ActivationRoute::f32; break;
    default: return fail(LMHEAD_ERR_ARGUMENT, "unknown activation route " + std::to_string(options.activations) + " (LMHEAD_ACTIVATIONS_*)");
  }
  switch (options.softcap) {
    case LMHEAD_SOFTCAP_NODES: ro.softcap = lmhead::SoftcapRoute::nodes; break;
    case LMHEAD_SOFTCAP_FUSED: ro.softcap = lmhead::SoftcapRoute::fused; break;
    default: return fail(LMHEAD_ERR_ARGUMENT, "unknown soft-cap route " + std::to_string(options.softcap) + " (LMHEAD_SOFTCAP_*)");
  }
  switch (options.route) {
    case LMHEAD_ROUTE_VEC_DOT: ro.route = lmhead::Route::vec_dot; break;
    case LMHEAD_ROUTE_LLAMACPP: ro.route = lmhead::Route::llamacpp; break;
    case LMHEAD_ROUTE_TILED: ro.route = lmhead::Route::tiled; break;
    default: return fail(LMHEAD_ERR_ARGUMENT, "unknown route " + std::to_string(options.route) + " (LMHEAD_ROUTE_*)");
  }
  ro.top_k = options.top_k;
  ro.logprobs = options.logprobs != 0;
  if (ro.top_k < 0 || ro.top_k > c.vocab)
    return fail(LMHEAD_ERR_ARGUMENT, "top-k must be between 0 and the vocabulary size " + std::to_string(c.vocab) +
                                         ", got " + std::to_string(ro.top_k));
  if (const lmhead_sampling_options* in = options.sampling) {
    if (!known_size(in, "lmhead_sampling_options")) return LMHEAD_ERR_ARGUMENT;
    lmhead::SamplingOptions& o = ro.sampling;
    o.temperature = in->temperature;
    o.top_k = in->top_k;
    o.top_p = in->top_p;
    o.min_p = in->min_p;
    o.seed = in->seed;
    o.position = in->position;
    if (in->bias_count > 0 && (!in->bias_ids || !in->bias_values))
      return fail(LMHEAD_ERR_ARGUMENT, "sampling.bias_count is " + std::to_string(in->bias_count) +
                                           " but bias_ids or bias_values is NULL");
    for (size_t i = 0; i < in->bias_count; ++i) o.logit_bias.emplace_back(in->bias_ids[i], in->bias_values[i]);
    if ((in->allowed == nullptr) != (in->allowed_words == 0))
      return fail(LMHEAD_ERR_ARGUMENT, "sampling.allowed and sampling.allowed_words go together: allowed is " +
                                           std::string(in->allowed ? "set" : "NULL") + ", allowed_words " +
                                           std::to_string(in->allowed_words));
    if (in->allowed) o.allowed.assign(in->allowed, in->allowed + in->allowed_words);
    // Option values out of range, a bias id outside the vocabulary, a mask of the wrong length.
    if (const int rc = guarded(LMHEAD_ERR_ARGUMENT, [&] { lmhead::sample::validate(o, c.vocab, tokens); })) return rc;
  }
  return LMHEAD_OK;
}

// on_device: hidden is GPU memory written on cuda_stream (lmhead_engine_run_device).
int run_checked(lmhead_engine* engine, const float* hidden, int tokens, const lmhead_run_options* options,
                lmhead_run_outputs* caller_outputs, bool on_device, void* cuda_stream) {
  if (!engine) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_run: engine is NULL");
  if (!hidden) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_run: hidden is NULL");
  if (!caller_outputs) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_run: outputs is NULL");
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  if (!read_sized(caller_outputs, "lmhead_run_outputs", {kRunOutputsV1}, out)) return LMHEAD_ERR_ARGUMENT;
  const lmhead_run_outputs* outputs = &out;
  const lmhead::HeadConfig& c = engine->model->config();
  if (tokens <= 0) return fail(LMHEAD_ERR_INPUT, "lmhead_engine_run: tokens must be positive, got " + std::to_string(tokens));

  lmhead::RunOptions ro;
  if (const int rc = to_run_options(options, c, tokens, ro)) return rc;
  if ((outputs->top_k_ids || outputs->top_k_values || outputs->top_k_logprobs) && ro.top_k == 0)
    return fail(LMHEAD_ERR_ARGUMENT, "top-k outputs given but options.top_k is 0");
  if ((outputs->logprob || outputs->top_k_logprobs) && !ro.logprobs)
    return fail(LMHEAD_ERR_ARGUMENT, "logprob outputs given but options.logprobs is 0");
  ro.want_logits = outputs->logits != nullptr;

  const size_t n = static_cast<size_t>(tokens) * static_cast<size_t>(c.hidden);
  lmhead::RunResult r;
  const int rc = guarded(LMHEAD_ERR_RUNTIME, [&] {
    r = on_device ? engine->engine->run_device(hidden, tokens, cuda_stream, ro) : engine->engine->run({hidden, n}, tokens, ro);
  });
  if (rc) return rc;  // a NaN or infinity in the rows is an InputError: LMHEAD_ERR_INPUT

  // Written only after the whole run succeeded, so a failure leaves the caller's buffers untouched.
  const size_t k = static_cast<size_t>(ro.top_k);
  for (int t = 0; t < tokens; ++t) {
    const lmhead::TokenChoice& ch = r.choices[static_cast<size_t>(t)];
    if (outputs->argmax) outputs->argmax[t] = ch.argmax;
    if (outputs->value) outputs->value[t] = ch.value;
    if (outputs->logprob) outputs->logprob[t] = ch.logprob;
    if (outputs->tie_count) outputs->tie_count[t] = ch.tie_count;
    if (outputs->sampled) outputs->sampled[t] = ch.sampled;
    for (size_t j = 0; j < k && j < ch.top.size(); ++j) {
      const size_t at = static_cast<size_t>(t) * k + j;
      if (outputs->top_k_ids) outputs->top_k_ids[at] = ch.top[j].id;
      if (outputs->top_k_values) outputs->top_k_values[at] = ch.top[j].logit;
      if (outputs->top_k_logprobs) outputs->top_k_logprobs[at] = ch.top[j].logprob;
    }
  }
  if (outputs->logits) std::memcpy(outputs->logits, r.logits.data(), r.logits.size() * sizeof(float));
  return LMHEAD_OK;
}
}  // namespace

extern "C" {

int lmhead_engine_verify(lmhead_engine* engine, const float* hidden, const int32_t* draft, int drafts,
                         const float* draft_probs, const lmhead_run_options* options, int* accepted, int32_t* next) {
  if (!engine) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_verify: engine is NULL");
  if (!hidden) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_verify: hidden is NULL");
  if (!accepted || !next) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_verify: accepted or next is NULL");
  if (drafts < 0) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_verify: drafts must be 0 or more, got " + std::to_string(drafts));
  if (drafts > 0 && !draft) return fail(LMHEAD_ERR_ARGUMENT, "lmhead_engine_verify: drafts > 0 but draft is NULL");
  const lmhead::HeadConfig& c = engine->model->config();
  const int rows = drafts + 1;
  lmhead::RunOptions ro;
  if (const int rc = to_run_options(options, c, rows, ro)) return rc;
  const std::span<const int32_t> draft_ids(draft, static_cast<size_t>(drafts));
  std::span<const float> probs;
  if (draft_probs) probs = {draft_probs, static_cast<size_t>(drafts) * static_cast<size_t>(c.vocab)};
  if (const int rc = guarded(LMHEAD_ERR_ARGUMENT, [&] { lmhead::sample::validate_draft(c.vocab, draft_ids, probs); }))
    return rc;
  lmhead::VerifyResult v;
  const int rc = guarded(LMHEAD_ERR_RUNTIME, [&] {
    v = engine->engine->verify({hidden, static_cast<size_t>(rows) * static_cast<size_t>(c.hidden)}, draft_ids, ro, probs);
  });
  if (rc) return rc;
  *accepted = v.accepted;
  *next = v.next;
  return LMHEAD_OK;
}

}  // extern "C"
