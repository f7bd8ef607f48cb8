/* lmhead C API (C99): the same engine as lmhead.hpp behind opaque handles.
 *
 *   lmhead_model* model;
 *   lmhead_engine* engine;
 *   if (lmhead_model_open("muse.gguf", &model) != 0) { fprintf(stderr, "%s\n", lmhead_last_error()); ... }
 *   if (lmhead_engine_create(model, "cpu", 0, &engine) != 0) { ... }
 *   int32_t next;
 *   if (lmhead_engine_run(engine, hidden, 1, &next, NULL) != 0) { ... }
 *   lmhead_engine_destroy(engine);
 *   lmhead_model_close(model);
 *
 * Every function that can fail returns 0 on success or one of LMHEAD_ERR_*, and records a message
 * naming the problem for the calling thread (lmhead_last_error). No C++ exception crosses this
 * interface. A model may be shared by any number of engines and threads; an engine may be called
 * from any thread (calls on one engine run one at a time).
 *
 * Growing the API: the option and output structs start with their own size. Callers fill it with
 * sizeof(the struct) as their header knows it (lmhead_run_options_init does this), so a library with
 * more fields reads only the fields the caller has, and a caller built against a newer header is
 * refused by an older library instead of having fields silently ignored.
 */
#ifndef LMHEAD_LMHEAD_H
#define LMHEAD_LMHEAD_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define LMHEAD_C_API
#else
#define LMHEAD_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
#define LMHEAD_OK 0
#define LMHEAD_ERR_ARGUMENT 1  /* a null pointer, an unknown name, a size the library does not know */
#define LMHEAD_ERR_INPUT 2     /* the hidden states: a NaN or infinity (token and index named), bad token count */
#define LMHEAD_ERR_MODEL 3     /* the checkpoint: unreadable, malformed, an unsupported head or architecture */
#define LMHEAD_ERR_RUNTIME 4   /* everything else: out of memory, a device error, an unavailable backend */

typedef struct lmhead_model lmhead_model;
typedef struct lmhead_engine lmhead_engine;

/* This thread's last failure message; "" when none has happened on this thread. The pointer stays
 * valid until the next failing call on this thread. */
LMHEAD_C_API const char* lmhead_last_error(void);
/* "0.1.0" */
LMHEAD_C_API const char* lmhead_version(void);

/* ---- model ------------------------------------------------------------------------------------ */

/* overrides: llama.cpp's --override-kv syntax, KEY=TYPE:VALUE (e.g. "granite.logit_scale=float:8"). */
typedef struct lmhead_model_options {
  size_t size; /* sizeof(lmhead_model_options) */
  const char* const* overrides;
  size_t override_count;
} lmhead_model_options;

LMHEAD_C_API int lmhead_model_open(const char* path, lmhead_model** out);
/* options may be NULL (same as lmhead_model_open). */
LMHEAD_C_API int lmhead_model_open_ex(const char* path, const lmhead_model_options* options, lmhead_model** out);
/* Engines made from the model keep it alive: closing it before them is allowed. NULL is ignored. */
LMHEAD_C_API void lmhead_model_close(lmhead_model* model);
LMHEAD_C_API int64_t lmhead_model_vocab(const lmhead_model* model);
LMHEAD_C_API int64_t lmhead_model_hidden(const lmhead_model* model);

/* The head as the architecture's rule configures it (docs/architectures.md). Strings live as long
 * as the model. */
typedef struct lmhead_model_info {
  size_t size; /* sizeof(lmhead_model_info), set by the caller */
  const char* architecture;
  const char* head_type;      /* "q5_K", "q8_0", ... */
  const char* head_tensor;    /* "output.weight" or "token_embd.weight" (tied) */
  int64_t vocab;
  int64_t hidden;
  float logit_scale;          /* multiplied in (granite's stated value is divided: this is 1/it) */
  float softcap;              /* 0: no cap */
  float eps;
  const char* logit_scale_rule;
  const char* softcap_rule;
  const char* final_norm;
  const char* rule_source;
} lmhead_model_info;
LMHEAD_C_API int lmhead_model_get_info(const lmhead_model* model, lmhead_model_info* info);

