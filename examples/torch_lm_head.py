#!/usr/bin/env python3
"""lmhead as the LM head of a small PyTorch model, end to end: greedy generation.

    python examples/torch_lm_head.py [MODEL.gguf] [--steps N] [--device cpu|cuda] [--compile]

The decoder (embedding, two causal transformer layers) is randomly initialised with a fixed seed and
stands in for a real model's body: what is shown is the wiring. Its last hidden state goes through
lmhead (final RMSNorm, the GGUF's quantized head, scale, soft cap, argmax) and the chosen token is
fed back. The default checkpoint is the project's small test head (vocab 4096, hidden 256).
"""
import argparse
import pathlib
import sys

import torch

from lmhead.torch import LMHead

ROOT = pathlib.Path(__file__).resolve().parents[1]


class TinyDecoder(torch.nn.Module):
    def __init__(self, vocab, hidden, layers=2, heads=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        layer = torch.nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.body = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids):
        x = self.embed(ids)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
        return self.body(x, mask=mask, is_causal=True)


class TinyLM(torch.nn.Module):
    """The decoder's body in torch, its last stage in lmhead."""

    def __init__(self, gguf, backend):
        super().__init__()
        self.head = LMHead(gguf, backend=backend)
        self.decoder = TinyDecoder(self.head.model.vocab, self.head.model.hidden)

    def forward(self, ids):
        h = self.decoder(ids)[0, -1:]  # [1, H]: the last position's hidden state
        return self.head(h.contiguous())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=str(ROOT / "tests" / "data" / "tail-q5k-v4096-h256.gguf"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    a = ap.parse_args()
    torch.manual_seed(0)
    lm = TinyLM(a.model, backend="cuda" if a.device.startswith("cuda") else "cpu").to(a.device).eval()
    step = torch.compile(lm, fullgraph=True) if a.compile else lm
    ids = torch.tensor([[1]], device=a.device)
    with torch.no_grad():
        for _ in range(a.steps):
            nxt = step(ids)  # int32 [1] on a.device
            ids = torch.cat([ids, nxt.to(ids.dtype).view(1, 1)], dim=1)
    model = lm.head.model
    texts = [model.token_bytes(int(i)).decode("utf-8", "replace") for i in ids[0].tolist()]
    print("ids:", ids[0].tolist())
    print("text:", "".join(texts).replace("\u2581", " "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
