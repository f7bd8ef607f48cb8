"""The Python API (python/lmhead): golden bytes through NumPy, every input route, errors, threads."""
import array
import subprocess
import threading

import numpy as np
import pytest

import lmhead

SMALL = "tail-q5k-v4096-h256.gguf"
GOLDEN = "llamacpp/muse-glimmer-{type}-s101"


@pytest.fixture(scope="module")
def model(data_dir):
    return lmhead.Model(str(data_dir / SMALL))


@pytest.fixture(scope="module")
def engine(model):
    return lmhead.Engine(model, backend="cpu", threads=2)


def hidden_states(t, h, seed=7):
    return np.random.default_rng(seed).standard_normal((t, h)).astype(np.float32)


# ---- golden bytes --------------------------------------------------------------------------------

# llama.cpp's own logits (tests/data/llamacpp/README.md): byte-equal on the default route for Q5_K at
# T = 1, 4 and for Q8_0 at every T.
@pytest.mark.parametrize("qtype,tokens", [("q5_K", 1), ("q5_K", 4), ("q8_0", 1), ("q8_0", 4), ("q8_0", 16)])
@pytest.mark.parametrize("backend", ["scalar", "cpu"])
def test_llamacpp_logits_byte_for_byte(data_dir, qtype, tokens, backend):
    stem = data_dir / GOLDEN.format(type=qtype)
    hidden = np.load(f"{stem}-t{tokens}.hidden.npy")
    want = np.load(f"{stem}-t{tokens}.logits.npy")
    engine = lmhead.Engine(lmhead.Model(f"{stem}.gguf"), backend=backend, threads=2)
    out = engine.run(hidden, logits=True)
    assert out.logits.dtype == np.float32 and out.logits.shape == want.shape
    assert out.logits.tobytes() == want.tobytes()
    # The tokens are the logits' argmax, lowest id on a tie.
    assert out.tokens.dtype == np.int32 and out.tokens.shape == (tokens,)
    np.testing.assert_array_equal(out.tokens, np.argmax(want, axis=1))


@pytest.mark.parametrize("extra", [[], ["--activations", "f32", "--softcap", "fused"]])
def test_logits_are_the_cli_out_bytes(data_dir, cli, tmp_path, extra):
    stem = data_dir / GOLDEN.format(type="q6_K")
    for tokens in (1, 8, 16):
        hidden = f"{stem}-t{tokens}.hidden.npy"
        out_path = tmp_path / f"cli-{tokens}.npy"
        subprocess.run([cli, "run", f"{stem}.gguf", "--hidden", hidden, "--out", str(out_path), "--backend", "cpu",
                        *extra], check=True, capture_output=True, timeout=120)
        kwargs = {"activations": "f32", "softcap": "fused"} if extra else {}
        out = lmhead.Engine(lmhead.Model(f"{stem}.gguf")).run(np.load(hidden), logits=True, **kwargs)
        assert out.logits.tobytes() == np.load(out_path).tobytes()