/* Token id's text, not NUL-terminated in general (*length bytes); NULL when the id is out of range
 * or the file has no token table. */
LMHEAD_C_API const char* lmhead_model_token_text(const lmhead_model* model, int64_t id, size_t* length);

/* ---- engine ----------------------------------------------------------------------------------- */

typedef struct lmhead_engine_options {
  size_t size;          /* sizeof(lmhead_engine_options) */
  const char* backend;  /* "scalar", "cpu" (default when NULL) or "cuda" */
  int threads;          /* 0: all hardware threads */
  int gpus;             /* cuda: vocabulary split over this many GPUs; 0 or 1: one */
  int shards;           /* vocabulary split into this many shards on one device; 0: automatic */
} lmhead_engine_options;
LMHEAD_C_API void lmhead_engine_options_init(lmhead_engine_options* options);

/* backend: "scalar", "cpu" or "cuda"; threads: 0 for all hardware threads. */
LMHEAD_C_API int lmhead_engine_create(const lmhead_model* model, const char* backend, int threads, lmhead_engine** out);
LMHEAD_C_API int lmhead_engine_create_ex(const lmhead_model* model, const lmhead_engine_options* options,
                                         lmhead_engine** out);
LMHEAD_C_API void lmhead_engine_destroy(lmhead_engine* engine);
/* The backend that runs: "scalar", "cpu-avx2", "cuda", ... Lives as long as the engine. */
LMHEAD_C_API const char* lmhead_engine_backend_name(const lmhead_engine* engine);

/* hidden: tokens x hidden floats, row-major. argmax: tokens ids (lowest id on a tie). logits: NULL,
 * or tokens x vocab floats for the capped logits (the same bytes as `lmhead run --out`). */
LMHEAD_C_API int lmhead_engine_run(lmhead_engine* engine, const float* hidden, int tokens, int32_t* argmax,
                                   float* logits);

enum lmhead_input_kind { LMHEAD_INPUT_HIDDEN = 0, LMHEAD_INPUT_NORMED = 1 };
enum lmhead_activation_route { LMHEAD_ACTIVATIONS_Q8 = 0, LMHEAD_ACTIVATIONS_F32 = 1 };
enum lmhead_softcap_route { LMHEAD_SOFTCAP_NODES = 0, LMHEAD_SOFTCAP_FUSED = 1 };
/* Whose order the dots follow (docs/numerics.md): ggml's vec_dot order at every T (default); what
 * llama.cpp's x86 CPU backend computes for the head type and token count; or llama.cpp's tiled
 * K-quant order at every T (Q4_K, Q5_K, Q6_K heads; other types keep vec_dot's), the fast one on the
 * GPU from 2 tokens. All three are batch-invariant but llamacpp, whose order follows the call's T. */
enum lmhead_route { LMHEAD_ROUTE_VEC_DOT = 0, LMHEAD_ROUTE_LLAMACPP = 1, LMHEAD_ROUTE_TILED = 2 };

/* Seeded sampling (docs/numerics.md §9): bias and mask, temperature, min-p, top-k and top-p on the
 * capped logits, then an exact draw keyed by (seed, position) only, so the token is the same on
 * every backend and for any thread, shard or GPU count and any split of positions over calls. The
 * defaults (lmhead_sampling_options_init) choose the argmax. The arrays are read during the call. */
typedef struct lmhead_sampling_options {
  size_t size;               /* sizeof(lmhead_sampling_options) */
  float temperature;         /* 0: greedy (the largest biased logit among the allowed ids, lowest id on ties) */
  int top_k;                 /* keep the k most likely ids; 0: off (not lmhead_run_options.top_k) */
  float top_p;               /* keep the most likely ids until their mass reaches top_p, in (0, 1]; 1: off */
  float min_p;               /* keep the ids with p >= min_p * p_max, in [0, 1]; 0: off */
  uint64_t seed;             /* the random stream's key */
  int64_t position;          /* token t of the call draws at position + t */
  const int32_t* bias_ids;   /* bias_count ids, each at most once */
  const float* bias_values;  /* bias_count values added to those ids' capped logits */
  size_t bias_count;
  const uint32_t* allowed;   /* NULL: every id allowed; else bit (id % 32) of word id / 32 set for allowed ids */
  size_t allowed_words;      /* ceil(V / 32) (one mask for every token) or tokens x that (one per token) */
} lmhead_sampling_options;
LMHEAD_C_API void lmhead_sampling_options_init(lmhead_sampling_options* options);

