// lmhead.compare: two sets of logits under a bounded-logit policy (numerics.md §11), over
// lmhead::compare. The figures are the ones `lmhead compare --json` prints, computed by the same
// code; as_dict() gives that JSON object less its "a" and "b" (the CLI's names of the sources).
#include "compare_py.hpp"
#include "ndarray_util.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lmhead/compare.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::handle g_input_error;  // lmhead.InputError, looked up once the module has made it

// Everything wrong with a comparison's arguments is the caller's: InputError, with the engine's
// message where the engine found it.
[[noreturn]] void raise_input(const std::string& message) {
  PyErr_SetString(g_input_error.ptr(), message.c_str());
  throw nb::python_error();
}

std::string metric_name(lmhead::PolicyClause::Metric m) { return std::string(lmhead::to_string(m)); }
std::string op_name(lmhead::PolicyClause::Op op) { return std::string(lmhead::to_string(op)); }

std::string shape_text(int64_t t, int64_t v) { return "[" + std::to_string(t) + ", " + std::to_string(v) + "]"; }

// One side: float32 or float64 logits [V] (one token) or [T, V], read in place when C-contiguous,
// gathered once when strided. `array` keeps the caller's buffer alive while the comparison runs.
struct Side {
  nb::ndarray<nb::ro> array;
  int64_t tokens = 0, vocab = 0;
  bool is_double = false;
  const float* f = nullptr;
  const double* d = nullptr;
  std::vector<float> f_copy;
  std::vector<double> d_copy;
};

void read_side(nb::handle obj, const char* name, Side& s) {
  if (!nb::try_cast(obj, s.array, false) && !nb::try_cast(obj, s.array, true))
    raise_input(std::string(name) +
                " must be a float32 or float64 array of logits [V] or [T, V] (NumPy, PyTorch, DLPack or the buffer "
                "protocol), got an object of type " + std::string(nb::type_name(obj.type()).c_str()));
  const nb::ndarray<nb::ro>& a = s.array;
  if (a.device_type() != nb::device::cpu::value)
    raise_input(std::string(name) + " is on a device (DLPack device type " + std::to_string(a.device_type()) +
                "): give host memory (e.g. .cpu())");
  if (a.dtype() == nb::dtype<double>()) s.is_double = true;
  else if (a.dtype() != nb::dtype<float>())
    raise_input(std::string(name) + " must be float32 or float64, got " + describe_dtype(a.dtype()));
  if (a.ndim() != 1 && a.ndim() != 2)
    raise_input(std::string(name) + " must be logits [V] or [T, V], got " + std::to_string(a.ndim()) + " dimensions");
  s.vocab = int64_t(a.shape(a.ndim() - 1));
  s.tokens = a.ndim() == 2 ? int64_t(a.shape(0)) : 1;
  if (s.is_double) s.d = packed_or_gathered<double>(a, s.tokens, s.vocab, s.d_copy);
  else s.f = packed_or_gathered<float>(a, s.tokens, s.vocab, s.f_copy);
}

lmhead::Policy policy_of(nb::handle policy) {
  if (policy.is_none()) return {};
  if (nb::isinstance<lmhead::Policy>(policy)) return nb::cast<lmhead::Policy>(policy);
  if (!nb::isinstance<nb::str>(policy))
    raise_input("policy must be a str such as 'max<11,mean<1.25' or an lmhead.Policy, got an object of type " +
                std::string(nb::type_name(policy.type()).c_str()));
  try {
    return lmhead::parse_policy(nb::cast<std::string>(policy));
  } catch (const lmhead::Error& e) {
    raise_input(e.what());
  }
}

struct PyComparison {
  lmhead::Comparison c;
  std::string policy_text;
};

// One token's figures, with its index (the JSON's "token").
struct PyToken {
  int64_t token = 0;
  lmhead::TokenComparison c;
};

