// Linked when lmhead is built without a CUDA compiler: the cuda backend reports why it is absent.
#include "backend/backend.hpp"
#include "cuda/bf16_pairs.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/multi_gpu.hpp"

namespace lmhead {

namespace {
constexpr const char* kNoCuda = "lmhead was built without CUDA (no nvcc found at configure time)";
}

bool cuda_available(std::string* why_not) {
  if (why_not) *why_not = kNoCuda;
  return false;
}

std::unique_ptr<Backend> make_cuda_backend(const HeadView&, int) {
  throw Error(std::string("the cuda backend is not available: ") + kNoCuda);
}

std::unique_ptr<Backend> make_cuda_backend_on_device(const HeadView&, int) {
  throw Error(std::string("the cuda backend is not available: ") + kNoCuda);
}

std::unique_ptr<Backend> make_multi_gpu_backend(const HeadView&, int, int) {
  throw Error(std::string("the multi-GPU cuda backend is not available: ") + kNoCuda);
}

void copy_device_rows_to_host(const float*, size_t, void*, float*) {
  throw Error(std::string("device hidden states need CUDA: ") + kNoCuda);
}

double measure_cuda_read_ceiling_gbps(uint64_t) {
  throw Error(std::string("the cuda read ceiling needs the cuda backend: ") + kNoCuda);
}

namespace cuda {
void set_tuning(Backend&, const Tuning&) { throw Error(std::string("cuda tuning: ") + kNoCuda); }
Tuning get_tuning(Backend&) { throw Error(std::string("cuda tuning: ") + kNoCuda); }
CallInfo last_call(Backend&) { throw Error(std::string("cuda call info: ") + kNoCuda); }
std::vector<uint64_t> last_block_clock(Backend&) { throw Error(std::string("cuda block clock: ") + kNoCuda); }
uint64_t head_device_bytes(Backend&) { throw Error(std::string("cuda device bytes: ") + kNoCuda); }
void use_input_buffer(Backend&, float*) { throw Error(std::string("cuda input buffer: ") + kNoCuda); }
double measure_sm_clock_mhz() { throw Error(std::string("cuda clock probe: ") + kNoCuda); }
void tanh_sweep(uint64_t, uint64_t, uint32_t*) { throw Error(std::string("cuda tanh sweep: ") + kNoCuda); }
int device_count() { return 0; }
void set_tuning_of_shards(Backend&, const Tuning&) { throw Error(std::string("cuda tuning: ") + kNoCuda); }
std::vector<CallInfo> last_calls_of_shards(Backend&) { throw Error(std::string("cuda call info: ") + kNoCuda); }
void set_shared_input(Backend&, bool) { throw Error(std::string("cuda input buffer: ") + kNoCuda); }
void dpbf16_lanes_on_device(const float*, const float*, const float*, const float*, const float*, int64_t, float*) {
  throw Error(std::string("cuda bf16 step check: ") + kNoCuda);
}
}  // namespace cuda

}  // namespace lmhead
