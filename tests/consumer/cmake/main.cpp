// The C++ API from an installed lmhead (find_package): prints what tests/consumer/c/main.c prints
// for the same inputs, and checks that a NaN comes back as lmhead::Error across the library.
#include <lmhead/lmhead.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static float value_at(size_t i) {
  unsigned long x = static_cast<unsigned long>(i * 2654435761u % 1000003u);
  return static_cast<float>(x) / 1000003.0f * 4.0f - 2.0f;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cpp_consumer MODEL [TOKENS]\n");
    return 2;
  }
  const int tokens = argc > 2 ? std::atoi(argv[2]) : 2;
  try {
    auto model = lmhead::Model::open(argv[1]);
    lmhead::Engine engine(model, {.backend = lmhead::BackendKind::cpu});
    std::vector<float> hidden(static_cast<size_t>(tokens) * model->config().hidden);
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = value_at(i);
    lmhead::RunResult r = engine.run(hidden, tokens);
    std::printf("argmax");
    for (const auto& c : r.choices) std::printf(" %d", c.argmax);
    std::printf("\n");
    lmhead::RunResult top = engine.run(std::span<const float>(hidden).first(model->config().hidden), 1, {.top_k = 3});
    std::printf("top3 %d %d %d\n", top.choices[0].top[0].id, top.choices[0].top[1].id, top.choices[0].top[2].id);
    hidden.back() = NAN;
    try {
      engine.run(hidden, tokens);
      std::fprintf(stderr, "cpp_consumer: a NaN was not refused\n");
      return 1;
    } catch (const lmhead::Error& e) {
      if (std::string(e.what()).find("non-finite") == std::string::npos) {
        std::fprintf(stderr, "cpp_consumer: unexpected message: %s\n", e.what());
        return 1;
      }
    }
  } catch (const lmhead::Error& e) {
    std::fprintf(stderr, "cpp_consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
