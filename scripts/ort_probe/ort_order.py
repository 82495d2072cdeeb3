"""Shared helpers: build ONNX graphs, run them in ONNX Runtime with profiling,
read back the executed node order, and emulate ORT's default order.

Run with an interpreter that has `onnx` and `onnxruntime` (1.31.1), e.g.
/work/tmp/venv-fx/bin/python.
"""
import glob
import json
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def make_session(model_bytes_or_path, level="basic", profile=True, disable_cse=True, optimized_path=None):
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.enable_profiling = profile
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    d = tempfile.mkdtemp(prefix="ortprobe")
    so.profile_file_prefix = os.path.join(d, "prof")
    if disable_cse:
        so.add_session_config_entry("optimization.disable_specified_optimizers",
                                    "CommonSubexpressionElimination")
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(model_bytes_or_path, so, providers=["CPUExecutionProvider"])


def profiled_order(sess, feeds):
    """Run once and return [(node_index, node_name, op_name)] in execution order."""
    sess.run(None, feeds)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    nodes.sort(key=lambda e: e["ts"])
    out = [(int(e["args"]["node_index"]), e["name"][: -len("_kernel_time")], e["args"]["op_name"]) for e in nodes]
    os.remove(path)
    return out


def ort_default_order(nodes, graph_output_names=None):
    """Emulate GraphViewer's DEFAULT order.

    nodes: list (index = ORT node index) of dicts with
      'inputs': list of input tensor names (explicit inputs, '' for missing),
      'outputs': list of output tensor names.
    A node's input nodes = producers of its inputs (graph inputs / initializers have none).
    Leaves = nodes none of whose outputs is consumed by another node (graph outputs do
    not create edges).
    """
    producer = {}
    for i, n in enumerate(nodes):
        for o in n["outputs"]:
            if o:
                producer[o] = i
    in_nodes = [[producer[t] for t in n["inputs"] if t in producer] for n in nodes]
    has_consumer = [False] * len(nodes)
    for i, ins in enumerate(in_nodes):
        for p in ins:
            has_consumer[p] = True
    leaves = [i for i in range(len(nodes)) if not has_consumer[i]]
    # Graph::ReverseDFSFrom(leaves, enter=nullptr, leave=push, comp=index<)
    stack = [(i, False) for i in leaves]
    visited = [False] * len(nodes)
    order = []
    while stack:
        n, leave = stack.pop()
        if leave:
            order.append(n)
            continue
        if visited[n]:
            continue
        visited[n] = True
        stack.append((n, True))
        for p in sorted(in_nodes[n]):
            if not visited[p]:
                stack.append((p, False))
    return order


def ort_default_order_sparse(nodes):
    """Same as ort_default_order, for a node table with holes (None = removed node index),
    as after graph transformers ran: removed nodes leave holes, new nodes get fresh indices."""
    dense = [n if n is not None else {"inputs": [], "outputs": []} for n in nodes]
    present = [n is not None for n in nodes]
    order = ort_default_order(dense)
    return [i for i in order if present[i]]
