"""lmhead.compare, parse_policy and policy_grammar: the figures of `lmhead compare --json`, known cases
worked out by hand, and every way the arguments can be wrong."""
import array
import json
import subprocess

import numpy as np
import pytest

import lmhead

GOLDEN = "llamacpp/muse-glimmer-{type}-s101-t{tokens}.logits.npy"


def logits(t, v, seed=3, scale=4.0):
    return (scale * np.random.default_rng(seed).standard_normal((t, v))).astype(np.float32)


def cli_compare(cli, a_path, b_path, policy=None, top_k=None):
    cmd = [cli, "compare", str(a_path), str(b_path), "--json"]
    if policy is not None:
        cmd += ["--policy", policy]
    if top_k is not None:
        cmd += ["--top-k", str(top_k)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p


def cli_json(cli, a_path, b_path, policy=None, top_k=None):
    p = cli_compare(cli, a_path, b_path, policy, top_k)
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    return out, p.returncode


# ---- the same figures as the CLI -----------------------------------------------------------------

def perturbed_pairs(data_dir):
    """(name, a, b): logits the CLI and the binding both read, from llama.cpp's golden outputs and
    from random arrays changed in known ways."""
    a = logits(6, 1000)
    rng = np.random.default_rng(11)
    small = a + (1e-3 * rng.standard_normal(a.shape)).astype(np.float32)
    large = a + (3.0 * rng.standard_normal(a.shape)).astype(np.float32)
    q5 = np.load(data_dir / GOLDEN.format(type="q5_K", tokens=16))
    q4 = np.load(data_dir / GOLDEN.format(type="q4_K", tokens=16))
    f32 = np.load(data_dir / GOLDEN.format(type="f32", tokens=16))
    return [("small", a, small), ("large", a, large), ("identical", a, a.copy()),
            ("one-token", a[2], small[2]), ("golden q5_K/q4_K", q5, q4), ("golden f32/q5_K", f32, q5)]


@pytest.mark.parametrize("policy,top_k", [(None, None), ("max<11,mean<1.25", 5), ("max<0.5,kl<1e-4,argmax=all", 10),
                                          ("topk>=0.9,ulp<=1000,differing<100,klmax<1", 3),
                                          ("mean<1.25", 5000)])
def test_figures_equal_the_cli_json(data_dir, cli, tmp_path, policy, top_k):
    for name, a, b in perturbed_pairs(data_dir):
        a_path, b_path = tmp_path / "a.npy", tmp_path / "b.npy"
        np.save(a_path, a)
        np.save(b_path, b)
        want, rc = cli_json(cli, a_path, b_path, policy, top_k)
        kwargs = {}
        if policy is not None:
            kwargs["policy"] = policy
        if top_k is not None:
            kwargs["top_k"] = top_k
        c = lmhead.compare(a, b, **kwargs)
        got = c.as_dict()
        del want["a"], want["b"]
        # JSON carries the shortest repr of each double: equal means the same bits.
        assert got == want, name
        assert rc == (0 if c.policy_holds else 1), name
        # The attributes are what as_dict() gathers.
        assert list(c.shape) == want["shape"] and c.values == want["values"]
        for key in ("top_k", "max_abs", "mean_abs", "differing", "max_ulp", "argmax_agree", "topk_overlap",
                    "kl_mean", "kl_max", "policy_text", "policy_holds"):
            assert getattr(c, key) == want[key], (name, key)
        assert [t.as_dict() for t in c.tokens] == want["tokens"]
        for t, w in zip(c.tokens, want["tokens"]):
            assert (t.token, t.max_abs, t.mean_abs, t.differing, t.max_ulp, t.argmax_a, t.argmax_b, t.argmax_agree,
                    t.topk_overlap, t.kl) == tuple(w[k] for k in ("token", "max_abs", "mean_abs", "differing",
                                                                  "max_ulp", "argmax_a", "argmax_b", "argmax_agree",
                                                                  "topk_overlap", "kl"))
        assert [r.as_dict() for r in c.policy] == want["policy"]
        for r, w in zip(c.policy, want["policy"]):
            assert (r.clause, r.measured, r.bound, r.op, r.holds) == (w["clause"], w["measured"], w["bound"], w["op"],
                                                                      w["holds"])


def test_violated_policy_matches_the_cli_exit_status(cli, tmp_path):
    a = logits(4, 300)
    b = a.copy()
    b[1, 7] += 20.0
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    want, rc = cli_json(cli, tmp_path / "a.npy", tmp_path / "b.npy", "max<11,mean<1.25")
    c = lmhead.compare(a, b, policy="max<11,mean<1.25")
    assert rc == 1 and not c.policy_holds
    assert [(r.clause, r.holds) for r in c.policy] == [("max<11", False), ("mean<1.25", True)]
    assert c.policy[0].measured == want["policy"][0]["measured"] == c.max_abs


# ---- known cases ---------------------------------------------------------------------------------

def test_identical_inputs_have_no_differences():
    a = logits(5, 777)
    c = lmhead.compare(a, a.copy(), policy="max<11,mean<1.25,argmax=all,differing=0,ulp=0,kl=0", top_k=5)
    assert c.shape == (5, 777) and c.values == 5 * 777 and c.top_k == 5
    assert (c.max_abs, c.mean_abs, c.differing, c.max_ulp) == (0.0, 0.0, 0, 0)
    assert (c.argmax_agree, c.topk_overlap, c.kl_mean, c.kl_max) == (5, 1.0, 0.0, 0.0)
    assert c.policy_holds and all(r.holds for r in c.policy) and len(c.policy) == 6
    assert [t.argmax_a for t in c.tokens] == list(np.argmax(a, axis=1))
    assert all(t.argmax_agree and t.kl == 0.0 and t.differing == 0 for t in c.tokens)


def test_one_ulp_change():
    a = logits(3, 500)
    b = a.copy()
    t, i = 1, 123
    b[t, i] = np.nextafter(a[t, i], np.float32(np.inf))
    step = float(b[t, i]) - float(a[t, i])
    c = lmhead.compare(a, b, policy="ulp<=1,differing=1")
    assert (c.differing, c.max_ulp) == (1, 1) and c.policy_holds
    assert c.max_abs == step and c.mean_abs == step / a.size
    assert [x.differing for x in c.tokens] == [0, 1, 0] and [x.max_ulp for x in c.tokens] == [0, 1, 0]
    assert c.tokens[t].max_abs == step and c.tokens[t].mean_abs == step / 500
    assert c.argmax_agree == 3 and c.topk_overlap == 1.0


def test_signed_zeros_are_equal_and_ulps_cross_zero():
    a = np.zeros((1, 8), np.float32)
    b = a.copy()
    b[0, 0] = -0.0
    c = lmhead.compare(a, b)
    assert (c.differing, c.max_ulp, c.max_abs) == (0, 0, 0.0)
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    a[0, 3], b[0, 3] = tiny, -tiny  # the two floats nearest zero, one each side: two ulps apart
    c = lmhead.compare(a, b)
    assert (c.differing, c.max_ulp) == (1, 2) and c.max_abs == 2 * float(tiny)


def test_argmax_disagreement():
    a = logits(4, 256)
    b = a.copy()
    t = 2
    top = int(np.argmax(a[t]))
    other = (top + 17) % 256
    b[t, other] = a[t, top] + 1.0
    c = lmhead.compare(a, b, policy="argmax=all")
    assert c.argmax_agree == 3 and not c.policy_holds
    assert c.policy[0].measured == 0.75 and c.policy[0].bound == 1.0 and c.policy[0].op == "="
    x = c.tokens[t]
    assert (x.argmax_a, x.argmax_b, x.argmax_agree) == (top, other, False)
    assert all(y.argmax_agree for k, y in enumerate(c.tokens) if k != t)
    assert c.max_abs == float(b[t, other]) - float(a[t, other])
    # A tie goes to the lowest index.
    b[t, top] = b[t, other]
    c = lmhead.compare(a, b)
    assert c.tokens[t].argmax_b == min(top, other)


def test_top_k_overlap_and_kl_against_numpy():
    v = 64
    a = np.arange(v, dtype=np.float32)[None, :] / 8  # ids 63, 62, ... are the largest
    b = a.copy()
    b[0, 63] = -5.0  # two of a's top five leave b's top five
    b[0, 61] = -5.0
    c = lmhead.compare(a, b, top_k=5)
    assert c.top_k == 5 and c.topk_overlap == 3 / 5 and c.tokens[0].topk_overlap == 3 / 5
    # KL(softmax(a) || softmax(b)) in double, max-subtracted: numpy's order of sums differs, so close.
    la = a[0].astype(np.float64) - a[0].max()
    la -= np.log(np.exp(la).sum())
    lb = b[0].astype(np.float64) - b[0].max()
    lb -= np.log(np.exp(lb).sum())
    kl = float((np.exp(la) * (la - lb)).sum())
    assert c.kl_mean == pytest.approx(kl, rel=1e-12) and c.kl_max == c.kl_mean
    # k above the vocabulary is clamped to it: every id is in both.
    assert lmhead.compare(a, b, top_k=1000).top_k == v and lmhead.compare(a, b, top_k=1000).topk_overlap == 1.0


def test_float64_side_is_compared_unrounded():
    a = logits(3, 200)
    a = np.copysign(1 + np.abs(a), a).astype(np.float32)  # |a| >= 1: half an ulp is above 5e-8
    exact = a.astype(np.float64) + 1e-9  # not representable in f32: rounds back to a
    c = lmhead.compare(a, exact)
    assert c.max_abs == float(np.max(np.abs(a.astype(np.float64) - exact)))
    assert c.differing == 0 and c.max_ulp == 0  # ulps and bits use the f32 rounding
    same = lmhead.compare(a, a.astype(np.float64)).as_dict()
    assert same == lmhead.compare(a, a).as_dict()
    assert lmhead.compare(exact, a).max_abs == c.max_abs


def test_input_forms():
    a = logits(4, 300)
    b = a + np.float32(0.25)
    want = lmhead.compare(a, b, top_k=7).as_dict()
    # Strided views are gathered: the same figures as their contiguous copies.
    wide_a = np.zeros((8, 600), np.float32)
    wide_b = np.zeros((8, 600), np.float32)
    wide_a[::2, ::2], wide_b[::2, ::2] = a, b
    assert lmhead.compare(wide_a[::2, ::2], wide_b[::2, ::2], top_k=7).as_dict() == want
    assert lmhead.compare(np.asfortranarray(a), b, top_k=7).as_dict() == want
    rev = lmhead.compare(a[::-1, ::-1], b[::-1, ::-1], top_k=7).as_dict()  # negative strides
    assert rev == lmhead.compare(a[::-1, ::-1].copy(), b[::-1, ::-1].copy(), top_k=7).as_dict()
    assert rev["max_abs"] == want["max_abs"] and rev["tokens"][0]["argmax_a"] == 299 - want["tokens"][3]["argmax_a"]
    # [V] is one token, as the CLI reads a [V] .npy.
    one = lmhead.compare(a[1], b[1], top_k=7)
    assert one.shape == (1, 300) and one.as_dict()["tokens"][0] == dict(want["tokens"][1], token=0)
    # The buffer protocol without NumPy.
    mem_a, mem_b = memoryview(array.array("f", a[0].tolist())), memoryview(array.array("f", b[0].tolist()))
    assert lmhead.compare(mem_a, mem_b, top_k=7).as_dict()["max_abs"] == want["tokens"][0]["max_abs"]
    # A policy parsed once, reused.
    p = lmhead.parse_policy("max<0.3, mean<0.3")
    assert lmhead.compare(a, b, policy=p).policy_holds and lmhead.compare(a, b, policy=p).policy_text == "max<0.3,mean<0.3"
    assert lmhead.compare(a, b, policy=None).policy == [] and lmhead.compare(a, b, policy=None).policy_holds


def test_parse_policy_and_grammar(cli):
    p = lmhead.parse_policy(" max < 11 , mean<=1.25,kl<1e-3,klmax<1,argmax=all,topk>=0.8,differing>2,ulp<5")
    assert p.text == "max<11,mean<=1.25,kl<1e-3,klmax<1,argmax=all,topk>=0.8,differing>2,ulp<5"
    assert str(p) == p.text and len(p) == 8
    assert [(c.metric, c.op, c.bound) for c in p.clauses] == [
        ("max", "<", 11.0), ("mean", "<=", 1.25), ("kl", "<", 1e-3), ("klmax", "<", 1.0), ("argmax", "=", 1.0),
        ("topk", ">=", 0.8), ("differing", ">", 2.0), ("ulp", "<", 5.0)]
    assert [c.text for c in p.clauses] == p.text.split(",")
    assert lmhead.parse_policy("max|a-b|<2").clauses[0].metric == "max"
    assert len(lmhead.parse_policy("")) == 0
    grammar = lmhead.policy_grammar()
    assert "max<11,mean<1.25" in grammar and "argmax=all" in grammar
    # The CLI's help quotes the same grammar (CLI11 may re-indent it: compare word by word).
    help_text = subprocess.run([cli, "compare", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert " ".join(grammar.split()) in " ".join(help_text.split())


# ---- errors --------------------------------------------------------------------------------------

def assert_input_error(fn, match):
    with pytest.raises(lmhead.InputError, match=match) as info:
        fn()
    assert isinstance(info.value, ValueError) and isinstance(info.value, lmhead.Error)
    return str(info.value)


@pytest.mark.parametrize("policy", ["max<<1", "max", "size<3", "max<", "max<abc", "max<inf", "max<11,,mean<1",
                                    "max<11,", "topk=all", "max<1e999"])
def test_malformed_policy_raises_the_engines_message(cli, tmp_path, policy):
    a = logits(2, 50)
    message = assert_input_error(lambda: lmhead.compare(a, a, policy=policy), "polic")
    assert_input_error(lambda: lmhead.parse_policy(policy), "polic")
    np.save(tmp_path / "a.npy", a)
    p = cli_compare(cli, tmp_path / "a.npy", tmp_path / "a.npy", policy)
    assert p.returncode == 2 and message in p.stderr


@pytest.mark.parametrize("where,value,word", [("A", np.nan, "NaN"), ("B", np.inf, r"\+inf"), ("B", -np.inf, "-inf")])
def test_non_finite_values_raise_the_engines_message(cli, tmp_path, where, value, word):
    a = logits(3, 40)
    b = a.copy()
    (a if where == "A" else b)[2, 17] = value
    message = assert_input_error(lambda: lmhead.compare(a, b), f"{where} token 2, index 17 is {word}")
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    p = cli_compare(cli, tmp_path / "a.npy", tmp_path / "b.npy")
    assert p.returncode == 2 and message in p.stderr


def test_shapes_that_disagree(cli, tmp_path):
    a = logits(3, 40)
    assert_input_error(lambda: lmhead.compare(a, a[:2]), r"shapes disagree: A is \[3, 40\], B is \[2, 40\]")
    assert_input_error(lambda: lmhead.compare(a, a[:, :39]), r"shapes disagree: A is \[3, 40\], B is \[3, 39\]")
    assert_input_error(lambda: lmhead.compare(a[0], a), r"shapes disagree: A is \[1, 40\], B is \[3, 40\]")
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", a[:2])
    p = cli_compare(cli, tmp_path / "a.npy", tmp_path / "b.npy")
    assert p.returncode == 2 and "shapes disagree" in p.stderr


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int64, np.uint8, np.bool_, np.complex64])
def test_wrong_dtype(dtype):
    a = logits(2, 30)
    assert_input_error(lambda: lmhead.compare(a.astype(dtype), a), "A must be float32 or float64, got ")
    assert_input_error(lambda: lmhead.compare(a, a.astype(dtype)), "B must be float32 or float64, got ")


def test_other_bad_arguments():
    a = logits(2, 30)
    assert_input_error(lambda: lmhead.compare(a.reshape(1, 2, 30), a), "A must be logits .* got 3 dimensions")
    assert_input_error(lambda: lmhead.compare(a, np.float32(1.0)), "B must be logits .* got 0 dimensions")
    assert_input_error(lambda: lmhead.compare("a.npy", a), "A must be a float32 or float64 array .* type str")
    assert_input_error(lambda: lmhead.compare(a, a.tolist()), "B must be a float32 or float64 array .* type list")
    assert_input_error(lambda: lmhead.compare(a[:0], a[:0]), r"shape \[0, 30\] is empty")
    assert_input_error(lambda: lmhead.compare(a, a, top_k=0), "top-k must be at least 1")
    assert_input_error(lambda: lmhead.compare(a, a, top_k=-3), "top-k must be at least 1")
    assert_input_error(lambda: lmhead.compare(a, a, policy=3), "policy must be a str .* type int")
    with pytest.raises(TypeError):
        lmhead.compare(a, a, top_k="5")
