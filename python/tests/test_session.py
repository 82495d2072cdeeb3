"""The runner on ORT's CPU provider: the recorded profile, the cap, output ownership, several sessions.

Every Session is created in a fresh forked process (`in_fresh_process`): the env arena is process-wide.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import (
    MODE_PROFILE,
    in_fresh_process,
    matmul_weight_model,
    mlp_feeds,
    mlp_model,
    plain_run,
    relu_add_model,
    stamp,
)
from ckpt_opt import (
    CeilingExceeded,
    InvalidProfile,
    NoProfile,
    OrtVersionMismatch,
    ProviderMismatch,
    RunnerError,
    Session,
)
from ckpt_opt.measure import arena_need

CAP = "ckpt-opt.arena_cap_bytes"
MODE = "ckpt-opt.profile.caller_outputs"


def loop(path, feeds, steps=20, **kw):
    """The caller's loop: `out` is held into the next step."""
    s = Session(path, **kw)
    for _ in range(steps):
        out = s.run(feeds)
    return {k: v.copy() for k, v in out.items()}, s.steps_run, s.load_reserved_bytes


def test_version_mismatch_names_file_and_key(tmp_path):
    path = stamp(mlp_model(), str(tmp_path / "v.onnx"), **{CAP: "1000000", "ckpt-opt.profile.ort_version": "1.19.2"})
    with pytest.raises(OrtVersionMismatch) as e:
        Session(path)
    assert "ckpt-opt.profile.ort_version" in str(e.value) and "v.onnx" in str(e.value)
    assert (e.value.recorded, e.value.installed) == ("1.19.2", ort.__version__)


def test_a_model_without_the_cap_names_the_key(tmp_path):
    path = stamp(mlp_model(), str(tmp_path / "n.onnx"))
    with pytest.raises(NoProfile) as e:
        Session(path)
    assert e.value.key == CAP and "n.onnx" in str(e.value)


def test_a_cap_below_256_bytes_is_refused(tmp_path):
    for cap in ("0", "255"):
        path = stamp(relu_add_model(), str(tmp_path / "r.onnx"), **{CAP: cap})
        with pytest.raises(InvalidProfile, match="a cap below 256 B holds nothing"):
            Session(path)

    def raw(cap):  # why: ORT reads a max_mem of 0 as no cap, and runs a 256 KiB graph in it
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg({"max_mem": cap, "arena_extend_strategy": 1}))
        so = ort.SessionOptions()
        so.add_session_config_entry("session.use_env_allocators", "1")
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return s.run(None, {"x": np.ones(1 << 16, np.float32)})[0].shape

    assert in_fresh_process(raw, 0) == (1 << 16,)


@pytest.mark.parametrize("mode", ["released", "held", "bound"])
def test_twenty_steps_run_under_the_measured_need_and_not_256_bytes_below(tmp_path, mlp_need, mode):
    need = mlp_need[mode]
    assert need % 256 == 0
    feeds = mlp_feeds()
    path = stamp(mlp_model(), str(tmp_path / "m.onnx"), **{CAP: need, **MODE_PROFILE[mode]})
    out, steps, load = in_fresh_process(loop, path, feeds)
    assert steps == 20 and load == 256
    ref = plain_run(path, feeds)
    for name, value in ref.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-6, atol=1e-7, err_msg=name)

    path = stamp(mlp_model(), str(tmp_path / "low.onnx"), **{CAP: need - 256, **MODE_PROFILE[mode]})
    with pytest.raises(CeilingExceeded) as e:
        in_fresh_process(loop, path, feeds)
    nodes = {n.name for n in mlp_model().graph.node}
    assert e.value.node in nodes and e.value.node in str(e.value)
    recorded_steps = int(MODE_PROFILE[mode].get("ckpt-opt.profile.steps", "3"))
    assert e.value.cap_bytes == need - 256 and 1 <= e.value.step <= recorded_steps
    assert "low.onnx" in str(e.value) and CAP in str(e.value)


