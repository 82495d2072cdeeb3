"""The pipeline API: the `ckpt-opt` binary's main job and report commands, called as a subprocess.

The binary is `$CKPT_OPT_BIN`, else `ckpt-opt` on PATH. Flags are passed as keywords:
`snake_case=value` becomes `--kebab-case value`, `True` a bare flag, `False`/`None` nothing, a list
or tuple the flag once per item. Exit codes map to exceptions: 1 `InvalidInput`, 2
`CeilingCannotBeMet` (with the receipt), 3 `ValidationFailed` (with the receipt), 4
`CouldNotValidate`, any other non-zero `CkptOptError`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Optional, Union

from .errors import CeilingCannotBeMet, CkptOptError, CouldNotValidate, InvalidInput, ValidationFailed

_BY_CODE = {1: InvalidInput, 2: CeilingCannotBeMet, 3: ValidationFailed, 4: CouldNotValidate}

Dims = Union[None, dict, list, tuple]


def binary() -> str:
    """The ckpt-opt executable to run."""
    env = os.environ.get("CKPT_OPT_BIN")
    if env:
        if not os.path.isfile(env):
            raise CkptOptError(f"CKPT_OPT_BIN={env}: no such file")
        return env
    found = shutil.which("ckpt-opt")
    if found is None:
        raise CkptOptError(
            "the ckpt-opt binary was not found: set CKPT_OPT_BIN to its path or put it on PATH "
            "(cargo build --release; target/release/ckpt-opt)"
        )
    return found


def flag_args(flags: dict) -> list:
    """`{"mem_pattern": "on", "validate": True}` -> `["--mem-pattern", "on", "--validate"]`."""
    out: list = []
    for key, value in flags.items():
        name = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(name)
        elif isinstance(value, (list, tuple)):
            for item in value:
                out += [name, str(item)]
        else:
            out += [name, str(value)]
    return out


def dim_args(dims: Dims) -> list:
    """`{"seq": 32, "batch": None}` -> `["--dim", "seq=32", "--dim", "batch"]` (a bare name: the dim `capacity`
    searches); a list of `"NAME=VALUE"` strings is passed as is."""
    if not dims:
        return []
    items = dims.items() if isinstance(dims, dict) else ((d, None) for d in dims)
    out: list = []
    for name, value in items:
        out += ["--dim", str(name) if value is None else f"{name}={value}"]
    return out


def _run(args: list, receipt_path: Optional[str] = None) -> subprocess.CompletedProcess:
    cmd = [binary()] + [os.fspath(a) for a in args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 0:
        return proc
    receipt = None
    if receipt_path and proc.returncode in (2, 3) and os.path.isfile(receipt_path):
        with open(receipt_path) as f:
            receipt = json.load(f)
    stderr = proc.stderr.strip()
    message = stderr or proc.stdout.strip() or f"{' '.join(cmd)} exited with {proc.returncode}"
    cls = _BY_CODE.get(proc.returncode, CkptOptError)
    raise cls(message, code=proc.returncode, stderr=proc.stderr, receipt=receipt)


def optimize(
    model,
    ceiling,
    output=None,
    validate: bool = True,
    receipt=None,
    dims: Dims = None,
    **profile_flags,
) -> dict:
    """`ckpt-opt MODEL --ceiling C [-o OUT] [--validate] --receipt R [--dim k=v]... [--flag value]...`;
    returns the receipt. `receipt=None` writes it to a temporary file."""
    with tempfile.TemporaryDirectory(prefix="ckpt-opt-") as tmp:
        receipt_path = os.fspath(receipt) if receipt is not None else os.path.join(tmp, "receipt.json")
        args = [model, "--ceiling", str(ceiling)]
        if output is not None:
            args += ["-o", output]
        if validate:
            args.append("--validate")
        args += ["--receipt", receipt_path] + dim_args(dims) + flag_args(profile_flags)
        _run(args, receipt_path)
        with open(receipt_path) as f:
            return json.load(f)


def frontier(model, out=None, dims: Dims = None, **flags) -> dict:
    """`ckpt-opt frontier MODEL --out DIR ...`; returns DIR/frontier.json (DIR temporary unless `out`)."""
    with tempfile.TemporaryDirectory(prefix="ckpt-opt-frontier-") as tmp:
        folder = os.fspath(out) if out is not None else tmp
        _run(["frontier", model, "--out", folder] + dim_args(dims) + flag_args(flags))
        with open(os.path.join(folder, "frontier.json")) as f:
            return json.load(f)


def capacity(model, ceiling, dims: Dims = None, **flags) -> dict:
    """`ckpt-opt capacity MODEL --ceiling C --json --dim NAME ...`; returns the JSON it prints."""
    proc = _run(["capacity", model, "--ceiling", str(ceiling), "--json"] + dim_args(dims) + flag_args(flags))
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise CkptOptError(f"ckpt-opt capacity printed no JSON ({e}): {proc.stdout[:200]!r}") from None


def buckets(model, trace, ceiling, out, dims: Dims = None, **flags) -> dict:
    """`ckpt-opt buckets MODEL --trace T --ceiling C --out DIR ...`; returns DIR/buckets.json with the
    deployable manifest (DIR/manifest.json) under "manifest". `model=None` with `manifest=PATH`."""
    args = ["buckets"] + ([model] if model is not None else [])
    args += ["--trace", trace, "--ceiling", str(ceiling), "--out", out] + dim_args(dims) + flag_args(flags)
    _run(args)
    with open(os.path.join(os.fspath(out), "buckets.json")) as f:
        report = json.load(f)
    with open(os.path.join(os.fspath(out), "manifest.json")) as f:
        report["manifest"] = json.load(f)
    return report
