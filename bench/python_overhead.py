#!/usr/bin/env python3
"""The Python call's cost on top of the engine's, beside `lmhead bench` on the same head.

    python bench/python_overhead.py MODEL [--backend cpu|cuda|scalar] [--tokens 1] [--runs 2000] [--cli build/.../lmhead]

Times engine.run(hidden) (argmax only) from Python and the same engine's C++ Engine::run in the
same process (a loop inside the module, no Python between calls); the overhead is their difference,
from the minimum of each (the least disturbed call) and from the medians. With --cli, `lmhead bench`
for the same head, backend and T is printed beside them (it times more than one Engine::run: its
own bookkeeping per call). Also times a call refused before the engine runs (wrong width): parsing,
checking, raising and catching. On the cuda backend with torch present, also a torch CUDA tensor
(read in place on the GPU) beside the host array.
"""
import argparse
import json
import statistics
import subprocess
import time

import numpy as np

import lmhead


def timed(f, runs):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        f()
        ts.append(time.perf_counter_ns() - t0)
    return min(ts) / 1e3, statistics.median(ts) / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--cli")
    a = ap.parse_args()
    model = lmhead.Model(a.model)
    engine = lmhead.Engine(model, backend=a.backend, threads=a.threads)
    h = np.random.default_rng(1).standard_normal((a.tokens, model.hidden)).astype(np.float32)
    for _ in range(50):
        engine.run(h)
    py_min, py_med = timed(lambda: engine.run(h), a.runs)
    wrong = np.zeros((a.tokens, model.hidden + 1), dtype=np.float32)

    def refused():
        try:
            engine.run(wrong)
        except lmhead.InputError:
            pass

    ref_min, ref_med = timed(refused, a.runs)
    cc_min, cc_med = engine._engine_call_times(h, a.runs)
    print(f"backend {engine.backend}, T={a.tokens}")
    print(f"python engine.run: min {py_min:.2f} us, median {py_med:.2f} us ({a.runs} calls)")
    print(f"C++ Engine::run in this process: min {cc_min:.2f} us, median {cc_med:.2f} us")
    print(f"python overhead over the C++ call: {py_min - cc_min:.2f} us (min - min), {py_med - cc_med:.2f} us (median - median)")
    print(f"python call refused before the engine (binding alone, with raising): min {ref_min:.2f} us, median {ref_med:.2f} us")
    if a.backend == "cuda":
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            # A torch CUDA tensor read in place (Engine::run_device, ordered on the current stream)
            # against the host array above: what keeping the rows on the GPU costs or saves.
            d = torch.from_numpy(h).cuda()
            torch.cuda.synchronize()
            for _ in range(50):
                engine.run(d)
            dev_min, dev_med = timed(lambda: engine.run(d), a.runs)
            print(f"python engine.run(torch CUDA tensor): min {dev_min:.2f} us, median {dev_med:.2f} us "
                  f"(vs host array: {dev_min - py_min:+.2f} us min, {dev_med - py_med:+.2f} us median)")
    if a.cli:
        args = [a.cli, "bench", a.model, "--tokens", str(a.tokens), "--backend", a.backend, "--json"]
        if a.threads:
            args += ["--threads", str(a.threads)]
        r = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["results"][0]
        cpp_min, cpp_med = r["min_ms"] * 1e3, r["median_ms"] * 1e3
        print(f"lmhead bench: min {cpp_min:.2f} us, median {cpp_med:.2f} us ({r['runs']} runs, {r['backend']})")


if __name__ == "__main__":
    main()
