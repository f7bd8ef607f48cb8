#pragma once
// Owning wrappers for device memory (cudaMalloc only) and mapped pinned host memory.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace lmhead::cuda {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(size_t n, cudaStream_t stream) { reset(n, stream); }
  ~DeviceArray() { release(); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) { release(); ptr_ = std::exchange(o.ptr_, nullptr); n_ = std::exchange(o.n_, 0); }
    return *this;
  }
  // Allocates n elements and fills them with zero bytes, so nothing the kernels read is ever
  // uninitialised (compute-sanitizer initcheck stays quiet). The zeros are queued on `stream`, the
  // stream whose work uses the buffer: a plain cudaMemset returns before it runs and goes to the
  // legacy default stream, which a cudaStreamNonBlocking stream does not wait for, so under load it
  // could land after a kernel's output and erase it (docs/cuda.md, "Completion").
  void reset(size_t n, cudaStream_t stream) {
    release();
    if (n == 0) return;
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    n_ = n;
    CUDA_CHECK(cudaMemsetAsync(ptr_, 0, n * sizeof(T), stream));
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  void release() noexcept {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// Page-locked host memory mapped into the device's address space: kernels read the hidden state
// from it and write the per-token results into it directly, with no copy node in the graph.
template <typename T>
class MappedHostArray {
 public:
  enum class Mapping { this_device, portable };
  MappedHostArray() = default;
  explicit MappedHostArray(size_t n) { reset(n); }
  ~MappedHostArray() { release(); }
  MappedHostArray(const MappedHostArray&) = delete;
  MappedHostArray& operator=(const MappedHostArray&) = delete;
  // portable: mapped into every device's address space (one buffer read by several GPUs); the
  // device pointer is then the host pointer (unified addressing).
  void reset(size_t n, Mapping mapping = Mapping::this_device) {
    const bool portable = mapping == Mapping::portable;
    release();
    if (n == 0) return;
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, n * sizeof(T), cudaHostAllocMapped | (portable ? cudaHostAllocPortable : 0u)));
    host_ = static_cast<T*>(p);
    n_ = n;
    std::memset(static_cast<void*>(host_), 0, n * sizeof(T));
    void* d = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    dev_ = static_cast<T*>(d);
  }
  T* host() const { return host_; }
  T* device() const { return dev_; }
  size_t size() const { return n_; }

 private:
  void release() noexcept {
    if (host_) cudaFreeHost(host_);
    host_ = dev_ = nullptr;
    n_ = 0;
  }
  T* host_ = nullptr;
  T* dev_ = nullptr;
  size_t n_ = 0;
};

}  // namespace lmhead::cuda
