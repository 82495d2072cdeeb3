"""Runs a model on ONNX Runtime's Python package (onnxruntime-training 1.19.2: the only
runtime that has the training ops of `generate_artifacts`' `training_model.onnx`) under a
configured CPU arena, for ckpt-opt's Rust side (runtime/src/training.rs).

    python runner.py serve            # one JSON request per stdin line, one JSON reply per line
    python runner.py run REQUEST.json # one request, the reply on stdout

A request:
    {"model": PATH, "inputs": {NAME: NPY_PATH}, "outputs_dir": DIR or null,
     "opt_level": "disable"|"basic"|"extended"|"all", "memory_pattern": bool,
     "intra_op_num_threads": N or null, "config_entries": [[KEY, VALUE], ...],
     "arena": null or {"max_mem": N or null, "arena_extend_strategy": 0|1,
                       "initial_chunk_size_bytes": N or null,
                       "max_dead_bytes_per_chunk": N or null},
     "steps": N (0: load only), "hold_outputs": bool, "bind_outputs": bool,
     "updated_inputs": [NAME, ...]}

With `bind_outputs`, every output is bound (IOBinding) to a numpy buffer allocated once
outside the arena, which ORT writes in place: the arena never holds an output.

With `arena`, the session allocates from an environment CPU arena with that `OrtArenaCfg`
(`create_and_register_allocator` + `session.use_env_allocators=1`); `max_mem` caps it.
A reply:
    {"ok": true, "ran": bool, "out_of_memory": str or null, "outputs": [[NAME, NPY_PATH]],
     "step_ms": [...], "ort_version": "1.19.2"}
    {"ok": false, "error": str, "ort_version": ...}
`ran` is false when an allocation failed under the cap (`out_of_memory` says where). The
outputs are the first step's (a validation compares the first run of a fresh session),
followed by the `updated_inputs` (buffers the model writes in place, such as
InPlaceAccumulatorV2's gradient buffers) as they are after it, named "<input> (after the step)".

Every request runs in a forked child: an environment allocator can be registered once per
process, so each trial gets a fresh environment and arena statistics, and the parent pays
the import of onnxruntime and numpy once.
"""

import json
import os
import sys
import time
import traceback

import numpy as np
import onnxruntime as ort

LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

OOM_MARKERS = ("Failed to allocate", "Available memory")


def run_request(req):
    arena = req.get("arena")
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.graph_optimization_level = LEVELS[req.get("opt_level", "disable")]
    so.enable_mem_pattern = bool(req.get("memory_pattern", False))
    if req.get("intra_op_num_threads") is not None:
        so.intra_op_num_threads = int(req["intra_op_num_threads"])
    for key, value in req.get("config_entries", []):
        so.add_session_config_entry(key, value)
    if arena is not None:
        cfg = {k: int(v) for k, v in arena.items() if v is not None}
        info = ort.OrtMemoryInfo(
            "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
        )
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(cfg))
        so.add_session_config_entry("session.use_env_allocators", "1")
    reply = {"ok": True, "ran": True, "out_of_memory": None, "outputs": [], "step_ms": []}
    try:
        sess = ort.InferenceSession(req["model"], so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
        if arena is not None and any(m in str(e) for m in OOM_MARKERS):
            reply.update(ran=False, out_of_memory=f"loading: {e}")
            return reply
        raise
    feeds = {name: np.load(path) for name, path in req.get("inputs", {}).items()}
    names = [o.name for o in sess.get_outputs()]
    run = bound_run(sess, feeds) if req.get("bind_outputs") else (lambda: sess.run(None, feeds))
    held = None
    for step in range(int(req.get("steps", 1))):
        start = time.perf_counter()
        try:
            outs = run()
        except Exception as e:  # noqa: BLE001
            if arena is not None and any(m in str(e) for m in OOM_MARKERS):
                reply.update(ran=False, out_of_memory=f"step {step + 1}: {e}")
                return reply
            raise
        reply["step_ms"].append((time.perf_counter() - start) * 1e3)
        if step == 0 and req.get("outputs_dir"):
            for i, (name, value) in enumerate(zip(names, outs)):
                path = os.path.join(req["outputs_dir"], f"out{i}.npy")
                np.save(path, np.array(value, copy=True))
                reply["outputs"].append([name, path])
            for j, name in enumerate(req.get("updated_inputs", [])):
                path = os.path.join(req["outputs_dir"], f"updated{j}.npy")
                np.save(path, np.array(feeds[name], copy=True))
                reply["outputs"].append([f"{name} (after the step)", path])
        # The previous outputs are dropped only now, after the step returned its own.
        held = outs if req.get("hold_outputs") else None
        del outs
    del held
    return reply


DTYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
}


def bound_run(sess, feeds):
    """A step function that runs with every output bound to a buffer allocated once here;
    symbolic output dims take the size of the input dim of the same name."""
    dims = {}
    for i in sess.get_inputs():
        if i.name in feeds:
            for d, n in zip(i.shape, feeds[i.name].shape):
                if isinstance(d, str):
                    dims[d] = n
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_cpu_input(name, value)
    buffers = []
    for o in sess.get_outputs():
        shape = [d if isinstance(d, int) else dims[d] for d in o.shape]
        buf = np.empty(shape, dtype=DTYPES[o.type])
        binding.bind_output(o.name, "cpu", 0, buf.dtype, list(buf.shape), buf.ctypes.data)
        buffers.append(buf)

    def run():
        sess.run_with_iobinding(binding)
        return buffers

    return run


def child(req, fd):
    try:
        reply = run_request(req)
    except Exception as e:  # noqa: BLE001
        reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
    reply["ort_version"] = ort.__version__
    with os.fdopen(fd, "w") as w:
        w.write(json.dumps(reply))
    os._exit(0)


def forked(req):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(req, w)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    if not text:
        code = os.waitstatus_to_exitcode(status)
        return {"ok": False, "error": f"the runner's child died (exit status {code})",
                "ort_version": ort.__version__}
    return json.loads(text)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        print(json.dumps({"ready": True, "ort_version": ort.__version__}), flush=True)
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(forked(json.loads(line))), flush=True)
    elif len(sys.argv) == 3 and sys.argv[1] == "run":
        with open(sys.argv[2]) as f:
            print(json.dumps(forked(json.load(f))))
    else:
        sys.exit("usage: runner.py serve | runner.py run REQUEST.json")


if __name__ == "__main__":
    main()
