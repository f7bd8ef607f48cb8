#pragma once
// The CUDA backend's kernels as seen from the host: parameter blocks and launchers. Each kernel
// family lives in its own .cu file (prep.cu, q5k_mma.cu, generic_head.cu, select.cu).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_layout.hpp"

namespace lmhead::cuda {

constexpr int kMaxTokens = 16;     // tokens per pass (the engine splits longer batches)
constexpr int kMaxTied = 16;       // select::kMaxTiedIds
constexpr int kActPitch = 272;     // bytes per token of one 256-element q8 group: 256 + 16 so that
                                   // 16-byte shared loads of neighbouring tokens hit distinct banks
constexpr int kFragPitch = 320;    // bytes per token of one super-block's q8 in MMA B-fragment order:
                                   // per q (0..3) 8 (lo, hi) word pairs + 16 B of padding
constexpr int kLanesPitch = 80;    // bytes per lane of one super-block's B fragments for the lanes kernel
constexpr int kLanesTokens = 2;    // tokens the lanes kernel (T <= 2) keeps in that layout
constexpr int kSumExpChunk = 512;  // select::kSumExpChunk
constexpr int kTopKChunk = 4096;   // ids per top-k chunk (sorted in shared memory)

// Per-token answer of a head kernel, written by the last block straight into mapped host memory.
struct TokenResult {
  float max;
  int32_t argmax;
  int64_t tie_count;
  int32_t n_tied;        // min(tie_count, kMaxTied)
  int32_t tied[kMaxTied];
  int32_t norm_path;     // 0: RMSNorm sum decided by the bounded parallel sum, 1: sequential chain
  int32_t pad;
};

// Running argmax of a disjoint set of ids, with the scalar scan's NaN and tie rules.
struct PartialBest {
  float max;
  int32_t id;     // -1: empty
  int32_t count;  // ids equal to max
};

enum class ActFormat : int { q8_K = 0, q8_0 = 1, f16 = 2, bf16 = 3, f32 = 4 };
enum CapMode : int { kScaleOnly = 0, kCapNodes = 1, kCapFused = 2 };

// The final norm (RMSNorm or LayerNorm) + activation quantization, one block per token.
struct SampleScratch;
struct SampleCallParams;

struct PrepParams {
  const float* hidden = nullptr;  // [T][H], mapped host memory
  // Rows the caller keeps in device memory (Engine::run_device): the pointer is read from this
  // mapped host word at run time, so one captured graph serves every call; hidden is unused then.
  const float* const* hidden_at = nullptr;
  // Per token: the index of its first NaN or infinity, or -1 (mapped host memory; written only
  // when not nullptr, i.e. for device rows, which the host never sees).
  int32_t* non_finite = nullptr;
  const float* gamma = nullptr;   // [H]
  int layer_norm = 0;             // LayerNorm (ggml_norm, numerics.md §6b) instead of RMSNorm
  const float* beta = nullptr;    // [H] added after gamma (LayerNorm + bias), or nullptr
  int input_normed = 0;           // hidden is already through the final norm: only quantize it
  int H = 0;
  int T = 0;
  float eps = 0;
  ActFormat format = ActFormat::q8_K;
  int force_sequential = 0;       // test hook: always run the sequential double chain
  // q8_K: tokens t < positive_amax_tokens take the scale's sign positive whenever some element
  // equals +amax (llama.cpp's ggml_quantize_mat_q8_K_4x8 for the repacked Q4_K gemm's whole
  // groups of 4 tokens; the others take the sign of the first element reaching amax)
  int positive_amax_tokens = 0;
  // q8 formats: groups of 256 elements, token slot pitch kActPitch
  int8_t* act_qs = nullptr;       // [ngroups][kMaxTokens][kActPitch]
  float* act_d = nullptr;         // q8_K: [H/256][kMaxTokens]; q8_0: [H/32][kMaxTokens] (f32 of the f16 d)
  uint32_t* act_bsp = nullptr;    // q8_K: [H/256][kMaxTokens][4] pairs of int16 sub-block sums
  // Written only when not nullptr, i.e. when the call's plan reads them (plan.hpp, reads_fragment_acts):
  int8_t* act_frag = nullptr;     // q8_K: [H/256][kMaxTokens][kFragPitch] the same quants in B-fragment order
  int8_t* act_lanes = nullptr;    // q8_K, tokens 0..1: [H/256][kLanesTokens][32][kLanesPitch] (lanes kernel)
  float* act_f = nullptr;         // float formats: [T][H]
  float* normed_out = nullptr;    // optional [T][H] (stages)
  int32_t* norm_path = nullptr;   // [kMaxTokens]
  // A sampling call: block t zeroes token t's scratch and block 0 copies the call's parameters
  // from mapped memory (the sampling kernels run after the head kernel, which waits for prep).
  SampleScratch* sample_scratch = nullptr;
  const SampleCallParams* sample_call_in = nullptr;
  SampleCallParams* sample_call = nullptr;
};

struct HeadParams {
  const uint8_t* weights = nullptr;  // device layout rows
  const uint16_t* aux = nullptr;     // Q6_K: [vocab][groups] f16 d
  int64_t row_stride = 0;
  int vocab = 0;
  int hidden = 0;
  int groups = 0;                    // device-layout groups per row
  int T = 0;                         // tokens in this call
  int t0 = 0;                        // first token of this pass (generic kernels run in passes)
  int tc = 0;                        // tokens in this pass
  const int8_t* act_qs = nullptr;
  const float* act_d = nullptr;
  const uint32_t* act_bsp = nullptr;
  const int8_t* act_frag = nullptr;
  const int8_t* act_lanes = nullptr;
  const float* act_f = nullptr;
  const float* head_bias = nullptr;  // [vocab] added to each raw logit before scale and cap, or nullptr
  float logit_scale = 1, cap = 0, inv_cap = 0;
  int cap_mode = kScaleOnly;
  float* logits = nullptr;           // [kMaxTokens][vocab] capped (always written)
  float* raw = nullptr;              // optional [kMaxTokens][vocab] raw logits (stages)
  PartialBest* partials = nullptr;   // [gridDim.x][kMaxTokens]
  unsigned* done_counter = nullptr;  // last-block detection, reset by the last block
  unsigned* tile_counter = nullptr;  // dynamic tile hand-out, reset by the last block
  unsigned* call_seq = nullptr;      // calls finished so far (device memory, never reset)
  unsigned* done_flag = nullptr;     // mapped host memory: call_seq, written after the results
  TokenResult* results = nullptr;    // [kMaxTokens] mapped host memory
  float* max_out = nullptr;          // [kMaxTokens] device copy of each token's max
  const uint8_t* stream_weights = nullptr;    // the head's lanes-split stream layout (stream_layout.hpp)
  const uint8_t* stream_n_weights = nullptr;  // Q5_K in the stream layout, sub-blocks split
  // A measuring hook (TestHooks::block_clock), nullptr in every other call: per block b <
  // kBlockClockBlocks, [4b] the block's start, [4b + 1] its activations staged, [4b + 2] its last
  // warp done, [4b + 3] its exit (the last block's after the merge and the done flag); %globaltimer ns.
  unsigned long long* block_clock = nullptr;
};
constexpr int kBlockClockBlocks = 1024;

struct MmaConfig {
  int warps = 12;   // 8, 12 or 16 warps per block (T > 8: 8 or 12); ring depth follows from it
  bool pdl = true;
};

void launch_prep(const PrepParams& p, cudaStream_t stream);
// The Q5_K q8-route head on the int8 tensor cores; T = 1..16.
void launch_q5k_mma(const HeadParams& p, const MmaConfig& cfg, int num_sms, cudaStream_t stream);
bool q5k_mma_supported(const MmaConfig& cfg);
// Dynamic shared memory the MMA kernel needs (the backend falls back to the generic kernel when a
// head's activations do not fit next to the stages).
size_t q5k_mma_smem(int groups, int tokens, const MmaConfig& cfg);
// The Q5_K q8-route head for T <= 2 with the eight float lanes in the MMA's N (see q5k_lanes.cu).
void launch_q5k_lanes(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream);
size_t q5k_lanes_smem(int groups, int tokens);
// The Q5_K (and Q4_K) q8-route head in passes of up to two tokens, weights streamed into
// registers from the lanes stream layout (see q5k_stream.cu). Q6_K and Q8_0 run the same kernel body
// in passes of up to kStreamMaxTokens.
constexpr int kStreamMaxTokens = 4;
// q4k: the head is Q4_K (its own stream layout, stream::transcode_tile_q4k), else Q5_K.
void launch_q5k_stream(const HeadParams& p, int warps, bool q4k, bool pdl, int num_sms, cudaStream_t stream);
size_t q5k_stream_smem(int groups, int tokens);
// The same kernel body (stream_kernel.cuh) for Q6_K (q6k_stream.cu) and Q8_0 heads whose hidden
// size is a multiple of 256 (q8_0_stream.cu), each on its own stream layout in stream_weights.
// llamacpp_tiled: Q6_K with llama.cpp's tiled K-quant order instead of vec_dot's.
void launch_q6k_stream(const HeadParams& p, int warps, bool llamacpp_tiled, bool pdl, int num_sms, cudaStream_t stream);
size_t q6k_stream_smem(int groups, int tokens);
void launch_q8_0_stream(const HeadParams& p, int warps, bool pdl, int num_sms, cudaStream_t stream);
size_t q8_0_stream_smem(int groups, int tokens);
// The same for T <= 2 with the weights staged in shared memory by bulk copies (the TMA unit, see
// q5k_tma.cu).
void launch_q5k_tma(const HeadParams& p, bool pdl, int num_sms, cudaStream_t stream);
size_t q5k_tma_smem(int groups, int tokens);
// The Q5_K q8-route head for any T with the tokens in the MMA's N, weights streamed into registers
// from the sub-blocks stream layout (see q5k_stream_n.cu). warps: 8, 12 or 16 (T <= 8).
// llamacpp_tiled: llama.cpp's tiled K-quant order instead of vec_dot's (12 warps, 8 above 8 tokens).
void launch_q5k_stream_n(const HeadParams& p, int warps, bool llamacpp_tiled, bool pdl, int num_sms,
                         cudaStream_t stream);
size_t q5k_stream_n_smem(int groups, int tokens, bool llamacpp_tiled);
// Q4_K, Q5_K or Q6_K in llama.cpp's tiled K-quant order from the lanes stream layout, tokens in the
// MMA's N, K = one sub-block (see kquant_tiled.cu). warps: 16, 12 or 8 (2, 3 or 4 item buffers).
void launch_kquant_tiled(const HeadParams& p, int warps, TensorType type, bool pdl, int num_sms, cudaStream_t stream);
size_t kquant_tiled_smem(int groups, int tokens);
// The same two kernel families with the items staged in shared memory by bulk copies, as many
// stages per warp as the device's shared memory allows next to the token runs (tokens_n.cuh,
// staged_kernel); the smem functions give the least a launch of `warps` warps needs (two stages per warp).
void launch_q5k_stream_n_staged(const HeadParams& p, int warps, bool llamacpp_tiled, bool pdl, int num_sms,
                                cudaStream_t stream);
size_t q5k_stream_n_staged_smem(int groups, int tokens, bool llamacpp_tiled, int warps);
void launch_kquant_tiled_staged(const HeadParams& p, int warps, TensorType type, bool pdl, int num_sms,
                                cudaStream_t stream);
size_t kquant_tiled_staged_smem(int groups, int tokens, TensorType type, int warps);
// Every head type on both routes, one thread per row, tokens in passes of 4; with a llama.cpp
// order, that path's roundings instead of vec_dot's (numerics.md, "The llama.cpp route"). The
// repacked Q4_K order takes the gemm's for tokens below T - T % 4 (whole groups of 4 of the call).
constexpr int kGenericTokens = 4;
enum class GenericOrder : int { vec_dot, llamacpp_tiled, llamacpp_repack, llamacpp_float_vec, llamacpp_float_sgemm };
void launch_generic_head(const HeadParams& p, TensorType type, bool float_route, GenericOrder order, int num_sms,
                         bool pdl, cudaStream_t stream);

// Selection beyond the fused argmax, over the stored capped logits.
struct SelectParams {
  const float* logits = nullptr;  // [kMaxTokens][vocab]
  const float* max_in = nullptr;  // [kMaxTokens]
  int vocab = 0;
  int T = 0;
  int k = 0;
  int k_chunk = 0;                // min(k, kTopKChunk)
  int2* candidates = nullptr;     // [T][chunks][k_chunk] (id, float bits); id -1 ends a list
  double* chunk_sums = nullptr;   // [T][sum-exp chunks]
};
void launch_topk(const SelectParams& p, cudaStream_t stream);
void launch_sum_exp(const SelectParams& p, cudaStream_t stream);

// The node route's intermediate stages from the raw logits (want_stages).
void launch_stage_nodes(const float* raw, int vocab, int T, float logit_scale, float cap, float inv_cap,
                        int cap_mode, float* scaled, float* div, float* tanh_out, cudaStream_t stream);

// Seeded sampling on the device (numerics.md §9, sample.cu): the same integer weights, buckets
// and draw as the host sampler (sample/weight_math.hpp), so the same token, without the logits
// leaving the GPU. Temperature > 0 without top-k; the backend samples other options on the host.
constexpr int kSampleCandidates = 32768;  // per token: ids of the top-p boundary bucket the device orders

// What changes from call to call: written by the host into mapped memory, copied to device memory
// by the prep kernel (so the sampling kernels read it from L2, not over PCIe).
struct SampleCallParams {
  double temperature = 1;
  double top_p = 1;
  double min_p = 0;
  uint64_t seed = 0;
  int64_t position = 0;   // of the pass's token 0; token t draws at position + t
  int32_t mask_stride = 0;  // 32-bit words between the tokens' mask rows (0: one row for all)
  int32_t has_mask = 0;
  int32_t has_bias = 0;
  int32_t pad = 0;
};

// Per token, zeroed by the prep kernel of every sampling call.
struct SampleScratch {
  unsigned long long max_key;     // the largest z as an ordered key (bias or mask: the max kernel)
  unsigned long long total;       // S, the kept ids' integer weights
  unsigned long long mass_below;  // top-p: the mass of the buckets before the boundary bucket
  unsigned long long rest;        // top-p: the target less mass_below (>= 1)
  int32_t boundary;               // top-p: the bucket where the mass reaches the target
  uint32_t blocks_done[2];        // the weights and boundary kernels' last-block counters
  uint32_t n_candidates;          // top-p: ids of the boundary bucket appended
  uint32_t tokens_done;           // token 0's only: tokens whose answer is written (the done flag)
  unsigned long long hist[2048];  // top-p: integer mass per rank bucket (sample::kRankBuckets)
  // top-p: the boundary bucket's mass and ids per fine bin (the next 10 bits of max - z), so that
  // its last block orders only the few ids of one fine bin
  unsigned long long fine_mass[1024];  // kSampleFineBins
  uint32_t fine_count[1024];
};

constexpr int kSampleFineBins = 1024;  // SampleScratch::fine_mass

struct SampleCandidate {
  unsigned long long key;  // sample::descending_key(z)
  unsigned long long weight;
  int32_t id;
  int32_t fine;  // its fine bin
};

// What the last block writes per token (mapped host memory).
enum SampleStatus : int32_t { kSampled = 0, kSampleOnHost = 1, kSampleNothingAllowed = 2 };

struct SampleParams {
  const float* logits = nullptr;        // [kMaxTokens][vocab], capped
  const float* max_in = nullptr;        // [kMaxTokens] the head's per-token maximum
  const SampleCallParams* call = nullptr;  // device copy
  const float* bias = nullptr;          // [vocab] dense logit bias (call->has_bias)
  const uint32_t* mask = nullptr;       // allowed-id bits (call->has_mask)
  SampleScratch* scratch = nullptr;     // [kMaxTokens]
  unsigned long long* chunk_mass = nullptr;  // [kMaxTokens][ceil(vocab / 512)]
  SampleCandidate* candidates = nullptr;     // [kMaxTokens][kSampleCandidates] (top-p)
  int32_t* sampled = nullptr;           // [kMaxTokens] mapped
  int32_t* status = nullptr;            // [kMaxTokens] mapped, SampleStatus
  // The call's done flag (mapped) and sequence: written after the last token's answer instead of by
  // the head kernel, so the host can poll for the sampled tokens.
  unsigned* done_flag = nullptr;
  unsigned* call_seq = nullptr;
  int vocab = 0;
  int T = 0;
  int max_kernel = 0;  // bias or mask: the maximum comes from the max kernel, not the head's max_in
  int top_p = 0;       // the boundary kernel runs
  int pdl = 0;         // launched as programmatic dependents: each waits for its predecessor's memory itself
  // One shard's half of a round for the multi-GPU backend: the kernel leaves its sums (chunk masses,
  // total, rank-bucket masses; the boundary bucket's candidates) and stops before the last block,
  // whose draw needs every shard's sums. max_in holds the global maximum; the boundary kernel reads
  // the boundary bucket the host wrote into the scratch.
  int rounds_only = 0;
};
void launch_sample(const SampleParams& p, cudaStream_t stream);
// round 1: the max kernel (bias or mask); round 2: the weights kernel (chunk masses, total, with top-p
// the rank-bucket masses); round 3: the boundary kernel (chunk masses before the boundary bucket, that
// bucket's ids). p.rounds_only must be set.
void launch_sample_round(const SampleParams& p, int round, cudaStream_t stream);

// Test hook: portable tanh on the device for the bit patterns [first, first + count).
void launch_tanh_sweep(uint64_t first, uint64_t count, uint32_t* out, cudaStream_t stream);

}  // namespace lmhead::cuda
