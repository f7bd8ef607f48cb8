#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets under fuzz/corpus/<target>/.

    python3 fuzz/make_corpus.py LMHEAD_CLI [GOLDEN_DIR]

Seeds come from three places:
  * the golden files (tests/data, written by ggml): small ones whole, large ones cut after their
    metadata, so the fuzzer starts from what real checkpoints and vectors files look like;
  * `lmhead make` checkpoints of every head type, kept tiny (16 rows) so each run stays fast;
  * files built here byte by byte for shapes neither of those has: every metadata value type,
    every tensor type lmhead can size, 1- to 4-D tensors, a tied head, NaN and infinity in hidden
    states, every .npy header variant NumPy writes.
The hand-made hostile files of fuzz/seeds/ (tools/make_hostile_seeds.py) are used as a second seed
directory by scripts/fuzz.sh, not copied. Rerunning this script rewrites the same bytes.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

# GGUF value types (spec/gguf.md)
U8, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml tensor types: id -> (block elements, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292), 30: (1, 2)}
F32, F16, Q8_0, Q5_K = 0, 1, 8, 13


class Gguf:
    """A GGUF v3 file: key-values and tensors are collected, then laid out with their offsets."""

    def __init__(self, alignment=32):
        self.kvs = []
        self.tensors = []  # (name, dims, type, bytes)
        self.alignment = alignment

    @staticmethod
    def s(text):
        data = text.encode() if isinstance(text, str) else text
        return struct.pack("<Q", len(data)) + data

    def kv(self, key, vtype, payload):
        self.kvs.append(self.s(key) + struct.pack("<i", vtype) + payload)
        return self

    def kv_u32(self, key, v): return self.kv(key, U32, struct.pack("<I", v))
    def kv_f32(self, key, v): return self.kv(key, F32V, struct.pack("<f", v))
    def kv_str(self, key, v): return self.kv(key, STRING, self.s(v))

    def kv_array(self, key, etype, payloads):
        return self.kv(key, ARRAY, struct.pack("<iQ", etype, len(payloads)) + b"".join(payloads))

    def tensor(self, name, dims, ttype, data):
        self.tensors.append((name, dims, ttype, data))
        return self

    def bytes(self):
        out = b"GGUF" + struct.pack("<Iqq", 3, len(self.tensors), len(self.kvs)) + b"".join(self.kvs)
        offset = 0
        infos = b""
        for name, dims, ttype, data in self.tensors:
            infos += self.s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
            infos += struct.pack("<iQ", ttype, offset)
            offset += len(data)
            offset += -offset % self.alignment
        out += infos
        out += bytes(-len(out) % self.alignment)
        for _, _, _, data in self.tensors:
            out += data + bytes(-len(data) % self.alignment)
        return out


def f32s(values):
    return b"".join(struct.pack("<f", v) for v in values)


