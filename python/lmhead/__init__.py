"""lmhead from Python: the last stage of an LLM decoder step on a GGUF checkpoint's head.

    import lmhead
    model = lmhead.Model("muse.gguf")
    engine = lmhead.Engine(model, backend="cpu", threads=0)
    out = engine.run(hidden, top_k=5, logprobs=True)     # hidden: float32 [H] or [T, H]
    out.tokens, out.top_k_ids, out.top_k_values, out.logprobs, out.ties
    out = engine.run(hidden, temperature=0.8, top_p=0.9, seed=1, position=40)   # out.sampled
    v = engine.verify(rows, draft=[11, 12, 13], temperature=0.8, seed=1)        # v.accepted, v.next

Failures raise lmhead.Error with the engine's message; the caller's bad values (shape, dtype,
device, a NaN, an option out of range) raise lmhead.InputError, which is also a ValueError.

Two sets of logits under a bounded-logit policy, the figures `lmhead compare --json` prints:

    c = lmhead.compare(a, b, policy="max<11,mean<1.25", top_k=5)   # float32/float64 [V] or [T, V]
    c.max_abs, c.mean_abs, c.differing, c.max_ulp, c.argmax_agree, c.topk_overlap, c.kl_mean
    c.tokens[t].kl, c.policy[i].measured, c.policy_holds, c.as_dict()
    lmhead.parse_policy("max<11,argmax=all"), lmhead.policy_grammar()
"""
import numpy as np

from ._lmhead import Error, InputError, Model, RunOutput, Verification, __version__, has_cuda
from ._lmhead import Engine as _Engine

__all__ = ["Error", "InputError", "Model", "Engine", "RunOutput", "Verification", "__version__", "has_cuda"]

from ._lmhead import (ClauseResult, Comparison, Policy, PolicyClause, TokenComparison, compare, parse_policy,
                      policy_grammar)

__all__ += ["compare", "parse_policy", "policy_grammar", "Comparison", "TokenComparison", "ClauseResult", "Policy",
            "PolicyClause"]

_CUDA_DLPACK_DEVICES = (2, 13)  # kDLCUDA, kDLCUDAManaged


def _on_cuda(x):
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return int(dev()[0]) in _CUDA_DLPACK_DEVICES
    except Exception:
        return False


class Engine(_Engine):
    """Engine(model, backend="cpu", threads=0, gpus=1, shards=0)

    backend: "scalar" (the reference), "cpu" (the best CPU kernels) or "cuda". One engine may be
    called from any number of threads; calls run one at a time (the GIL is released meanwhile).

    Sampling (run and verify; docs/numerics.md §9): logit_bias ({id: value} or (id, value) pairs)
    and allowed (a bitmask of 32-bit words, bit id % 32 of word id // 32 set for allowed ids, as
    grammar engines produce: ceil(V/32) words for every token or [T, ceil(V/32)]), then
    temperature (0: greedy), min_p, sample_top_k and top_p, and an exact draw keyed by seed and
    position only (token t draws at position + t): the same token on every backend and for any
    thread, shard or GPU count. RunOutput.sampled holds it; without sampling options it is the
    argmax.
    """

    def run(self, hidden, top_k=0, logprobs=False, logits=False, activations="q8", softcap="nodes",
            input="hidden", stream=None, *, temperature=0.0, sample_top_k=0, top_p=1.0, min_p=0.0, seed=0,
            position=0, logit_bias=None, allowed=None, route="vec_dot"):
        """Runs float32 hidden states [H] or [T, H] through the head; returns a RunOutput.

        activations: "q8" (llama.cpp's route, default) or "f32"; softcap: "nodes" (byte-exact,
        default) or "fused"; input: "hidden" (before the final norm) or "normed" (after it);
        route: the dots' order, "vec_dot" (default, ggml's vec_dot order at every T), "llamacpp"
        (llama.cpp's CPU path for the head type and T) or "tiled" (llama.cpp's tiled K-quant
        order at every T: Q4_K / Q5_K / Q6_K heads, the fast one on the GPU from 2 tokens).
        Host arrays are read in place when C-contiguous. A CUDA tensor (or any CUDA DLPack array)
        given to the cuda backend stays on the GPU: the engine reads it in place once the work
        queued on `stream` is done. stream: a torch.cuda.Stream, a CuPy stream, or a cudaStream_t
        as an int; None: the tensor's current stream (torch, CuPy), else the legacy default stream.
        Given to another backend a CUDA tensor is refused. The results are host arrays. The
        keyword-only options choose RunOutput.sampled (see the class's note).
        """
        sampling = _sampling(temperature, sample_top_k, top_p, min_p, seed, position, logit_bias, allowed)
        sampling["route"] = route
        if _on_cuda(hidden):
            stream = _stream_handle(hidden, stream)
            if not _is_contiguous(hidden):
                hidden = hidden.contiguous()
        try:
            return self._run(hidden, top_k, logprobs, logits, activations, softcap, input, stream or 0, **sampling)
        except InputError:
            moved = _readable_copy(hidden, self.backend)
            if moved is None:
                raise
        return self.run(moved, top_k, logprobs, logits, activations, softcap, input, stream, **sampling)

    def verify(self, hidden, draft, draft_probs=None, top_k=0, logprobs=False, logits=False, activations="q8",
               softcap="nodes", input="hidden", *, temperature=0.0, sample_top_k=0, top_p=1.0, min_p=0.0, seed=0,
               position=0, logit_bias=None, allowed=None, route="vec_dot"):
        """Speculative verification of the draft tokens; returns a Verification.

        hidden: float32 [len(draft) + 1, H] host rows, row j the state after draft token j - 1 (row
        0 the state before the first draft), at positions position + j. Greedy (temperature 0): a
        draft token is accepted while it equals that row's greedy choice. Temperature > 0 without
        draft_probs: while it equals the token run() would sample there. With draft_probs (float32
        [len(draft), V], the draft model's probabilities): accepted with probability min(1, p/q), a
        rejection drawing `next` from max(0, p - q) normalized, so the tokens follow the target's
        distribution. Verification.accepted, .next, .target and .run (the RunOutput of every row).
        """
        sampling = _sampling(temperature, sample_top_k, top_p, min_p, seed, position, logit_bias, allowed)
        sampling["route"] = route
        ids = np.asarray(draft, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < -2**31 or ids.max() >= 2**31):
            raise InputError(f"draft ids must fit in int32, got {ids.min()} .. {ids.max()}")
        draft = np.ascontiguousarray(ids.astype(np.int32))
        if draft_probs is not None:
            draft_probs = np.ascontiguousarray(np.asarray(draft_probs, dtype=np.float32))
        if _on_cuda(hidden) or getattr(hidden, "requires_grad", False):
            hidden = hidden.detach().cpu() if hasattr(hidden, "detach") else hidden
        return self._verify(hidden, draft, draft_probs, top_k, logprobs, logits, activations, softcap, input,
                            **sampling)


