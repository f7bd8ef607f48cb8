"""lmhead from Python: the last stage of an LLM decoder step on a GGUF checkpoint's head.

    import lmhead
    model = lmhead.Model("muse.gguf")
    engine = lmhead.Engine(model, backend="cpu", threads=0)
    out = engine.run(hidden, top_k=5, logprobs=True)     # hidden: float32 [H] or [T, H]
    out.tokens, out.top_k_ids, out.top_k_values, out.logprobs, out.ties

Failures raise lmhead.Error with the engine's message; the caller's bad values (shape, dtype,
device, a NaN, an option out of range) raise lmhead.InputError, which is also a ValueError.

Two sets of logits under a bounded-logit policy, the figures `lmhead compare --json` prints:

    c = lmhead.compare(a, b, policy="max<11,mean<1.25", top_k=5)   # float32/float64 [V] or [T, V]
    c.max_abs, c.mean_abs, c.differing, c.max_ulp, c.argmax_agree, c.topk_overlap, c.kl_mean
    c.tokens[t].kl, c.policy[i].measured, c.policy_holds, c.as_dict()
    lmhead.parse_policy("max<11,argmax=all"), lmhead.policy_grammar()
"""
from ._lmhead import Error, InputError, Model, RunOutput, __version__, has_cuda
from ._lmhead import Engine as _Engine

__all__ = ["Error", "InputError", "Model", "Engine", "RunOutput", "__version__", "has_cuda"]

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
    """

    def run(self, hidden, top_k=0, logprobs=False, logits=False, activations="q8", softcap="nodes",
            input="hidden", stream=None):
        """Runs float32 hidden states [H] or [T, H] through the head; returns a RunOutput.

        activations: "q8" (llama.cpp's route, default) or "f32"; softcap: "nodes" (byte-exact,
        default) or "fused"; input: "hidden" (before the final norm) or "normed" (after it).
        Host arrays are read in place when C-contiguous. A CUDA tensor (or any CUDA DLPack array)
        given to the cuda backend stays on the GPU: the engine reads it in place once the work
        queued on `stream` is done. stream: a torch.cuda.Stream, a CuPy stream, or a cudaStream_t
        as an int; None: the tensor's current stream (torch, CuPy), else the legacy default stream.
        Given to another backend a CUDA tensor is refused. The results are host arrays.
        """
        if _on_cuda(hidden):
            stream = _stream_handle(hidden, stream)
            if not _is_contiguous(hidden):
                hidden = hidden.contiguous()
        try:
            return self._run(hidden, top_k, logprobs, logits, activations, softcap, input, stream or 0)
        except InputError:
            moved = _readable_copy(hidden, self.backend)
            if moved is None:
                raise
        return self.run(moved, top_k, logprobs, logits, activations, softcap, input, stream)


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
