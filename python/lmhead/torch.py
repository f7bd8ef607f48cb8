"""lmhead as a PyTorch operator: ``torch.ops.lmhead.run`` and the module ``LMHead``.

    from lmhead.torch import LMHead
    head = LMHead("muse.gguf", backend="cpu")
    tokens = head(hidden)                       # int32 [T] on hidden's device
    tokens, logits = head(hidden, logits=True)  # and float32 [T, V]
    tokens = head(hidden, temperature=0.8, top_p=0.9, seed=1, position=40)  # sampled (numerics.md §9)

The operator is registered with torch.library and has a fake (meta) implementation, so
torch.compile traces through it without running it. It has no gradient: it chooses tokens.
An engine enters the operator as an integer handle (operators take tensors and plain values, not
Python objects); ``LMHead`` registers its engine and passes the handle.
"""
import itertools
import threading
from typing import Optional

import torch

from . import Engine, Model

_engines = {}  # handle -> (Engine, vocab)
_lock = threading.Lock()
_next = itertools.count(1)


def register(engine, vocab):
    """Makes `engine` callable from torch.ops.lmhead.run; returns its handle."""
    with _lock:
        handle = next(_next)
        _engines[handle] = (engine, int(vocab))
    return handle


def unregister(handle):
    with _lock:
        _engines.pop(handle, None)


def _lookup(handle):
    try:
        return _engines[handle]
    except KeyError:
        raise ValueError(f"lmhead.torch: no engine registered under handle {handle}") from None


def _tokens_of(hidden):
    return 1 if hidden.dim() == 1 else hidden.shape[0]


@torch.library.custom_op("lmhead::run", mutates_args=())
def run(hidden: torch.Tensor, engine: int, want_logits: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden float32 [H] or [T, H] -> (tokens int32 [T], logits float32 [T, V] or [T, 0])."""
    eng, _ = _lookup(engine)
    out = eng.run(hidden.detach(), logits=want_logits)
    return _as_tensors(out.tokens, out, want_logits, hidden.device)


def _as_tensors(tokens, out, want_logits, device):
    """(tokens int32 [T], logits float32 [T, V] or [T, 0]) on `device` from a RunOutput."""
    if want_logits:
        logits = torch.from_numpy(out.logits).to(device)
    else:
        logits = torch.empty((len(out), 0), dtype=torch.float32, device=device)
    return torch.from_numpy(tokens).to(device), logits


@run.register_fake
def _run_fake(hidden, engine, want_logits):
    _, vocab = _lookup(engine)
    t = _tokens_of(hidden)
    tokens = hidden.new_empty((t,), dtype=torch.int32)
    logits = hidden.new_empty((t, vocab if want_logits else 0), dtype=torch.float32)
    return tokens, logits


@torch.library.custom_op("lmhead::sample", mutates_args=())
def sample(hidden: torch.Tensor, engine: int, want_logits: bool, temperature: float, top_k: int, top_p: float,
           min_p: float, seed: int, position: int, allowed: Optional[torch.Tensor], bias_ids: Optional[torch.Tensor],
           bias_values: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden float32 [H] or [T, H] -> (sampled tokens int32 [T], logits float32 [T, V] or [T, 0]).

    Engine.run's sampling: allowed (32-bit words, one mask or one per token), bias_ids int32 [n] and
    bias_values float32 [n], temperature (0: greedy), min_p, top_k (0: off), top_p, and a draw keyed
    by seed (0 to 2^63 - 1 here) and position only: the same tokens on every backend.
    """
    eng, _ = _lookup(engine)
    bias = None
    if bias_ids is not None or bias_values is not None:
        if bias_ids is None or bias_values is None or bias_ids.numel() != bias_values.numel():
            raise ValueError("lmhead.torch: bias_ids and bias_values go together, with as many values as ids")
        bias = list(zip(bias_ids.reshape(-1).tolist(), bias_values.reshape(-1).tolist()))
    out = eng.run(hidden.detach(), logits=want_logits, temperature=temperature, sample_top_k=top_k, top_p=top_p,
                  min_p=min_p, seed=seed, position=position, logit_bias=bias, allowed=allowed)
    return _as_tensors(out.sampled, out, want_logits, hidden.device)


@sample.register_fake
def _sample_fake(hidden, engine, want_logits, temperature, top_k, top_p, min_p, seed, position, allowed, bias_ids,
                 bias_values):
    return _run_fake(hidden, engine, want_logits)


class LMHead(torch.nn.Module):
    """The last stage of a decoder step as a module: hidden states in, next tokens out.

    model: an lmhead.Model or a GGUF path; backend, threads, gpus: as lmhead.Engine.
    """

    def __init__(self, model, backend="cpu", threads=0, gpus=1):
        super().__init__()
        self.model = model if isinstance(model, Model) else Model(str(model))
        self.engine = Engine(self.model, backend=backend, threads=threads, gpus=gpus)
        self.handle = register(self.engine, self.model.vocab)

    def forward(self, hidden, logits: bool = False, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                min_p: float = 0.0, seed: int = 0, position: int = 0, allowed=None, logit_bias=None):
        """The next tokens: the argmax, or with sampling options (those of Engine.run, top_k being
        the sampling one; logit_bias a {id: value} dict) the sampled tokens."""
        sampling = (temperature != 0 or top_k != 0 or top_p != 1 or min_p != 0 or allowed is not None or
                    bool(logit_bias))
        if not sampling:
            tokens, lg = torch.ops.lmhead.run(hidden, self.handle, logits)
        else:
            ids = values = None
            if logit_bias:
                ids = torch.tensor(list(logit_bias.keys()), dtype=torch.int32)
                values = torch.tensor(list(logit_bias.values()), dtype=torch.float32)
            tokens, lg = torch.ops.lmhead.sample(hidden, self.handle, logits, temperature, top_k, top_p, min_p, seed,
                                                 position, allowed, ids, values)
        return (tokens, lg) if logits else tokens

    def __del__(self):
        unregister(getattr(self, "handle", None))
