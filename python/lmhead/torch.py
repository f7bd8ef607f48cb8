"""lmhead as a PyTorch operator: ``torch.ops.lmhead.run`` and the module ``LMHead``.

    from lmhead.torch import LMHead
    head = LMHead("muse.gguf", backend="cpu")
    tokens = head(hidden)                       # int32 [T] on hidden's device
    tokens, logits = head(hidden, logits=True)  # and float32 [T, V]

The operator is registered with torch.library and has a fake (meta) implementation, so
torch.compile traces through it without running it. It has no gradient: it chooses tokens.
An engine enters the operator as an integer handle (operators take tensors and plain values, not
Python objects); ``LMHead`` registers its engine and passes the handle.
"""
import itertools
import threading

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
    tokens = torch.from_numpy(out.tokens).to(hidden.device)
    if want_logits:
        logits = torch.from_numpy(out.logits).to(hidden.device)
    else:
        logits = torch.empty((len(out), 0), dtype=torch.float32, device=hidden.device)
    return tokens, logits


@run.register_fake
def _run_fake(hidden, engine, want_logits):
    _, vocab = _lookup(engine)
    t = _tokens_of(hidden)
    tokens = hidden.new_empty((t,), dtype=torch.int32)
    logits = hidden.new_empty((t, vocab if want_logits else 0), dtype=torch.float32)
    return tokens, logits


class LMHead(torch.nn.Module):
    """The last stage of a decoder step as a module: hidden states in, next tokens out.

    model: an lmhead.Model or a GGUF path; backend, threads, gpus: as lmhead.Engine.
    """

    def __init__(self, model, backend="cpu", threads=0, gpus=1):
        super().__init__()
        self.model = model if isinstance(model, Model) else Model(str(model))
        self.engine = Engine(self.model, backend=backend, threads=threads, gpus=gpus)
        self.handle = register(self.engine, self.model.vocab)

    def forward(self, hidden, logits: bool = False):
        tokens, lg = torch.ops.lmhead.run(hidden, self.handle, logits)
        return (tokens, lg) if logits else tokens

    def __del__(self):
        unregister(getattr(self, "handle", None))
