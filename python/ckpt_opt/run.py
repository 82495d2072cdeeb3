"""Run a ckpt-opt output model for N steps through `Session`, under the ceiling it records.

    python -m ckpt_opt.run MODEL --steps N [--feeds DIR] [--int-high NAME=K]... [--dim NAME=V]... [--seed S]

Feeds come from DIR (NAME.npy per input) or are generated once from the input specs (floats
standard normal from --seed, integers zero or in [0, K) with --int-high) and fed to every step.
Prints one line per step and a JSON summary last. Exit 0 when every step ran, 2 when a step (or
loading) exceeded the arena cap, 1 on any other error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from .errors import CeilingExceeded, RunnerError


def _scalar_loss(outputs: dict):
    loss = outputs.get("loss")
    if loss is not None and loss.size == 1 and np.issubdtype(loss.dtype, np.floating):
        return float(loss.reshape(()))
    return None


def main(argv=None) -> int:
    from .feeds import load_feeds, name_values, random_feeds
    from .session import Session

    ap = argparse.ArgumentParser(prog="python -m ckpt_opt.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--feeds", help="folder of NAME.npy, one per input")
    ap.add_argument("--int-high", action="append", default=[], metavar="NAME=K",
                    help="integer input NAME takes values in [0, K) (default: zeros)")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=V", help="bind a symbolic input dim")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.steps < 1:
        ap.error("--steps must be at least 1")

    summary: dict = {"model": a.model, "steps": a.steps}
    step_ms: list = []
    code = 0
    try:
        s = Session(a.model)
        summary.update(
            arena_cap_bytes=s.arena_cap_bytes,
            ceiling_bytes=s.ceiling_bytes,
            caller_bytes=s.caller_bytes,
            load_reserved_bytes=s.load_reserved_bytes,
            caller_outputs=s.profile.get("ckpt-opt.profile.caller_outputs"),
        )
        if a.feeds:
            feeds = load_feeds(a.feeds)
        else:
            feeds = random_feeds(s.inputs, a.seed, name_values(a.int_high, "--int-high"), name_values(a.dim, "--dim"))
        summary["feed_bytes"] = int(sum(np.asarray(v).nbytes for v in feeds.values()))
        for step in range(1, a.steps + 1):
            t0 = time.perf_counter()
            out = s.run(feeds)
            ms = (time.perf_counter() - t0) * 1e3
            step_ms.append(round(ms, 3))
            loss = _scalar_loss(out)
            print(f"step {step}/{a.steps}: {ms:.2f} ms" + ("" if loss is None else f", loss {loss:.6g}"), flush=True)
        summary["output_bytes"] = int(sum(v.nbytes for v in out.values()))
        summary["ok"] = True
    except CeilingExceeded as e:
        summary.update(ok=False, error=str(e), node=e.node, failed_step=e.step)
        print(f"error: {e}", file=sys.stderr)
        code = 2
    except RunnerError as e:
        summary.update(ok=False, error=str(e))
        print(f"error: {e}", file=sys.stderr)
        code = 1
    summary["step_ms"] = step_ms
    if step_ms:
        summary["p50_ms"] = float(np.percentile(step_ms, 50))
    print(json.dumps(summary))
    return code


if __name__ == "__main__":
    sys.exit(main())
