//! Recompute policies, and what happens to ops the registry does not know.

mod ops_common;

use ckpt_ir::build::{attr_i, ModelBuilder};
use ckpt_ir::ops::{infer_into, lookup, policy, registry, InferError, Policy};
use ckpt_ir::{onnx, DType, ONNX_DOMAIN};
use ops_common::{graph, producer, run, try_run, ty};

fn bool_init(name: &str, v: bool) -> onnx::TensorProto {
    onnx::TensorProto {
        name: Some(name.into()),
        data_type: Some(DType::Bool.code()),
        raw_data: Some(vec![v as u8].into()),
        ..Default::default()
    }
}

fn dropout_model(opset: i64, training: Option<&str>) -> onnx::ModelProto {
    dropout_model_with(opset, "ratio", training)
}

fn dropout_model_with(opset: i64, ratio: &str, training: Option<&str>) -> onnx::ModelProto {
    let mut inputs = vec!["x", ratio];
    if let Some(t) = training {
        inputs.push(t);
    }
    ModelBuilder::new(opset)
        .input("x", DType::F32, "b,64")
        .input("mode", DType::Bool, "")
        .init_f32("ratio", &[], &[0.1])
        .init_f32("zero", &[], &[0.0])
        .initializer(bool_init("on", true))
        .initializer(bool_init("off", false))
        .node("Dropout", &inputs, &["y", "mask"])
        .output("y", DType::F32, "")
        .build()
}

#[test]
fn dropout_is_stochastic_only_in_training_mode() {
    for (opset, mode, want) in [
        (20, Some("on"), "stochastic"),
        (20, Some("mode"), "stochastic"), // a graph input: cannot be proven false
        (20, Some("off"), "recomputable"),
        (20, None, "recomputable"),
        (13, Some("on"), "stochastic"),
    ] {
        let (g, t) = run(dropout_model(opset, mode));
        assert_eq!(ty(&g, &t, "y"), "f32[b,64]");
        assert_eq!(ty(&g, &t, "mask"), "bool[b,64]");
        let p = policy(&g, producer(&g, "y"));
        let got = match p {
            Policy::Stochastic(_) => "stochastic",
            Policy::Recomputable => "recomputable",
            _ => "other",
        };
        assert_eq!(got, want, "opset {opset}, training_mode {mode:?}: {p:?}");
    }
    // Ratio 0 is a copy even in training mode.
    let (g, _) = run(dropout_model_with(20, "zero", Some("on")));
    assert_eq!(policy(&g, producer(&g, "y")), Policy::Recomputable);
    // Opset 7–11 Dropout has no training mode: ORT runs it as Identity.
    let m = ModelBuilder::new(11)
        .input("x", DType::F32, "4")
        .node_with(
            "Dropout",
            &["x"],
            &["y"],
            vec![ckpt_ir::build::attr_f("ratio", 0.5)],
        )
        .output("y", DType::F32, "")
        .build();
    let (g, _) = run(m);
    assert_eq!(policy(&g, producer(&g, "y")), Policy::Recomputable);
}

#[test]
fn random_ops_are_stochastic_and_pure_ops_recomputable() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,64")
        .node_with(
            "RandomUniformLike",
            &["x"],
            &["r"],
            vec![attr_i("dtype", 1)],
        )
        .node("RandomNormalLike", &["x"], &["n"])
        .node("Bernoulli", &["x"], &["bern"])
        .node("Relu", &["x"], &["relu"])
        .output("r", DType::F32, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(ty(&g, &t, "r"), "f32[b,64]");
    for n in ["r", "n", "bern"] {
        assert!(
            matches!(policy(&g, producer(&g, n)), Policy::Stochastic(_)),
            "{n}"
        );
    }
    assert_eq!(policy(&g, producer(&g, "relu")), Policy::Recomputable);
    assert_eq!(Policy::Recomputable.reason(), "pure and deterministic");
}

