"""Shared test helpers: models built with `onnx`, profile stamping, and fresh processes.

Every Session registers the process-wide env arena, so each test that creates one does it in a
forked child (`in_fresh_process`); the parent only builds models and compares results.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(REPO, "tests", "fixtures", "mlp_d0_aot.onnx")

BASE_PROFILE = {
    "ckpt-opt.profile.graph_optimization_level": "disable",
    "ckpt-opt.profile.enable_mem_pattern": "false",
    "ckpt-opt.profile.arena_extend_strategy": "kSameAsRequested",
    "ckpt-opt.profile.execution_provider": "cpu",
    "ckpt-opt.profile.caller_outputs": "released",
    "ckpt-opt.profile.intra_op_num_threads": "1",
    "ckpt-opt.profile.steps": "3",
    "ckpt-opt.profile.ort_version": ort.__version__,
    "ckpt-opt.session_config.optimization.disable_specified_optimizers": "CommonSubexpressionElimination",
}


def stamp(model: onnx.ModelProto, dst: str, **overrides) -> str:
    """Writes `model` to `dst` with BASE_PROFILE and `overrides` (key with `.` as `__`; None drops a key)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    props = dict(BASE_PROFILE)
    for k, v in overrides.items():
        props[k.replace("__", ".")] = v
    del m.metadata_props[:]
    for k, v in props.items():
        if v is not None:
            e = m.metadata_props.add()
            e.key, e.value = k, str(v)
    onnx.save(m, dst)
    return dst


def mlp_model() -> onnx.ModelProto:
    return onnx.load(MLP)


def relu_add_model(n: int = 1 << 16) -> onnx.ModelProto:
    """y = Relu(x) + x over n floats: one intermediate and one output of n*4 bytes each."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "x"], ["y"], name="add")],
        "relu_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def matmul_weight_model(n: int = 256) -> onnx.ModelProto:
    """y = x @ W with W an initializer, which ORT prepacks into the arena when the session loads."""
    w = numpy_helper.from_array(np.ones((n, n), np.float32), "W")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        "matmul_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def mlp_feeds(seed: int = 0) -> dict:
    """Feeds for the MLP fixture: standard normal weights and batch, labels in [0, 10)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in onnx.load(MLP).graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[i.name] = rng.integers(0, 10, size=shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _child(fn, args, conn):
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as e:
        try:
            conn.send(("raised", e))
        except Exception:
            conn.send(("raised", RuntimeError(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")))
    finally:
        conn.close()


def in_fresh_process(fn, *args):
    """fn(*args) in a forked process; returns its result or raises its exception here."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(fn, args, child))
    p.start()
    child.close()
    try:
        outcome, value = parent.recv()
    except EOFError:
        p.join()
        raise RuntimeError(f"the child died with exit code {p.exitcode}") from None
    p.join()
    if outcome == "raised":
        raise value
    return value


def plain_run(path: str, feeds: dict) -> dict:
    """A plain InferenceSession run (level disable, one thread, no env arena), in a fresh process."""

    def go():
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = 1
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))

    return in_fresh_process(go)


# The profile each caller_outputs mode is offered with: held outputs only in one region of the arena
# (kNextPowerOfTwo from a first region at least the cap). With held outputs the need still grows for a
# few steps (`test_held_outputs_need_more_than_three_steps_show`), so that profile records 20 steps.
MODE_PROFILE = {
    "released": {"ckpt-opt.profile.caller_outputs": "released"},
    "bound": {"ckpt-opt.profile.caller_outputs": "bound"},
    "held": {
        "ckpt-opt.profile.caller_outputs": "held",
        "ckpt-opt.profile.arena_extend_strategy": "kNextPowerOfTwo",
        "ckpt-opt.profile.initial_chunk_size_bytes": str(1 << 20),
        "ckpt-opt.profile.steps": "20",
    },
}


@pytest.fixture(scope="session")
def mlp_need(tmp_path_factory) -> dict:
    """The MLP's arena need under each caller_outputs mode (its MODE_PROFILE), bisected once per test session."""
    from ckpt_opt.measure import arena_need

    d = tmp_path_factory.mktemp("need")
    feeds = mlp_feeds()
    out = {}
    for mode, profile in MODE_PROFILE.items():
        path = stamp(mlp_model(), str(d / f"mlp_{mode}.onnx"), **profile)
        out[mode] = arena_need(path, feeds, upper_bytes=1 << 20)
    return out
