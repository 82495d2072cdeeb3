//! Every (domain, op) that a fixture or the example uses has a full registry entry: its
//! shapes infer, its FLOPs count, its policy has a reason, and its memory behaviour in
//! ONNX Runtime (alias, in place, scratch) is the one this file states. A new op in a
//! fixture fails here until it is added to [`MEMORY`] and to the registry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ckpt_ir::ops::{flops, infer, op_def, policy, Policy};
use ckpt_ir::{import_file, Bindings};

/// Memory behaviour of each fixture op: `alias` (`.Alias(0, 0)`), `inplace`
/// (`.MayInplace(0, 0)`), `scratch` (a scratch rule), `alias 1<-0` (output 1 is input 0's
/// buffer), `-` (allocates its outputs, no scratch).
const MEMORY: &[(&str, &str, &str)] = &[
    ("ai.onnx", "Conv", "scratch"),
    ("ai.onnx", "ConvTranspose", "scratch"),
    ("ai.onnx", "Expand", "-"),
    ("ai.onnx", "Greater", "-"),
    ("ai.onnx", "MaxPool", "-"),
    ("ai.onnx", "Reciprocal", "-"),
    ("ai.onnx", "ReduceMean", "-"),
    ("ai.onnx", "Sigmoid", "inplace"),
    ("ai.onnx", "Sqrt", "-"),
    ("ai.onnx", "Add", "-"),
    ("ai.onnx", "And", "-"),
    ("ai.onnx", "Cast", "inplace"),
    ("ai.onnx", "Clip", "inplace"),
    ("ai.onnx", "Concat", "-"),
    ("ai.onnx", "Constant", "-"),
    ("ai.onnx", "ConstantOfShape", "-"),
    ("ai.onnx", "Div", "-"),
    ("ai.onnx", "Dropout", "-"),
    ("ai.onnx", "Equal", "-"),
    ("ai.onnx", "Erf", "-"),
    ("ai.onnx", "Exp", "-"),
    ("ai.onnx", "Gather", "-"),
    ("ai.onnx", "GatherElements", "-"),
    ("ai.onnx", "GatherND", "-"),
    ("ai.onnx", "Gelu", "-"),
    ("ai.onnx", "Gemm", "-"),
    ("ai.onnx", "GreaterOrEqual", "-"),
    ("ai.onnx", "Identity", "alias"),
    ("ai.onnx", "LayerNormalization", "-"),
    ("ai.onnx", "Less", "-"),
    ("ai.onnx", "LessOrEqual", "-"),
    ("ai.onnx", "LogSoftmax", "inplace scratch"),
    ("ai.onnx", "MatMul", "-"),
    ("ai.onnx", "Mul", "-"),
    ("ai.onnx", "Neg", "-"),
    ("ai.onnx", "NegativeLogLikelihoodLoss", "-"),
    ("ai.onnx", "Not", "-"),
    ("ai.onnx", "Pad", "-"),
    ("ai.onnx", "Pow", "-"),
    ("ai.onnx", "RandomUniformLike", "-"),
    ("ai.onnx", "ReduceSum", "-"),
    ("ai.onnx", "Relu", "inplace"),
    ("ai.onnx", "Reshape", "alias"),
    ("ai.onnx", "ScatterElements", "inplace"),
    ("ai.onnx", "ScatterND", "-"),
    ("ai.onnx", "Shape", "-"),
    ("ai.onnx", "Slice", "-"),
    ("ai.onnx", "Softmax", "inplace scratch"),
    ("ai.onnx", "SoftmaxCrossEntropyLoss", "-"),
    ("ai.onnx", "Split", "-"),
    ("ai.onnx", "Squeeze", "alias"),
    ("ai.onnx", "Sub", "-"),
    ("ai.onnx", "Sum", "scratch"),
    ("ai.onnx", "Tanh", "inplace"),
    ("ai.onnx", "Transpose", "-"),
    ("ai.onnx", "Trilu", "inplace"),
    ("ai.onnx", "Unsqueeze", "alias"),
    ("ai.onnx", "Where", "scratch"),
    ("com.microsoft", "ConcatTraining", "-"),
    ("com.microsoft", "DropoutGrad", "-"),
    ("com.microsoft", "FusedMatMul", "-"),
    ("com.microsoft", "GatherGrad", "-"),
    ("com.microsoft", "Gelu", "-"),
    ("com.microsoft", "GeluGrad", "-"),
    ("com.microsoft", "InPlaceAccumulatorV2", "alias 1<-0"),
    ("com.microsoft", "LayerNormalizationGrad", "-"),
    ("com.microsoft", "ReluGrad", "-"),
    ("com.microsoft", "SliceGrad", "-"),
    ("com.microsoft", "SoftmaxCrossEntropyLossGrad", "-"),
    ("com.microsoft", "SoftmaxGrad_13", "-"),
    ("com.microsoft", "TanhGrad", "-"),
];

