// lmhead's Python module: Model, Engine and RunOutput over the C++ API. The hot path (Engine.run)
// stays in C++: the argument's buffer is taken through DLPack or the buffer protocol without a copy
// when it is C-contiguous float32 on the host, the GIL is released while the engine runs, and the
// outputs are NumPy views of the result's own vectors (no copy of the [T, V] logits).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compare_py.hpp"
#include "ndarray_util.hpp"
#include "lmhead/lmhead.hpp"
#include "sample/sampler.hpp"
#include "sample/verify.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

PyObject* g_error = nullptr;        // lmhead.Error(Exception)
PyObject* g_input_error = nullptr;  // lmhead.InputError(lmhead.Error, ValueError): the caller's values

// A failure that is the caller's values (shape, dtype, device, NaN, option out of range).
struct InputFailure {
  std::string message;
};

[[noreturn]] void bad_input(std::string message) { throw InputFailure{std::move(message)}; }

struct PyModel {
  std::shared_ptr<const lmhead::Model> model;
};

struct PyEngine {
  std::shared_ptr<const lmhead::Model> model;
  std::unique_ptr<lmhead::Engine> engine;
  lmhead::BackendKind backend = lmhead::BackendKind::cpu;
};

// A run's outputs. Arrays handed to Python are views of these vectors with this object as their
// owner, so they stay valid after the RunOutput itself is dropped by the caller.
struct PyOutput {
  int tokens = 0;
  int top_k = 0;
  bool has_logprobs = false;
  bool has_logits = false;
  int64_t vocab = 0;
  std::vector<int32_t> ids, sampled;
  std::vector<float> values, logprobs;
  std::vector<int64_t> ties;
  std::vector<int32_t> top_ids;
  std::vector<float> top_values, top_logprobs;
  std::vector<float> logits;
  std::vector<std::vector<int32_t>> tied_ids;
  std::string backend;
};

// Writable, like any array a NumPy function returns: the caller owns this run's results.
template <class T>
nb::object view(nb::handle owner, std::vector<T>& v, std::initializer_list<size_t> shape) {
  return nb::cast(nb::ndarray<nb::numpy, T>(v.data(), shape, owner));
}

bool on_cuda(const nb::ndarray<nb::ro>& a) {
  return a.device_type() == nb::device::cuda::value || a.device_type() == nb::device::cuda_managed::value;
}

template <class E>
E parse_option(std::string_view name, std::string_view value, const char* choices) {
  E out{};
  if (!lmhead::parse(value, out))
    bad_input("unknown " + std::string(name) + " '" + std::string(value) + "' (" + choices + ")");
  return out;
}

// The hidden rows of a call: [H] or [T, H] float32, host memory (or, for a cuda engine when
// `device_allowed`, a CUDA array read in place). `array` keeps the caller's buffer alive.
struct Rows {
  nb::ndarray<nb::ro> array;
  const float* data = nullptr;
  int64_t tokens = 0;
  bool on_device = false;
  std::vector<float> gathered;  // a strided host view, gathered once
};

void read_rows(PyEngine& self, nb::handle hidden, bool device_allowed, Rows& rows) {
  const lmhead::HeadConfig& c = self.model->config();
  nb::ndarray<nb::ro>& a = rows.array;
  if (!nb::try_cast(hidden, a, false) && !nb::try_cast(hidden, a, true))
    bad_input("hidden must be a float32 array of shape [H] or [T, H] (NumPy, PyTorch, DLPack or the buffer "
              "protocol), got an object of type " + std::string(nb::type_name(hidden.type()).c_str()));
  const bool device_rows = on_cuda(a) && self.backend == lmhead::BackendKind::cuda;
  if (device_rows && !device_allowed) bad_input("verify reads host memory: move hidden to the host first");
  if (a.device_type() != nb::device::cpu::value && !device_rows)
    bad_input("hidden is on a device (DLPack device type " + std::to_string(a.device_type()) +
              ") this engine cannot read: give host memory" +
              (self.backend == lmhead::BackendKind::cuda ? "" : ", or use backend='cuda' for CUDA tensors"));
  if (a.dtype() != nb::dtype<float>())
    bad_input("hidden must be float32, got " + describe_dtype(a.dtype()));
  if (a.ndim() != 1 && a.ndim() != 2)
    bad_input("hidden must be [H] or [T, H], got " + std::to_string(a.ndim()) + " dimensions");
  const int64_t H = static_cast<int64_t>(a.shape(a.ndim() - 1));
  const int64_t T = a.ndim() == 2 ? static_cast<int64_t>(a.shape(0)) : 1;
  if (H != c.hidden)
    bad_input("hidden has width " + std::to_string(H) + ", the model's hidden size is " + std::to_string(c.hidden));
  if (T <= 0) bad_input("hidden has no tokens (shape [0, H])");
  if (T > (1 << 30)) bad_input("hidden has " + std::to_string(T) + " tokens, more than one call takes");
  // Zero-copy when the rows are packed; a strided host view (a slice, a transpose) is gathered once.
  if (device_rows && !rows_packed(a, T, H))
    bad_input("hidden on the GPU must be C-contiguous (rows of H packed): call .contiguous() first");
  rows.data = device_rows ? static_cast<const float*>(a.data()) : packed_or_gathered<float>(a, T, H, rows.gathered);
  rows.tokens = T;
  rows.on_device = device_rows;
}

