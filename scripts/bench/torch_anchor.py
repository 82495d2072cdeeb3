"""PyTorch's own numbers for a scale-bench model: one training step (forward, loss, backward) in
eager PyTorch on the CPU, with and without HF per-layer gradient checkpointing, its peak bytes and
its FLOPs.

    python torch_anchor.py --model hf_gpt2 --size n_layer=12 ... (make_model.sh NAME with
    TORCH_ANCHOR=1 passes a bench model's sizes)

The model, its weights and its data are the bench graph's (gen_std.build and make_data, the
fixtures' seed), so the step is the one the bench graph computes. The peak is the parameters
plus the largest sum of the step's allocations less its frees, as the profiler records them
(`profile_memory`); it is given two ways:

- gradients made as backward reaches them (`zero_grad(set_to_none=True)`, PyTorch's default):
  no gradient is held during the forward;
- gradients held for the whole step (allocated before it, as ckpt-opt's runner binds them):
  the accounting of ckpt-opt's device total.

The FLOPs are torch.utils.flop_counter's (matrix products and attention only); "added" is the
checkpointed step's over the plain one's.
"""
import argparse
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "fixtures"))
sys.path.insert(0, here)
import gen_more  # noqa: E402,F401  (registers llama in gen_std)
import gen_std  # noqa: E402
from gen_bench import parse_sizes  # noqa: E402

MIB = 1 << 20
HF = ("hf_gpt2", "llama")  # wrappers of a transformers model at `.model`


def peak_bytes(mod, data, held):
    """The parameters, the gradients if `held`, and the step's largest net allocation."""
    import torch

    mod.zero_grad(set_to_none=True)
    params = sum(p.numel() * p.element_size() for p in mod.parameters())
    if held:
        for p in mod.parameters():
            p.grad = torch.zeros_like(p)
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, profile_memory=True) as prof:
        mod(*data).backward()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    net = peak = 0
    for e in events:
        net += e.nbytes()
        peak = max(peak, net)
    return params * (2 if held else 1) + peak


def flops(mod, data):
    from torch.utils.flop_counter import FlopCounterMode

    mod.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        mod(*data).backward()
    return counter.get_total_flops()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=HF)
    ap.add_argument("--size", action="append", default=[], metavar="KEY=N")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    sizes = parse_sizes(a.size)
    mod = gen_std.build(a.model, 0.0, sizes)
    s = dict(gen_std.MODELS[a.model]["sizes"])
    s.update(sizes)
    data = gen_std.make_data(gen_std.data_spec(a.model, s), gen_std.SEED)
    rows = {}
    for ckpt in (False, True):
        if ckpt:
            mod.model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        key = "hf_checkpointing" if ckpt else "plain"
        rows[key] = {
            "peak_mib_gradients_as_made": peak_bytes(mod, data, held=False) / MIB,
            "peak_mib_gradients_held": peak_bytes(mod, data, held=True) / MIB,
            "flops": flops(mod, data),
        }
    rows["hf_checkpointing"]["added_flops_percent"] = 100.0 * (
        rows["hf_checkpointing"]["flops"] / rows["plain"]["flops"] - 1.0)
    print(json.dumps({"model": a.model, "sizes": s, "torch": torch.__version__, **rows}, indent=1))


if __name__ == "__main__":
    main()
