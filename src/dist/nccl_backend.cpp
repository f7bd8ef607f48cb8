// One rank of a one-process-per-GPU head. Each process uploads and runs only its own shard (the
// rows plan_shards gives rank R of N), then the ranks ncclAllGather fixed-size packed per-token
// summaries and every rank merges them in rank order, so every rank holds the same answer:
//   argmax / ties / top-k   22 + 2k int32 words per token and rank,
//   logprobs                a second all-gather: each rank's 512-id chunk sums of exp(x - M)
//                           against the merged maximum M (ceil(max shard rows / 512) doubles
//                           per token and rank), added in id order as on one GPU,
//   logits                  only with --out: [T, max shard rows] floats per rank.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/backend.hpp"
#include "backend/sharding.hpp"
#include "cuda/multi_gpu.hpp"
#include "dist/rendezvous.hpp"

namespace lmhead {
namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(r));
}
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(e));
}

constexpr int kHeaderWords = 5 + select::kMaxTiedIds + 1;  // max, argmax, tie count (2), n tied, tied ids, n top

int summary_words(int k) { return kHeaderWords + 2 * k; }

void pack(const select::TokenSummary& s, int k, int32_t* w) {
  std::memset(w, 0, size_t(summary_words(k)) * 4);
  std::memcpy(&w[0], &s.max, 4);
  w[1] = s.argmax;
  const uint64_t ties = uint64_t(s.tie_count);
  w[2] = int32_t(uint32_t(ties));
  w[3] = int32_t(uint32_t(ties >> 32));
  const int n_tied = std::min<int>(int(s.tied_ids.size()), select::kMaxTiedIds);
  w[4] = n_tied;
  for (int i = 0; i < n_tied; ++i) w[5 + i] = s.tied_ids[size_t(i)];
  const int n_top = std::min<int>(int(s.top.size()), k);
  w[kHeaderWords - 1] = n_top;
  for (int i = 0; i < n_top; ++i) {
    w[kHeaderWords + 2 * i] = s.top[size_t(i)].id;
    std::memcpy(&w[kHeaderWords + 2 * i + 1], &s.top[size_t(i)].logit, 4);
  }
}

