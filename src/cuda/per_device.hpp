#pragma once
// Function attributes (cudaFuncSetAttribute: the dynamic shared memory a kernel may take) hold per
// device, so a launch helper that raises them once per process breaks on a second GPU. This runs a
// configuration once on every device a launch meets, also when several host threads (shards on
// one GPU, or one thread per GPU) reach it at the same time.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuda/cuda_check.hpp"

namespace lmhead::cuda {

class OncePerDevice {
 public:
  static constexpr int kMaxDevices = 64;
  // Calls configure(device) unless it already ran for the calling thread's current device;
  // returns that device.
  template <class Configure>
  int run(Configure&& configure) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const uint64_t bit = uint64_t(1) << (device % kMaxDevices);
    if ((done_.load(std::memory_order_acquire) & bit) == 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      if ((done_.load(std::memory_order_relaxed) & bit) == 0) {
        configure(device);
        done_.fetch_or(bit, std::memory_order_release);
      }
    }
    return device;
  }

 private:
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;
};

}  // namespace lmhead::cuda
