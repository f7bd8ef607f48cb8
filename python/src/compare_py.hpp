#pragma once
// lmhead.compare, lmhead.parse_policy and lmhead.policy_grammar (compare_py.cpp): the bounded-logit
// comparison of lmhead/compare.hpp, the same figures `lmhead compare --json` prints.
#include <nanobind/nanobind.h>

// Adds Policy, PolicyClause, Comparison, TokenComparison, ClauseResult and the three functions to
// the module. Called after lmhead.Error and lmhead.InputError exist: bad input raises InputError.
void bind_compare(nanobind::module_& m);