fn models() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut v = Vec::new();
    for dir in ["tests/fixtures", "examples"] {
        for e in std::fs::read_dir(root.join(dir)).expect("fixture dir exists") {
            let p = e.expect("readable dir entry").path();
            if p.extension().is_some_and(|e| e == "onnx") {
                v.push(p);
            }
        }
    }
    v.sort();
    assert!(v.len() >= 10, "fixtures not found: {v:?}");
    v
}

fn stated(def: &ckpt_ir::ops::OpDef) -> String {
    let mut parts = Vec::new();
    match def.alias {
        Some((0, 0)) => parts.push("alias".to_string()),
        Some((o, i)) => parts.push(format!("alias {o}<-{i}")),
        None => {}
    }
    match def.may_inplace {
        Some((0, 0)) => parts.push("inplace".to_string()),
        Some((o, i)) => parts.push(format!("inplace {o}<-{i}")),
        None => {}
    }
    if def.scratch.is_some() {
        parts.push("scratch".to_string());
    }
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(" ")
    }
}

#[test]
fn every_fixture_op_has_a_full_entry() {
    let memory: BTreeMap<(&str, &str), &str> =
        MEMORY.iter().map(|&(d, o, m)| ((d, o), m)).collect();
    let mut seen = 0;
    let mut used = std::collections::BTreeSet::new();
    let mut missing = std::collections::BTreeSet::new();
    for path in models() {
        let g = import_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let types = infer(&g).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            types.from_value_info().is_empty(),
            "{}: nodes typed from value_info (not in the registry): {:?}",
            path.display(),
            types.from_value_info()
        );
        // Every symbolic dim bound to a small size, so FLOPs can be counted.
        let mut b = Bindings::new();
        for t in g.tensor_ids() {
            for s in types.shape(t).map(|s| s.symbols()).unwrap_or_default() {
                b.insert(s, 2);
            }
        }
        for &n in g.nodes() {
            let node = g.node(n);
            let what = format!("{}: {}::{}", path.display(), node.domain, node.op_type);
            let def = op_def(&g, n).unwrap_or_else(|| panic!("{what}: no registry entry"));
            flops(&g, n, &types, &b).unwrap_or_else(|e| panic!("{what}: {e}"));
            let p = policy(&g, n);
            assert_ne!(p, Policy::Unknown, "{what}");
            assert!(!p.reason().is_empty(), "{what}: policy without a reason");
            match memory.get(&(def.domain, def.op_type)) {
                Some(want) => assert_eq!(&stated(def), want, "{what}: memory behaviour"),
                None => {
                    missing.insert((def.domain, def.op_type, stated(def)));
                }
            }
            used.insert((def.domain, def.op_type));
            seen += 1;
        }
    }
    assert!(seen > 1000, "only {seen} nodes checked");
    assert!(
        missing.is_empty(),
        "memory behaviour not stated in MEMORY (the registry says): {missing:?}"
    );
    let stale: Vec<_> = memory.keys().filter(|k| !used.contains(*k)).collect();
    assert!(stale.is_empty(), "MEMORY rows no fixture uses: {stale:?}");
}
