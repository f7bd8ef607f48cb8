#pragma once
// Every CUDA runtime call and every launch is checked; a failure becomes an lmhead::Error that names
// the call, the file:line and CUDA's own error string, so a device problem never passes silently.
#include <cuda_runtime.h>

#include <string>

#include "lmhead/error.hpp"

namespace lmhead::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  cudaGetLastError();  // clear the runtime's last-error slot so the next launch check reports its own error
  throw Error(std::string("CUDA error at ") + file + ":" + std::to_string(line) + ": " + what + ": " +
              cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace lmhead::cuda

#define CUDA_CHECK(expr)                                                             \
  do {                                                                               \
    const cudaError_t lmhead_cuda_err_ = (expr);                                     \
    if (lmhead_cuda_err_ != cudaSuccess)                                             \
      ::lmhead::cuda::throw_cuda_error(lmhead_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface through cudaGetLastError.
#define CUDA_CHECK_LAUNCH(name) CUDA_CHECK(cudaGetLastError())