PyComparison run_compare(nb::handle a_obj, nb::handle b_obj, nb::handle policy_obj, int top_k) {
  lmhead::CompareOptions o;
  o.policy = policy_of(policy_obj);  // before the arrays: a malformed policy is named first, as the CLI does
  o.top_k = top_k;
  Side a, b;
  read_side(a_obj, "A", a);
  read_side(b_obj, "B", b);
  if (a.tokens != b.tokens || a.vocab != b.vocab)
    raise_input("shapes disagree: A is " + shape_text(a.tokens, a.vocab) + ", B is " + shape_text(b.tokens, b.vocab));
  const int64_t T = a.tokens, V = a.vocab;
  const size_t n = size_t(T) * size_t(V);
  PyComparison out;
  out.policy_text = o.policy.text;
  std::string failure;
  {
    nb::gil_scoped_release unlocked;
    try {
      using fs = std::span<const float>;
      using ds = std::span<const double>;
      if (a.is_double && b.is_double) out.c = lmhead::compare(ds(a.d, n), ds(b.d, n), T, V, o);
      else if (a.is_double) out.c = lmhead::compare(ds(a.d, n), fs(b.f, n), T, V, o);
      else if (b.is_double) out.c = lmhead::compare(fs(a.f, n), ds(b.d, n), T, V, o);
      else out.c = lmhead::compare(fs(a.f, n), fs(b.f, n), T, V, o);
    } catch (const lmhead::Error& e) {
      failure = e.what();  // an empty shape, a NaN or infinity, top_k < 1: raised with the GIL held again
    }
  }
  if (!failure.empty()) raise_input(failure);
  return out;
}

nb::dict token_dict(const PyToken& t) {
  nb::dict d;
  d["token"] = t.token;
  d["max_abs"] = t.c.max_abs;
  d["mean_abs"] = t.c.mean_abs;
  d["differing"] = t.c.differing;
  d["max_ulp"] = t.c.max_ulp;
  d["argmax_a"] = t.c.argmax_a;
  d["argmax_b"] = t.c.argmax_b;
  d["argmax_agree"] = t.c.argmax_agree;
  d["topk_overlap"] = t.c.topk_overlap;
  d["kl"] = t.c.kl;
  return d;
}

nb::dict clause_dict(const lmhead::ClauseResult& r) {
  nb::dict d;
  d["clause"] = r.clause.text;
  d["measured"] = r.measured;
  d["bound"] = r.clause.bound;
  d["op"] = op_name(r.clause.op);
  d["holds"] = r.holds;
  return d;
}

std::vector<PyToken> tokens_of(const PyComparison& s) {
  std::vector<PyToken> out(s.c.per_token.size());
  for (size_t t = 0; t < out.size(); ++t) out[t] = {int64_t(t), s.c.per_token[t]};
  return out;
}

std::string clause_repr(const lmhead::PolicyClause& c) {
  return "lmhead.PolicyClause('" + c.text + "': " + metric_name(c.metric) + " " + op_name(c.op) + " " +
         nb::cast<std::string>(nb::repr(nb::float_(c.bound))) + ")";
}

}  // namespace

