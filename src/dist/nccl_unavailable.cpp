// Linked when lmhead is built without NCCL (or without CUDA): the one-process-per-GPU mode says why.
#include "backend/backend.hpp"

namespace lmhead {

std::unique_ptr<Backend> make_nccl_rank_backend(const HeadView&, int, int, const std::string&) {
  throw Error("the one-process-per-GPU mode (--nccl-rank) needs NCCL: lmhead was built without it "
              "(no nccl.h / libnccl found at configure time, or LMHEAD_NCCL=OFF, or no CUDA)");
}

}  // namespace lmhead
