#include "cuda/device_head.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "cuda/cuda_check.hpp"

namespace lmhead::cuda {

std::vector<DeviceHead::StreamCopy> DeviceHead::stream_copies() const {
  const int64_t V = head_.vocab;
  const int G = layout_.groups;
  switch (head_.type) {
    case TensorType::Q5_K:
      return {{HeadCopy::lanes, stream::bytes(V, G), stream::kItemBytes,
               [](const uint8_t* const (&rows)[stream::kTileRows], int groups, uint8_t* dst) {
                 stream::transcode_tile(rows, groups, dst, stream::Split::lanes);
               }},
              {HeadCopy::subblocks, stream::bytes(V, G), stream::kItemBytes,
               [](const uint8_t* const (&rows)[stream::kTileRows], int groups, uint8_t* dst) {
                 stream::transcode_tile(rows, groups, dst, stream::Split::subblocks);
               }}};
    case TensorType::Q4_K:
      return {{HeadCopy::lanes, stream::q4_bytes(V, G), stream::kQ4ItemBytes, stream::transcode_tile_q4k}};
    case TensorType::Q6_K:
      return {{HeadCopy::lanes, stream::q6_bytes(V, G), stream::kQ6ItemBytes, stream::transcode_tile_q6k}};
    case TensorType::Q8_0:
      if (head_.hidden % 256 != 0) return {};
      return {{HeadCopy::lanes, stream::q8_0_bytes(V, G), stream::kQ80ItemBytes, stream::transcode_tile_q8_0}};
    default:
      return {};
  }
}

DeviceHead::StreamCopy* DeviceHead::find(HeadCopy c, std::vector<StreamCopy>& copies) {
  for (StreamCopy& s : copies)
    if (s.copy == c) return &s;
  return nullptr;
}

DeviceHead::DeviceHead(const HeadView& head, cudaStream_t stream)
    : head_(head), stream_(stream), layout_(device_layout(head.type, head.hidden)) {
  std::vector<StreamCopy> copies = stream_copies();
  // Q5_K: the sub-blocks split alone unless asked for both (measured: docs/performance.md, "One
  // copy of the head").
  if (head.type == TensorType::Q5_K && !head.cuda_second_layout)
    copies.erase(copies.begin() + (find(HeadCopy::lanes, copies) - copies.data()));
  uint64_t stream_total = 0;
  for (const StreamCopy& c : copies) stream_total += c.bytes;
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (!copies.empty() && stream_total + working_bytes() <= free_bytes) upload_stream(copies);
  else upload_rows();
}

// The logits and activation buffers come on top of the head: 10 % of its rows plus 64 MiB.
uint64_t DeviceHead::working_bytes() const {
  const uint64_t rows = uint64_t(head_.vocab) * uint64_t(layout_.row_stride);
  return rows / 10 + (uint64_t(64) << 20);
}

void DeviceHead::ensure(HeadCopy c) {
  if (c == HeadCopy::rows) {
    if (rows_.size() == 0) upload_rows();
    return;
  }
  if ((copies() & copy_bit(c)) != 0) return;
  std::vector<StreamCopy> all = stream_copies();
  StreamCopy* s = find(c, all);
  if (s == nullptr) throw Error("no stream layout of this kind for a " + std::string(tensor_type_name(head_.type)) + " head");
  check_fits(s->bytes, "a second stream layout");
  upload_stream({*s});
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the staging buffers of the upload die here
}

unsigned DeviceHead::copies() const {
  unsigned c = copy_bit(HeadCopy::rows);
  if (lanes_.size() > 0) c |= copy_bit(HeadCopy::lanes);
  if (subblocks_.size() > 0) c |= copy_bit(HeadCopy::subblocks);
  return c;
}

unsigned DeviceHead::on_demand() const {
  // Only next to another stream layout: a device without room for one holds the file's rows.
  if (lanes_.size() == 0 && subblocks_.size() == 0) return 0;
  unsigned c = 0;
  for (const StreamCopy& s : stream_copies())
    if (array(s.copy).size() == 0) c |= copy_bit(s.copy);
  return c;
}

void DeviceHead::check_fits(uint64_t bytes, const char* what) const {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (bytes + working_bytes() > free_bytes)
    throw Error("the " + std::string(tensor_type_name(head_.type)) + " head's " + what + " does not fit on the GPU: " +
                std::to_string(bytes) + " bytes + working buffers, " + std::to_string(free_bytes) + " bytes free");
}

void DeviceHead::report_progress(int64_t done, int& last_pct, const char* what) const {
  const uint64_t total = uint64_t(head_.vocab) * uint64_t(layout_.row_stride);
  if (total <= (uint64_t(256) << 20)) return;
  const int pct = int(100 * done / head_.vocab);
  if (pct / 10 == last_pct / 10) return;
  std::fprintf(stderr, "lmhead: uploading the %s head to the GPU (%s): %3d%% of %.0f MB\n",
               std::string(tensor_type_name(head_.type)).c_str(), what, pct, double(total) / 1e6);
  last_pct = pct;
}

// Whole 16-row tiles per chunk of an upload (the stream layouts are tile-major).
int64_t DeviceHead::rows_per_chunk() const {
  return std::max<int64_t>(1, int64_t((uint64_t(64) << 20) / uint64_t(layout_.row_stride)) / 16) * 16;
}

void DeviceHead::upload_rows() {
  const int64_t V = head_.vocab;
  const uint64_t total = uint64_t(V) * uint64_t(layout_.row_stride);
  // Refuse up front, with the numbers, a head the device cannot hold (rather than a bare
  // out-of-memory from cudaMalloc halfway through the buffers).
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const uint64_t needed = total + working_bytes();
  if (needed > free_bytes)
    throw Error("the " + std::string(tensor_type_name(head_.type)) + " head does not fit on the GPU: it needs about " +
                std::to_string(needed) + " bytes (weights " + std::to_string(total) + " + working buffers), but only " +
                std::to_string(free_bytes) + " of " + std::to_string(total_bytes) + " bytes are free");
  rows_.reset(total + 256, stream_);  // tail slack: 16-byte loads past the last row stay inside
  if (layout_.aux_d) aux_.reset(size_t(V) * layout_.groups, stream_);
  const bool same_bytes = head_.type == TensorType::Q4_K || head_.type == TensorType::Q5_K;
  const int64_t chunk = rows_per_chunk();
  std::vector<uint8_t> staging;
  std::vector<uint16_t> aux_staging;
  int last_pct = -1;
  for (int64_t r0 = 0; r0 < V; r0 += chunk) {
    const int64_t n = std::min(chunk, V - r0);
    uint8_t* dst = rows_.get() + uint64_t(r0) * uint64_t(layout_.row_stride);
    if (same_bytes && head_.row_bytes == uint64_t(layout_.row_stride)) {
      CUDA_CHECK(cudaMemcpyAsync(dst, head_.weights + uint64_t(r0) * head_.row_bytes, size_t(n) * head_.row_bytes,
                                 cudaMemcpyHostToDevice, stream_));
    } else {
      staging.resize(size_t(n) * size_t(layout_.row_stride));
      if (layout_.aux_d) aux_staging.resize(size_t(n) * size_t(layout_.groups));
      for (int64_t r = 0; r < n; ++r)
        to_device_row(layout_, head_.weights + uint64_t(r0 + r) * head_.row_bytes, head_.hidden,
                      staging.data() + size_t(r) * size_t(layout_.row_stride),
                      layout_.aux_d ? aux_staging.data() + size_t(r) * size_t(layout_.groups) : nullptr);
      upload(dst, staging.data(), staging.size());
      if (layout_.aux_d)
        upload(aux_.get() + size_t(r0) * size_t(layout_.groups), aux_staging.data(), aux_staging.size() * 2);
    }
    report_progress(r0 + n, last_pct, "file rows");
  }
}

void DeviceHead::upload_stream(const std::vector<StreamCopy>& copies) {
  const int64_t V = head_.vocab;
  for (const StreamCopy& c : copies) array(c.copy).reset(c.bytes, stream_);
  const int64_t chunk = rows_per_chunk();
  std::vector<uint8_t> staging;
  int last_pct = -1;
  for (int64_t r0 = 0; r0 < V; r0 += chunk) {
    const int64_t n = std::min(chunk, V - r0);
    for (const StreamCopy& c : copies) {
      const size_t tile_bytes = size_t(layout_.groups) * size_t(c.item_bytes);
      const int64_t tiles = (n + stream::kTileRows - 1) / stream::kTileRows;
      staging.resize(size_t(tiles) * tile_bytes);
      // The transcoding is a few ns per byte on one core: the host's cores share the chunk's tiles.
      const int64_t workers = std::min<int64_t>(tiles, std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16));
      std::vector<std::thread> pool;
      for (int64_t w = 0; w < workers; ++w)
        pool.emplace_back([&, w] {
          for (int64_t t = w; t < tiles; t += workers) {
            const uint8_t* rows[stream::kTileRows];
            for (int i = 0; i < stream::kTileRows; ++i) {
              const int64_t r = r0 + t * stream::kTileRows + i;
              rows[i] = r < V ? head_.weights + uint64_t(r) * head_.row_bytes : nullptr;
            }
            c.transcode(rows, layout_.groups, staging.data() + size_t(t) * tile_bytes);
          }
        });
      for (std::thread& th : pool) th.join();
      upload(array(c.copy).get() + uint64_t(r0 / stream::kTileRows) * tile_bytes, staging.data(), staging.size());
    }
    report_progress(r0 + n, last_pct, "stream layouts");
  }
}

// A staging buffer the caller reuses at once: cudaMemcpyAsync from pageable memory returns only
// after the bytes have left it, and the copy is ordered on stream_ before every kernel.
void DeviceHead::upload(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}


}  // namespace lmhead::cuda
