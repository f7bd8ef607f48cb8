#pragma once
// The CPU backend with an explicit instruction-set limit, for tests and benchmarks that compare the
// SIMD kernels with the portable ones inside the same backend. make_cpu_backend uses the best.
#include <memory>

#include "backend/backend.hpp"
#include "cpu/kernels.hpp"

namespace lmhead::cpu {

std::unique_ptr<Backend> make_cpu_backend_limited(const HeadView& head, int threads, Isa limit);

}  // namespace lmhead::cpu
