#pragma once
// The head's copies on one device (docs/cuda.md, "Device layouts"): one stream layout its plans
// read when the device has room for it (Q5_K: the sub-blocks split, which every token count's
// kernel reads, plus the lanes split only with HeadView::cuda_second_layout; Q4_K, Q6_K and Q8_0
// with hidden a multiple of 256: their one layout), else the file's rows. Other copies are uploaded
// only by the first call whose plan reads them (the file's rows for the float routes; a forced
// kernel of another layout), so a serving engine keeps that memory for its KV cache.
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
  // copy_bit()s of stream copies not held that a forced plan row may still ask for (uploaded on demand).
  unsigned on_demand() const;
  // Uploads the copy `c` if it is not held yet.
  void ensure(HeadCopy c);
  uint64_t bytes() const { return rows_.bytes() + aux_.bytes() + lanes_.bytes() + subblocks_.bytes(); }

  const uint8_t* rows() const { return rows_.get(); }
  const uint16_t* aux() const { return aux_.get(); }      // Q6_K: [vocab][groups] f16 d of the rows
  const uint8_t* lanes() const { return lanes_.get(); }   // the lanes split (or the type's only stream layout)
  const uint8_t* subblocks() const { return subblocks_.get(); }

 private:
  // One stream copy of the head: its size, its item size and the tile transcoder that fills it.
  struct StreamCopy {
    HeadCopy copy;  // lanes or subblocks
    uint64_t bytes;
    int item_bytes;
    void (*transcode)(const uint8_t* const (&rows)[stream::kTileRows], int groups, uint8_t* dst);
  };
  std::vector<StreamCopy> stream_copies() const;
  static StreamCopy* find(HeadCopy c, std::vector<StreamCopy>& copies);
  // The buffer of a stream copy (lanes or subblocks).
  DeviceArray<uint8_t>& array(HeadCopy c) { return c == HeadCopy::lanes ? lanes_ : subblocks_; }
  const DeviceArray<uint8_t>& array(HeadCopy c) const { return c == HeadCopy::lanes ? lanes_ : subblocks_; }
  uint64_t working_bytes() const;
  int64_t rows_per_chunk() const;
  void report_progress(int64_t done, int& last_pct, const char* what) const;
  void upload_rows();
  void upload_stream(const std::vector<StreamCopy>& copies);
  void upload(void* dst, const void* src, size_t bytes);
  void check_fits(uint64_t bytes, const char* what) const;

  HeadView head_;
  cudaStream_t stream_;
  DeviceLayout layout_;
  DeviceArray<uint8_t> rows_;       // the file's rows in the device layout (device_layout.hpp)
  DeviceArray<uint16_t> aux_;
  DeviceArray<uint8_t> lanes_;
  DeviceArray<uint8_t> subblocks_;
};

}  // namespace lmhead::cuda
