// Sampling on the GPU (issue 16, numerics.md §9, src/cuda/sample.cu): the device's token is the
// host sampler's token on the same capped logits, for every option the device takes, 1 to 16 tokens
// per pass, graph replays with new seeds and positions, biases, masks per token, and ids tied at
// the top-p boundary (ordered on the device, or past its candidate buffer handed to the host).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "hardening_util.hpp"
#include "lmhead/lmhead.hpp"
#include "sample/sampler.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

struct SampleCase {
  SamplingOptions o;
  std::string name;
};

std::vector<SampleCase> device_cases(int64_t V) {
  std::vector<SampleCase> v;
  for (float temperature : {0.5f, 1.0f, 2.5f})
    for (float top_p : {1.0f, 0.99f, 0.9f, 0.5f})
      for (float min_p : {0.0f, 0.05f}) {
        SamplingOptions o;
        o.temperature = temperature;
        o.top_p = top_p;
        o.min_p = min_p;
        o.seed = 1000 + uint64_t(v.size());
        v.push_back({o, "T " + std::to_string(temperature) + " top-p " + std::to_string(top_p) + " min-p " +
                            std::to_string(min_p)});
      }
  SamplingOptions biased;
  biased.temperature = 1.0f;
  biased.top_p = 0.9f;
  biased.seed = 77;
  biased.logit_bias = {{5, 2.5f}, {int32_t(V - 1), 3.0f}, {700, -40.0f}};
  v.push_back({biased, "bias + top-p"});
  SamplingOptions masked = biased;
  masked.logit_bias.clear();
  masked.allowed.assign(size_t((V + 31) / 32), 0x0f0f0f0fu);  // one mask for every token
  v.push_back({masked, "mask + top-p"});
  return v;
}

class CudaSample : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  }

  // One forward of the CUDA backend with the logits back; every token's sampled id against the host
  // sampler on those logits. Returns the tokens the device handed to the host.
  static int expect_host_tokens(Backend& b, const Model& m, const std::vector<float>& hidden, int T,
                                const SamplingOptions& o, int64_t position, const std::string& what) {
    const int64_t V = m.config().vocab;
    const size_t words = size_t((V + 31) / 32);
    ForwardRequest req;
    req.want_logits = true;
    req.sampling = &o;
    req.sample_position = position;
    if (!o.allowed.empty()) {
      req.sample_mask = o.allowed.data();
      req.sample_mask_stride = o.allowed.size() == words ? 0 : words;
    }
    ForwardOutput out;
    b.forward(hidden.data(), T, req, out);
    EXPECT_EQ(out.sampled.size(), size_t(T)) << what;
    for (int t = 0; t < T && size_t(t) < out.sampled.size(); ++t) {
      const uint32_t* mask = req.sample_mask == nullptr ? nullptr : req.sample_mask + size_t(t) * req.sample_mask_stride;
      const int32_t host = sample::sample_token(out.logits.data() + size_t(t) * size_t(V), V, o, mask, position + t);
      EXPECT_EQ(out.sampled[size_t(t)], host) << what << ", token " << t << " at position " << position + t;
    }
    const cuda::CallInfo info = cuda::last_call(b);
    EXPECT_TRUE(info.sampled_on_device) << what;
    // Without the logits the host waits on the sampling kernels' done flag instead of the stream.
    ForwardRequest plain = req;
    plain.want_logits = false;
    ForwardOutput again;
    b.forward(hidden.data(), T, plain, again);
    EXPECT_EQ(again.sampled, out.sampled) << what << " (polled)";
    return info.sampled_on_host;
  }
};

// 40,000 ids (a partial last chunk), hidden states scaled from nearly flat to peaked logits.
TEST_F(CudaSample, DeviceTokensAreTheHostSamplersTokens) {
  TempDir dir;
  const auto model = Model::open(make_checkpoint(dir, "q8_0", 40000, 256, "--seed 3"));
  auto backend = make_cuda_backend(head_view(*model), 1);
  ASSERT_TRUE(backend->samples(device_cases(40000)[0].o));
  int on_host = 0;
  for (float spread : {0.05f, 1.0f, 8.0f}) {
    for (int T : {1, 3, 16}) {
      std::vector<float> hidden = test_hidden(T, 256, uint64_t(T) * 7 + 1);
      for (float& x : hidden) x *= spread;
      for (const SampleCase& c : device_cases(40000))
        for (int64_t position : {int64_t(0), int64_t(12345), int64_t(1) << 40})  // the second and third replay the graph
          on_host += expect_host_tokens(*backend, *model, hidden, T, c.o, position,
                                        c.name + ", spread " + std::to_string(spread) + ", T " + std::to_string(T));
    }
  }
  EXPECT_EQ(on_host, 0) << "every token of these logits is drawn on the device";
}

