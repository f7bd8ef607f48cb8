#include "cpu/thread_pool.hpp"

#include <algorithm>

namespace lmhead::cpu {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  size_ = threads;
  threads_.reserve(size_ - 1);
  for (int w = 1; w < size_; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::finish_one() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_all();
}

void ThreadPool::run(const std::function<void(int)>& task) {
  error_ = nullptr;
  if (size_ == 1) {
    task(0);
    return;
  }
  task_ = &task;
  pending_.store(size_, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  try {
    task(0);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  finish_one();
  for (int left = pending_.load(std::memory_order_acquire); left != 0;
       left = pending_.load(std::memory_order_acquire))
    pending_.wait(left, std::memory_order_acquire);
  task_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    while (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stopping_.load(std::memory_order_acquire)) return;
    try {
      (*task_)(worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    finish_one();
  }
}

Range split_range(int64_t n, int parts, int part, int64_t align) {
  if (align < 1) align = 1;
  const int64_t units = (n + align - 1) / align;
  Range r;
  r.begin = std::min(n, units * part / parts * align);
  r.end = std::min(n, units * (part + 1) / parts * align);
  return r;
}

}  // namespace lmhead::cpu
