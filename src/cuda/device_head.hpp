#pragma once
// The head's copies on one device (docs/cuda.md, "Device layouts"): the stream layouts its plans
// read when the device has room for them (Q5_K: lanes and sub-blocks splits; Q4_K, Q6_K and Q8_0
// with hidden a multiple of 256: one each), else the file's rows. Next to the stream layouts the
// file's rows are uploaded only by the first call whose plan reads them (the float routes, a forced
// staged or generic kernel), so a serving engine keeps that memory for its KV cache.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/device_layout.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/plan.hpp"
#include "cuda/stream_layout.hpp"

namespace lmhead::cuda {

class DeviceHead {
 public:
  // Uploads on `stream` (the caller synchronizes before it relies on the bytes) to the calling
  // thread's current device; `head` must outlive this object (the rows may be uploaded later).
  DeviceHead(const HeadView& head, cudaStream_t stream);

  const DeviceLayout& layout() const { return layout_; }
  // copy_bit()s of the copies a plan may read: those held, and the file's rows (uploaded on demand).
  unsigned copies() const;
  // Uploads the copy `c` if it is not held yet (only the file's rows can be missing).
  void ensure(HeadCopy c);
  uint64_t bytes() const { return rows_.bytes() + aux_.bytes() + lanes_.bytes() + subblocks_.bytes(); }

  const uint8_t* rows() const { return rows_.get(); }
  const uint16_t* aux() const { return aux_.get(); }      // Q6_K: [vocab][groups] f16 d of the rows
  const uint8_t* lanes() const { return lanes_.get(); }   // the lanes split (or the type's only stream layout)
  const uint8_t* subblocks() const { return subblocks_.get(); }

 private:
  // One stream copy of the head: its size, its item size and the tile transcoder that fills it.
  struct StreamCopy {
    DeviceArray<uint8_t>* target;
    uint64_t bytes;
    int item_bytes;
    void (*transcode)(const uint8_t* const (&rows)[stream::kTileRows], int groups, uint8_t* dst);
  };
  std::vector<StreamCopy> stream_copies();
  uint64_t working_bytes() const;
  int64_t rows_per_chunk() const;
  void report_progress(int64_t done, int& last_pct, const char* what) const;
  void upload_rows();
  void upload_stream(const std::vector<StreamCopy>& copies);
  void upload(void* dst, const void* src, size_t bytes);

  HeadView head_;
  cudaStream_t stream_;
  DeviceLayout layout_;
  DeviceArray<uint8_t> rows_;       // the file's rows in the device layout (device_layout.hpp)
  DeviceArray<uint16_t> aux_;
  DeviceArray<uint8_t> lanes_;
  DeviceArray<uint8_t> subblocks_;
};

}  // namespace lmhead::cuda
