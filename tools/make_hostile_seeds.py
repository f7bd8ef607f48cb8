#!/usr/bin/env python3
"""Writes the hand-made seed corpus for the parser fuzzers: small GGUF and .npy files, valid ones
and one per hostile case of spec/gguf.md, built byte by byte (no GGUF library, so the seeds do not
inherit any writer's assumptions).

    python3 tools/make_hostile_seeds.py [OUT_DIR]     # default: fuzz/seeds next to this script

Writes OUT_DIR/gguf/*.gguf, OUT_DIR/npy/*.npy and, beside each folder, an `<folder>.expected.tsv`
that lists for every seed "accept" or the text lmhead's error must contain. The test
GgufSeeds.EverySeedIsJudgedAsListed (tests/gguf_hostile_test.cpp) and NpySeeds (tests/npy_test.cpp)
hold the reader to that list. The output is deterministic: rerunning it changes no bytes.
"""
import os
import struct
import sys

F32, Q8_0, Q5_K = 0, 8, 13
U32, I32, F32V, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10


class G:
    """GGUF bytes, field by field."""

    def __init__(self):
        self.b = bytearray()

    def raw(self, data):
        self.b += data if isinstance(data, (bytes, bytearray)) else data.encode()
        return self

    def u8(self, v): return self.raw(struct.pack("<B", v))
    def u32(self, v): return self.raw(struct.pack("<I", v))
    def i32(self, v): return self.raw(struct.pack("<i", v))
    def u64(self, v): return self.raw(struct.pack("<Q", v))
    def i64(self, v): return self.raw(struct.pack("<q", v))
    def f32(self, v): return self.raw(struct.pack("<f", v))

    def s(self, text):
        data = text.encode() if isinstance(text, str) else text
        return self.u64(len(data)).raw(data)

    def header(self, tensors, kvs, version=3):
        return self.raw(b"GGUF").u32(version).i64(tensors).i64(kvs)

    def kv_u32(self, k, v): return self.s(k).i32(U32).u32(v)
    def kv_f32(self, k, v): return self.s(k).i32(F32V).f32(v)
    def kv_str(self, k, v): return self.s(k).i32(STRING).s(v)

    def kv_strs(self, k, values):
        self.s(k).i32(ARRAY).i32(STRING).u64(len(values))
        for v in values:
            self.s(v)
        return self

    def tensor(self, name, dims, type_, offset):
        self.s(name).u32(len(dims))
        for d in dims:
            self.i64(d)
        return self.i32(type_).u64(offset)

    def pad(self, alignment=32):
        while len(self.b) % alignment:
            self.b.append(0)
        return self

    def zeros(self, n):
        self.b += bytes(n)
        return self


