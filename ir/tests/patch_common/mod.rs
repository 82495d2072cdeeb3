//! Graphs shared by the patch tests.

use std::path::Path;

use ckpt_ir::build::ModelBuilder;
use ckpt_ir::{import_bytes, DType};

/// `y = Neg(x)` with `x: f32[2,3]`.
pub fn neg_graph() -> ckpt_ir::Graph {
    let bytes = ModelBuilder::new(18)
        .input("x", DType::F32, "2,3")
        .node("Neg", &["x"], &["y"])
        .output("y", DType::F32, "2,4")
        .bytes();
    import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap()
}