using U32Array = nb::ndarray<const uint32_t, nb::c_contig, nb::device::cpu>;
using I32Array = nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu>;
using F32Array = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

// The options every call shares (the Python wrapper has already made the arrays contiguous and of
// their dtype: `allowed` uint32, None for no mask). Bad values raise InputError with the engine's
// message.
lmhead::RunOptions run_options(const PyEngine& self, int tokens, int top_k, bool logprobs, bool logits,
                               std::string_view activations, std::string_view softcap, std::string_view input,
                               float temperature, int sample_top_k, float top_p, float min_p, uint64_t seed,
                               int64_t position, const std::vector<std::pair<int32_t, float>>& logit_bias,
                               std::optional<U32Array> allowed, std::string_view route) {
  const lmhead::HeadConfig& c = self.model->config();
  if (top_k < 0 || top_k > c.vocab)
    bad_input("top_k must be between 0 and the vocabulary size " + std::to_string(c.vocab) + ", got " +
              std::to_string(top_k));
  lmhead::RunOptions ro;
  ro.activations = parse_option<lmhead::ActivationRoute>("activations", activations, "q8 or f32");
  ro.softcap = parse_option<lmhead::SoftcapRoute>("softcap", softcap, "nodes or fused");
  ro.input = parse_option<lmhead::InputKind>("input", input, "hidden or normed");
  ro.route = parse_option<lmhead::Route>("route", route, "vec_dot, llamacpp or tiled");
  ro.top_k = top_k;
  ro.logprobs = logprobs;
  ro.want_logits = logits;
  lmhead::SamplingOptions& o = ro.sampling;
  o.temperature = temperature;
  o.top_k = sample_top_k;
  o.top_p = top_p;
  o.min_p = min_p;
  o.seed = seed;
  o.position = position;
  o.logit_bias = logit_bias;
  if (allowed) o.allowed.assign(allowed->data(), allowed->data() + allowed->size());
  try {
    lmhead::sample::validate(o, c.vocab, tokens);
  } catch (const lmhead::Error& e) {
    throw InputFailure{e.what()};
  }
  return ro;
}

nb::object make_output(lmhead::RunResult&& r, int tokens, int top_k, bool logprobs, bool logits, int64_t vocab) {
  auto out = std::make_unique<PyOutput>();
  const size_t T = static_cast<size_t>(tokens);
  out->tokens = tokens;
  out->top_k = top_k;
  out->has_logprobs = logprobs;
  out->has_logits = logits;
  out->vocab = vocab;
  out->backend = std::move(r.backend);
  out->ids.resize(T);
  out->sampled.resize(T);
  out->values.resize(T);
  out->ties.resize(T);
  if (logprobs) out->logprobs.resize(T);
  if (top_k > 0) {
    out->top_ids.resize(T * top_k);
    out->top_values.resize(T * top_k);
    if (logprobs) out->top_logprobs.resize(T * top_k);
  }
  out->tied_ids.resize(T);
  for (size_t t = 0; t < T; ++t) {
    const lmhead::TokenChoice& ch = r.choices[t];
    out->ids[t] = ch.argmax;
    out->sampled[t] = ch.sampled;
    out->values[t] = ch.value;
    out->ties[t] = ch.tie_count;
    if (ch.tie_count > 1) out->tied_ids[t] = ch.tied_ids;
    if (logprobs) out->logprobs[t] = ch.logprob;
    for (size_t j = 0; j < static_cast<size_t>(top_k) && j < ch.top.size(); ++j) {
      out->top_ids[t * top_k + j] = ch.top[j].id;
      out->top_values[t * top_k + j] = ch.top[j].logit;
      if (logprobs) out->top_logprobs[t * top_k + j] = ch.top[j].logprob;
    }
  }
  if (logits) out->logits = std::move(r.logits);
  return nb::cast(out.release(), nb::rv_policy::take_ownership);
}

