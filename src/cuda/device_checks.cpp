// The checks a CUDA backend makes of the machine before it starts, and the copy of a caller's
// device rows to the host for the backends that read host memory.
#include <cuda_runtime.h>

#include <string>

#include "backend/backend.hpp"
#include "cuda/cuda_check.hpp"

namespace lmhead {

void copy_device_rows_to_host(const float* device, size_t n, void* stream, float* host) {
  cudaPointerAttributes a{};
  CUDA_CHECK(cudaPointerGetAttributes(&a, device));
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw Error("device hidden states: the pointer is not GPU memory (run() takes host memory)");
  int caller = 0;
  CUDA_CHECK(cudaGetDevice(&caller));
  if (a.type == cudaMemoryTypeDevice) CUDA_CHECK(cudaSetDevice(a.device));
  // Ordered after the caller's work on its stream, and complete when this returns.
  const cudaError_t copied = cudaMemcpyAsync(host, device, n * sizeof(float), cudaMemcpyDeviceToHost,
                                             static_cast<cudaStream_t>(stream));
  const cudaError_t synced = copied == cudaSuccess ? cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) : copied;
  CUDA_CHECK(cudaSetDevice(caller));
  CUDA_CHECK(synced);
}

bool cuda_available(std::string* why_not) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why_not) *why_not = std::string("no usable CUDA device (") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) + ")";
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    if (why_not) *why_not = "no CUDA device found";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    if (why_not) *why_not = "cannot read the properties of CUDA device 0";
    cudaGetLastError();
    return false;
  }
  if (prop.major < 9) {
    if (why_not)
      *why_not = std::string("the cuda backend is built for compute capability 9.0 (Hopper) and newer; device 0 (") +
                 prop.name + ") is " + std::to_string(prop.major) + "." + std::to_string(prop.minor);
    return false;
  }
  return true;
}

}  // namespace lmhead
