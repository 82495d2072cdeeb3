//! Helpers shared by the op-registry tests: build, import, infer, and print one type.
#![allow(dead_code)]

use std::path::Path;

use ckpt_ir::ops::{infer, InferError, Types};
use ckpt_ir::{import_model, onnx, Bindings, Graph, NodeId};

pub fn graph(m: onnx::ModelProto) -> Graph {
    import_model(m, Path::new("test.onnx"), None).expect("model imports")
}

pub fn run(m: onnx::ModelProto) -> (Graph, Types) {
    let g = graph(m);
    let t = infer(&g).unwrap_or_else(|e| panic!("inference failed: {e}"));
    (g, t)
}

pub fn try_run(m: onnx::ModelProto) -> Result<Types, InferError> {
    infer(&graph(m))
}

/// `dtype[d0,d1,…]` of a tensor.
pub fn ty(g: &Graph, t: &Types, name: &str) -> String {
    let id = g
        .tensor_id(name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    let tt = t.get(id).unwrap_or_else(|| panic!("{name} not inferred"));
    format!("{}{}", tt.dtype, tt.shape)
}

/// Tracked elements of a tensor, printed.
pub fn val(g: &Graph, t: &Types, name: &str) -> Option<String> {
    let id = g.tensor_id(name)?;
    t.value(id).map(|v| {
        v.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// The node producing `name`.
pub fn producer(g: &Graph, name: &str) -> NodeId {
    g.tensor(g.tensor_id(name).expect("tensor"))
        .producer()
        .expect("produced by a node")
}

pub fn bind(pairs: &[(&str, u64)]) -> Bindings {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}
