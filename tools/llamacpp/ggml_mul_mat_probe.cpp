// ggml_mul_mat on llama.cpp's CPU backend for heads of 2 and 4 super-blocks per row (and float heads
// whose rows are not a multiple of 64), every head type of lmhead's llama.cpp route, T = 1, 4, 8 and
// 16 activation columns: what the public end-to-end sets (hidden 256, one super-block) cannot show,
// the order across super-blocks and the float paths' tails. Writes ggml's outputs and a manifest
// with the FNV-1a hashes of the weight and activation bytes; the inputs are remade by lmhead's test
// (tests/llamacpp_ggml_test.cpp) from the same splitmix64 stream, its quantizer checked against the
// weight hashes. Built and run by ggml_mul_mat_probe.sh; linked against the llama.cpp build's ggml.
//
// Inputs, per K (the same floats for every type): weights w[r][k] = (2u - 1) / 8, r < ROWS, then
// activations x[t][k] = (2u - 1) * (1 + t % 5), t < 16; u = (splitmix64() >> 40) / 2^24, the stream
// seeded with 0x1000 + K. Weights quantized by ggml_quantize_chunk (no importance matrix).
//
// Usage: ggml_mul_mat_probe OUTDIR [ROWS]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "synth/splitmix64.hpp"

namespace {


uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
  return h;
}

// A 2-D little-endian f32 .npy.
void write_npy(const std::string& path, const std::vector<float>& v, int rows, int cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) { std::perror(path.c_str()); std::exit(1); }
  const uint16_t len = uint16_t(header.size());
  std::fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  std::fwrite(&len, 2, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(v.data(), 4, v.size(), f);
  std::fclose(f);
}

struct Case {
  const char* name;  // file stem; "-repack": the weight in the CPU_REPACK buffer, as llama.cpp loads it
  const char* type;  // lmhead's name of the type
  ggml_type gtype;
  bool repack;
  std::vector<int> ks;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: %s OUTDIR [ROWS]\n", argv[0]); return 2; }
  const std::string out = argv[1];
  const int M = argc > 2 ? std::atoi(argv[2]) : 16;
  constexpr int kTokens = 16;
  const int Ts[] = {1, 4, 8, 16};

  ggml_backend_t backend = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(backend, 2);
  ggml_backend_reg_t reg = ggml_backend_cpu_reg();
  ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
  auto extra = (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
  ggml_backend_buffer_type_t repack = nullptr;
  for (ggml_backend_buffer_type_t* b = extra ? extra(dev) : nullptr; b && *b; ++b)
    if (std::string(ggml_backend_buft_name(*b)) == "CPU_REPACK") repack = *b;
  if (!repack) { std::fprintf(stderr, "this build has no CPU_REPACK buffer type\n"); return 1; }

  const std::vector<int> quant_ks = {512, 1024}, float_ks = {512, 1024, 1040, 1047};
  const Case cases[] = {
      {"q4_K", "q4_K", GGML_TYPE_Q4_K, false, quant_ks}, {"q4_K-repack", "q4_K", GGML_TYPE_Q4_K, true, quant_ks},
      {"q5_K", "q5_K", GGML_TYPE_Q5_K, false, quant_ks}, {"q6_K", "q6_K", GGML_TYPE_Q6_K, false, quant_ks},
      {"q8_0", "q8_0", GGML_TYPE_Q8_0, false, quant_ks}, {"f16", "f16", GGML_TYPE_F16, false, float_ks},
      {"bf16", "bf16", GGML_TYPE_BF16, false, float_ks}, {"f32", "f32", GGML_TYPE_F32, false, float_ks},
  };

  std::string manifest = "{\n  \"rows\": " + std::to_string(M) + ",\n  \"tokens\": [1, 4, 8, 16],\n  \"cases\": [\n";
  std::string activations;
  bool first = true;
  for (const Case& c : cases) {
    for (int K : c.ks) {
      lmhead::synth::SplitMix64 s{0x1000 + uint64_t(K)};
      std::vector<float> wf(size_t(M) * K), x(size_t(kTokens) * K);
      for (float& v : wf) v = (2 * s.unit24() - 1) / 8;
      for (int t = 0; t < kTokens; ++t)
        for (int k = 0; k < K; ++k) x[size_t(t) * K + k] = (2 * s.unit24() - 1) * float(1 + t % 5);
      std::vector<uint8_t> wq(ggml_row_size(c.gtype, K) * M);
      ggml_quantize_chunk(c.gtype, wf.data(), wq.data(), 0, M, K, nullptr);

      // The outputs for T = 1, 4, 8, 16 (each the first T activation columns) stacked: 29 rows.
      std::vector<float> stacked;
      for (int T : Ts) {
        ggml_init_params wp = {ggml_tensor_overhead() * 2, nullptr, true};
        ggml_context* wctx = ggml_init(wp);
        ggml_tensor* w = ggml_new_tensor_2d(wctx, c.gtype, K, M);
        ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, c.repack ? repack : ggml_backend_cpu_buffer_type());
        ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        ggml_backend_tensor_set(w, wq.data(), 0, wq.size());  // the repack buffer repacks here

        ggml_init_params gp = {ggml_tensor_overhead() * 4 + ggml_graph_overhead(), nullptr, true};
        ggml_context* gctx = ggml_init(gp);
        ggml_tensor* a = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, K, T);
        ggml_tensor* y = ggml_mul_mat(gctx, w, a);
        ggml_cgraph* g = ggml_new_graph(gctx);
        ggml_build_forward_expand(g, y);
        ggml_backend_buffer_t gbuf = ggml_backend_alloc_ctx_tensors_from_buft(gctx, ggml_backend_cpu_buffer_type());
        ggml_backend_tensor_set(a, x.data(), 0, size_t(T) * K * sizeof(float));
        if (ggml_backend_graph_compute(backend, g) != GGML_STATUS_SUCCESS) { std::fprintf(stderr, "compute failed\n"); return 1; }
        std::vector<float> r(size_t(T) * M);
        ggml_backend_tensor_get(y, r.data(), 0, r.size() * sizeof(float));
        stacked.insert(stacked.end(), r.begin(), r.end());
        ggml_backend_buffer_free(gbuf);
        ggml_free(gctx);
        ggml_backend_buffer_free(wbuf);
        ggml_free(wctx);
      }
      const std::string file = std::string(c.name) + "-k" + std::to_string(K) + ".npy";
      write_npy(out + "/" + file, stacked, int(stacked.size()) / M, M);
      char line[512];
      std::snprintf(line, sizeof line,
                    "%s    {\"file\": \"%s\", \"type\": \"%s\", \"repack\": %s, \"hidden\": %d, \"weights_fnv1a\": \"%016llx\"}",
                    first ? "" : ",\n", file.c_str(), c.type, c.repack ? "true" : "false", K,
                    (unsigned long long)fnv1a(wq.data(), wq.size()));
      manifest += line;
      first = false;
      const std::string key = "\"" + std::to_string(K) + "\"";
      if (activations.find(key) == std::string::npos) {
        std::snprintf(line, sizeof line, "%s    %s: \"%016llx\"", activations.empty() ? "" : ",\n", key.c_str(),
                      (unsigned long long)fnv1a(x.data(), x.size() * sizeof(float)));
        activations += line;
      }
    }
  }
  manifest += "\n  ],\n  \"activations_fnv1a\": {\n" + activations + "\n  }\n}\n";
  FILE* f = std::fopen((out + "/manifest.json").c_str(), "w");
  std::fputs(manifest.c_str(), f);
  std::fclose(f);
  ggml_backend_free(backend);
  return 0;
}
