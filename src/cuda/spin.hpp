#pragma once
// One step of a host busy-wait (the shard pool, its barrier, the wait on a kernel's done flag):
// the pause instruction keeps the spinning core from starving its sibling hyper-thread.
#include <thread>

namespace lmhead::cuda {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace lmhead::cuda
