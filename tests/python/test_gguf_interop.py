#!/usr/bin/env python3
"""GGUF and .npy interoperability with llama.cpp's own Python package `gguf` and with NumPy.

    python3 test_gguf_interop.py LMHEAD_CLI TESTS_DATA_DIR

(a) `lmhead make` writes a small checkpoint; gguf-py must read it, with the metadata and tensor
    layout lmhead promises; `lmhead info --json` must describe the same head; the tensor bytes are
    checked through the tool: the stages `lmhead run --activations f32 --dump` writes must match what
    NumPy computes from gguf-py's own view of the tensors (gamma, and the dequantized Q5_K rows).
(b) gguf-py must read the golden files (written by ggml) the way lmhead's C++ tests expect them
    (tests/gguf_reader_test.cpp), and lmhead must agree with it about each checkpoint's head.
(c) A hidden state given as a NumPy-written .npy and as FILE.gguf:TENSOR gives identical logits
    bytes, and every .npy lmhead writes loads in NumPy.

Exits 0 when everything holds, 1 on a failed check, 2 when the environment is missing something
(the README's test command installs `gguf` and `numpy`).
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize
except ImportError as e:  # the test command installs these; running without them is a setup error
    print(f"FAIL: cannot import llama.cpp's Python package 'gguf' or numpy ({e}).")
    print("      Install them with: python3 -m pip install gguf numpy  (scripts/test.sh does this)")
    sys.exit(2)

FAILURES = []
CHECKS = [0]


def check(condition, what):
    CHECKS[0] += 1
    if not condition:
        FAILURES.append(what)
        print(f"  FAIL {what}")
    return condition


def run_cli(cli, *args):
    proc = subprocess.run([cli, *args], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"`lmhead {' '.join(args)}` exited {proc.returncode}:\n{proc.stderr.strip()}")
    return proc.stdout


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def field_type(reader, key):
    return reader.fields[key].types[0]


def tensor(reader, name):
    for t in reader.tensors:
        if t.name == name:
            return t
    return None


def np_load_checked(path, shape):
    a = np.load(path)
    check(a.dtype == np.float32 and a.shape == shape, f"{os.path.basename(path)}: NumPy reads {a.dtype} {a.shape}, expected float32 {shape}")
    return a


# ---- (a) a file lmhead make wrote ----------------------------------------------------------------

def check_made_file(cli, tmp):
    print("(a) lmhead make -> gguf-py")
    vocab, hidden = 1000, 512
    path = os.path.join(tmp, "made.gguf")
    run_cli(cli, "make", path, "--vocab", str(vocab), "--hidden", str(hidden), "--type", "q5_K", "--quiet")
    check(not [n for n in os.listdir(tmp) if ".tmp-" in n], "make left a temporary file behind")
    r = GGUFReader(path)

    check(field(r, "GGUF.version") == 3, "GGUF version is 3")
    check(r.alignment == 32, f"alignment {r.alignment}, expected the default 32")
    check(field(r, "general.architecture") == "muse-glimmer", "general.architecture = muse-glimmer")
    for key, value in [("muse-glimmer.logit_scale", 0.196116), ("muse-glimmer.final_logit_softcapping", 20.0)]:
        check(field_type(r, key) == gguf.GGUFValueType.FLOAT32, f"{key} is f32")
        check(np.float32(field(r, key)) == np.float32(value), f"{key} = {value} (got {field(r, key)})")
    for key, value in [("muse-glimmer.embedding_length", hidden), ("muse-glimmer.vocab_size", vocab)]:
        check(field_type(r, key) == gguf.GGUFValueType.UINT32, f"{key} is u32")
        check(field(r, key) == value, f"{key} = {value} (got {field(r, key)})")
    tokens = field(r, "tokenizer.ggml.tokens")
    check(tokens is not None and len(tokens) == vocab, f"tokenizer.ggml.tokens has {vocab} entries")

    norm, head = tensor(r, "output_norm.weight"), tensor(r, "output.weight")
    if not (check(norm is not None and head is not None, "output_norm.weight and output.weight present")):
        return
    check(norm.tensor_type == GGMLQuantizationType.F32 and list(norm.shape) == [hidden], f"output_norm.weight F32 [{hidden}]")
    check(head.tensor_type == GGMLQuantizationType.Q5_K and list(head.shape) == [hidden, vocab], f"output.weight Q5_K [{hidden}, {vocab}]")
    row_bytes = hidden // 256 * 176
    check(int(head.n_bytes) == vocab * row_bytes, f"output.weight holds {vocab * row_bytes} bytes")
    for t in r.tensors:
        check((t.data_offset - r.data_offset) % 32 == 0, f"{t.name} offset is a multiple of 32")
    end = max(int(t.data_offset) + int(t.n_bytes) for t in r.tensors)
    check(os.path.getsize(path) == (end + 31) // 32 * 32, "the file ends at the last tensor, padded to 32 (as ggml writes)")

    info = json.loads(run_cli(cli, "info", path, "--json"))
    check(info["hidden"] == hidden and info["vocab"] == vocab, "info --json: hidden and vocab as gguf-py reads them")
    check(info["head_type"] == "q5_K" and info["head_tensor"] == "output.weight", "info --json: q5_K head in output.weight")
    check(info["head_bytes"] == int(head.n_bytes) and info["row_bytes"] == row_bytes, "info --json: head and row bytes agree with gguf-py")
    check(np.float32(info["logit_scale"]["value"]) == np.float32(field(r, "muse-glimmer.logit_scale")), "info --json: logit_scale")
    check(info["softcap"]["value"] == 20.0 and not info["softcap"]["default"], "info --json: softcap 20 from the file")

    # Tensor bytes, through what the tool computes from them. NumPy writes the hidden state.
    rng = np.random.default_rng(7)
    h = rng.standard_normal((2, hidden)).astype(np.float32)
    h_path = os.path.join(tmp, "h.npy")
    np.save(h_path, h)
    dump = os.path.join(tmp, "dump")
    run_cli(cli, "run", path, "--hidden", h_path, "--activations", "f32", "--dump", dump, "--backend", "scalar")
    normed = np_load_checked(os.path.join(dump, "normed.npy"), (2, hidden)).astype(np.float64)
    raw = np_load_checked(os.path.join(dump, "logits_raw.npy"), (2, vocab)).astype(np.float64)
    for stage in ["logits_scaled", "logits_div", "logits_tanh", "logits_capped"]:
        np_load_checked(os.path.join(dump, stage + ".npy"), (2, vocab))

    # normed = h / sqrt(mean(h^2) + eps) * gamma: computed in f64, lmhead's f32 result is within a
    # few float32 ulps; a misread gamma byte would be off by far more.
    gamma = np.asarray(norm.data, dtype=np.float64).reshape(hidden)
    eps = float(np.float32(1e-5))
    h64 = h.astype(np.float64)
    expected_normed = h64 / np.sqrt((h64 * h64).mean(axis=1, keepdims=True) + eps) * gamma
    err = np.abs(normed - expected_normed).max() / np.abs(expected_normed).max()
    check(err < 1e-5, f"normed matches gamma as gguf-py reads it (max relative error {err:.2e})")
    print(f"  normed vs f64 from gguf-py's gamma: max relative error {err:.2e}")

    # logits_raw = W . normed with W dequantized by gguf-py, in f64: the f32 route's rounding error
    # is bounded by about n * 2^-24 * sum|w x|; one misread Q5_K byte moves a logit by ~d * |x|,
    # orders of magnitude above that bound.
    w = dequantize(np.asarray(head.data), GGMLQuantizationType.Q5_K).astype(np.float64).reshape(vocab, hidden)
    expected_raw = normed @ w.T
    bound = hidden * 2.0 ** -24 * (np.abs(normed) @ np.abs(w).T) + 1e-30
    ratio = (np.abs(raw - expected_raw) / bound).max()
    check(ratio <= 1.0, f"logits_raw matches gguf-py's dequantized output.weight (worst error {ratio:.3f} of its rounding bound)")
    print(f"  logits_raw vs f64 from gguf-py's dequantized Q5_K: worst error {ratio:.4f} of the rounding bound")


# ---- (b) golden files ----------------------------------------------------------------------------

def check_golden(cli, data, tmp):
    print("(b) golden files -> gguf-py")
    for name, hidden, vocab in [("tail-q5k-v4099-h512", 512, 4099), ("tail-q5k-v4096-h256", 256, 4096)]:
        path = os.path.join(data, name + ".gguf")
        r = GGUFReader(path)
        check(field(r, "general.architecture") == "muse-glimmer", f"{name}: architecture")
        check(np.float32(field(r, "muse-glimmer.logit_scale")) == np.float32(0.196116), f"{name}: logit_scale 0.196116")
        check(field(r, "muse-glimmer.final_logit_softcapping") == 20.0, f"{name}: softcap 20")
        check(np.float32(field(r, "muse-glimmer.attention.layer_norm_rms_epsilon")) == np.float32(1e-5), f"{name}: eps 1e-5")
        tokens = field(r, "tokenizer.ggml.tokens")
        check(len(tokens) == vocab, f"{name}: {vocab} tokens")
        check(tokens[:12] == ["<pad>", "<bos>", "<eos>", "<unk>", "\u2581the", "\u2581Muse", "\u2581glimmer", "été", "日本", "🙂", "\n", '"quoted"'],
              f"{name}: the first twelve token texts")
        head = tensor(r, "output.weight")
        check(head.tensor_type == GGMLQuantizationType.Q5_K and list(head.shape) == [hidden, vocab], f"{name}: Q5_K [{hidden}, {vocab}]")
        check(r.data_offset == {"tail-q5k-v4099-h512": 65056, "tail-q5k-v4096-h256": 65024}[name], f"{name}: data section offset")
        info = json.loads(run_cli(cli, "info", path, "--json"))
        check((info["hidden"], info["vocab"], info["head_type"], info["head_bytes"]) == (hidden, vocab, "q5_K", int(head.n_bytes)),
              f"{name}: lmhead info agrees with gguf-py")

        vectors = GGUFReader(os.path.join(data, name + ".vectors.gguf"))
        n_tokens = int(field(vectors, "tail.tokens"))
        names = [t.name for t in vectors.tensors]
        check(names == ["hidden", "rms_norm", "normed", "normed_vec_dot", "logits_raw", "logits_scaled",
                        "logits_div", "logits_tanh", "logits_capped"], f"{name}.vectors: tensor names in order")
        for t in vectors.tensors:
            width = vocab if t.name.startswith("logits") else hidden
            expected_type = GGMLQuantizationType.Q8_K if t.name == "normed_vec_dot" else GGMLQuantizationType.F32
            # ggml drops a trailing dim of 1: a 1-token tensor has one dim.
            expected_shape = [width, n_tokens] if n_tokens > 1 else [width]
            check(t.tensor_type == expected_type and list(t.shape) == expected_shape, f"{name}.vectors: {t.name} {expected_type.name} {expected_shape}")

    r = GGUFReader(os.path.join(data, "quantize-r64-n512.gguf"))
    check([(t.name, t.tensor_type.name, int(t.n_bytes)) for t in r.tensors] ==
          [("source", "F32", 131072), ("q4_K", "Q4_K", 18432), ("q5_K", "Q5_K", 22528), ("q6_K", "Q6_K", 26880), ("q8_0", "Q8_0", 34816)],
          "quantize-r64-n512: tensors, types and sizes")


# ---- (c) .npy and FILE.gguf:TENSOR agree ---------------------------------------------------------

def check_inputs_agree(cli, data, tmp):
    print("(c) NumPy .npy input == FILE.gguf:TENSOR input")
    name = "tail-q5k-v4099-h512"
    vectors_path = os.path.join(data, name + ".vectors.gguf")
    hidden = tensor(GGUFReader(vectors_path), "hidden")
    h = np.asarray(hidden.data, dtype=np.float32).reshape(3, 512)  # ggml [H, T] is NumPy [T, H]
    h_path = os.path.join(tmp, "golden_hidden.npy")
    np.save(h_path, h)
    model = os.path.join(data, name + ".gguf")
    from_npy, from_gguf = os.path.join(tmp, "from_npy.npy"), os.path.join(tmp, "from_gguf.npy")
    run_cli(cli, "run", model, "--hidden", h_path, "--out", from_npy)
    run_cli(cli, "run", model, "--hidden", vectors_path + ":hidden", "--out", from_gguf)
    a, b = np_load_checked(from_npy, (3, 4099)), np_load_checked(from_gguf, (3, 4099))
    check(a.tobytes() == b.tobytes(), "logits bytes are identical for both inputs")
    one = os.path.join(tmp, "one_token.npy")
    np.save(one, h[0])  # shape [H]
    run_cli(cli, "run", model, "--hidden", one, "--out", os.path.join(tmp, "one_out.npy"))
    c = np_load_checked(os.path.join(tmp, "one_out.npy"), (1, 4099))
    check(c.tobytes() == a[:1].tobytes(), "a [H] .npy runs as one token with the same logits")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    cli, data = sys.argv[1], sys.argv[2]
    if not (os.path.isfile(cli) and os.access(cli, os.X_OK)):
        print(f"FAIL: the lmhead tool is not at {cli} (build the `lmhead` target first)")
        return 2
    print(f"gguf-py {getattr(gguf, '__version__', '(version unknown)')}, numpy {np.__version__}")
    with tempfile.TemporaryDirectory(prefix="lmhead-interop-") as tmp:
        for part in (lambda: check_made_file(cli, tmp), lambda: check_golden(cli, data, tmp), lambda: check_inputs_agree(cli, data, tmp)):
            try:
                part()
            except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError) as e:
                check(False, f"{type(e).__name__}: {e}")
    if FAILURES:
        print(f"FAILED: {len(FAILURES)} of {CHECKS[0]} checks")
        return 1
    print(f"OK: {CHECKS[0]} checks: gguf-py, NumPy and lmhead agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