typedef struct lmhead_run_options {
  size_t size;       /* sizeof(lmhead_run_options) */
  int input;         /* enum lmhead_input_kind */
  int activations;   /* enum lmhead_activation_route */
  int softcap;       /* enum lmhead_softcap_route */
  int top_k;         /* 0: argmax only */
  int logprobs;      /* nonzero: log-softmax of the argmax and of the top-k */
  /* Added in 0.2.0 (a caller with 0.1.0's size keeps the default): */
  const lmhead_sampling_options* sampling;  /* NULL: lmhead_run_outputs.sampled is the argmax */
  /* Added in 0.3.0 (a caller with 0.2.0's size keeps the default): */
  int route;         /* enum lmhead_route */
} lmhead_run_options;
LMHEAD_C_API void lmhead_run_options_init(lmhead_run_options* options);

/* Where a run writes; every pointer may be NULL (that output is not wanted). */
typedef struct lmhead_run_outputs {
  size_t size;              /* sizeof(lmhead_run_outputs) */
  int32_t* argmax;          /* [T] */
  float* value;             /* [T] the argmax's capped logit */
  float* logprob;           /* [T] needs options.logprobs */
  int64_t* tie_count;       /* [T] how many ids share the maximum */
  int32_t* top_k_ids;       /* [T, top_k] value descending, id ascending */
  float* top_k_values;      /* [T, top_k] */
  float* top_k_logprobs;    /* [T, top_k] needs options.logprobs */
  float* logits;            /* [T, V] capped logits */
  /* Added in 0.2.0 (a caller with 0.1.0's size wants none of these): */
  int32_t* sampled;         /* [T] the token options.sampling chose (the argmax without it) */
} lmhead_run_outputs;

/* options NULL: the defaults (argmax of the q8 route with the node-per-op cap). */
LMHEAD_C_API int lmhead_engine_run_ex(lmhead_engine* engine, const float* hidden, int tokens,
                                      const lmhead_run_options* options, lmhead_run_outputs* outputs);

/* The same with the hidden states in GPU memory (a cuda engine; tokens x hidden floats on the
 * engine's GPU), written by work queued on cuda_stream (a cudaStream_t; NULL: the legacy default
 * stream). A one-GPU engine reads them in place once that work is done and checks them there
 * (LMHEAD_ERR_INPUT for a NaN or infinity); the outputs are host memory, as above. */
LMHEAD_C_API int lmhead_engine_run_device(lmhead_engine* engine, const float* device_hidden, int tokens,
                                          void* cuda_stream, const lmhead_run_options* options,
                                          lmhead_run_outputs* outputs);

/* Speculative verification: hidden holds drafts + 1 rows of tokens x hidden floats, row j the
 * state after draft token j - 1 (row 0 the state before the first draft), drawn at positions
 * sampling->position + j. Greedy (options NULL, no sampling, or temperature 0): a draft token is
 * accepted while it equals that row's greedy choice. Temperature > 0 without draft_probs: while it
 * equals the token lmhead_engine_run_ex would sample there. With draft_probs (drafts x vocab
 * probabilities of the draft model, rows summing to 1): accepted with probability min(1, p / q); on
 * a rejection `next` is drawn from max(0, p - q) normalized, so the tokens follow the target's
 * distribution. accepted: how many draft tokens were accepted (0..drafts); next: the token after
 * them (a correction, or the last row's token when every draft was accepted). drafts may be 0. */
LMHEAD_C_API int lmhead_engine_verify(lmhead_engine* engine, const float* hidden, const int32_t* draft, int drafts,
                                      const float* draft_probs, const lmhead_run_options* options, int* accepted,
                                      int32_t* next);

#ifdef __cplusplus
}
#endif

#endif /* LMHEAD_LMHEAD_H */