select::TokenSummary unpack(const int32_t* w, int k) {
  select::TokenSummary s;
  std::memcpy(&s.max, &w[0], 4);
  s.argmax = w[1];
  s.tie_count = int64_t(uint64_t(uint32_t(w[2])) | (uint64_t(uint32_t(w[3])) << 32));
  s.tied_ids.assign(w + 5, w + 5 + std::clamp(w[4], 0, select::kMaxTiedIds));
  const int n_top = std::clamp(w[kHeaderWords - 1], 0, k);
  for (int i = 0; i < n_top; ++i) {
    Candidate c;
    c.id = w[kHeaderWords + 2 * i];
    std::memcpy(&c.logit, &w[kHeaderWords + 2 * i + 1], 4);
    s.top.push_back(c);
  }
  return s;
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class NcclRankBackend final : public Backend {
 public:
  NcclRankBackend(const HeadView& head, int rank, int ranks, const std::string& id_file)
      : head_(head), rank_(rank), ranks_(ranks) {
    if (ranks < 1 || rank < 0 || rank >= ranks)
      throw Error("--nccl-rank must be in [0, --nccl-ranks), got rank " + std::to_string(rank) + " of " +
                  std::to_string(ranks));
    if (id_file.empty()) throw Error("the one-process-per-GPU mode needs --nccl-id FILE (shared by every rank)");
    bounds_ = plan_shards(head.vocab, ranks);
    for (int r = 0; r < ranks; ++r) max_rows_ = std::max(max_rows_, bounds_[size_t(r) + 1] - bounds_[size_t(r)]);
    // NVLink multicast (NVLS) can take shared GPUs out of service: off unless the launcher says otherwise.
    setenv("NCCL_NVLS_ENABLE", "0", 0);

    ncclUniqueId id;
    if (rank == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      dist::publish_id(id_file, &id, sizeof id);
    } else {
      const std::vector<uint8_t> bytes = dist::wait_for_id(id_file, sizeof id, dist::rendezvous_timeout_s(), rank);
      std::memcpy(&id, bytes.data(), sizeof id);
    }
    std::string why;
    if (!cuda_available(&why)) throw Error("rank " + std::to_string(rank) + ": the cuda backend is not available: " + why);
    int devices = 0;
    cuda_check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    // One process per GPU: rank r drives device r modulo the devices it sees (a launcher that
    // sets CUDA_VISIBLE_DEVICES per rank leaves each process one device 0).
    device_ = rank % devices;
    local_ = make_cuda_backend_on_device(shard_view(head, bounds_[size_t(rank)], bounds_[size_t(rank) + 1]), device_);
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    nccl_check(ncclCommInitRank(&comm_, ranks, id, rank), "ncclCommInitRank");
    // Every rank has read the id once the collective init returns: leave no stale file behind.
    if (rank == 0) std::remove(id_file.c_str());
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    // NCCL connects its peers on the first collective (about 0.15 s between two GPUs of one
    // machine): pay that here, not in the first call.
    int32_t probe = rank;
    std::vector<int32_t> all(static_cast<size_t>(ranks));
    all_gather(&probe, all.data(), 4, ncclInt32, 1);
  }

  ~NcclRankBackend() override {
    cudaSetDevice(device_);
    if (send_) cudaFree(send_);
    if (recv_) cudaFree(recv_);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  bool takes_normed_input() const override { return local_->takes_normed_input(); }

  std::string name() const override {
    return "cuda rank " + std::to_string(rank_) + " of " + std::to_string(ranks_) + " (NCCL, GPU " +
           std::to_string(device_) + ")";
  }

  void forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) override {
    if (req.want_stages)
      throw Error("--dump (every stage) is not available in the one-process-per-GPU mode; run it in one process "
                  "(--gpus N), which gives the same bytes");
    const int64_t V = head_.vocab;
    const int64_t first = bounds_[size_t(rank_)];
    ForwardRequest local_req = req;
    local_req.logprobs = false;
    ForwardOutput local;
    local_.get()->forward(hidden, tokens, local_req, local);
    const auto t1 = std::chrono::steady_clock::now();

    // Phase one: the packed summaries.
    const int k = req.top_k, W = summary_words(k);
    std::vector<int32_t> mine(size_t(tokens) * size_t(W));
    for (int t = 0; t < tokens; ++t) {
      select::TokenSummary s = local.summaries.at(size_t(t));
      if (s.argmax >= 0) s.argmax += int32_t(first);
      for (int32_t& id : s.tied_ids) id += int32_t(first);
      for (Candidate& c : s.top) c.id += int32_t(first);
      pack(s, k, mine.data() + size_t(t) * size_t(W));
    }
    std::vector<int32_t> all(mine.size() * size_t(ranks_));
    all_gather(mine.data(), all.data(), mine.size() * 4, ncclInt32, mine.size());
    out.summaries.assign(size_t(tokens), {});
    for (int r = 0; r < ranks_; ++r)  // rank order on every rank: the same merge everywhere
      for (int t = 0; t < tokens; ++t)
        select::merge(out.summaries[size_t(t)], unpack(all.data() + (size_t(r) * size_t(tokens) + size_t(t)) * size_t(W), k), k);
    const auto t2 = std::chrono::steady_clock::now();

    // Phase two (logprobs): chunk sums against the merged maximum.
    out.sum_exp.assign(req.logprobs ? size_t(tokens) : 0, 0.0);
    auto t3 = t2;
    if (req.logprobs) {
      const size_t max_chunks = size_t(cuda::sum_exp_chunks(max_rows_));
      std::vector<float> global_max(static_cast<size_t>(tokens));
      for (int t = 0; t < tokens; ++t) global_max[size_t(t)] = out.summaries[size_t(t)].max;
      const size_t my_chunks = size_t(cuda::sum_exp_chunks(bounds_[size_t(rank_) + 1] - first));
      std::vector<double> sums(size_t(tokens) * my_chunks), padded(size_t(tokens) * max_chunks, 0.0);
      cuda::chunk_sums_against(*local_, global_max.data(), tokens, sums.data());
      for (int t = 0; t < tokens; ++t)
        std::copy_n(sums.begin() + size_t(t) * my_chunks, my_chunks, padded.begin() + size_t(t) * max_chunks);
      std::vector<double> every(padded.size() * size_t(ranks_));
      all_gather(padded.data(), every.data(), padded.size() * 8, ncclFloat64, padded.size());
      for (int t = 0; t < tokens; ++t) {
        double total = 0.0;
        for (int r = 0; r < ranks_; ++r) {
          const size_t chunks = size_t(cuda::sum_exp_chunks(bounds_[size_t(r) + 1] - bounds_[size_t(r)]));
          const double* p = every.data() + (size_t(r) * size_t(tokens) + size_t(t)) * max_chunks;
          for (size_t c = 0; c < chunks; ++c) total += p[c];
        }
        out.sum_exp[size_t(t)] = total;
      }
      t3 = std::chrono::steady_clock::now();
    }

    out.logits.clear();
    auto t4 = t3;
    if (req.want_logits) {
      const size_t rows = size_t(bounds_[size_t(rank_) + 1] - first), width = size_t(max_rows_);
      std::vector<float> padded(size_t(tokens) * width, 0.0f);
      for (int t = 0; t < tokens; ++t)
        std::copy_n(local.logits.begin() + size_t(t) * rows, rows, padded.begin() + size_t(t) * width);
      std::vector<float> every(padded.size() * size_t(ranks_));
      all_gather(padded.data(), every.data(), padded.size() * 4, ncclFloat32, padded.size());
      out.logits.resize(size_t(tokens) * size_t(V));
      for (int r = 0; r < ranks_; ++r) {
        const size_t r_first = size_t(bounds_[size_t(r)]), r_rows = size_t(bounds_[size_t(r) + 1]) - r_first;
        for (int t = 0; t < tokens; ++t)
          std::copy_n(every.begin() + (size_t(r) * size_t(tokens) + size_t(t)) * width, r_rows,
                      out.logits.begin() + size_t(t) * size_t(V) + r_first);
      }
      t4 = std::chrono::steady_clock::now();
    }

    out.times = local.times;
    out.times.push_back({"exchange: NCCL all-gather and merge of packed summaries", ms_between(t1, t2)});
    if (req.logprobs) out.times.push_back({"exchange: logprob chunk sums (NCCL all-gather)", ms_between(t2, t3)});
    if (req.want_logits) out.times.push_back({"gather of logits (asked for)", ms_between(t3, t4)});
  }

 private:
  // Equal-sized contributions from every rank, laid out in rank order in `recv`.
  void all_gather(const void* send, void* recv, size_t bytes, ncclDataType_t type, size_t count) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    if (bytes > capacity_) {
      if (send_) cudaFree(send_);
      if (recv_) cudaFree(recv_);
      send_ = recv_ = nullptr;
      cuda_check(cudaMalloc(&send_, bytes), "cudaMalloc (exchange)");
      cuda_check(cudaMalloc(&recv_, bytes * size_t(ranks_)), "cudaMalloc (exchange)");
      capacity_ = bytes;
    }
    cuda_check(cudaMemcpyAsync(send_, send, bytes, cudaMemcpyHostToDevice, stream_), "copy to the exchange buffer");
    nccl_check(ncclAllGather(send_, recv_, count, type, comm_, stream_), "ncclAllGather");
    cuda_check(cudaMemcpyAsync(recv, recv_, bytes * size_t(ranks_), cudaMemcpyDeviceToHost, stream_),
               "copy from the exchange buffer");
    cuda_check(cudaStreamSynchronize(stream_), "exchange");
  }

  HeadView head_;
  int rank_, ranks_;
  int device_ = 0;
  std::vector<int64_t> bounds_;
  int64_t max_rows_ = 0;
  std::unique_ptr<Backend> local_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_nccl_rank_backend(const HeadView& head, int rank, int ranks, const std::string& id_file) {
  return std::make_unique<NcclRankBackend>(head, rank, ranks, id_file);
}

}  // namespace lmhead