def small_model(hidden=32, tokens=3):
    """A valid miniature checkpoint-and-vectors file: metadata like a real head, an F32 norm, a
    Q8_0 head, and an F32 `hidden` [H, T] for the FILE.gguf:TENSOR input path."""
    g = G().header(3, 6)
    g.kv_str("general.architecture", "muse-glimmer")
    g.kv_u32("muse-glimmer.embedding_length", hidden)
    g.kv_f32("muse-glimmer.logit_scale", 0.196116)
    g.kv_f32("muse-glimmer.final_logit_softcapping", 20.0)
    g.kv_f32("muse-glimmer.attention.layer_norm_rms_epsilon", 1e-5)
    g.kv_strs("tokenizer.ggml.tokens", ["<pad>", "été", "日本", "\n"])
    head_bytes = 4 * (hidden // 32) * 34
    g.tensor("output_norm.weight", [hidden], F32, 0)
    g.tensor("output.weight", [hidden, 4], Q8_0, 4 * hidden)
    hidden_offset = 4 * hidden + head_bytes
    hidden_offset += -hidden_offset % 32
    # ggml drops trailing dims of 1: a 1-token hidden state is stored with n_dims 1.
    g.tensor("hidden", [hidden, tokens] if tokens > 1 else [hidden], F32, hidden_offset)
    g.pad()
    start = len(g.b)
    for i in range(hidden):
        g.f32(1.0 + i / 64)
    for r in range(4 * hidden // 32):  # Q8_0 blocks: f16 scale 1.0, then 32 int8
        g.raw(struct.pack("<e", 1.0)).raw(bytes((r * 7 + k) % 256 for k in range(32)))
    g.zeros(start + hidden_offset - len(g.b))
    for i in range(hidden * tokens):
        g.f32((i % 17) / 8.0 - 1.0)
    return g.pad()


def gguf_seeds():
    """(name, bytes, expected): expected is "accept" or a substring of the error."""
    seeds = []

    def add(name, g, expected):
        seeds.append((name, bytes(g.b if isinstance(g, G) else g), expected))

    add("valid-model", small_model(), "accept")
    add("valid-one-token", small_model(hidden=64, tokens=1), "accept")
    add("valid-metadata-only", G().header(0, 1).kv_str("general.name", "x"), "accept")
    add("valid-alignment-64", G().header(1, 1).kv_u32("general.alignment", 64).tensor("t", [8], F32, 0).pad(64).zeros(32).pad(64), "accept")

    add("hostile-empty", G(), "truncated: expected 4 bytes for the magic")
    add("hostile-bad-magic", G().raw(b"GGML").u32(3).i64(0).i64(0), "not a GGUF file")
    add("hostile-version-1", G().header(0, 0, 1), "obsolete GGUF version 1")
    add("hostile-version-2", G().header(0, 0, 2), "obsolete GGUF version 2")
    add("hostile-big-endian", G().raw(b"GGUF").raw(struct.pack(">I", 3)).raw(struct.pack(">q", 0)).raw(struct.pack(">q", 0)), "big-endian")
    add("hostile-negative-tensor-count", G().header(-1, 0), "negative tensor count")
    add("hostile-kv-count-2e62", G().header(0, 1 << 62).kv_u32("a", 1), "key-value count 4611686018427387904 cannot fit")
    add("hostile-kv-count-max", G().header(0, (1 << 63) - 1).kv_u32("a", 1), "cannot fit")
    add("hostile-tensor-count-2e62", G().header(1 << 62, 0).tensor("t", [8], F32, 0).pad().zeros(32), "tensor count 4611686018427387904 cannot fit")
    add("hostile-key-length-2e63", G().header(0, 1).u64(1 << 63).raw(b"abc").i32(U32).u32(0), "truncated: expected 9223372036854775808 bytes for the key")
    add("hostile-string-length-max", G().header(0, 1).s("general.name").i32(STRING).u64((1 << 64) - 1).raw(b"x"), "truncated: expected 18446744073709551615 bytes")
    add("hostile-array-length-2e62", G().header(0, 1).s("ids").i32(ARRAY).i32(U32).u64(1 << 62).u32(1), "truncated: array 'ids'")
    add("hostile-array-bytes-wrap", G().header(0, 1).s("ids").i32(ARRAY).i32(U64).u64(1 << 61).u64(0), "needs more than 2^64 bytes")
    add("hostile-string-array-2e62", G().header(0, 1).s("tokenizer.ggml.tokens").i32(ARRAY).i32(STRING).u64(1 << 62).s("a"), "strings")
    add("hostile-unknown-value-type", G().header(0, 1).s("k").i32(13).u32(0), "unknown value type 13")
    add("hostile-array-of-arrays", G().header(0, 1).s("nested").i32(ARRAY).i32(ARRAY).u64(1).i32(U32).u64(1).u32(7), "arrays of arrays are not supported")
    add("hostile-bool-2", G().header(0, 1).s("flag").i32(BOOL).u8(2), "bool value 2")
    add("hostile-duplicate-key", G().header(0, 2).kv_u32("a", 1).kv_u32("a", 2), "duplicate key 'a'")
    add("hostile-utf8-overlong-key", G().header(0, 1).kv_u32(b"bad\xc0\xafkey", 1), "is not valid UTF-8")
    add("hostile-utf8-surrogate-value", G().header(0, 1).kv_str("general.name", b"ok\xed\xa0\x80"), "is not valid UTF-8")
    add("hostile-utf8-token", G().header(0, 1).kv_strs("tokenizer.ggml.tokens", [b"fine", b"\xff"]), "element 1 of array 'tokenizer.ggml.tokens'")
    add("hostile-alignment-0", G().header(0, 1).kv_u32("general.alignment", 0), "general.alignment is 0")
    add("hostile-alignment-48", G().header(0, 1).kv_u32("general.alignment", 48), "not a power of two")
    add("hostile-alignment-2e31", G().header(0, 1).kv_u32("general.alignment", 1 << 31), "larger than lmhead's limit")
    add("hostile-alignment-string", G().header(0, 1).kv_str("general.alignment", "32"), "general.alignment has type string, must be u32")
    add("hostile-n-dims-5", G().header(1, 0).s("t").u32(5).i64(1).i64(1).i64(1).i64(1).i64(1).i32(F32).u64(0).pad().zeros(32), "n_dims 5 is more than 4")
    add("hostile-negative-dim", G().header(1, 0).tensor("t", [8, -2], F32, 0).pad().zeros(64), "dim 1 is negative")
    add("hostile-zero-dim", G().header(1, 0).tensor("t", [8, 0], F32, 0).pad().zeros(64), "dim 1 is zero")
    add("hostile-dims-overflow", G().header(1, 0).tensor("t", [1 << 32, 1 << 32], F32, 0).pad().zeros(64), "the product of its dims overflows")
    add("hostile-bytes-overflow", G().header(1, 0).tensor("t", [1 << 61, 2], F32, 0).pad().zeros(64), "size in bytes overflows")
    # iq2_xxs is sized from ggml's table (66 B per 256 elements): 64 bytes of data are too few
    add("hostile-type-iq2-xxs", G().header(1, 0).tensor("t", [256], 16, 0).pad().zeros(64), "tensor 't' needs 66 bytes")
    add("hostile-type-unknown", G().header(1, 0).tensor("t", [256], 4242, 0).pad().zeros(64), "unsupported ggml type id 4242")
    add("hostile-partial-block", G().header(1, 0).tensor("t", [100], Q5_K, 0).pad().zeros(256), "not a multiple of q5_K's block of 256")
    add("hostile-duplicate-tensor", G().header(2, 0).tensor("w", [8], F32, 0).tensor("w", [8], F32, 32).pad().zeros(64), "duplicate tensor name 'w'")
    add("hostile-utf8-tensor-name", G().header(1, 0).tensor(b"w\x80", [8], F32, 0).pad().zeros(32), "is not valid UTF-8")
    add("hostile-offset-unaligned", G().header(1, 0).tensor("t", [8], F32, 4).pad().zeros(64), "is not a multiple of the alignment 32")
    add("hostile-offset-past-end", G().header(1, 0).tensor("t", [8], F32, 1 << 40).pad().zeros(64), "is past the end of the file")
    add("hostile-offset-near-2e64", G().header(1, 0).tensor("t", [8], F32, (1 << 64) - 32).pad().zeros(64), "is past the end of the file")
    add("hostile-data-past-end", G().header(1, 0).tensor("t", [1024], F32, 0).pad().zeros(64), "truncated: tensor 't' needs 4096 bytes")
    add("hostile-no-data-section", G().header(1, 0).tensor("t", [8], F32, 0), "truncated: expected the data section")
    add("hostile-overlap", G().header(2, 0).tensor("b", [8], F32, 32).tensor("a", [16], F32, 0).pad().zeros(64), "overlap")
    model = small_model().b
    add("hostile-truncated-model", model[: len(model) // 2], "truncated")
    return seeds


def npy(descr="<f4", fortran="False", shape="(3, 4)", data=None, header=None, version=1, length=None):
    """A .npy file; any part may be overridden to lie."""
    if header is None:
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    if length is None:
        length = len(header)
    out = b"\x93NUMPY" + bytes([version, 0])
    out += struct.pack("<H", length) if version == 1 else struct.pack("<I", length)
    out += header.encode("latin-1")
    if data is None:
        data = b"".join(struct.pack("<f", i / 4) for i in range(12))
    return out + data


def npy_seeds():
    twelve = b"".join(struct.pack("<f", i / 4) for i in range(12))
    return [
        ("valid-2d", npy(), "accept"),
        ("valid-1d", npy(shape="(12,)"), "accept"),
        ("valid-version-2", npy(version=2), "accept"),
        ("valid-key-order", npy(header="{'shape': (3, 4), 'fortran_order': False, 'descr': '<f4'}"), "accept"),
        ("hostile-empty", b"", "truncated"),
        ("hostile-not-npy", b"GGUF" + bytes(60), "not a .npy file"),
        ("hostile-f64", npy(descr="<f8", data=twelve * 2), "dtype '<f8' (float64)"),
        ("hostile-big-endian", npy(descr=">f4"), "big-endian"),
        ("hostile-int32", npy(descr="<i4"), "dtype '<i4'"),
        ("hostile-fortran", npy(fortran="True"), "fortran_order is True"),
        ("hostile-rank-3", npy(shape="(1, 3, 4)"), "has rank 3"),
        ("hostile-scalar", npy(shape="()", data=twelve[:4]), "has rank 0"),
        ("hostile-empty-dim", npy(shape="(0, 4)", data=b""), "is empty"),
        ("hostile-truncated-data", npy(data=twelve[:30]), "truncated: shape (3, 4) needs 48 bytes"),
        ("hostile-extra-data", npy(data=twelve + b"\0\0\0\0"), "data size mismatch"),
        ("hostile-header-past-eof", npy(length=60000), "runs past the end of the file"),
        ("hostile-shape-overflow", npy(shape="(4294967296, 4294967296)"), "more elements than fit in 64 bits"),
        ("hostile-shape-huge", npy(shape="(9223372036854775807, 1)"), "truncated: shape"),
        ("hostile-dim-too-large", npy(shape="(99999999999999999999, 1)"), "dim too large"),
        ("hostile-unterminated", npy(header="{'descr': '<f4"), "unterminated string"),
        ("hostile-version-9", npy(version=9), "unsupported .npy format version 9"),
    ]


def write(folder, seeds, ext):
    os.makedirs(folder, exist_ok=True)
    lines = []
    for name, data, expected in seeds:
        with open(os.path.join(folder, name + ext), "wb") as f:
            f.write(data)
        lines.append("%s%s\t%s\n" % (name, ext, expected))
    with open(folder.rstrip("/") + ".expected.tsv", "w", encoding="utf-8") as f:
        f.write("# seed\taccept, or a substring of lmhead's error (written by tools/make_hostile_seeds.py)\n")
        f.writelines(lines)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fuzz", "seeds")
    write(os.path.join(out, "gguf"), gguf_seeds(), ".gguf")
    write(os.path.join(out, "npy"), npy_seeds(), ".npy")


if __name__ == "__main__":
    main()
