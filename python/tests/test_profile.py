"""The metadata reader against models written by `onnx`, and the profile it yields."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from conftest import BASE_PROFILE, MLP, matmul_weight_model, mlp_model, stamp
from ckpt_opt import InvalidProfile, MalformedModel, NoProfile, cuda_provider_options, read_metadata, read_profile
from ckpt_opt.arena_probe import PROBE_MODEL
from ckpt_opt.profile import MAX_INITIAL_CHUNK, arena_cfg_entries


def props_of(path):
    return {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}


def test_reader_matches_onnx_on_the_fixtures():
    fixtures = os.path.join(os.path.dirname(MLP))
    names = sorted(f for f in os.listdir(fixtures) if f.endswith(".onnx"))
    assert len(names) >= 10
    for name in names:
        path = os.path.join(fixtures, name)
        assert read_metadata(path) == props_of(path), name


def test_reader_matches_onnx_with_unicode_empty_values_and_a_large_graph(tmp_path):
    m = matmul_weight_model(1024)  # a 4 MiB initializer before and after the entries
    m.graph.initializer.append(numpy_helper.from_array(np.zeros(1 << 20, np.float32), "big"))
    path = stamp(m, str(tmp_path / "u.onnx"), **{"ckpt-opt.version": "0.9.0 — β", "empty": "", "": "no key"})
    assert os.path.getsize(path) > 8 << 20
    got = read_metadata(path)
    assert got == props_of(path)
    assert got["ckpt-opt.version"] == "0.9.0 — β" and got["empty"] == "" and got[""] == "no key"


def test_a_key_recorded_twice_takes_its_last_value(tmp_path):
    m = mlp_model()
    for v in ("first", "last"):
        e = m.metadata_props.add()
        e.key, e.value = "ckpt-opt.version", v
    onnx.save(m, str(tmp_path / "d.onnx"))
    assert read_metadata(str(tmp_path / "d.onnx"))["ckpt-opt.version"] == "last"


def test_truncated_and_empty_files(tmp_path):
    data = open(MLP, "rb").read()
    (tmp_path / "t.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(MalformedModel, match="t.onnx"):
        read_metadata(str(tmp_path / "t.onnx"))
    (tmp_path / "e.onnx").write_bytes(b"")
    assert read_metadata(str(tmp_path / "e.onnx")) == {}
    (tmp_path / "g.onnx").write_bytes(b"\x0b\x00")  # wire type 3 (a group): not a ModelProto
    with pytest.raises(MalformedModel, match="wire type 3"):
        read_metadata(str(tmp_path / "g.onnx"))


def test_profile_reads_every_recorded_setting(tmp_path):
    path = stamp(
        mlp_model(), str(tmp_path / "p.onnx"),
        **{"ckpt-opt.arena_cap_bytes": "59648", "ckpt-opt.ceiling_bytes": "68904", "ckpt-opt.caller_bytes": "9000",
           "ckpt-opt.initializer_bytes": "256", "ckpt-opt.version": "0.1.0",
           "ckpt-opt.profile.initial_chunk_size_bytes": "4096", "ckpt-opt.profile.cudnn_conv_algo_search": "EXHAUSTIVE"},
    )
    p = read_profile(path)
    assert (p.arena_cap_bytes, p.ceiling_bytes, p.caller_bytes, p.initializer_bytes) == (59648, 68904, 9000, 256)
    assert (p.graph_optimization_level, p.enable_mem_pattern, p.arena_extend_strategy_code) == ("disable", False, 1)
    assert (p.steps, p.intra_op_num_threads, p.initial_chunk_size_bytes, p.version) == (3, 1, 4096, "0.1.0")
    assert p.session_config == {"optimization.disable_specified_optimizers": "CommonSubexpressionElimination"}
    assert set(BASE_PROFILE) <= set(p.entries) and "ckpt-opt.arena_cap_bytes" not in p.entries


def test_no_profile_names_the_missing_keys(tmp_path):
    with pytest.raises(NoProfile) as e:
        read_profile(MLP)
    assert e.value.key == "ckpt-opt.profile.graph_optimization_level" and MLP in str(e.value)
    path = stamp(mlp_model(), str(tmp_path / "n.onnx"), **{"ckpt-opt.profile.steps": None})
    with pytest.raises(NoProfile, match=r"`ckpt-opt\.arena_cap_bytes`, `ckpt-opt\.profile\.steps`") as e:
        read_profile(path, also_required=("ckpt-opt.arena_cap_bytes",))
    assert e.value.keys == ["ckpt-opt.arena_cap_bytes", "ckpt-opt.profile.steps"]


@pytest.mark.parametrize(
    "key,value,why",
    [
        ("ckpt-opt.profile.caller_outputs", "kept", "released, held, bound"),
        ("ckpt-opt.profile.steps", "0", "1 to 100"),
        ("ckpt-opt.profile.intra_op_num_threads", "+2", "1 to 1024"),
        ("ckpt-opt.profile.arena_extend_strategy", "kDouble", "kNextPowerOfTwo"),
        ("ckpt-opt.profile.initial_chunk_size_bytes", "arena_budget", "in bytes"),
        ("ckpt-opt.profile.mystery_knob", "1", "unknown profile setting"),
        ("ckpt-opt.arena_cap_bytes", "12MiB", "whole number"),
    ],
)
def test_invalid_values_are_refused_naming_the_key(tmp_path, key, value, why):
    path = stamp(mlp_model(), str(tmp_path / "i.onnx"), **{key: value})
    with pytest.raises(InvalidProfile, match=why) as e:
        read_profile(path)
    assert e.value.key == key and "i.onnx" in str(e.value)


def test_the_ceiling_must_be_the_sum_of_its_parts(tmp_path):
    parts = {"ckpt-opt.arena_cap_bytes": "100", "ckpt-opt.caller_bytes": "20", "ckpt-opt.initializer_bytes": "3"}
    assert read_profile(stamp(mlp_model(), str(tmp_path / "a.onnx"), **parts, **{"ckpt-opt.ceiling_bytes": "123"}))
    with pytest.raises(InvalidProfile, match=r"`ckpt-opt.ceiling_bytes` = `124`: is not .* = 123"):
        read_profile(stamp(mlp_model(), str(tmp_path / "b.onnx"), **parts, **{"ckpt-opt.ceiling_bytes": "124"}))


def test_arena_cfg_clamps_the_first_region_to_a_c_int(tmp_path):
    path = stamp(mlp_model(), str(tmp_path / "c.onnx"), **{"ckpt-opt.profile.initial_chunk_size_bytes": str(3 << 30)})
    entries = arena_cfg_entries(read_profile(path), 4 << 30)
    assert entries == {"max_mem": 4 << 30, "arena_extend_strategy": 1, "initial_chunk_size_bytes": MAX_INITIAL_CHUNK}
    assert MAX_INITIAL_CHUNK == 2147483392
    ort.OrtArenaCfg(entries)  # accepted
    with pytest.raises(Exception):
        ort.OrtArenaCfg({"initial_chunk_size_bytes": MAX_INITIAL_CHUNK + (1 << 8)})  # 2**31 does not fit


def test_cuda_provider_options(tmp_path):
    path = stamp(
        mlp_model(), str(tmp_path / "g.onnx"),
        **{"ckpt-opt.profile.execution_provider": "cuda", "ckpt-opt.arena_cap_bytes": "123456789"},
    )
    p = read_profile(path)
    assert cuda_provider_options(p) == {
        "device_id": 0,
        "gpu_mem_limit": 123456789,
        "arena_extend_strategy": "kSameAsRequested",
        "cudnn_conv_algo_search": "HEURISTIC",
    }
    assert cuda_provider_options(p, arena_cap_bytes=1 << 30, device_id=1)["gpu_mem_limit"] == 1 << 30
    path = stamp(
        mlp_model(), str(tmp_path / "h.onnx"),
        **{"ckpt-opt.profile.arena_extend_strategy": "kNextPowerOfTwo",
           "ckpt-opt.profile.cudnn_conv_algo_search": "EXHAUSTIVE"},
    )
    opts = cuda_provider_options(read_profile(path), arena_cap_bytes=4096)
    assert (opts["arena_extend_strategy"], opts["cudnn_conv_algo_search"]) == ("kNextPowerOfTwo", "EXHAUSTIVE")
    with pytest.raises(NoProfile, match="ckpt-opt.arena_cap_bytes"):
        cuda_provider_options(read_profile(path))


def test_the_hand_written_probe_model_is_valid_onnx():
    m = onnx.load_from_string(PROBE_MODEL)
    onnx.checker.check_model(m, full_check=True)
    assert [n.op_type for n in m.graph.node] == ["ConstantOfShape"]
