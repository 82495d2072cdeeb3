//! Patches: applied in one place, verified after.

use std::path::Path;

use ckpt_ir::build::ModelBuilder;
use ckpt_ir::{
    export, import_bytes, print_graph, DType, NewNode, NewTensor, Patch, PatchError, Rewire,
    TensorRef,
};

fn graph() -> ckpt_ir::Graph {
    let bytes = ModelBuilder::new(20)
        .input("x", DType::F32, "8")
        .node("Relu", &["x"], &["a"])
        .node("Neg", &["a"], &["b"])
        .node("Mul", &["b", "a"], &["c"])
        .value_info("a", DType::F32, "8")
        .output("c", DType::F32, "8")
        .bytes();
    import_bytes(bytes.into(), Path::new("t.onnx"), None).unwrap()
}

#[test]
fn clone_and_rewire() {
    let mut g = graph();
    let a = g.tensor_id("a").unwrap();
    let relu = g.tensor(a).producer().unwrap();
    let mul = g.nodes()[2];
    let x = g.tensor_id("x").unwrap();
    let patch = Patch {
        label: "recompute a".into(),
        tensors: vec![NewTensor {
            name: "a.recompute".into(),
            like: a,
        }],
        nodes: vec![NewNode {
            name: "Relu_a.recompute".into(),
            copy_of: relu,
            inputs: vec![Some(TensorRef::Existing(x))],
            outputs: vec![Some(TensorRef::New(0))],
            before: mul,
        }],
        rewires: vec![Rewire {
            node: mul,
            slot: 1,
            from: a,
            to: TensorRef::New(0),
        }],
        metadata: vec![("k".into(), "v".into())],
    };
    insta::assert_snapshot!("patch_value", patch.to_string());
    let applied = patch.apply(&mut g).unwrap();
    assert_eq!(applied.nodes.len(), 1);
    assert_eq!(g.tensor(a).consumers(), &[g.nodes()[1]]);
    insta::assert_snapshot!("patched_graph", print_graph(&g));
    let m = export(&g);
    let vi = &m.graph.as_ref().unwrap().value_info;
    assert!(vi.iter().any(|v| v.name.as_deref() == Some("a.recompute")));
    assert_eq!(m.metadata_props[0].value.as_deref(), Some("v"));
}

#[test]
fn placing_a_clone_before_its_input_is_rejected() {
    let mut g = graph();
    let a = g.tensor_id("a").unwrap();
    let neg = g
        .tensor_id("b")
        .and_then(|b| g.tensor(b).producer())
        .unwrap();
    let relu = g.nodes()[0];
    let patch = Patch {
        label: "bad".into(),
        tensors: vec![NewTensor {
            name: "b2".into(),
            like: a,
        }],
        nodes: vec![NewNode {
            name: "neg2".into(),
            copy_of: neg,
            inputs: vec![Some(TensorRef::Existing(a))],
            outputs: vec![Some(TensorRef::New(0))],
            before: relu,
        }],
        ..Default::default()
    };
    assert!(matches!(
        patch.apply(&mut g),
        Err(PatchError::Verify { .. })
    ));
}

#[test]
fn rewire_of_wrong_tensor_is_rejected() {
    let mut g = graph();
    let x = g.tensor_id("x").unwrap();
    let mul = g.nodes()[2];
    let patch = Patch {
        label: "wrong".into(),
        rewires: vec![Rewire {
            node: mul,
            slot: 0,
            from: x,
            to: TensorRef::Existing(x),
        }],
        ..Default::default()
    };
    assert!(matches!(
        patch.apply(&mut g),
        Err(PatchError::RewireMismatch { .. })
    ));
}

#[test]
fn duplicate_name_is_rejected() {
    let mut g = graph();
    let a = g.tensor_id("a").unwrap();
    let patch = Patch {
        label: "dup".into(),
        tensors: vec![NewTensor {
            name: "b".into(),
            like: a,
        }],
        ..Default::default()
    };
    assert!(matches!(
        patch.apply(&mut g),
        Err(PatchError::NameTaken { .. })
    ));
}