// stream: the cudaStream_t (as an integer) whose work wrote a CUDA `hidden`; 0: the legacy default.
nb::object run(nb::handle self_handle, nb::handle hidden, int top_k, bool logprobs, bool logits,
               std::string_view activations, std::string_view softcap, std::string_view input, uintptr_t stream,
               float temperature, int sample_top_k, float top_p, float min_p, uint64_t seed, int64_t position,
               const std::vector<std::pair<int32_t, float>>& logit_bias, std::optional<U32Array> allowed,
               std::string_view route) {
  PyEngine& self = nb::cast<PyEngine&>(self_handle);
  Rows rows;
  read_rows(self, hidden, true, rows);
  const int T = static_cast<int>(rows.tokens);
  const lmhead::RunOptions ro = run_options(self, T, top_k, logprobs, logits, activations, softcap, input, temperature,
                                            sample_top_k, top_p, min_p, seed, position, logit_bias, allowed, route);
  const size_t n = static_cast<size_t>(T) * static_cast<size_t>(self.model->config().hidden);
  lmhead::RunResult r;
  {
    nb::gil_scoped_release unlocked;
    try {
      // A CUDA tensor stays on the device: the engine reads it there after the stream's work.
      r = rows.on_device ? self.engine->run_device(rows.data, T, reinterpret_cast<void*>(stream), ro)
                         : self.engine->run({rows.data, n}, T, ro);
    } catch (const lmhead::InputError& e) {
      throw InputFailure{e.what()};  // a NaN or infinity in the rows: the caller's values
    }
  }
  return make_output(std::move(r), T, top_k, logprobs, logits, self.model->config().vocab);
}

struct PyVerification {
  int accepted = 0;
  int32_t next = -1;
  std::vector<int32_t> target;
  nb::object run;
};

// Speculative verification: hidden holds len(draft) + 1 host rows; draft_probs None or
// [len(draft), V] float32 (the wrapper has made both contiguous).
PyVerification verify(nb::handle self_handle, nb::handle hidden, I32Array draft, std::optional<F32Array> draft_probs,
                      int top_k, bool logprobs, bool logits, std::string_view activations, std::string_view softcap,
                      std::string_view input, float temperature, int sample_top_k, float top_p, float min_p,
                      uint64_t seed, int64_t position, const std::vector<std::pair<int32_t, float>>& logit_bias,
                      std::optional<U32Array> allowed, std::string_view route) {
  PyEngine& self = nb::cast<PyEngine&>(self_handle);
  const lmhead::HeadConfig& c = self.model->config();
  Rows rows;
  read_rows(self, hidden, false, rows);
  const int T = static_cast<int>(rows.tokens);
  if (draft.ndim() != 1) bad_input("draft must be a 1-D array of token ids, got " + std::to_string(draft.ndim()) + " dimensions");
  const size_t drafts = draft.shape(0);
  if (static_cast<int64_t>(drafts) + 1 != rows.tokens)
    bad_input("verification of " + std::to_string(drafts) + " draft tokens needs " + std::to_string(drafts + 1) +
              " hidden rows (one per draft token plus one for the token after them), got " + std::to_string(T));
  std::span<const float> probs;
  if (draft_probs) {
    if (draft_probs->ndim() != 2 || draft_probs->shape(0) != drafts || static_cast<int64_t>(draft_probs->shape(1)) != c.vocab)
      bad_input("draft_probs must be float32 [" + std::to_string(drafts) + ", " + std::to_string(c.vocab) +
                "] (one row of the draft model's probabilities per draft token)");
    probs = {draft_probs->data(), draft_probs->size()};
  }
  const std::span<const int32_t> ids(draft.data(), drafts);
  try {
    lmhead::sample::validate_draft(c.vocab, ids, probs);
  } catch (const lmhead::Error& e) {
    throw InputFailure{e.what()};
  }
  const lmhead::RunOptions ro = run_options(self, T, top_k, logprobs, logits, activations, softcap, input, temperature,
                                            sample_top_k, top_p, min_p, seed, position, logit_bias, allowed, route);
  lmhead::VerifyResult v;
  {
    nb::gil_scoped_release unlocked;
    try {
      v = self.engine->verify({rows.data, static_cast<size_t>(T) * static_cast<size_t>(c.hidden)}, ids, ro, probs);
    } catch (const lmhead::InputError& e) {
      throw InputFailure{e.what()};
    }
  }
  PyVerification out;
  out.accepted = v.accepted;
  out.next = v.next;
  out.target = std::move(v.target);
  out.run = make_output(std::move(v.run), T, top_k, logprobs, logits, c.vocab);
  return out;
}

}  // namespace

