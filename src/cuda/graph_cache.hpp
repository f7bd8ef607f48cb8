#pragma once
// The CUDA graphs of a backend's calls, one per key (the call's plan and request): the first call
// of a key runs its work directly, then it is captured once and replayed by later calls.
#include <cuda_runtime.h>

#include <functional>
#include <map>

#include "cuda/cuda_check.hpp"

namespace lmhead::cuda {

template <class Key>
class GraphCache {
 public:
  explicit GraphCache(cudaStream_t stream) : stream_(stream) {}
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache() { clear(); }

  // Replays the graph of `key` on the stream; false when none is captured.
  bool replay(const Key& key) {
    const auto it = graphs_.find(key);
    if (it == graphs_.end()) return false;
    CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    return true;
  }

  // Captures what `record` enqueues on the stream as the graph of `key` (nothing runs).
  void capture(const Key& key, const std::function<void()>& record) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      record();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(err);
    graphs_[key] = exec;
  }

  // Drops every graph (they hold the buffers' addresses of their capture).
  void clear() {
    cudaStreamSynchronize(stream_);  // a polled call's graph may still be retiring
    for (auto& [k, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

 private:
  cudaStream_t stream_;
  std::map<Key, cudaGraphExec_t> graphs_;
};

}  // namespace lmhead::cuda
