"""The runner's loop on CUDA, with device-level bytes beside the arena's cap.

    python3 scripts/gpu_runner_check.py MODEL [STEPS]

Runs STEPS (default 20) steps of MODEL (an output written with `--provider cuda`) through
`ckpt_opt.Session` and reads the device's used bytes (`cudaMemGetInfo` through torch when it
is installed, else `nvidia-smi --query-gpu=memory.used`) before the session, after loading and
after every step. Prints one JSON line: the recorded ceiling and cap, the device's growth over
its used bytes before the session, and whether the growth stayed within the ceiling. Exit 0
when it did, 2 when a step raised `CeilingExceeded`, 3 when the device grew past the ceiling.
"""

import json
import subprocess
import sys


def used_bytes() -> int:
    try:
        import torch

        free, total = torch.cuda.mem_get_info()
        return int(total - free)
    except Exception:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            check=True, capture_output=True, text=True,
        ).stdout
        return int(out.split()[0]) * 1024 * 1024


def main() -> int:
    import ckpt_opt
    from ckpt_opt.feeds import random_feeds

    model = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    before = used_bytes()
    s = ckpt_opt.Session(model)
    loaded = used_bytes()
    feeds = random_feeds(s.inputs, 0)
    peak = loaded
    report = {"model": model, "ceiling_bytes": s.ceiling_bytes, "arena_cap_bytes": s.arena_cap_bytes,
              "caller_bytes": s.caller_bytes, "initializer_bytes": s.initializer_bytes,
              "device_used_before": before, "device_growth_after_load": loaded - before}
    try:
        for _ in range(steps):
            s.run(feeds)
            peak = max(peak, used_bytes())
    except ckpt_opt.CeilingExceeded as e:
        report.update(exceeded=str(e))
        print(json.dumps(report))
        return 2
    growth = peak - before
    report.update(steps=steps, device_growth_peak=growth, within_ceiling=growth <= s.ceiling_bytes)
    print(json.dumps(report))
    return 0 if growth <= s.ceiling_bytes else 3


if __name__ == "__main__":
    sys.exit(main())
