//! A patch's fresh nodes of another domain than ONNX's (`ckpt_ir::FreshNode::domain`).

use std::path::Path;

use ckpt_ir::{export_bytes, import_bytes, Patch, TensorRef};

mod patch_common;
use patch_common::neg_graph;

/// A fresh node of another domain (ONNX Runtime's `com.microsoft.FusedConv` here) is printed
/// with its domain, keeps it in the graph and the file, and its domain is imported at the
/// version the patch gives where the model did not import it; a second one imports nothing
/// more.
#[test]
fn a_fresh_node_of_another_domain_imports_it() {
    let mut g = neg_graph();
    let neg = g.nodes()[0];
    let x = g.tensor_id("x").unwrap();
    assert_eq!(g.opset("com.microsoft"), None);
    let fused = |name: &str, out: usize| ckpt_ir::FreshNode {
        name: name.into(),
        domain: Some(("com.microsoft".into(), 1)),
        op_type: "FusedConv".into(),
        attributes: vec![],
        inputs: vec![Some(TensorRef::Existing(x)), Some(TensorRef::Existing(x))],
        outputs: vec![Some(TensorRef::New(out))],
        before: neg,
    };
    let new = |name: &str| ckpt_ir::NewTensor {
        name: name.into(),
        like: None,
    };
    let patch = Patch {
        tensors: vec![new("a"), new("b")],
        fresh: vec![fused("conv_a", 0), fused("conv_b", 1)],
        ..Patch::new("contrib")
    };
    let text = patch.to_string();
    assert!(
        text.contains(&format!(
            "node \"conv_a\" = com.microsoft.FusedConv({x}, {x}) {{}} -> new0 before {neg}"
        )),
        "{text}"
    );
    patch.apply(&mut g).unwrap();
    assert_eq!(g.opset("com.microsoft"), Some(1));
    let imports = g.opsets();
    assert_eq!(
        imports.iter().filter(|(d, _)| d == "com.microsoft").count(),
        1
    );
    let conv = g.nodes()[0];
    assert_eq!(g.node(conv).domain, "com.microsoft");
    let again = import_bytes(export_bytes(&g).into(), Path::new("t.onnx"), None).unwrap();
    let n = again.nodes()[0];
    assert_eq!(
        (
            again.node(n).domain.as_str(),
            again.node(n).op_type.as_str()
        ),
        ("com.microsoft", "FusedConv")
    );
    assert_eq!(again.opset("com.microsoft"), Some(1));
}