void bind_compare(nb::module_& m) {
  g_input_error = m.attr("InputError");

  nb::class_<lmhead::PolicyClause>(m, "PolicyClause", "One clause of a policy: METRIC OP BOUND, e.g. max<11.")
      .def_prop_ro("text", [](const lmhead::PolicyClause& c) { return c.text; }, "the clause as written, without spaces")
      .def_prop_ro("metric", [](const lmhead::PolicyClause& c) { return metric_name(c.metric); },
                   "max, mean, kl, klmax, argmax, topk, differing or ulp")
      .def_prop_ro("op", [](const lmhead::PolicyClause& c) { return op_name(c.op); }, "<, <=, >, >= or =")
      .def_prop_ro("bound", [](const lmhead::PolicyClause& c) { return c.bound; }, "the bound (argmax=all: 1.0)")
      .def("__repr__", &clause_repr);

  nb::class_<lmhead::Policy>(m, "Policy", "A parsed bounded-logit policy: every clause must hold.")
      .def_prop_ro("text", [](const lmhead::Policy& p) { return p.text; })
      .def_prop_ro("clauses", [](const lmhead::Policy& p) { return p.clauses; })
      .def("__len__", [](const lmhead::Policy& p) { return p.clauses.size(); })
      .def("__str__", [](const lmhead::Policy& p) { return p.text; })
      .def("__repr__", [](const lmhead::Policy& p) { return "lmhead.Policy('" + p.text + "')"; });

  nb::class_<lmhead::ClauseResult>(m, "ClauseResult", "A policy clause measured on a comparison.")
      .def_prop_ro("clause", [](const lmhead::ClauseResult& r) { return r.clause.text; })
      .def_prop_ro("metric", [](const lmhead::ClauseResult& r) { return metric_name(r.clause.metric); })
      .def_prop_ro("op", [](const lmhead::ClauseResult& r) { return op_name(r.clause.op); })
      .def_prop_ro("bound", [](const lmhead::ClauseResult& r) { return r.clause.bound; })
      .def_prop_ro("measured", [](const lmhead::ClauseResult& r) { return r.measured; })
      .def_prop_ro("holds", [](const lmhead::ClauseResult& r) { return r.holds; })
      .def("as_dict", &clause_dict, "the clause as `lmhead compare --json` prints it in \"policy\"")
      .def("__repr__", [](const lmhead::ClauseResult& r) {
        return "lmhead.ClauseResult('" + r.clause.text + "', measured=" +
               nb::cast<std::string>(nb::repr(nb::float_(r.measured))) + ", " + (r.holds ? "holds" : "violated") + ")";
      });

  nb::class_<PyToken>(m, "TokenComparison", "One token's figures (a row of A against the same row of B).")
      .def_prop_ro("token", [](const PyToken& t) { return t.token; })
      .def_prop_ro("max_abs", [](const PyToken& t) { return t.c.max_abs; })
      .def_prop_ro("mean_abs", [](const PyToken& t) { return t.c.mean_abs; })
      .def_prop_ro("differing", [](const PyToken& t) { return t.c.differing; })
      .def_prop_ro("max_ulp", [](const PyToken& t) { return t.c.max_ulp; })
      .def_prop_ro("argmax_a", [](const PyToken& t) { return t.c.argmax_a; })
      .def_prop_ro("argmax_b", [](const PyToken& t) { return t.c.argmax_b; })
      .def_prop_ro("argmax_agree", [](const PyToken& t) { return t.c.argmax_agree; })
      .def_prop_ro("topk_overlap", [](const PyToken& t) { return t.c.topk_overlap; })
      .def_prop_ro("kl", [](const PyToken& t) { return t.c.kl; })
      .def("as_dict", &token_dict, "the token as `lmhead compare --json` prints it in \"tokens\"")
      .def("__repr__", [](const PyToken& t) {
        return "lmhead.TokenComparison(token=" + std::to_string(t.token) +
               ", max_abs=" + nb::cast<std::string>(nb::repr(nb::float_(t.c.max_abs))) +
               ", argmax " + std::to_string(t.c.argmax_a) + "/" + std::to_string(t.c.argmax_b) + ")";
      });

  nb::class_<PyComparison>(m, "Comparison",
                           "lmhead.compare's result: the figures of `lmhead compare --json`, computed in double.")
      .def_prop_ro("shape", [](const PyComparison& s) { return nb::make_tuple(s.c.tokens, s.c.vocab); },
                   "(T, V); a [V] side counts as one token")
      .def_prop_ro("top_k", [](const PyComparison& s) { return s.c.top_k; }, "k of the top-k overlap (clamped to V)")
      .def_prop_ro("max_abs", [](const PyComparison& s) { return s.c.max_abs; }, "max |a - b| over every logit")
      .def_prop_ro("mean_abs", [](const PyComparison& s) { return s.c.mean_abs; }, "mean |a - b| over every logit")
      .def_prop_ro("differing", [](const PyComparison& s) { return s.c.differing; },
                   "logits whose f32 bit patterns differ (+0 and -0 equal; a float64 side rounded to f32 first)")
      .def_prop_ro("values", [](const PyComparison& s) { return s.c.tokens * s.c.vocab; }, "T * V")
      .def_prop_ro("max_ulp", [](const PyComparison& s) { return s.c.max_ulp; },
                   "the largest ulp distance between f32 values (opposite signs: every float between them)")
      .def_prop_ro("argmax_agree", [](const PyComparison& s) { return s.c.argmax_agree; },
                   "tokens whose argmax is the same (lowest index wins a tie)")
      .def_prop_ro("topk_overlap", [](const PyComparison& s) { return s.c.topk_overlap; },
                   "mean over tokens of |topk(A) n topk(B)| / k")
      .def_prop_ro("kl_mean", [](const PyComparison& s) { return s.c.kl_mean; },
                   "mean over tokens of KL(softmax(A) || softmax(B)), max-subtracted, in double")
      .def_prop_ro("kl_max", [](const PyComparison& s) { return s.c.kl_max; }, "the largest per-token KL")
      .def_prop_ro("tokens", &tokens_of, "per token: a list of TokenComparison")
      .def_prop_ro("policy", [](const PyComparison& s) { return s.c.policy; },
                   "each clause of the policy with its measured value and whether it holds: a list of ClauseResult")
      .def_prop_ro("policy_text", [](const PyComparison& s) { return s.policy_text; })
      .def_prop_ro("policy_holds", [](const PyComparison& s) { return s.c.policy_holds; },
                   "every clause holds (True for an empty policy)")
      .def("as_dict",
           [](const PyComparison& s) {
             nb::dict d;
             nb::list shape;
             shape.append(s.c.tokens);
             shape.append(s.c.vocab);
             d["shape"] = shape;
             d["top_k"] = s.c.top_k;
             d["max_abs"] = s.c.max_abs;
             d["mean_abs"] = s.c.mean_abs;
             d["differing"] = s.c.differing;
             d["values"] = s.c.tokens * s.c.vocab;
             d["max_ulp"] = s.c.max_ulp;
             d["argmax_agree"] = s.c.argmax_agree;
             d["topk_overlap"] = s.c.topk_overlap;
             d["kl_mean"] = s.c.kl_mean;
             d["kl_max"] = s.c.kl_max;
             nb::list toks;
             for (const PyToken& t : tokens_of(s)) toks.append(token_dict(t));
             d["tokens"] = toks;
             nb::list pol;
             for (const lmhead::ClauseResult& r : s.c.policy) pol.append(clause_dict(r));
             d["policy"] = pol;
             d["policy_text"] = s.policy_text;
             d["policy_holds"] = s.c.policy_holds;
             return d;
           },
           "The object `lmhead compare --json` prints, less \"a\" and \"b\" (the CLI's names of its sources).")
      .def("__repr__", [](const PyComparison& s) {
        std::string r = "lmhead.Comparison(shape=(" + std::to_string(s.c.tokens) + ", " + std::to_string(s.c.vocab) + ")" +
                        ", max_abs=" + nb::cast<std::string>(nb::repr(nb::float_(s.c.max_abs))) +
                        ", mean_abs=" + nb::cast<std::string>(nb::repr(nb::float_(s.c.mean_abs))) +
                        ", argmax_agree=" + std::to_string(s.c.argmax_agree) + "/" + std::to_string(s.c.tokens);
        if (!s.c.policy.empty()) r += ", policy '" + s.policy_text + "' " + (s.c.policy_holds ? "holds" : "violated");
        return r + ")";
      });

  m.def(
      "parse_policy",
      [](const std::string& text) {
        try {
          return lmhead::parse_policy(text);
        } catch (const lmhead::Error& e) {
          raise_input(e.what());
        }
      },
      "text"_a,
      "Parses a bounded-logit policy such as 'max<11,mean<1.25,argmax=all' (policy_grammar() has the grammar); a "
      "malformed one raises InputError naming the clause.");
  m.def("policy_grammar", []() { return std::string(lmhead::policy_grammar()); },
        "The policy grammar, as `lmhead compare --help` prints it.");
  m.def("compare", &run_compare, "a"_a, "b"_a, "policy"_a.none() = "", "top_k"_a = 5,
        "Two sets of logits, float32 or float64 [V] or [T, V] on the host (NumPy, PyTorch, DLPack or the buffer\n"
        "protocol), compared as `lmhead compare` does: max and mean |a - b|, differing values, the largest ulp\n"
        "distance, argmax agreement, top-k overlap, KL(softmax(a) || softmax(b)), overall and per token, all in\n"
        "double. policy: a str such as 'max<11,mean<1.25', a Policy or None (none); its clauses are measured and\n"
        "policy_holds says whether all hold. Shapes that disagree, a NaN or infinity, another dtype, top_k < 1\n"
        "or a malformed policy raise InputError with the engine's message. The GIL is released while it runs.");
}
