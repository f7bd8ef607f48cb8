#!/usr/bin/env python3
"""Architecture rules and files with tensors of every ggml type, written by llama.cpp's `gguf` package.

    python3 test_arch_rules.py LMHEAD_CLI TESTS_DATA_DIR

(a) A llama file written the way llama.cpp's saver writes (logit_scale = 0, final_logit_softcapping
    = 30) with IQ4_NL, IQ2_XXS, IQ4_XS, TQ2_0, MXFP4, I8, I32 and F64 tensors beside a Q8_0 head
    opens in `info` and runs in `run`; llama's graph reads neither key, so the logits are neither
    multiplied by 0 nor capped: they equal NumPy's f32 computation from gguf-py's dequantized head.
(b) An IQ4_NL head is refused by name.
(c) --override-kv is applied and shown in `info --json`; an unknown architecture is refused naming
    it and the override syntax; a granite scale is divided.
(d) `bench` takes run's route options.

Exits 0 when everything holds, 1 on a failed check, 2 when the environment is missing something.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES
    from gguf.quants import dequantize, quantize
except ImportError as e:
    print(f"FAIL: cannot import llama.cpp's Python package 'gguf' or numpy ({e}).")
    sys.exit(2)

FAILURES = []
CHECKS = [0]
H, V = 64, 40


def check(condition, what):
    CHECKS[0] += 1
    if not condition:
        FAILURES.append(what)
        print(f"  FAIL {what}")
    return condition


def cli_run(cli, *args):
    return subprocess.run([cli, *args], capture_output=True, text=True, timeout=300)


def raw_tensor(rng, qtype, rows, cols):
    """Random bytes of a whole number of blocks; every float field made a small finite value."""
    block, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)
    if qtype in (T.IQ4_NL, T.IQ4_XS, T.IQ2_XXS, T.TQ2_0):
        # their f16 scale is the first (IQ4_NL, IQ4_XS, IQ2_XXS) or last (TQ2_0) 2 bytes of a block
        at = 0 if qtype != T.TQ2_0 else size - 2
        blocks = data.reshape(rows, -1, size)
        blocks[:, :, at:at + 2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    return data


def write_file(path, arch, head_type=T.Q8_0, kv=None, extra=True, seed=1):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    for key, value in (kv or {}).items():
        w.add_float32(key, value)
    w.add_uint32(f"{arch}.embedding_length", H)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    gamma = (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32)
    w.add_tensor("output_norm.weight", gamma)
    head = (rng.standard_normal((V, H)) * 0.5).astype(np.float32)
    if head_type == T.Q8_0:
        w.add_tensor("output.weight", quantize(head, T.Q8_0), raw_dtype=T.Q8_0)
    else:
        w.add_tensor("output.weight", raw_tensor(rng, head_type, V, H), raw_dtype=head_type)
    if extra:
        for i, qt in enumerate([T.IQ4_NL, T.IQ2_XXS, T.IQ4_XS, T.TQ2_0, T.MXFP4]):
            w.add_tensor(f"blk.{i}.w", raw_tensor(rng, qt, 2, 256), raw_dtype=qt)
        w.add_tensor("blk.9.i8", rng.integers(-5, 5, size=(3, 7), dtype=np.int8))
        w.add_tensor("blk.9.i32", rng.integers(-5, 5, size=(5,), dtype=np.int32))
        w.add_tensor("blk.9.f64", rng.standard_normal(6).astype(np.float64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return gamma, head


def check_llama_beside_other_types(cli, tmp):
    path = os.path.join(tmp, "llama.gguf")
    # llama.cpp's saver writes these two keys into files of every architecture
    gamma, _ = write_file(path, "llama", kv={"llama.logit_scale": 0.0, "llama.final_logit_softcapping": 30.0})
    reader = gguf.GGUFReader(path)
    types = {t.name: t.tensor_type for t in reader.tensors}
    check(types["blk.0.w"] == T.IQ4_NL, "gguf-py wrote an IQ4_NL tensor")
    p = cli_run(cli, "info", path, "--json")
    if not check(p.returncode == 0, f"info opens a file with IQ/TQ/MXFP4/I8/I32/F64 tensors: {p.stderr.strip()}"):
        return
    info = json.loads(p.stdout)
    check(info["head_type"] == "q8_0", "info: head type q8_0")
    check(info["logit_scale"]["value"] == 1.0 and info["logit_scale"]["from"] == "not applied",
          f"info: llama's logit_scale is not applied ({info['logit_scale']})")
    check(info["softcap"]["value"] == 0.0 and info["softcap"]["from"] == "not applied",
          f"info: llama's cap is not applied ({info['softcap']})")
    check(info["rule"]["source"] == "src/models/llama.cpp", "info: the rule names its llama.cpp source")

    rng = np.random.default_rng(7)
    hidden = rng.standard_normal((2, H)).astype(np.float32)
    hpath, out = os.path.join(tmp, "h.npy"), os.path.join(tmp, "out.npy")
    np.save(hpath, hidden)
    p = cli_run(cli, "run", path, "--hidden", hpath, "--activations", "f32", "--out", out)
    if not check(p.returncode == 0, f"run works on that file: {p.stderr.strip()}"):
        return
    got = np.load(out)
    w = dequantize(next(t for t in reader.tensors if t.name == "output.weight").data,
                   T.Q8_0).reshape(V, H).astype(np.float64)
    x = hidden.astype(np.float64)
    normed = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5) * gamma
    want = normed @ w.T
    err = np.abs(got - want).max() / np.abs(want).max()
    check(err < 1e-5, f"run: logits equal NumPy's (neither scaled by 0 nor capped), relative error {err:.2e}")
    check(np.abs(got).max() > 30.0 or np.abs(want).max() <= 30.0, "run: logits are not capped at 30")

    # bench takes run's route options
    p = cli_run(cli, "bench", path, "--tokens", "1", "--repeat", "1", "--threads", "1", "--activations", "f32",
                "--softcap", "fused", "--top-k", "3", "--logprobs", "--input", "normed", "--json")
    if check(p.returncode == 0, f"bench takes --activations/--softcap/--top-k/--logprobs/--input: {p.stderr.strip()}"):
        row = json.loads(p.stdout)["results"][0]
        check(row["activations"] == "f32" and row["softcap"] == "fused" and row["top_k"] == 3 and row["logprobs"]
              and row["input"] == "normed", f"bench reports the route it measured ({row})")


def check_unsupported_head(cli, tmp):
    path = os.path.join(tmp, "iq4nl_head.gguf")
    write_file(path, "llama", head_type=T.IQ4_NL, extra=False)
    for cmd in ("info", "run"):
        args = [cmd, path] + (["--hidden", os.path.join(tmp, "h.npy")] if cmd == "run" else [])
        p = cli_run(cli, *args)
        check(p.returncode != 0 and "iq4_nl" in p.stderr and "output.weight" in p.stderr,
              f"{cmd}: an IQ4_NL head is refused by name ({p.stderr.strip()})")


def check_overrides(cli, tmp):
    path = os.path.join(tmp, "granite.gguf")
    write_file(path, "granite", kv={"granite.logit_scale": 8.0}, extra=False)
    info = json.loads(cli_run(cli, "info", path, "--json").stdout)
    check(info["logit_scale"]["value"] == 0.125 and info["logit_scale"]["from"] == "file",
          f"granite divides by its logit_scale ({info['logit_scale']})")
    p = cli_run(cli, "info", "--override-kv", "granite.logit_scale=float:4", path, "--json")
    if check(p.returncode == 0, f"info --override-kv: {p.stderr.strip()}"):
        info = json.loads(p.stdout)
        check(info["logit_scale"]["value"] == 0.25 and info["logit_scale"]["from"] == "override",
              f"the override is applied and shown ({info['logit_scale']})")
        check(info["overrides"] == ["granite.logit_scale=float:4"], f"info lists the overrides ({info['overrides']})")
    p = cli_run(cli, "info", path, "--override-kv", "granite.logit_scale=float:0")
    check(p.returncode != 0 and "granite.logit_scale" in p.stderr, "a zero granite scale is refused")

    unknown = os.path.join(tmp, "unknown.gguf")
    write_file(unknown, "weirdnet", extra=False)
    p = cli_run(cli, "info", unknown)
    check(p.returncode != 0 and "'weirdnet'" in p.stderr and "--override-kv weirdnet.logit_scale=float:" in p.stderr,
          f"an unknown architecture is refused naming it and the override syntax ({p.stderr.strip()})")
    p = cli_run(cli, "info", unknown, "--json", "--override-kv", "weirdnet.logit_scale=float:1",
                "--override-kv", "weirdnet.final_logit_softcapping=float:0")
    check(p.returncode == 0 and json.loads(p.stdout)["rule"]["source"] == "stated by overrides",
          f"overrides state a rule for an unknown architecture ({p.stderr.strip()})")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    cli = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="lmhead-rules-") as tmp:
        for part in (check_llama_beside_other_types, check_unsupported_head, check_overrides):
            try:
                part(cli, tmp)
            except (subprocess.TimeoutExpired, KeyError, ValueError, StopIteration, json.JSONDecodeError) as e:
                check(False, f"{part.__name__}: {type(e).__name__}: {e}")
    if FAILURES:
        print(f"FAILED: {len(FAILURES)} of {CHECKS[0]} checks")
        return 1
    print(f"OK: {CHECKS[0]} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
