"""`python -m ckpt_opt.measure` and `python -m ckpt_opt.run`, as the project's scripts call them."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import mlp_feeds, mlp_model, stamp
from ckpt_opt.feeds import npy_name, random_feeds
from ckpt_opt.measure import arena_need

PYTHON_DIR = os.path.join(os.path.dirname(__file__), "..")


def module(*args):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=120)


def write_feeds(folder, feeds):
    os.makedirs(folder, exist_ok=True)
    for name, value in feeds.items():
        np.save(os.path.join(folder, npy_name(name)), value)


def test_measure_prints_the_need_that_arena_need_returns(tmp_path):
    path = stamp(mlp_model(), str(tmp_path / "m.onnx"), **{"ckpt-opt.arena_cap_bytes": 1 << 20})
    feeds = mlp_feeds()
    write_feeds(tmp_path / "feeds", feeds)
    p = module("ckpt_opt.measure", path, "--feeds", str(tmp_path / "feeds"))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"arena_need_bytes": arena_need(path, feeds), "steps": 3}


def test_run_prints_a_line_per_step_and_a_summary(tmp_path, mlp_need):
    path = stamp(mlp_model(), str(tmp_path / "m.onnx"), **{"ckpt-opt.arena_cap_bytes": mlp_need["released"]})
    p = module("ckpt_opt.run", path, "--steps", "5", "--int-high", "labels=10", "--seed", "3")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines[:5]] == [f"step {i}/5" for i in range(1, 6)]
    assert "loss" in lines[0]
    summary = json.loads(lines[-1])
    assert summary["ok"] and summary["arena_cap_bytes"] == mlp_need["released"] and len(summary["step_ms"]) == 5
    assert summary["caller_outputs"] == "released" and summary["load_reserved_bytes"] == 256

    low = stamp(mlp_model(), str(tmp_path / "low.onnx"), **{"ckpt-opt.arena_cap_bytes": mlp_need["released"] - 256})
    write_feeds(tmp_path / "feeds", mlp_feeds())
    p = module("ckpt_opt.run", low, "--steps", "3", "--feeds", str(tmp_path / "feeds"))
    assert p.returncode == 2
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert not summary["ok"] and summary["node"] and summary["failed_step"] == 1

    p = module("ckpt_opt.run", str(tmp_path / "nothing.onnx"), "--steps", "1")
    assert p.returncode != 0


def test_random_feeds_follow_the_input_specs():
    class Arg:
        def __init__(self, name, type_, shape):
            self.name, self.type, self.shape = name, type_, shape

    specs = [Arg("x", "tensor(float)", ["batch", 3]), Arg("ids", "tensor(int64)", [4]), Arg("m", "tensor(int64)", [2])]
    a = random_feeds(specs, seed=1, int_high={"ids": 7}, dims={"batch": 2})
    b = random_feeds(specs, seed=1, int_high={"ids": 7}, dims={"batch": 2})
    assert a["x"].shape == (2, 3) and a["x"].dtype == np.float32
    np.testing.assert_array_equal(a["x"], b["x"])
    assert a["ids"].dtype == np.int64 and a["ids"].min() >= 0 and a["ids"].max() < 7
    np.testing.assert_array_equal(a["m"], np.zeros(2, np.int64))
    with pytest.raises(Exception, match="--dim batch=VALUE"):
        random_feeds(specs)
    assert npy_name("enc/layer.0:w") == "enc%2Flayer.0:w.npy"