def test_held_outputs_need_more_than_three_steps_show(tmp_path):
    """Measured: with the previous step's outputs held, the arena's free chunks settle only after a
    few steps, so the need of 3 steps does not bound a longer loop (released outputs settle at once)."""
    feeds = mlp_feeds()
    held = stamp(mlp_model(), str(tmp_path / "h.onnx"), **MODE_PROFILE["held"])
    released = stamp(mlp_model(), str(tmp_path / "r.onnx"), **MODE_PROFILE["released"])
    held_3, held_20 = (arena_need(held, feeds, steps=n, upper_bytes=1 << 20) for n in (3, 20))
    assert held_3 < held_20
    assert arena_need(released, feeds, steps=3, upper_bytes=1 << 20) == arena_need(
        released, feeds, steps=20, upper_bytes=1 << 20
    )


def test_the_needs_of_the_three_modes(mlp_need):
    # bound outputs take nothing from the arena; held ones add the previous step's outputs
    assert mlp_need["bound"] < mlp_need["released"] < mlp_need["held"]


@pytest.mark.parametrize("mode", ["released", "held", "bound"])
def test_outputs_are_the_same_runner_buffers_each_step(tmp_path, mode):
    path = stamp(mlp_model(), str(tmp_path / "b.onnx"), **{CAP: 1 << 20, MODE: mode})
    f1, f2 = mlp_feeds(1), mlp_feeds(2)

    def go():
        s = Session(path)
        first = s.run(f1)
        loss1 = first["loss"].copy()
        second = s.run(f2)
        return all(first[k] is second[k] for k in first), loss1, first["loss"].copy(), second

    same, loss1, first_after, second = in_fresh_process(go)
    assert same  # overwritten by the next step, like .grad
    np.testing.assert_array_equal(first_after, second["loss"])
    ref1, ref2 = plain_run(path, f1), plain_run(path, f2)
    np.testing.assert_allclose(loss1, ref1["loss"], rtol=1e-6)
    for name, value in ref2.items():
        np.testing.assert_allclose(second[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


def test_bound_output_is_written_in_place(tmp_path):
    """Relu -> Add over 64 Ki floats (256 KiB): bound, only the Relu result is in the arena."""
    x = {"x": np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32)}
    need = {}
    for mode in ("released", "bound", "held"):
        path = stamp(relu_add_model(), str(tmp_path / f"{mode}.onnx"), **{MODE: mode})
        need[mode] = arena_need(path, x, upper_bytes=1 << 21)
    assert need == {"bound": 262144, "released": 524288, "held": 786432}

    path = stamp(relu_add_model(), str(tmp_path / "bound.onnx"), **{MODE: "bound", CAP: 262144})

    def go():
        s = Session(path)
        y = np.empty(1 << 16, np.float32)
        ptr = y.ctypes.data
        out = s.run_bound(x, {"y": y})
        return out["y"] is y and y.ctypes.data == ptr, y, s.run(x)["y"]

    same, y, y_run = in_fresh_process(go)
    assert same
    expected = np.maximum(x["x"], 0) + x["x"]
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(y_run, expected)


def test_run_bound_checks_its_buffers(tmp_path):
    path = stamp(relu_add_model(), str(tmp_path / "r.onnx"), **{CAP: 1 << 20})
    x = {"x": np.ones(1 << 16, np.float32)}

    def go(outputs):
        return Session(path).run_bound(x, outputs)

    with pytest.raises(RunnerError, match=r"missing \['y'\]"):
        in_fresh_process(go, {})
    with pytest.raises(RunnerError, match="`y` needs a writeable C-contiguous numpy array of float32"):
        in_fresh_process(go, {"y": np.empty(1 << 16, np.float64)})


def test_feeds_must_name_every_input_with_its_dtype(tmp_path):
    path = stamp(mlp_model(), str(tmp_path / "f.onnx"), **{CAP: 1 << 20})
    feeds = mlp_feeds()

    def go(f):
        return Session(path).run(f)

    partial = {k: v for k, v in feeds.items() if k != "labels"}
    with pytest.raises(RunnerError, match=r"missing \['labels'\]"):
        in_fresh_process(go, partial)
    with pytest.raises(RunnerError, match="input `labels` is int32, the model takes int64"):
        in_fresh_process(go, {**feeds, "labels": feeds["labels"].astype(np.int32)})


def symbolic_model(out_dim: str) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "sym",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [out_dim, 4])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_bound_outputs_resolve_symbolic_dims_from_the_inputs(tmp_path):
    ok = stamp(symbolic_model("batch"), str(tmp_path / "ok.onnx"), **{CAP: 1 << 20, MODE: "bound"})
    bad = stamp(symbolic_model("rows"), str(tmp_path / "bad.onnx"), **{CAP: 1 << 20, MODE: "bound"})
    x = np.arange(-12, 12, dtype=np.float32).reshape(6, 4)

    def go(path):
        return Session(path).run({"x": x})["y"]

    np.testing.assert_array_equal(in_fresh_process(go, ok), np.maximum(x, 0))
    with pytest.raises(RunnerError, match=r"output `y` dim 0 \(`rows`\) is not a dim of any input"):
        in_fresh_process(go, bad)


