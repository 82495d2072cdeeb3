"""The pipeline API against a fake `ckpt-opt` (CKPT_OPT_BIN), so no Rust build is needed."""

import json
import os
import sys

import pytest

from ckpt_opt import (
    CeilingCannotBeMet,
    CkptOptError,
    CouldNotValidate,
    InvalidInput,
    ValidationFailed,
    buckets,
    capacity,
    frontier,
    optimize,
)
from ckpt_opt.cli import dim_args, flag_args

FAKE = r'''#!{python}
"""Records its argv; exits with $FAKE_EXIT after writing what the real binary writes."""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "w") as f:
    json.dump(args, f)
code = int(os.environ.get("FAKE_EXIT", "0"))
def after(flag):
    return args[args.index(flag) + 1] if flag in args else None
receipt = after("--receipt")
if receipt and code in (0, 2, 3):
    with open(receipt, "w") as f:
        json.dump({{"exit": code, "ceiling_bytes": 1000}}, f)
out = after("--out")
if out and code == 0:
    os.makedirs(out, exist_ok=True)
    for name in ("frontier.json", "buckets.json", "manifest.json"):
        with open(os.path.join(out, name), "w") as f:
            json.dump({{"file": name}}, f)
if "--json" in args and code == 0:
    print(json.dumps({{"dim": "batch", "largest": 12}}))
if code:
    print("error: exit " + str(code) + " from the fake", file=sys.stderr)
sys.exit(code)
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    path = tmp_path / "ckpt-opt"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    log = tmp_path / "argv.json"
    monkeypatch.setenv("CKPT_OPT_BIN", str(path))
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.delenv("FAKE_EXIT", raising=False)
    return lambda: json.loads(log.read_text())


def test_optimize_passes_flags_and_returns_the_receipt(fake, tmp_path):
    r = optimize(
        "m.onnx", "90%", output=tmp_path / "o.onnx", dims={"seq": 32, "batch": 8},
        mem_pattern="off", caller_outputs="held", seed_random_ops=True, locate_peak=False, reserve=None,
    )
    assert r == {"exit": 0, "ceiling_bytes": 1000}
    argv = fake()
    receipt = argv[argv.index("--receipt") + 1]
    assert argv == [
        "m.onnx", "--ceiling", "90%", "-o", str(tmp_path / "o.onnx"), "--validate", "--receipt", receipt,
        "--dim", "seq=32", "--dim", "batch=8", "--mem-pattern", "off", "--caller-outputs", "held",
        "--seed-random-ops",
    ]
    assert not os.path.exists(receipt)  # a temporary receipt is removed
    optimize("m.onnx", 5000, validate=False, receipt=tmp_path / "r.json")
    assert "--validate" not in fake() and json.loads((tmp_path / "r.json").read_text())["exit"] == 0


@pytest.mark.parametrize(
    "code,cls,receipt",
    [(1, InvalidInput, None), (2, CeilingCannotBeMet, {"exit": 2, "ceiling_bytes": 1000}),
     (3, ValidationFailed, {"exit": 3, "ceiling_bytes": 1000}), (4, CouldNotValidate, None), (101, CkptOptError, None)],
)
def test_exit_codes_map_to_exceptions(fake, monkeypatch, code, cls, receipt):
    monkeypatch.setenv("FAKE_EXIT", str(code))
    with pytest.raises(cls) as e:
        optimize("m.onnx", "1GiB")
    assert type(e.value) is cls and e.value.code == code
    assert e.value.receipt == receipt
    assert f"exit {code} from the fake" in e.value.message and e.value.stderr


def test_report_commands(fake, tmp_path):
    assert frontier("m.onnx", points=4) == {"file": "frontier.json"}
    argv = fake()
    assert argv[:3] == ["frontier", "m.onnx", "--out"] and argv[4:] == ["--points", "4"]
    assert capacity("m.onnx", "2GiB", dims={"batch": None, "seq": 64}) == {"dim": "batch", "largest": 12}
    assert fake() == ["capacity", "m.onnx", "--ceiling", "2GiB", "--json", "--dim", "batch", "--dim", "seq=64"]
    got = buckets("sym.onnx", "trace.csv", 3300000, tmp_path / "b", dim_map="seq=max_seq_len", validate=True)
    assert got == {"file": "buckets.json", "manifest": {"file": "manifest.json"}}
    assert fake() == [
        "buckets", "sym.onnx", "--trace", "trace.csv", "--ceiling", "3300000", "--out", str(tmp_path / "b"),
        "--dim-map", "seq=max_seq_len", "--validate",
    ]


def test_a_missing_binary_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("CKPT_OPT_BIN", str(tmp_path / "nope"))
    with pytest.raises(CkptOptError, match="CKPT_OPT_BIN=.*nope: no such file"):
        optimize("m.onnx", "1GiB")
    monkeypatch.delenv("CKPT_OPT_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CkptOptError, match="set CKPT_OPT_BIN"):
        capacity("m.onnx", "1GiB")


def test_flag_mapping():
    assert flag_args({"ort_opt_level": "all", "validate": True, "quiet": False, "x": None, "ceilings": ["90%", "80%"]}) == [
        "--ort-opt-level", "all", "--validate", "--ceilings", "90%", "--ceilings", "80%",
    ]
    assert dim_args(["seq=4", "batch"]) == ["--dim", "seq=4", "--dim", "batch"]
    assert dim_args(None) == []
