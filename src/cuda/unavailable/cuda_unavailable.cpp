// Linked when lmhead is built without a CUDA compiler: the cuda backend reports why it is absent.
#include "backend/backend.hpp"

namespace lmhead {

bool cuda_available(std::string* why_not) {
  if (why_not) *why_not = "lmhead was built without CUDA (no nvcc found at configure time)";
  return false;
}

std::unique_ptr<Backend> make_cuda_backend(const HeadView&, int) {
  throw Error("the cuda backend is not available: lmhead was built without CUDA (no nvcc found at configure time)");
}

double measure_cuda_read_ceiling_gbps(uint64_t) {
  throw Error("the cuda read ceiling needs the cuda backend: lmhead was built without CUDA");
}

}  // namespace lmhead
