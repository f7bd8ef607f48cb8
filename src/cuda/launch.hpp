#pragma once
// How every head kernel is launched: its dynamic shared-memory limit is raised once per device (to
// what the device allows next to the kernel's static shared memory), then one launch with
// programmatic dependent launch when asked (the kernel waits for the prep kernel's memory with
// griddepcontrol.wait, so its weight loads can start while the prep still runs). The sampling
// kernels use the same launch (launch_maybe_pdl).
#include <cuda_runtime.h>

#include <atomic>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels.hpp"
#include "cuda/per_device.hpp"

namespace lmhead::cuda {

// Raises Kernel's dynamic shared-memory limit on the calling thread's device (once per device).
template <auto Kernel>
void allow_max_dynamic_smem() {
  static OncePerDevice configured;
  configured.run([](int device) {
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attrs{};
    CUDA_CHECK(cudaFuncGetAttributes(&attrs, Kernel));
    CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    optin - int(attrs.sharedSizeBytes)));
  });
}

// One launch, as a programmatic dependent of the stream's previous kernel when `pdl` (the kernel
// then waits for that kernel's memory itself, with griddepcontrol.wait).
template <auto Kernel, class... Args>
void launch_maybe_pdl(dim3 grid, dim3 block, size_t dynamic_smem, bool pdl, cudaStream_t stream, const Args&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = dynamic_smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, Kernel, args...));
}

// The dynamic shared memory a block may opt in to on the calling thread's device (asked once per
// device): what the staged kernels size their rings to.
inline size_t smem_optin_of_current_device() {
  static OncePerDevice asked;
  static std::atomic<int> optin[OncePerDevice::kMaxDevices];
  const int device = asked.run([](int d) {
    int v = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
    optin[d % OncePerDevice::kMaxDevices].store(v, std::memory_order_relaxed);
  });
  return size_t(optin[device % OncePerDevice::kMaxDevices].load(std::memory_order_relaxed));
}

template <auto Kernel, class... Args>
void launch_head_kernel(dim3 grid, dim3 block, size_t dynamic_smem, bool pdl, cudaStream_t stream, const Args&... args) {
  allow_max_dynamic_smem<Kernel>();
  launch_maybe_pdl<Kernel>(grid, block, dynamic_smem, pdl, stream, args...);
}

}  // namespace lmhead::cuda