def _sampling(temperature, sample_top_k, top_p, min_p, seed, position, logit_bias, allowed):
    """The sampling keywords in the module's types: bias as (id, value) pairs, the mask as uint32 words."""
    if logit_bias is None:
        pairs = []
    elif isinstance(logit_bias, dict):
        pairs = [(int(k), float(v)) for k, v in logit_bias.items()]
    else:
        pairs = [(int(k), float(v)) for k, v in logit_bias]
    words = None
    if allowed is not None:
        if hasattr(allowed, "detach"):  # a torch tensor (xgrammar's int32 bitmask)
            allowed = allowed.detach().cpu().numpy()
        a = np.asarray(allowed)
        if a.dtype.itemsize != 4 or a.dtype.kind not in "iu":
            raise InputError(f"allowed must be 32-bit integer words (uint32 or int32), got {a.dtype}")
        words = np.ascontiguousarray(a).view(np.uint32).reshape(-1)
    return {"temperature": float(temperature), "sample_top_k": int(sample_top_k), "top_p": float(top_p),
            "min_p": float(min_p), "seed": int(seed), "position": int(position), "logit_bias": pairs,
            "allowed": words}


def _stream_handle(array, stream):
    """The cudaStream_t (an int) whose work wrote a CUDA array: the one given, else its current one."""
    if stream is None:
        device = getattr(array, "device", None)
        if getattr(device, "type", None) == "cuda":  # torch
            import torch
            return int(torch.cuda.current_stream(device).cuda_stream)
        try:  # CuPy
            import cupy
            return int(cupy.cuda.get_current_stream().ptr)
        except Exception:
            return 0
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        handle = getattr(stream, attribute, None)
        if handle is not None:
            return int(handle)
    return int(stream)


def _is_contiguous(array):
    f = getattr(array, "is_contiguous", None)
    return f() if callable(f) else True


def _readable_copy(hidden, backend):
    """What to run instead of `hidden` after the module could not read it, or None (re-raise)."""
    if getattr(hidden, "requires_grad", False):  # DLPack refuses tensors that need grad
        return hidden.detach()
    if _on_cuda(hidden) and not backend.startswith("cuda"):
        raise InputError(f"hidden is on a CUDA device; the {backend} backend reads host memory: "
                         "move it with .cpu() or make the engine with backend='cuda'") from None
    return None
