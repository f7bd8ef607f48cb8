"""Sampling and speculative verification from Python: the CLI's tokens, every backend and call split
alike, masks and biases as grammar engines pass them, and the caller's bad values as InputError."""
import json
import subprocess

import numpy as np
import pytest

import lmhead

SMALL = "tail-q5k-v4096-h256.gguf"
V, H = 4096, 256
OPTIONS = {"temperature": 0.8, "top_p": 0.9, "min_p": 0.01, "seed": 3, "position": 10, "logit_bias": {5: 2.0}}


@pytest.fixture(scope="module")
def model(data_dir):
    return lmhead.Model(str(data_dir / SMALL))


@pytest.fixture(scope="module")
def engine(model):
    return lmhead.Engine(model, backend="cpu", threads=2)


def rows(t, seed=1):
    return np.random.default_rng(seed).standard_normal((t, H)).astype(np.float32)


def test_without_options_sampled_is_the_argmax(engine):
    out = engine.run(rows(6))
    assert out.sampled.dtype == np.int32 and out.sampled.shape == (6,)
    np.testing.assert_array_equal(out.sampled, out.tokens)


def test_the_cli_draws_the_same_tokens(engine, cli, data_dir, tmp_path):
    hidden = rows(4)
    np.save(tmp_path / "h.npy", hidden)
    args = ["--temperature", "0.8", "--top-p", "0.9", "--min-p", "0.01", "--seed", "3", "--position", "10",
            "--logit-bias", "5=2", "--json"]
    ran = subprocess.run([cli, "run", str(data_dir / SMALL), "--hidden", str(tmp_path / "h.npy"), *args],
                         check=True, capture_output=True, text=True, timeout=120)
    want = [t["sampled"] for t in json.loads(ran.stdout)["tokens"]]
    out = engine.run(hidden, **OPTIONS)
    assert out.sampled.tolist() == want
    assert out.sampled.tolist() != out.tokens.tolist()  # the options did change something here

    draft = [int(x) for x in want[:2]] + [int((want[2] + 1) % V)]  # two accepted, the third rejected
    verified = subprocess.run([cli, "verify", str(data_dir / SMALL), "--hidden", str(tmp_path / "h.npy"),
                               "--draft", ",".join(map(str, draft)), *args],
                              check=True, capture_output=True, text=True, timeout=120)
    cli_verdict = json.loads(verified.stdout)
    v = engine.verify(hidden, draft, **OPTIONS)
    assert (v.accepted, v.next, v.target) == (cli_verdict["accepted"], cli_verdict["next"], cli_verdict["target"])
    assert v.accepted == 2 and v.next == want[2]
    np.testing.assert_array_equal(v.run.sampled, out.sampled)


def test_every_backend_shard_count_and_call_split_draws_alike(model):
    hidden = rows(6, seed=4)
    want = lmhead.Engine(model, backend="scalar", threads=1).run(hidden, **OPTIONS).sampled
    for kwargs in ({"backend": "cpu", "threads": 2}, {"backend": "cpu", "threads": 1, "shards": 3}):
        np.testing.assert_array_equal(lmhead.Engine(model, **kwargs).run(hidden, **OPTIONS).sampled, want)
    # Positions continue across calls: rows 0-2 at position 10, rows 3-5 at position 13.
    e = lmhead.Engine(model, backend="cpu", threads=2)
    first = e.run(hidden[:3], **OPTIONS).sampled
    rest = e.run(hidden[3:], **{**OPTIONS, "position": 13}).sampled
    np.testing.assert_array_equal(np.concatenate([first, rest]), want)


def test_masks_as_grammar_engines_pass_them(engine):
    hidden = rows(3, seed=6)
    words = V // 32
    mask = np.zeros((3, words), dtype=np.uint32)
    allowed = [(17, 100), (901, 2047), (4095,)]
    for t, ids in enumerate(allowed):
        for i in ids:
            mask[t, i // 32] |= np.uint32(1 << (i % 32))
    for temperature in (0.0, 1.0, 50.0):
        got = engine.run(hidden, temperature=temperature, seed=9, allowed=mask).sampled
        for t, ids in enumerate(allowed):
            assert got[t] in ids
    # One mask for every token, and the same bits as int32 words (xgrammar's dtype).
    one = np.zeros(words, dtype=np.uint32)
    one[1] = np.uint32(1 << 31)  # id 63 alone
    assert engine.run(hidden, temperature=1.0, allowed=one.view(np.int32)).sampled.tolist() == [63, 63, 63]


def test_bias_moves_the_greedy_choice(engine):
    hidden = rows(2, seed=8)
    assert engine.run(hidden, logit_bias={77: 1000.0}).sampled.tolist() == [77, 77]
    assert engine.run(hidden, logit_bias=[(78, 1000.0)]).sampled.tolist() == [78, 78]


def test_verification_with_draft_probabilities(engine):
    hidden = rows(4, seed=12)
    target = engine.run(hidden, temperature=1.0, seed=5).sampled
    q = np.full((3, V), 1.0 / V, dtype=np.float32)
    v = engine.verify(hidden, target[:3], draft_probs=q, temperature=1.0, seed=5)
    assert 0 <= v.accepted <= 3 and 0 <= v.next < V
    assert len(v.target) == v.accepted + 1
    again = engine.verify(hidden, target[:3], draft_probs=q, temperature=1.0, seed=5)
    assert (again.accepted, again.next) == (v.accepted, v.next)  # a function of seed and position only
    # Greedy: accepted while the draft is the argmax.
    greedy = engine.verify(hidden, engine.run(hidden).tokens[:3])
    assert greedy.accepted == 3 and greedy.next == engine.run(hidden).tokens[3]


@pytest.mark.parametrize("kwargs,needle", [
    ({"temperature": 1.0, "top_p": 0.0}, "top-p"),
    ({"temperature": -1.0}, "temperature"),
    ({"min_p": 2.0}, "min-p"),
    ({"sample_top_k": -1}, "top-k"),
    ({"logit_bias": {V: 1.0}}, "outside the vocabulary"),
    ({"logit_bias": {3: float("nan")}}, "not finite"),
    ({"allowed": np.zeros(5, dtype=np.uint32)}, "allowed-token mask"),
    ({"allowed": np.zeros(128, dtype=np.float32)}, "32-bit integer words"),
])
def test_bad_sampling_options_are_input_errors(engine, kwargs, needle):
    with pytest.raises(lmhead.InputError, match=needle):
        engine.run(rows(2), **kwargs)


def test_bad_drafts_are_input_errors(engine):
    hidden = rows(3)
    with pytest.raises(lmhead.InputError, match="needs 2 hidden rows"):
        engine.verify(hidden, [1])
    with pytest.raises(lmhead.InputError, match="draft token 1"):
        engine.verify(hidden, [1, V])
    with pytest.raises(lmhead.InputError, match="fit in int32"):
        engine.verify(hidden, [1, 2**32 + 5])
    with pytest.raises(lmhead.InputError, match="draft_probs must be float32"):
        engine.verify(hidden, [1, 2], draft_probs=np.ones((1, V), dtype=np.float32))
    bad = np.ones((2, V), dtype=np.float32)
    bad[1, 7] = -1.0
    with pytest.raises(lmhead.InputError, match="draft probability"):
        engine.verify(hidden, [1, 2], draft_probs=bad)
