"""Checking that the registered CPU env arena enforces its cap, after a session was created on it.

ORT 1.31.1's capped BFC arena counts what session load takes (prepacked weights) against
`max_mem` by subtracting from it in an unsigned size: when load takes more than the cap, the
subtraction wraps and every later allocation is allowed, so the session runs uncapped and
nothing says so. A `max_mem` below 256 B rounds to 0, which ORT reads as "no cap", the same way.

The probe is a one-node model (`ConstantOfShape` of a uint8 tensor larger than the cap) created
on the same registered arena and run once. A capped arena refuses the request before allocating
anything ("Available memory of N is smaller than requested bytes"), so the probe leaves the arena
as it was (measured: a model's need is the same to the byte with and without the probe) and tells
how much of the cap is already taken. An uncapped arena passes the request on to malloc, which
refuses a petabyte, with another message: the probe reads that as "not capped".
"""

from __future__ import annotations

import re
from typing import Optional

import numpy as np

_UINT8, _INT64, _TENSOR_ATTR = 2, 7, 4


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _probe_model() -> bytes:
    """ModelProto (ir 8, opset 17): y = ConstantOfShape(n) with a uint8 zero, n: int64[1]."""
    value = _int(1, 1) + _int(2, _UINT8) + _len(9, b"\x00")  # TensorProto dims, data_type, raw_data
    attr = _len(1, b"value") + _len(5, value) + _int(20, _TENSOR_ATTR)
    node = _len(1, b"n") + _len(2, b"y") + _len(4, b"ConstantOfShape") + _len(5, attr)
    shape_n = _len(1, _int(1, 1))  # TensorShapeProto{dim{dim_value: 1}}
    type_n = _len(1, _int(1, _INT64) + _len(2, shape_n))
    shape_y = _len(1, _len(2, b"bytes"))  # TensorShapeProto{dim{dim_param: "bytes"}}
    type_y = _len(1, _int(1, _UINT8) + _len(2, shape_y))
    graph = (
        _len(1, node)
        + _len(2, b"ckpt_opt_arena_probe")
        + _len(11, _len(1, b"n") + _len(2, type_n))
        + _len(12, _len(1, b"y") + _len(2, type_y))
    )
    opset = _len(1, b"") + _int(2, 17)
    return _int(1, 8) + _len(7, graph) + _len(8, opset)


PROBE_MODEL = _probe_model()

_AVAILABLE = re.compile(r"Available memory of (\d+) is smaller than requested bytes of (\d+)")


def probe_env_arena(ort, cap_bytes: int) -> Optional[int]:
    """Bytes of the cap already taken from the registered env arena, or None when the arena does not
    enforce `cap_bytes`. Call it right after creating the session, with the arena still registered."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.use_env_allocators", "1")
    sess = ort.InferenceSession(PROBE_MODEL, so, providers=["CPUExecutionProvider"])
    request = max(1 << 50, 2 * int(cap_bytes))
    try:
        sess.run(None, {"n": np.array([request], dtype=np.int64)})
    except Exception as e:  # ORT raises its own Fail class
        m = _AVAILABLE.search(str(e))
        if m:
            return (int(cap_bytes) // 256 * 256) - int(m.group(1))
        return None
    return None
