/* A C99 program using lmhead through an installed copy (scripts/package-test.sh builds it with
 * pkg-config and through find_package): opens MODEL, runs T deterministic hidden states, prints the
 * argmax ids and the top-3 of the first token, and checks that a NaN is refused by name.
 *
 *   c_consumer MODEL [T]
 */
#include <lmhead/lmhead.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The same values tests/consumer/cmake/main.cpp makes, so the two programs can be compared. */
static float value_at(size_t i) {
  unsigned long x = (unsigned long)(i * 2654435761u % 1000003u);
  return (float)x / 1000003.0f * 4.0f - 2.0f;
}

int main(int argc, char** argv) {
  lmhead_model* model = NULL;
  lmhead_engine* engine = NULL;
  int tokens = argc > 2 ? atoi(argv[2]) : 2;
  int rc = 1;
  if (argc < 2 || tokens <= 0) {
    fprintf(stderr, "usage: c_consumer MODEL [TOKENS]\n");
    return 2;
  }
  if (lmhead_model_open(argv[1], &model) != LMHEAD_OK) {
    fprintf(stderr, "c_consumer: %s\n", lmhead_last_error());
    return 1;
  }
  if (lmhead_engine_create(model, "cpu", 0, &engine) != LMHEAD_OK) {
    fprintf(stderr, "c_consumer: %s\n", lmhead_last_error());
    lmhead_model_close(model);
    return 1;
  }
  {
    const int64_t hidden_size = lmhead_model_hidden(model);
    const size_t n = (size_t)tokens * (size_t)hidden_size;
    float* hidden = malloc(n * sizeof *hidden);
    int32_t* argmax = malloc((size_t)tokens * sizeof *argmax);
    int32_t top_ids[3];
    float top_values[3];
    lmhead_run_options options;
    lmhead_run_outputs outputs;
    size_t i;
    int t;
    if (!hidden || !argmax) goto done;
    for (i = 0; i < n; ++i) hidden[i] = value_at(i);
    if (lmhead_engine_run(engine, hidden, tokens, argmax, NULL) != LMHEAD_OK) {
      fprintf(stderr, "c_consumer: %s\n", lmhead_last_error());
      goto done;
    }
    printf("argmax");
    for (t = 0; t < tokens; ++t) printf(" %d", (int)argmax[t]);
    printf("\n");

    lmhead_run_options_init(&options);
    options.top_k = 3;
    memset(&outputs, 0, sizeof outputs);
    outputs.size = sizeof outputs;
    outputs.top_k_ids = top_ids;
    outputs.top_k_values = top_values;
    if (lmhead_engine_run_ex(engine, hidden, 1, &options, &outputs) != LMHEAD_OK) {
      fprintf(stderr, "c_consumer: %s\n", lmhead_last_error());
      goto done;
    }
    printf("top3 %d %d %d\n", (int)top_ids[0], (int)top_ids[1], (int)top_ids[2]);

    hidden[n - 1] = NAN;
    if (lmhead_engine_run(engine, hidden, tokens, argmax, NULL) != LMHEAD_ERR_INPUT ||
        strstr(lmhead_last_error(), "non-finite") == NULL) {
      fprintf(stderr, "c_consumer: a NaN was not refused as LMHEAD_ERR_INPUT (%s)\n", lmhead_last_error());
      goto done;
    }
    rc = 0;
  done:
    free(hidden);
    free(argmax);
  }
  lmhead_engine_destroy(engine);
  lmhead_model_close(model);
  return rc;
}
