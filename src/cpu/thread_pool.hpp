#pragma once
// A persistent pool of worker threads for the CPU backend: threads are created once, then every
// call wakes them through a generation counter (a futex under std::atomic::wait), so a forward
// pass pays a wake-up, never a thread creation.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lmhead::cpu {

class ThreadPool {
 public:
  // threads <= 0: one per hardware thread. The calling thread is worker 0, so threads - 1
  // threads are created.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Runs task(worker) for worker = 0..size()-1 concurrently and returns when all are done. The
  // first exception thrown by any worker is rethrown here. Not reentrant: one run at a time.
  void run(const std::function<void(int worker)>& task);

 private:
  void worker_loop(int worker);
  void finish_one();

  int size_ = 1;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Splits [0, n) into `parts` contiguous ranges of nearly equal size, each a multiple of `align`
// except the last; range i is [begin, end).
struct Range {
  int64_t begin = 0, end = 0;
};
Range split_range(int64_t n, int parts, int part, int64_t align = 1);

}  // namespace lmhead::cpu