def test_backends_agree_byte_for_byte(model):
    h = hidden_states(5, model.hidden)
    a = lmhead.Engine(model, backend="scalar").run(h, top_k=4, logprobs=True, logits=True)
    b = lmhead.Engine(model, backend="cpu", threads=2).run(h, top_k=4, logprobs=True, logits=True)
    for name in ("tokens", "values", "ties", "logprobs", "top_k_ids", "top_k_values", "top_k_logprobs", "logits"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name


# ---- the model -----------------------------------------------------------------------------------

def test_model_properties(model, data_dir):
    assert (model.vocab, model.hidden, model.head_type) == (4096, 256, "q5_K")
    assert model.architecture == "muse-glimmer"
    assert model.path == str(data_dir / SMALL)
    assert lmhead.Model(data_dir / SMALL).vocab == model.vocab  # any os.PathLike
    rule = model.rule
    assert rule["architecture"] == "muse-glimmer" and rule["final_norm"] == "rmsnorm"
    assert rule["softcap"] == model.softcap and rule["logit_scale"] == model.logit_scale
    assert rule["softcap_from"] == "file" and rule["logit_scale_from"] == "file"
    assert model.has_token_texts
    texts = [model.token_bytes(i) for i in range(model.vocab)]
    assert all(isinstance(t, bytes) for t in texts) and len(set(texts)) > model.vocab // 2
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.token_bytes(model.vocab)
    assert [model.token(i) for i in range(50)] == [t.decode("utf-8", "replace") for t in texts[:50]]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.token(-1)


def test_override_changes_the_rule_and_the_logits(data_dir, model):
    capless = lmhead.Model(str(data_dir / SMALL), overrides=["muse-glimmer.final_logit_softcapping=float:0"])
    assert capless.softcap == 0 and capless.rule["softcap_from"] == "override"
    h = hidden_states(2, model.hidden)
    capped = lmhead.Engine(model).run(h, logits=True).logits
    raw = lmhead.Engine(capless).run(h, logits=True).logits
    assert np.abs(capped).max() <= model.softcap and np.abs(raw).max() > np.abs(capped).max()


# ---- inputs --------------------------------------------------------------------------------------

def test_one_vector_is_one_token(engine, model):
    h = hidden_states(1, model.hidden)
    assert engine.run(h[0], logits=True).logits.tobytes() == engine.run(h, logits=True).logits.tobytes()


class DLPackOnly:
    """An object that speaks only DLPack (like a framework's tensor)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_every_input_route_gives_the_same_bytes(engine, model):
    h = hidden_states(3, model.hidden)
    want = engine.run(h, logits=True).logits.tobytes()
    big = np.zeros((3, 2 * model.hidden), dtype=np.float32)
    big[:, ::2] = h                                   # strided columns: gathered, not refused
    padded = np.zeros((6, model.hidden), dtype=np.float32)
    padded[::2] = h                                   # strided rows
    fortran = np.asfortranarray(h)
    buffer_only = memoryview(array.array("f", h.ravel().tolist()))  # buffer protocol, 1-D
    for name, x in [("strided columns", big[:, ::2]), ("strided rows", padded[::2]), ("fortran", fortran),
                    ("dlpack", DLPackOnly(h))]:
        assert engine.run(x, logits=True).logits.tobytes() == want, name
    one = engine.run(buffer_only[: model.hidden], logits=True).logits.tobytes()
    assert one == engine.run(h[0], logits=True).logits.tobytes()


def test_outputs_outlive_the_result_and_are_independent(engine, model):
    h = hidden_states(2, model.hidden)
    out = engine.run(h, top_k=3, logits=True)
    logits, tokens = out.logits, out.tokens
    again = engine.run(h, top_k=3, logits=True).logits.copy()
    del out
    assert logits.tobytes() == again.tobytes() and tokens.shape == (2,)
    assert logits.flags.c_contiguous


def test_top_k_logprobs_and_values_follow_the_logits(engine, model):
    h = hidden_states(4, model.hidden)
    out = engine.run(h, top_k=6, logprobs=True, logits=True)
    lg = out.logits
    assert out.top_k_ids.shape == (4, 6) and out.top_k_ids.dtype == np.int32
    for t in range(4):
        order = sorted(range(model.vocab), key=lambda i: (-lg[t, i], i))[:6]
        assert out.top_k_ids[t].tolist() == order
        assert out.top_k_values[t].tobytes() == lg[t, order].tobytes()
        assert out.values[t] == lg[t].max() and out.tokens[t] == order[0]
        ref = lg[t].astype(np.float64) - np.log(np.exp(lg[t].astype(np.float64) - lg[t].max()).sum()) - lg[t].max()
        np.testing.assert_allclose(out.top_k_logprobs[t], ref[order], rtol=0, atol=2e-5)
        np.testing.assert_allclose(out.logprobs[t], ref[order[0]], rtol=0, atol=2e-5)
    assert engine.run(h).top_k_ids is None and engine.run(h).logprobs is None and engine.run(h).logits is None


def test_ties_are_counted(data_dir):
    # A head whose rows are all equal ties every id: the lowest id wins and the count is the vocab.
    stem = data_dir / GOLDEN.format(type="q8_0")
    m = lmhead.Model(f"{stem}.gguf")
    e = lmhead.Engine(m, backend="scalar")
    out = e.run(np.zeros(m.hidden, dtype=np.float32))  # a zero state: every logit is 0
    assert out.tokens[0] == 0 and out.ties[0] == m.vocab and out.tied_ids[0][0] == 0


def test_normed_input_and_routes_run(engine, model):
    h = hidden_states(2, model.hidden)
    n = engine.run(h, input="normed", activations="f32", softcap="fused", logits=True)
    assert n.logits.shape == (2, model.vocab) and np.isfinite(n.logits).all()


# The dots' order: route "tiled" is batch-invariant (each token alone gives the bytes it has in a
# batch), its own order (not vec_dot's bytes on this head), and "llamacpp" equals it where llama.cpp
# tiles (Q5_K from 8 tokens).
def test_route_tiled(engine, model):
    h = hidden_states(8, model.hidden, seed=3)
    tiled = engine.run(h, logits=True, route="tiled")
    for t in (0, 5):
        assert engine.run(h[t], logits=True, route="tiled").logits.tobytes() == tiled.logits[t].tobytes()
    assert engine.run(h, logits=True).logits.tobytes() != tiled.logits.tobytes()
    assert engine.run(h, logits=True, route="llamacpp").logits.tobytes() == tiled.logits.tobytes()
    v = engine.verify(h, draft=tiled.tokens[:7], route="tiled")
    assert v.accepted == 7 and v.next == tiled.tokens[7]


# ---- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad,match", [
    (np.zeros((2, 256), dtype=np.float64), "float32, got float64"),
    (np.zeros((2, 256), dtype=np.int32), "float32, got int32"),
    (np.zeros((2, 255), dtype=np.float32), "width 255, the model's hidden size is 256"),
    (np.zeros((1, 2, 256), dtype=np.float32), "3 dimensions"),
    (np.zeros((0, 256), dtype=np.float32), "no tokens"),
    ("not an array", "got an object of type str"),
])
def test_bad_input_is_a_value_error_naming_the_problem(engine, bad, match):
    with pytest.raises(lmhead.InputError, match=match) as info:
        engine.run(bad)
    assert isinstance(info.value, ValueError) and isinstance(info.value, lmhead.Error)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_hidden_names_token_and_index(engine, model, value):
    h = hidden_states(3, model.hidden)
    h[2, 17] = value
    with pytest.raises(ValueError, match=r"token 2 has a non-finite value .* at index 17"):
        engine.run(h)


@pytest.mark.parametrize("kwargs,match", [
    ({"top_k": -1}, "top_k must be between 0"), ({"top_k": 4097}, "top_k must be between 0"),
    ({"activations": "q4"}, "unknown activations 'q4'"), ({"softcap": "x"}, "unknown softcap 'x'"),
    ({"input": "raw"}, "unknown input 'raw'"), ({"route": "fast"}, "unknown route 'fast'"),
])
def test_bad_options(engine, model, kwargs, match):
    with pytest.raises(lmhead.InputError, match=match):
        engine.run(hidden_states(1, model.hidden), **kwargs)


def test_bad_engine_and_model(model, tmp_path):
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        lmhead.Engine(model, backend="gpu")
    with pytest.raises(ValueError, match="threads must be"):
        lmhead.Engine(model, threads=-1)
    with pytest.raises(lmhead.Error) as info:
        lmhead.Model(str(tmp_path / "missing.gguf"))
    assert "missing.gguf" in str(info.value) and not isinstance(info.value, ValueError)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 20)
    with pytest.raises(lmhead.Error, match="junk.gguf"):
        lmhead.Model(str(junk))
    with pytest.raises(lmhead.Error, match="override"):
        lmhead.Model(str(tmp_path / "x.gguf"), overrides=["no-equals-sign"])
    if not lmhead.has_cuda:
        with pytest.raises(lmhead.Error, match="(?i)cuda"):
            lmhead.Engine(model, backend="cuda")


class FakeCudaTensor:
    """Stands in for a CUDA tensor on a machine without one: DLPack says CUDA, .cpu() copies."""

    def __init__(self, a):
        self._a = a
        self.copies = 0

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        raise BufferError("device memory")

    def cpu(self):
        self.copies += 1
        return self._a.copy()


def test_cuda_array_on_a_host_backend_is_refused(engine, model):
    fake = FakeCudaTensor(hidden_states(1, model.hidden))
    with pytest.raises(lmhead.InputError, match="CUDA device; the cpu-.* backend reads host memory"):
        engine.run(fake)
    assert fake.copies == 0


def test_cuda_array_for_the_cuda_backend_is_not_copied_to_the_host(model):
    from lmhead import _readable_copy

    h = hidden_states(2, model.hidden)
    fake = FakeCudaTensor(h)
    assert _readable_copy(fake, "cuda") is None  # the module reads it on the device, or says why not
    assert fake.copies == 0
    assert _readable_copy(h, "cuda") is None  # a host array the module refused stays refused


def test_stream_handles():
    from lmhead import _stream_handle

    class TorchLike:
        cuda_stream = 0x1234

    class CupyLike:
        ptr = 0x5678

    host = hidden_states(1, 8)
    assert _stream_handle(host, 77) == 77
    assert _stream_handle(host, TorchLike()) == 0x1234
    assert _stream_handle(host, CupyLike()) == 0x5678


# ---- threads -------------------------------------------------------------------------------------

def test_threads_calling_one_engine(engine, model):
    inputs = [hidden_states(1 + i % 3, model.hidden, seed=100 + i) for i in range(8)]
    want = [engine.run(h, top_k=2, logits=True) for h in inputs]
    want = [(w.tokens.copy(), w.top_k_ids.copy(), w.logits.tobytes()) for w in want]
    failures = []

    def worker(k):
        try:
            for r in range(6):
                i = (k + r) % len(inputs)
                out = engine.run(inputs[i], top_k=2, logits=True)
                if not (np.array_equal(out.tokens, want[i][0]) and np.array_equal(out.top_k_ids, want[i][1])
                        and out.logits.tobytes() == want[i][2]):
                    failures.append((k, r, i))
        except Exception as e:  # noqa: BLE001 - reported below with the thread
            failures.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_engine_call_timer_for_the_overhead_bench(engine, model):
    lo, mid = engine._engine_call_times(hidden_states(1, model.hidden), 5)
    assert 0 < lo <= mid
    with pytest.raises(ValueError, match="runs > 0"):
        engine._engine_call_times(hidden_states(1, model.hidden), 0)
