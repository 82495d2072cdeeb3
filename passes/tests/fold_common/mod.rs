//! Helpers shared by the fold tests: a graph built, imported and typed, a node found by its
//! output, and a `ConstantOfShape` fill.
#![allow(dead_code)]

use std::path::Path;

use ckpt_ir::{import_bytes, onnx, DType, Graph, NodeId};

/// The model `bytes` imported and typed.
pub fn typed(bytes: Vec<u8>) -> Graph {
    let mut g = import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap();
    ckpt_ir::ops::infer_into(&mut g).unwrap();
    g
}

/// The node that writes tensor `t`.
pub fn node_of(g: &Graph, t: &str) -> NodeId {
    g.tensor(g.tensor_id(t).unwrap()).producer().unwrap()
}

/// A `value` attribute of one f32 (a ConstantOfShape's fill).
pub fn fill(v: f32) -> onnx::AttributeProto {
    onnx::AttributeProto {
        name: Some("value".into()),
        r#type: Some(onnx::attribute_proto::AttributeType::Tensor as i32),
        t: Some(onnx::TensorProto {
            dims: vec![1],
            data_type: Some(DType::F32.code()),
            float_data: vec![v],
            ..Default::default()
        }),
        ..Default::default()
    }
}