NB_MODULE(_lmhead, m) {
  m.doc() = "lmhead: final norm, quantized LM head, logit scale, soft cap and token choice from GGUF checkpoints";
  m.attr("__version__") = LMHEAD_VERSION_STRING;
#ifdef LMHEAD_HAVE_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif

  g_error = PyErr_NewException("lmhead.Error", PyExc_Exception, nullptr);
  PyObject* bases = PyTuple_Pack(2, g_error, PyExc_ValueError);
  g_input_error = PyErr_NewException("lmhead.InputError", bases, nullptr);
  Py_DECREF(bases);
  m.attr("Error") = nb::handle(g_error);
  m.attr("InputError") = nb::handle(g_input_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InputFailure& e) {
      PyErr_SetString(g_input_error, e.message.c_str());
    } catch (const lmhead::Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });

  nb::class_<PyModel>(m, "Model")
      .def("__init__",
           [](PyModel* self, const std::filesystem::path& path, const std::vector<std::string>& overrides) {
             lmhead::ModelOptions mo;
             for (const std::string& o : overrides) mo.overrides.push_back(lmhead::MetadataOverride::parse(o));
             auto model = lmhead::Model::open(path.string(), mo);
             new (self) PyModel{std::move(model)};
           },
           "path"_a, "overrides"_a = std::vector<std::string>{},
           "Opens a GGUF checkpoint's head. overrides: llama.cpp's --override-kv, e.g. ['granite.logit_scale=float:8'].")
      .def_prop_ro("path", [](const PyModel& s) { return s.model->path(); })
      .def_prop_ro("vocab", [](const PyModel& s) { return s.model->config().vocab; })
      .def_prop_ro("hidden", [](const PyModel& s) { return s.model->config().hidden; })
      .def_prop_ro("head_type", [](const PyModel& s) { return std::string(lmhead::tensor_type_name(s.model->config().head_type)); })
      .def_prop_ro("head_tensor", [](const PyModel& s) { return s.model->config().head_tensor; })
      .def_prop_ro("architecture", [](const PyModel& s) { return s.model->config().architecture; })
      .def_prop_ro("logit_scale", [](const PyModel& s) { return s.model->config().logit_scale; })
      .def_prop_ro("softcap", [](const PyModel& s) { return s.model->config().softcap; })
      .def_prop_ro("eps", [](const PyModel& s) { return s.model->config().eps; })
      .def_prop_ro("rule",
                   [](const PyModel& s) {
                     const lmhead::HeadConfig& c = s.model->config();
                     nb::dict d;
                     d["architecture"] = c.architecture;
                     d["source"] = c.rule_source;
                     d["logit_scale"] = c.logit_scale;
                     d["logit_scale_rule"] = c.logit_scale_rule;
                     d["logit_scale_from"] = std::string(lmhead::to_string(c.logit_scale_from));
                     d["softcap"] = c.softcap;
                     d["softcap_rule"] = c.softcap_rule;
                     d["softcap_from"] = std::string(lmhead::to_string(c.softcap_from));
                     d["eps"] = c.eps;
                     d["eps_key"] = c.eps_key;
                     d["eps_from"] = std::string(lmhead::to_string(c.eps_from));
                     d["final_norm"] = c.final_norm;
                     d["tied"] = c.tied;
                     d["overrides"] = c.overrides;
                     return d;
                   },
                   "The architecture's rule in force and where each value came from (docs/architectures.md).")
      .def_prop_ro("has_token_texts", [](const PyModel& s) { return s.model->has_token_texts(); })
      .def("token_bytes",
           [](const PyModel& s, int64_t id) {
             if (id < 0 || id >= s.model->config().vocab)
               bad_input("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(s.model->config().vocab) + ")");
             const std::string_view t = s.model->token_text(id);
             return nb::bytes(t.data(), t.size());
           },
           "id"_a, "The token's text as stored (b'' when the file has no token table).")
      .def("token",
           [](const PyModel& s, int64_t id) {
             if (id < 0 || id >= s.model->config().vocab)
               bad_input("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(s.model->config().vocab) + ")");
             // Byte-level vocabularies split characters over tokens: undecodable bytes become U+FFFD.
             const std::string_view t = s.model->token_text(id);
             PyObject* u = PyUnicode_DecodeUTF8(t.data(), static_cast<Py_ssize_t>(t.size()), "replace");
             if (!u) throw nb::python_error();
             return nb::steal<nb::str>(u);
           },
           "id"_a, "The token's text as a str (invalid UTF-8 replaced).")
      .def("__repr__", [](const PyModel& s) {
        const lmhead::HeadConfig& c = s.model->config();
        return "lmhead.Model('" + s.model->path() + "', " + c.architecture + ", vocab=" + std::to_string(c.vocab) +
               ", hidden=" + std::to_string(c.hidden) + ", " + std::string(lmhead::tensor_type_name(c.head_type)) + ")";
      });

  nb::class_<PyEngine>(m, "Engine")
      .def("__init__",
           [](PyEngine* self, const PyModel& model, std::string_view backend, int threads, int gpus, int shards) {
             lmhead::EngineOptions eo;
             eo.backend = parse_option<lmhead::BackendKind>("backend", backend, "scalar, cpu or cuda");
             if (threads < 0) bad_input("threads must be 0 (all) or positive, got " + std::to_string(threads));
             if (gpus < 1) bad_input("gpus must be 1 or more, got " + std::to_string(gpus));
             if (shards < 0) bad_input("shards must be 0 (automatic) or positive, got " + std::to_string(shards));
             eo.threads = threads;
             eo.gpus = gpus;
             eo.shards = shards;
             auto engine = std::make_unique<lmhead::Engine>(model.model, eo);
             new (self) PyEngine{model.model, std::move(engine), eo.backend};
           },
           "model"_a, "backend"_a = "cpu", "threads"_a = 0, "gpus"_a = 1, "shards"_a = 0)
      .def_prop_ro("backend", [](const PyEngine& s) { return s.engine->backend_name(); })
      .def("_engine_call_times",
           [](PyEngine& s, nb::ndarray<const float, nb::c_contig, nb::device::cpu> h, int runs) {
             // The C++ call alone, timed in this process: what bench/python_overhead.py subtracts
             // from the Python call's time to give the binding's overhead.
             const int64_t H = s.model->config().hidden;
             if (runs <= 0 || h.size() == 0 || static_cast<int64_t>(h.size()) % H != 0)
               bad_input("_engine_call_times needs runs > 0 and a C-contiguous float32 [T, H]");
             const int T = static_cast<int>(static_cast<int64_t>(h.size()) / H);
             std::vector<double> us;
             nb::gil_scoped_release unlocked;
             for (int i = 0; i < runs; ++i) {
               const auto t0 = std::chrono::steady_clock::now();
               lmhead::RunResult r = s.engine->run({h.data(), h.size()}, T);
               const auto t1 = std::chrono::steady_clock::now();
               us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
             }
             std::sort(us.begin(), us.end());
             return std::make_pair(us.front(), us[us.size() / 2]);
           },
           "hidden"_a, "runs"_a)
      .def("_run", &run, "hidden"_a, "top_k"_a = 0, "logprobs"_a = false, "logits"_a = false,
           "activations"_a = "q8", "softcap"_a = "nodes", "input"_a = "hidden", "stream"_a = 0,
           "temperature"_a = 0.0f, "sample_top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f, "seed"_a = 0,
           "position"_a = 0, "logit_bias"_a = std::vector<std::pair<int32_t, float>>{}, "allowed"_a = nb::none(),
           "route"_a = "vec_dot")
      .def("_verify", &verify, "hidden"_a, "draft"_a, "draft_probs"_a = nb::none(), "top_k"_a = 0,
           "logprobs"_a = false, "logits"_a = false, "activations"_a = "q8", "softcap"_a = "nodes",
           "input"_a = "hidden", "temperature"_a = 0.0f, "sample_top_k"_a = 0, "top_p"_a = 1.0f, "min_p"_a = 0.0f,
           "seed"_a = 0, "position"_a = 0, "logit_bias"_a = std::vector<std::pair<int32_t, float>>{},
           "allowed"_a = nb::none(), "route"_a = "vec_dot");

  nb::class_<PyVerification>(m, "Verification")
      .def_ro("accepted", &PyVerification::accepted, "how many draft tokens the target accepted")
      .def_ro("next", &PyVerification::next, "the target's token after them (a correction, or the bonus token)")
      .def_ro("target", &PyVerification::target, "the target's own choice at each position checked (accepted + 1)")
      .def_ro("run", &PyVerification::run, "the RunOutput over all drafts + 1 rows")
      .def("__repr__", [](const PyVerification& v) {
        return "Verification(accepted=" + std::to_string(v.accepted) + ", next=" + std::to_string(v.next) + ")";
      });

  nb::class_<PyOutput>(m, "RunOutput")
      .def_prop_ro("tokens", [](nb::handle h) { auto& o = nb::cast<PyOutput&>(h); return view(h, o.ids, {o.ids.size()}); },
                   "int32 [T]: the argmax of each token (lowest id on a tie)")
      .def_prop_ro("sampled", [](nb::handle h) { auto& o = nb::cast<PyOutput&>(h); return view(h, o.sampled, {o.sampled.size()}); },
                   "int32 [T]: the token the sampling options chose (the argmax without them)")
      .def_prop_ro("values", [](nb::handle h) { auto& o = nb::cast<PyOutput&>(h); return view(h, o.values, {o.values.size()}); },
                   "float32 [T]: the argmax's capped logit")
      .def_prop_ro("ties", [](nb::handle h) { auto& o = nb::cast<PyOutput&>(h); return view(h, o.ties, {o.ties.size()}); },
                   "int64 [T]: how many ids share the maximum")
      .def_prop_ro("tied_ids", [](const PyOutput& o) { return o.tied_ids; },
                   "per token, the first few tied ids ascending (empty without a tie)")
      .def_prop_ro("logprobs",
                   [](nb::handle h) -> nb::object {
                     auto& o = nb::cast<PyOutput&>(h);
                     if (!o.has_logprobs) return nb::none();
                     return view(h, o.logprobs, {o.logprobs.size()});
                   },
                   "float32 [T]: log-softmax of the argmax (logprobs=True), else None")
      .def_prop_ro("top_k_ids",
                   [](nb::handle h) -> nb::object {
                     auto& o = nb::cast<PyOutput&>(h);
                     if (!o.top_k) return nb::none();
                     return view(h, o.top_ids, {size_t(o.tokens), size_t(o.top_k)});
                   },
                   "int32 [T, k]: value descending, id ascending (top_k > 0), else None")
      .def_prop_ro("top_k_values",
                   [](nb::handle h) -> nb::object {
                     auto& o = nb::cast<PyOutput&>(h);
                     if (!o.top_k) return nb::none();
                     return view(h, o.top_values, {size_t(o.tokens), size_t(o.top_k)});
                   })
      .def_prop_ro("top_k_logprobs",
                   [](nb::handle h) -> nb::object {
                     auto& o = nb::cast<PyOutput&>(h);
                     if (!o.top_k || !o.has_logprobs) return nb::none();
                     return view(h, o.top_logprobs, {size_t(o.tokens), size_t(o.top_k)});
                   })
      .def_prop_ro("logits",
                   [](nb::handle h) -> nb::object {
                     auto& o = nb::cast<PyOutput&>(h);
                     if (!o.has_logits) return nb::none();
                     return view(h, o.logits, {size_t(o.tokens), size_t(o.vocab)});
                   },
                   "float32 [T, V]: the capped logits (logits=True), else None; the bytes `lmhead run --out` writes")
      .def_prop_ro("backend", [](const PyOutput& o) { return o.backend; })
      .def("__len__", [](const PyOutput& o) { return o.tokens; });

  bind_compare(m);  // lmhead.compare, parse_policy, policy_grammar (compare_py.cpp)
}
