"""Feeds for the command-line tools: read from a folder of `.npy` files, or generated from the input specs.

A folder holds `NAME.npy` for every input NAME, with `/` in a name written as `%2F`. Generated
feeds: floats standard normal from one seeded generator in input order, integers zero or uniform
in [0, K) for inputs given `int_high[NAME] = K`, bools false. Symbolic dims need `dims[NAME]`.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from .errors import RunnerError
from .session import NUMPY_DTYPES


def npy_name(input_name: str) -> str:
    return input_name.replace("%", "%25").replace("/", "%2F") + ".npy"


def load_feeds(folder: str) -> dict:
    """`{name: array}` for every `.npy` file in `folder` (the Session refuses missing or unknown names)."""
    from urllib.parse import unquote

    if not os.path.isdir(folder):
        raise RunnerError(f"--feeds {folder}: not a folder")
    feeds = {}
    for entry in sorted(os.listdir(folder)):
        if entry.endswith(".npy"):
            feeds[unquote(entry[: -len(".npy")])] = np.load(os.path.join(folder, entry), allow_pickle=False)
    if not feeds:
        raise RunnerError(f"--feeds {folder}: no .npy files")
    return feeds


def random_feeds(inputs, seed: int = 0, int_high: Optional[dict] = None, dims: Optional[dict] = None) -> dict:
    """Generated feeds for `inputs` (see the module doc)."""
    int_high = dict(int_high or {})
    dims = dict(dims or {})
    unknown = [n for n in int_high if n not in {m.name for m in inputs}]
    if unknown:
        raise RunnerError(f"--int-high names no input: {', '.join(unknown)}")
    rng = np.random.default_rng(seed)
    feeds = {}
    for meta in inputs:
        dtype = NUMPY_DTYPES.get(meta.type)
        if dtype is None:
            raise RunnerError(f"input `{meta.name}` is {meta.type}: give it as a .npy file (--feeds)")
        shape = []
        for i, d in enumerate(meta.shape):
            if isinstance(d, int):
                shape.append(d)
            elif isinstance(d, str) and d in dims:
                shape.append(int(dims[d]))
            else:
                raise RunnerError(f"input `{meta.name}` dim {i} (`{d}`) is symbolic: bind it with --dim {d}=VALUE")
        if np.issubdtype(dtype, np.floating):
            feeds[meta.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            feeds[meta.name] = np.zeros(shape, dtype=dtype)
        elif meta.name in int_high:
            feeds[meta.name] = rng.integers(0, int(int_high[meta.name]), size=shape).astype(dtype)
        else:
            feeds[meta.name] = np.zeros(shape, dtype=dtype)
    return feeds


def name_values(pairs, flag: str) -> dict:
    """`["a=3", "b=4"]` -> `{"a": 3, "b": 4}` for a repeatable `--flag NAME=INT`."""
    out = {}
    for p in pairs or []:
        name, sep, value = p.partition("=")
        if not sep or not name or not value.strip().isdigit():
            raise RunnerError(f"{flag} `{p}`: expected NAME=INTEGER")
        out[name] = int(value)
    return out
