"""The arena need of a model under the runner: the smallest `max_mem` (to 256 B) under which
`steps` calls of `Session.run(feeds)` succeed.

Each trial is a fresh forked process (the env arena is process-wide and its regions never shrink)
that creates `Session(path, arena_cap_bytes=cap)` and calls `run(feeds)` `steps` times with the
same feeds: exactly the loop a caller runs, so ckpt-opt's own measurement can be compared with
this one to the byte. The bisection starts from an upper bound it first checks runs (the
recorded cap, else 64 MiB), doubling it while it does not. Caps below what session load takes are
refused by the Session (ORT would run them uncapped), so they count as too small. Trials fork the
calling process: call it from one that has no multi-threaded ORT session of its own running.

    python -m ckpt_opt.measure MODEL --feeds DIR_OF_NPY [--steps N]
prints {"arena_need_bytes": N, "steps": S}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from typing import Optional

from .errors import CeilingExceeded, RunnerError
from .profile import read_profile

_ALIGN = 256
_LARGEST = 1 << 42


def _trial(path: str, cap: int, feeds: dict, steps: int, conn) -> None:
    from .session import Session

    try:
        s = Session(path, arena_cap_bytes=cap, log_severity_level=4)
        for _ in range(steps):
            s.run(feeds)
        conn.send(("ok", ""))
    except CeilingExceeded as e:
        conn.send(("ceiling", str(e)))
    except BaseException as e:  # reported to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def runs_under(path: str, cap: int, feeds: dict, steps: int) -> bool:
    """Whether `steps` runs fit in an arena capped at `cap`, in a fresh forked process."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_trial, args=(path, cap, feeds, steps, child))
    proc.start()
    child.close()
    try:
        outcome, message = parent.recv()
    except EOFError:
        proc.join()
        raise RunnerError(f"{path}: the trial at cap {cap} B died (exit {proc.exitcode}) without a result") from None
    proc.join()
    if outcome == "error":
        raise RunnerError(f"{path}: the trial at cap {cap} B failed for another reason than the cap: {message}")
    return outcome == "ok"


def arena_need(path, feeds: dict, steps: Optional[int] = None, upper_bytes: Optional[int] = None) -> int:
    """The smallest cap, a multiple of 256 B, under which `steps` (default: the recorded steps) runs fit."""
    path = os.fspath(path)
    profile = read_profile(path)
    steps = profile.steps if steps is None else int(steps)
    hi = upper_bytes or profile.arena_cap_bytes or (64 << 20)
    hi = -(-int(hi) // _ALIGN) * _ALIGN
    while not runs_under(path, hi, feeds, steps):
        if hi >= _LARGEST:
            raise RunnerError(f"{path}: {steps} steps do not run even in an arena capped at {hi} B")
        hi *= 2
    lo = 0
    while hi - lo > _ALIGN:
        mid = (lo + hi) // 2 // _ALIGN * _ALIGN
        if runs_under(path, mid, feeds, steps):
            hi = mid
        else:
            lo = mid
    return hi


def main(argv=None) -> int:
    from .feeds import load_feeds

    ap = argparse.ArgumentParser(prog="python -m ckpt_opt.measure", description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--feeds", required=True, help="folder of NAME.npy, one per input (`/` in a name as %%2F)")
    ap.add_argument("--steps", type=int, help="steps per trial (default: the recorded ckpt-opt.profile.steps)")
    ap.add_argument("--upper", type=int, help="first upper bound to try, in bytes (default: the recorded cap)")
    a = ap.parse_args(argv)
    try:
        feeds = load_feeds(a.feeds)
        steps = a.steps if a.steps is not None else read_profile(a.model).steps
        need = arena_need(a.model, feeds, steps, a.upper)
    except RunnerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"arena_need_bytes": need, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