// 600,000 ids: more chunks (1,172) than a last block stages in shared memory, so the draw and the
// top-p join scan the chunk masses in global memory instead.
TEST_F(CudaSample, LargeVocabularyScansTheChunkMassesInGlobalMemory) {
  TempDir dir;
  constexpr int64_t V = 600000;
  const auto model = Model::open(make_checkpoint(dir, "q8_0", V, 64, "--seed 5"));
  auto backend = make_cuda_backend(head_view(*model), 1);
  int on_host = 0;
  for (float spread : {0.05f, 4.0f})
    for (int T : {1, 4}) {
      std::vector<float> hidden = test_hidden(T, 64, uint64_t(T) * 11 + 3);
      for (float& x : hidden) x *= spread;
      for (float top_p : {1.0f, 0.9f, 0.5f}) {
        SamplingOptions o;
        o.temperature = 1.0f;
        o.top_p = top_p;
        o.seed = 31 + uint64_t(T);
        on_host += expect_host_tokens(*backend, *model, hidden, T, o, 777,
                                      "top-p " + std::to_string(top_p) + ", spread " + std::to_string(spread) +
                                          ", T " + std::to_string(T));
      }
    }
  EXPECT_EQ(on_host, 0) << "every token of these logits is drawn on the device";
}

TEST_F(CudaSample, MasksPerTokenAndBiasChangesBetweenCalls) {
  TempDir dir;
  const auto model = Model::open(make_checkpoint(dir, "q8_0", 5000, 256, "--seed 9"));
  auto backend = make_cuda_backend(head_view(*model), 1);
  const int T = 16;
  const std::vector<float> hidden = test_hidden(T, 256, 5);
  const size_t words = (5000 + 31) / 32;
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 3;
  o.allowed.assign(words * T, 0u);
  for (int t = 0; t < T; ++t)  // token t may only draw ids 32t .. 32t + 31 and 4000 + t
    o.allowed[size_t(t) * words + size_t(t)] = ~0u, o.allowed[size_t(t) * words + (4000 + size_t(t)) / 32] |= 1u << ((4000 + t) % 32);
  EXPECT_EQ(expect_host_tokens(*backend, *model, hidden, T, o, 0, "per-token masks"), 0);
  ForwardRequest req;
  req.sampling = &o;
  req.sample_mask = o.allowed.data();
  req.sample_mask_stride = words;
  for (int64_t pos = 0; pos < 20; ++pos) {
    ForwardOutput out;
    req.sample_position = pos;
    backend->forward(hidden.data(), T, req, out);
    for (int t = 0; t < T; ++t) {
      const int32_t id = out.sampled[size_t(t)];
      EXPECT_TRUE((id >= 32 * t && id < 32 * t + 32) || id == 4000 + t) << "token " << t << " drew " << id;
    }
  }
  o.allowed.clear();
  for (float b : {30.0f, -30.0f, 0.5f}) {  // a new bias each call: re-uploaded, the graph replayed
    o.logit_bias = {{17, b}, {4999, 1.0f}};
    EXPECT_EQ(expect_host_tokens(*backend, *model, hidden, T, o, 100, "bias " + std::to_string(b)), 0);
  }
}

// A tiny soft cap under a large scale: about half of the ids cap to exactly the maximum, all in one
// rank bucket. With 40,000 ids the device orders the ~20,000 tied ids by id; with 80,000 the ~40,000
// exceed its candidate buffer and the host sampler draws from the logits the device kept: the
// same token either way.
TEST_F(CudaSample, TiesAtTheTopPBoundary) {
  TempDir dir;
  for (int64_t V : {int64_t(40000), int64_t(80000)}) {
    const auto model = Model::open(make_checkpoint(dir, "q8_0", V, 256, "--seed 4 --logit-scale 1000 --softcap 1"));
    auto backend = make_cuda_backend(head_view(*model), 1);
    const int T = 2;
    const std::vector<float> hidden = test_hidden(T, 256, 11);
    int on_host = 0;
    for (float top_p : {0.3f, 0.999f}) {
      SamplingOptions o;
      o.temperature = 1.0f;
      o.top_p = top_p;
      o.seed = 5;
      for (int64_t pos = 0; pos < 8; ++pos)
        on_host += expect_host_tokens(*backend, *model, hidden, T, o, pos, "V " + std::to_string(V) + " top-p " + std::to_string(top_p));
    }
    if (V == 40000) EXPECT_EQ(on_host, 0);
    else EXPECT_GT(on_host, 0) << "the ties should exceed the device's candidate buffer";
  }
}

TEST_F(CudaSample, NothingAllowedIsAnError) {
  TempDir dir;
  const auto model = Model::open(make_checkpoint(dir, "q8_0", 1000, 256, "--seed 2"));
  Engine engine(model, {.backend = BackendKind::cuda});
  RunOptions o;
  o.sampling.temperature = 1.0f;
  o.sampling.allowed.assign((1000 + 31) / 32, 0u);
  const std::vector<float> hidden = test_hidden(1, 256, 1);
  try {
    engine.run(hidden, 1, o);
    ADD_FAILURE() << "a mask that allows nothing was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no token can be sampled"), std::string::npos) << e.what();
  }
  o.sampling.allowed.clear();
  EXPECT_EQ(engine.run(hidden, 1, o).choices.size(), 1u);  // the engine is whole afterwards
}

}  // namespace