def test_a_cap_below_what_loading_takes_is_refused_not_run_uncapped(tmp_path):
    """ORT prepacks MatMul's constant weight (256 KiB) into the arena at load; under a smaller cap its
    count of bytes left wraps around, and a plain session runs with no cap at all."""
    path = stamp(matmul_weight_model(256), str(tmp_path / "w.onnx"), **{CAP: 4096})
    x = {"x": np.ones((256, 256), np.float32)}

    def raw():
        info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg({"max_mem": 4096, "arena_extend_strategy": 1}))
        so = ort.SessionOptions()
        so.add_session_config_entry("session.use_env_allocators", "1")
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        return s.run(None, x)[0].nbytes  # a 256 KiB output under a 4 KiB cap

    assert in_fresh_process(raw) == 262144
    with pytest.raises(CeilingExceeded, match="enforces no cap") as e:
        in_fresh_process(loop, path, x, 1)
    assert e.value.step == 0

    need = arena_need(path, x, steps=3, upper_bytes=1 << 21)
    path = stamp(matmul_weight_model(256), str(tmp_path / "w2.onnx"), **{CAP: need})
    _, steps, load = in_fresh_process(loop, path, x, 3)
    assert steps == 3 and load >= 262144 and need > load


def test_each_session_keeps_its_own_arena(tmp_path, mlp_need):
    """A second Session registers its own arena; the first keeps the one it was created on."""
    need = mlp_need["released"]
    path = stamp(mlp_model(), str(tmp_path / "s.onnx"))
    feeds = mlp_feeds()

    def steps(s, n=3):
        try:
            for _ in range(n):
                s.run(feeds)
            return "ok"
        except CeilingExceeded:
            return "ceiling"

    def fits_first():
        a = Session(path, arena_cap_bytes=need)
        b = Session(path, arena_cap_bytes=need - 256)
        c = Session(path, arena_cap_bytes=need)
        interleaved = []
        for _ in range(10):
            interleaved += [steps(a, 1), steps(c, 1)]
        return steps(a), steps(b), steps(a), steps(c), set(interleaved)

    assert in_fresh_process(fits_first) == ("ok", "ceiling", "ok", "ok", {"ok"})

    def small_first():
        a = Session(path, arena_cap_bytes=need - 256)
        b = Session(path, arena_cap_bytes=1 << 20)
        return steps(a), steps(b), steps(a)

    assert in_fresh_process(small_first) == ("ceiling", "ok", "ceiling")


def test_provider_mismatch_is_never_a_fallback(tmp_path):
    cpu = stamp(mlp_model(), str(tmp_path / "cpu.onnx"), **{CAP: 1 << 20})
    with pytest.raises(ProviderMismatch, match="CUDAExecutionProvider was requested") as e:
        Session(cpu, providers=["CUDAExecutionProvider"])
    assert "ckpt-opt.profile.execution_provider" in str(e.value) and "cpu.onnx" in str(e.value)
    cuda = stamp(mlp_model(), str(tmp_path / "cuda.onnx"), **{CAP: 1 << 20, "ckpt-opt.profile.execution_provider": "cuda"})
    with pytest.raises(ProviderMismatch, match="gpu_mem_limit=1 differs"):
        Session(cuda, providers=[("CUDAExecutionProvider", {"gpu_mem_limit": 1})])
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here: the no-CUDA refusal is not reachable")
    with pytest.raises(ProviderMismatch, match="CUDAExecutionProvider is not available"):
        Session(cuda)