/// An ONNX Runtime contrib op the registry has no entry for (an op of a domain no registry
/// knows is refused at import: `tests/import.rs`).
#[test]
fn an_op_the_registry_lacks_is_unknown_and_typed_from_value_info() {
    let m = ModelBuilder::new(20)
        .opset("com.microsoft", 1)
        .input("x", DType::F32, "b,64")
        .node_in("com.microsoft", "Inverse", &["x"], &["y"], vec![])
        .node("Relu", &["y"], &["z"])
        .value_info("y", DType::F16, "b,32")
        .output("z", DType::F16, "")
        .build();
    let (g, t) = run(m);
    assert_eq!(policy(&g, producer(&g, "y")), Policy::Unknown);
    assert_eq!(ty(&g, &t, "y"), "f16[b,32]");
    assert_eq!(ty(&g, &t, "z"), "f16[b,32]");
    assert_eq!(t.from_value_info(), &[producer(&g, "y")]);
}

#[test]
fn an_unknown_op_without_value_info_is_an_error_naming_node_and_op() {
    let m = ModelBuilder::new(20)
        .opset("com.microsoft", 1)
        .input("x", DType::F32, "b,64")
        .node_in("com.microsoft", "Inverse", &["x"], &["y"], vec![])
        .output("z", DType::F32, "")
        .node("Relu", &["y"], &["z"])
        .build();
    let e = try_run(m).unwrap_err();
    assert!(
        matches!(&e, InferError::NoRule { node, op, .. } if node == "Inverse_y" && op == "com.microsoft::Inverse"),
        "{e}"
    );
    assert!(e.to_string().contains("value_info"), "{e}");
}

#[test]
fn opset_ranges_select_entries() {
    assert!(lookup(ONNX_DOMAIN, "Scatter", Some(10)).is_some());
    assert!(lookup(ONNX_DOMAIN, "Scatter", Some(11)).is_none());
    assert!(
        lookup(ONNX_DOMAIN, "Gelu", Some(19)).is_none(),
        "ONNX Gelu starts at opset 20"
    );
    assert!(lookup(ONNX_DOMAIN, "Gelu", Some(20)).is_some());
    assert!(lookup("com.microsoft", "Gelu", Some(1)).is_some());
    assert!(lookup(ONNX_DOMAIN, "NoSuchOp", Some(20)).is_none());
    assert!(registry().len() > 150, "{}", registry().len());
}

#[test]
fn infer_into_fills_only_missing_types() {
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,64")
        .node("Relu", &["x"], &["r"])
        .node("Neg", &["r"], &["n"])
        .value_info("r", DType::F32, "b,?")
        .output("n", DType::F32, "")
        .build();
    let mut g = graph(m);
    let r = g.tensor_id("r").expect("r");
    let before = g.tensor(r).shape.clone();
    let types = infer_into(&mut g).expect("infers");
    assert_eq!(g.tensor(r).shape, before, "declared shapes are kept");
    assert_eq!(
        types.shape(r).map(|s| s.to_string()).as_deref(),
        Some("[b,64]")
    );
}

#[test]
fn infer_into_types_untyped_outputs() {
    // An intermediate without a type at all (ONNX requires one of graph outputs only).
    let m = ModelBuilder::new(20)
        .input("x", DType::F32, "b,64")
        .node("Relu", &["x"], &["r"])
        .node("Neg", &["r"], &["y"])
        .output("y", DType::F32, "b,64")
        .build();
    let mut g = graph(m);
    let r = g.tensor_id("r").expect("r");
    assert_eq!(g.tensor(r).dtype, None);
    infer_into(&mut g).expect("infers");
    assert_eq!(g.tensor(r).dtype, Some(DType::F32));
    assert_eq!(
        g.tensor(r).shape.as_ref().map(|s| s.to_string()).as_deref(),
        Some("[b,64]")
    );
}
