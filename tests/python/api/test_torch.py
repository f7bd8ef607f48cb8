"""PyTorch: tensors as input, the custom op (eager, opcheck, torch.compile), the example, and on a
GPU machine CUDA tensors. Skipped where torch is not installed (CI's CPU machine); bench/gpu.sh runs
it where torch and a GPU are."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch.library.custom_op needs torch >= 2.4", allow_module_level=True)

import lmhead  # noqa: E402
from lmhead.torch import LMHead  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
SMALL = "tail-q5k-v4096-h256.gguf"
cuda = pytest.mark.skipif(not (torch.cuda.is_available() and lmhead.has_cuda),
                          reason="needs a CUDA device and lmhead built with CUDA")


@pytest.fixture(scope="module")
def model(data_dir):
    return lmhead.Model(str(data_dir / SMALL))


@pytest.fixture(scope="module")
def hidden(model):
    return torch.from_numpy(np.random.default_rng(11).standard_normal((3, model.hidden)).astype(np.float32))


def reference(model, h, backend="cpu"):
    return lmhead.Engine(model, backend=backend).run(h.cpu().numpy(), top_k=2, logits=True)


def test_cpu_tensors_are_read_like_numpy(model, hidden):
    want = reference(model, hidden)
    e = lmhead.Engine(model)
    assert e.run(hidden, logits=True).logits.tobytes() == want.logits.tobytes()
    assert e.run(hidden.t().contiguous().t(), logits=True).logits.tobytes() == want.logits.tobytes()  # strided
    needs_grad = hidden.clone().requires_grad_(True)
    assert e.run(needs_grad, logits=True).logits.tobytes() == want.logits.tobytes()
    with pytest.raises(ValueError, match="float32, got float64"):
        e.run(hidden.double())


def test_custom_op_eager_and_opcheck(model, hidden):
    head = LMHead(model)
    want = reference(model, hidden)
    tokens, logits = head(hidden, logits=True)
    assert tokens.dtype == torch.int32 and tokens.tolist() == want.tokens.tolist()
    assert logits.numpy().tobytes() == want.logits.tobytes()
    assert head(hidden[0]).tolist() == want.tokens[:1].tolist()
    torch.library.opcheck(torch.ops.lmhead.run.default, (hidden, head.handle, True),
                          test_utils=("test_schema", "test_faketensor"))


def test_sampling_op_draws_the_engines_tokens(model, hidden):
    head = LMHead(model)
    e = lmhead.Engine(model)
    options = {"temperature": 0.8, "top_p": 0.9, "seed": 3, "position": 10}
    want = e.run(hidden.numpy(), logits=True, logit_bias={5: 2.0}, **options)
    tokens, logits = head(hidden, logits=True, logit_bias={5: 2.0}, **options)
    assert tokens.dtype == torch.int32 and tokens.tolist() == want.sampled.tolist()
    assert logits.numpy().tobytes() == want.logits.tobytes()
    mask = torch.zeros(model.vocab // 32, dtype=torch.int32)
    mask[2] = 1 << 4  # id 68 alone, as an int32 bitmask (xgrammar's dtype)
    assert head(hidden, temperature=1.0, allowed=mask).tolist() == [68] * hidden.shape[0]
    assert head(hidden).tolist() == want.tokens.tolist()  # no options: the argmax
    ids, values = torch.tensor([5], dtype=torch.int32), torch.tensor([2.0])
    torch.library.opcheck(torch.ops.lmhead.sample.default,
                          (hidden, head.handle, True, 0.8, 0, 0.9, 0.0, 3, 10, None, ids, values),
                          test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda x, p: head(x, temperature=0.8, top_p=0.9, seed=3, position=p),
                             fullgraph=True, backend="aot_eager")
    for p in (10, 11):  # a new position per decode step
        assert compiled(hidden, p).tolist() == e.run(hidden.numpy(), **{**options, "position": p}).sampled.tolist()


def test_torch_compile_traces_the_op(model, hidden):
    head = LMHead(model)

    class Tail(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(model.hidden, model.hidden)
            self.head = head

        def forward(self, x):
            return self.head(self.proj(x), logits=True)

    torch.manual_seed(0)
    m = Tail().eval()
    with torch.no_grad():
        eager = m(hidden)
        compiled = torch.compile(m, fullgraph=True, backend="aot_eager")(hidden)
    assert eager[0].tolist() == compiled[0].tolist()
    assert torch.equal(eager[1], compiled[1])


def test_example_generates(data_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "torch_lm_head.py"), str(data_dir / SMALL),
                        "--steps", "4"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split("ids:")[1].splitlines()[0]
    assert len(eval(ids)) == 5  # the prompt and four generated tokens


# ---- on the GPU machine ---------------------------------------------------------------------------

@cuda
def test_cuda_tensor_on_the_cuda_backend(model, hidden):
    want = reference(model, hidden, backend="cuda")
    e = lmhead.Engine(model, backend="cuda")
    # Written on a side stream and run with that stream current: the device read is ordered after it.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_gpu = (hidden.to("cuda", non_blocking=True) * 2) / 2
        out = e.run(on_gpu, top_k=2, logits=True)
    assert out.logits.tobytes() == want.logits.tobytes()
    assert out.top_k_ids.tolist() == want.top_k_ids.tolist()


@cuda
def test_cuda_tensor_is_read_after_its_stream(model, hidden):
    # The rows are written behind ~0.2 s of GPU sleep on a side stream: read without waiting for
    # that stream, the engine would see the zeros, not the rows.
    want = reference(model, hidden, backend="cuda")
    e = lmhead.Engine(model, backend="cuda")
    side = torch.cuda.Stream()
    for explicit in (False, True):
        rows = torch.zeros_like(hidden, device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(400_000_000)
            rows.copy_(hidden.to("cuda"))
        if explicit:
            out = e.run(rows, top_k=2, logits=True, stream=side)  # current stream: the default one
        else:
            with torch.cuda.stream(side):
                out = e.run(rows, top_k=2, logits=True)
        assert out.logits.tobytes() == want.logits.tobytes(), f"explicit stream {explicit}"


@cuda
def test_cuda_tensor_layouts_and_errors(model, hidden):
    e = lmhead.Engine(model, backend="cuda")
    want = reference(model, hidden, backend="cuda")
    strided = hidden.t().contiguous().t().cuda()
    assert not strided.is_contiguous()
    assert e.run(strided, top_k=2, logits=True).logits.tobytes() == want.logits.tobytes()
    assert e.run(hidden[1].cuda()).tokens.tolist() == want.tokens[1:2].tolist()
    bad = hidden.cuda().clone()
    bad[2, 5] = float("nan")
    with pytest.raises(lmhead.InputError, match=r"token 2 has a non-finite value \(nan\) at index 5"):
        e.run(bad)
    with pytest.raises(lmhead.InputError, match="float32"):
        e.run(hidden.cuda().half())
    with pytest.raises(lmhead.InputError, match="width"):
        e.run(hidden.cuda()[:, :-1].contiguous())
    assert e.run(hidden.cuda(), logits=True).logits.tobytes() == want.logits.tobytes()  # whole after the errors


@cuda
def test_cuda_tensor_on_a_host_backend_is_refused(model, hidden):
    with pytest.raises(lmhead.InputError, match="CUDA device"):
        lmhead.Engine(model, backend="cpu").run(hidden.cuda())


@cuda
def test_custom_op_on_cuda(model, hidden):
    head = LMHead(model, backend="cuda")
    tokens, logits = head(hidden.cuda(), logits=True)
    assert tokens.is_cuda and logits.is_cuda
    want = reference(model, hidden, backend="cuda")
    assert tokens.cpu().tolist() == want.tokens.tolist()
    assert logits.cpu().numpy().tobytes() == want.logits.tobytes()
    compiled = torch.compile(lambda x: head(x), fullgraph=True)
    assert compiled(hidden.cuda()).cpu().tolist() == want.tokens.tolist()