def tensor_bytes(ttype, dims, seed):
    """Bytes of a tensor of `dims`: scales as small f16 numbers so quantized blocks decode finitely."""
    block_elems, block_bytes = TYPES[ttype]
    n = 1
    for d in dims:
        n *= d
    if ttype == F32:
        return f32s([((i * 37 + seed) % 19 - 9) / 16 for i in range(n)])
    raw = bytearray((i * 131 + seed * 17) % 251 for i in range(n // block_elems * block_bytes))
    if ttype in (F16, 30):
        for i in range(0, len(raw), 2):  # keep every half-float finite: clear the top exponent bit
            raw[i + 1] &= 0x3B
    else:
        for b in range(0, len(raw), block_bytes):
            raw[b:b + 2] = struct.pack("<e", 0.01)
            if ttype in (3, 7, 9, 10, 11, 12, 13):
                raw[b + 2:b + 4] = struct.pack("<e", 0.001)
    return bytes(raw)


def head_file(ttype, hidden, vocab, arch="muse-glimmer", tied=False, extra_kvs=True, hidden_tokens=0):
    g = Gguf()
    g.kv_str("general.architecture", arch)
    if extra_kvs:
        g.kv_u32(arch + ".embedding_length", hidden)
        g.kv_u32(arch + ".vocab_size", vocab)
        g.kv_f32(arch + ".logit_scale", 0.25)
        g.kv_f32(arch + ".final_logit_softcapping", 20.0)
        g.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5)
        g.kv_array("tokenizer.ggml.tokens", STRING, [Gguf.s(t) for t in ["<s>", "é", "日本", "\n", "\""][:vocab]])
    g.tensor("output_norm.weight", [hidden], F32, f32s([1 + i / 64 for i in range(hidden)]))
    g.tensor("token_embd.weight" if tied else "output.weight", [hidden, vocab], ttype, tensor_bytes(ttype, [hidden, vocab], 1))
    if hidden_tokens:
        dims = [hidden] if hidden_tokens == 1 else [hidden, hidden_tokens]
        g.tensor("hidden", dims, F32, tensor_bytes(F32, dims, 3))
    return g.bytes()


def every_value_type():
    g = Gguf(alignment=64)
    g.kv_u32("general.alignment", 64)
    g.kv("u8", U8, b"\x07").kv("i8", I8, b"\xf9").kv("u16", U16, struct.pack("<H", 65535))
    g.kv("i16", I16, struct.pack("<h", -2)).kv("i32", I32, struct.pack("<i", -5))
    g.kv("u64", U64, struct.pack("<Q", 1 << 40)).kv("i64", I64, struct.pack("<q", -(1 << 40)))
    g.kv("f64", F64, struct.pack("<d", 0.5)).kv("bool", BOOL, b"\x01").kv_str("string", "🙂 ok")
    g.kv("f32.nan", F32V, struct.pack("<f", float("nan")))
    for etype, fmt, values in [(U8, "<B", [1, 2]), (I8, "<b", [-1]), (U16, "<H", [3]), (I16, "<h", [-3]), (U32, "<I", [4, 5]),
                               (I32, "<i", [-4]), (F32V, "<f", [0.5, -0.5]), (BOOL, "<B", [0, 1]), (U64, "<Q", [9]),
                               (I64, "<q", [-9]), (F64, "<d", [0.25])]:
        g.kv_array("array.%d" % etype, etype, [struct.pack(fmt, v) for v in values])
    g.kv_array("array.empty", U32, [])
    g.kv_array("array.strings", STRING, [Gguf.s("a"), Gguf.s(""), Gguf.s("ü")])
    for ttype, (block_elems, _) in sorted(TYPES.items()):
        dims = [block_elems * 2] if block_elems > 1 else [3, 2, 1, 2]
        g.tensor("t%d" % ttype, dims, ttype, tensor_bytes(ttype, dims, ttype))
    return g.bytes()


def npy(shape, values, version=1, header=None):
    if header is None:
        dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % dims
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode("latin-1") + f32s(values)


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cli = sys.argv[1]
    golden = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "tests", "data")
    shutil.rmtree(CORPUS, ignore_errors=True)
    # The CLI's outputs are read back from a directory of this run's own, outside the corpus, so two
    # runs never write one file; it is removed when the script ends, on an error too.
    scratch = tempfile.TemporaryDirectory(prefix="lmhead-make-corpus-")

    def golden_bytes(name, limit=None):
        with open(os.path.join(golden, name), "rb") as f:
            return f.read(limit) if limit else f.read()

    # Golden files: the 1-token vectors file is small enough to keep whole; the checkpoints and the
    # 3-token vectors file are cut (their metadata and tensor tables survive, the data does not).
    vectors_256 = golden_bytes("tail-q5k-v4096-h256.vectors.gguf")
    for target in ("gguf_fuzz", "hidden_input_fuzz"):
        write(target, "golden-vectors-h256.gguf", vectors_256)
        write(target, "golden-vectors-h512-cut16k.gguf", golden_bytes("tail-q5k-v4099-h512.vectors.gguf", 16384))
    write("gguf_fuzz", "golden-checkpoint-h256-cut48k.gguf", golden_bytes("tail-q5k-v4096-h256.gguf", 49152))
    write("gguf_fuzz", "golden-quantize-cut8k.gguf", golden_bytes("quantize-r64-n512.gguf", 8192))
    write("model_fuzz", "golden-checkpoint-h256-cut48k.gguf", golden_bytes("tail-q5k-v4096-h256.gguf", 49152))

    # `lmhead make`: the project's own writer, every head type.
    for ttype in ("q5_K", "q4_K", "q6_K", "q8_0", "f16", "bf16", "f32"):
        out = os.path.join(scratch.name, ttype + ".gguf")
        subprocess.run([cli, "make", out, "--vocab", "16", "--hidden", "256", "--type", ttype, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out, "rb") as f:
            data = f.read()
        write("model_fuzz", "make-%s-v16-h256.gguf" % ttype, data)
        if ttype in ("q5_K", "q8_0"):
            write("gguf_fuzz", "make-%s-v16-h256.gguf" % ttype, data)

    # Hand-made: shapes the other sources lack.
    write("gguf_fuzz", "every-value-and-tensor-type.gguf", every_value_type())

    # Regressions: the shapes of the inputs that made model_fuzz crash (docs/security.md), rebuilt
    # here by hand so every fuzz run starts by replaying them.
    nan_gamma = Gguf()
    nan_gamma.kv_str("general.architecture", "x")
    nan_gamma.tensor("output_norm.weight", [32], F32, f32s([float("nan") if i == 29 else 1.0 for i in range(32)]))
    nan_gamma.tensor("output.weight", [32, 4], Q8_0, tensor_bytes(Q8_0, [32, 4], 2))
    write("model_fuzz", "regress-nan-norm-weight.gguf", nan_gamma.bytes())
    tiny_gamma = Gguf()
    tiny_gamma.kv_str("general.architecture", "x")
    tiny_gamma.tensor("output_norm.weight", [64], F32, f32s([1e-40] * 64))
    tiny_gamma.tensor("output.weight", [64, 4], Q8_0, tensor_bytes(Q8_0, [64, 4], 3))
    write("model_fuzz", "regress-subnormal-norm-weight-q8_0.gguf", tiny_gamma.bytes())

    # Model-level refusals the reader cannot see: a 3-D head, a token table of integers.
    head_3d = Gguf()
    head_3d.kv_str("general.architecture", "x")
    head_3d.tensor("output_norm.weight", [8], F32, f32s([1.0] * 8))
    head_3d.tensor("output.weight", [8, 3, 2], F32, tensor_bytes(F32, [8, 3, 2], 4))
    write("model_fuzz", "hostile-head-3d.gguf", head_3d.bytes())
    int_tokens = Gguf()
    int_tokens.kv_str("general.architecture", "x")
    int_tokens.kv_array("tokenizer.ggml.tokens", U32, [struct.pack("<I", i) for i in range(3)])
    int_tokens.tensor("output_norm.weight", [8], F32, f32s([1.0] * 8))
    int_tokens.tensor("output.weight", [8, 3], F32, tensor_bytes(F32, [8, 3], 5))
    write("model_fuzz", "hostile-tokens-u32.gguf", int_tokens.bytes())
    for name, data in [
        ("tiny-f32-h8-v5.gguf", head_file(F32, 8, 5)),
        ("tiny-q8_0-h32-v4.gguf", head_file(Q8_0, 32, 4)),
        ("tiny-f16-tied-llama.gguf", head_file(F16, 8, 3, arch="llama", tied=True, extra_kvs=False)),
        ("unknown-arch-f16-tied.gguf", head_file(F16, 8, 3, arch="other", tied=True, extra_kvs=False)),
        ("tiny-q5_K-h256-v2-with-hidden.gguf", head_file(Q5_K, 256, 2, hidden_tokens=2)),
    ]:
        write("model_fuzz", name, data)
        write("gguf_fuzz", name, data)

    for name, dims, values in [
        ("hidden-1-token-ndims-1.gguf", [8], [0.5] * 8),
        ("hidden-3-tokens.gguf", [8, 3], [i / 8 for i in range(24)]),
        ("hidden-nan.gguf", [4, 2], [0, 1, float("nan"), 2, 3, 4, 5, 6]),
        ("hidden-inf.gguf", [4, 1, 1, 2], [0, 1, 2, 3, float("-inf"), 4, 5, 6]),
    ]:
        write("hidden_input_fuzz", name, Gguf().tensor("hidden", dims, F32, f32s(values)).bytes())
    write("hidden_input_fuzz", "hidden-f16.gguf", Gguf().tensor("hidden", [8], F16, tensor_bytes(F16, [8], 1)).bytes())
    write("hidden_input_fuzz", "hidden-3d.gguf", Gguf().tensor("hidden", [2, 2, 2], F32, f32s(range(8))).bytes())
    write("hidden_input_fuzz", "spec-with-colons.txt", b"dir:with:colons/x.gguf:layer:0")
    write("hidden_input_fuzz", "spec-empty-tensor.txt", b"x.gguf:")

    # The CLI's own .npy writer: the normed stage of the 1-token golden input.
    dump = os.path.join(scratch.name, "dump")
    subprocess.run([cli, "run", os.path.join(golden, "tail-q5k-v4096-h256.gguf"), "--hidden",
                    os.path.join(golden, "tail-q5k-v4096-h256.vectors.gguf") + ":hidden", "--dump", dump, "--backend", "scalar"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(dump, "normed.npy"), "rb") as f:
        write("npy_fuzz", "cli-dump-normed-h256.npy", f.read())

    nan, inf = float("nan"), float("inf")
    for name, data in [
        ("h4-t2-version3.npy", npy([2, 4], range(8), version=3)),
        ("nan.npy", npy([2, 2], [0, nan, 1, 2])),
        ("inf.npy", npy([3], [inf, 0, 1])),
        ("minus-inf.npy", npy([1, 3], [0, 1, -inf])),
        ("double-quotes-long-int.npy", npy([2, 2], range(4), header='{"descr": "<f4", "fortran_order": False, "shape": (2L, 2L)}')),
        ("no-trailing-comma.npy", npy([4], range(4), header="{'descr':'<f4','fortran_order':False,'shape':(4,)}")),
    ]:
        write("npy_fuzz", name, data)


if __name__ == "__main__":
    main()
