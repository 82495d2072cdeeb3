//! The negative log-likelihood's gradient folded without its one-hot table
//! (`ckpt_passes::fold::fold_onehot_gradients`): only PyTorch's decomposition as exporters
//! write it, a -1 scattered into +0 zeros at each row's target, weighted per row, less the
//! softmax times the row sums.

use std::path::Path;

use ckpt_ir::build::{attr_i, attr_s, ModelBuilder};
use ckpt_ir::{import_bytes, DType, Graph};
use ckpt_passes::fold::{fold, fold_onehot_gradients};

mod fold_common;
use fold_common::{fill, node_of, typed};

/// What one case changes from the exporter's loss-head backward over `[4, 6]` logits.
#[derive(Clone)]
struct Case {
    opset: i64,
    minus: f32,
    zero: f32,
    weights: &'static str,
    axes: Vec<i64>,
    scatter_reduction: Option<&'static str>,
    weighted_read_twice: bool,
    dtype: DType,
}

impl Default for Case {
    fn default() -> Case {
        Case {
            opset: 18,
            minus: -1.0,
            zero: 0.0,
            weights: "4,1",
            axes: vec![1],
            scatter_reduction: None,
            weighted_read_twice: false,
            dtype: DType::F32,
        }
    }
}

fn graph(c: &Case) -> Graph {
    let mut scatter_attrs = vec![attr_i("axis", 1)];
    if let Some(r) = c.scatter_reduction {
        scatter_attrs.push(attr_s("reduction", r));
    }
    let mut m = ModelBuilder::new(c.opset)
        .input("lsm", c.dtype, "4,6")
        .input("target", DType::I64, "4,1")
        .input("w", c.dtype, c.weights)
        .init_i64("shape", &[2], &[4, 6])
        .init_i64("col", &[2], &[4, 1])
        .init_i64("axes", &[1], &c.axes)
        .node_with(
            "ConstantOfShape",
            &["shape"],
            &["zeros"],
            vec![fill(c.zero)],
        )
        .node_with("ConstantOfShape", &["col"], &["minus"], vec![fill(c.minus)])
        .node_with(
            "ScatterElements",
            &["zeros", "target", "minus"],
            &["onehot"],
            scatter_attrs,
        )
        .node("Mul", &["onehot", "w"], &["weighted"])
        .node("Exp", &["lsm"], &["e"])
        .node_with(
            "ReduceSum",
            &["weighted", "axes"],
            &["rows"],
            vec![attr_i("keepdims", 1)],
        )
        .node("Mul", &["e", "rows"], &["p"])
        .node("Sub", &["weighted", "p"], &["grad"])
        .output("grad", c.dtype, "4,6");
    if c.weighted_read_twice {
        m = m
            .node("Neg", &["weighted"], &["n"])
            .output("n", c.dtype, "4,6");
    }
    typed(m.bytes())
}

/// The exporter's form becomes `rows = minus * w`, `p = e * w` and
/// `grad = ScatterElements(p, target, rows, axis=1, reduction=add)`; the one-hot table, its
/// weighted copy and the zeros are removed, and the written graph reads back.
#[test]
fn the_onehot_gradient_becomes_a_scatter_add_into_the_softmax_term() {
    for weights in ["4,1", "1", ""] {
        let mut g = graph(&Case {
            weights,
            ..Case::default()
        });
        let patch = fold_onehot_gradients(&g, "folded");
        let subs: Vec<(ckpt_ir::NodeId, &str)> = patch
            .substitutes
            .iter()
            .map(|s| (s.node, s.op_type.as_str()))
            .collect();
        assert_eq!(
            subs,
            [
                (node_of(&g, "rows"), "Mul"),
                (node_of(&g, "p"), "Mul"),
                (node_of(&g, "grad"), "ScatterElements")
            ],
            "{patch}"
        );
        assert_eq!(
            patch.removals,
            ["weighted", "onehot", "zeros"].map(|t| node_of(&g, t)),
            "{patch}"
        );
        patch.apply(&mut g).unwrap();
        let ops: Vec<&str> = g
            .nodes()
            .iter()
            .map(|&n| g.node(n).op_type.as_str())
            .collect();
        assert_eq!(
            ops,
            ["ConstantOfShape", "Exp", "Mul", "Mul", "ScatterElements"]
        );
        let grad = g.node(node_of(&g, "grad"));
        assert_eq!(grad.attr_s("reduction").as_deref(), Some("add"));
        let names = |n: &ckpt_ir::Node| -> Vec<String> {
            n.inputs
                .iter()
                .map(|t| g.tensor(t.unwrap()).name.clone())
                .collect()
        };
        assert_eq!(names(grad), ["p", "target", "rows"]);
        assert_eq!(names(g.node(node_of(&g, "rows"))), ["minus", "w"]);
        assert_eq!(names(g.node(node_of(&g, "p"))), ["e", "w"]);
        let back = import_bytes(ckpt_ir::export_bytes(&g).into(), Path::new("t.onnx"), None);
        assert_eq!(back.unwrap().node_count(), 5);
    }
}

/// Each of these leaves the graph as it is: a fill other than -1, zeros that are -0.0, weights
/// that do not broadcast to a column (`[4, 6]`), a row sum over another axis, an
/// accumulating scatter, a weighted table something else reads, an element type ONNX
/// Runtime's CPU ScatterElements lacks (f16), and opset 15, whose ScatterElements has no
/// `reduction`.
#[test]
fn anything_but_the_exporters_form_is_left_alone() {
    let cases = [
        Case {
            minus: 1.0,
            ..Case::default()
        },
        Case {
            minus: -2.0,
            ..Case::default()
        },
        Case {
            zero: -0.0,
            ..Case::default()
        },
        Case {
            weights: "4,6",
            ..Case::default()
        },
        Case {
            axes: vec![0],
            ..Case::default()
        },
        Case {
            scatter_reduction: Some("add"),
            ..Case::default()
        },
        Case {
            weighted_read_twice: true,
            ..Case::default()
        },
        Case {
            dtype: DType::F16,
            ..Case::default()
        },
        Case {
            opset: 15,
            ..Case::default()
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let g = graph(c);
        let patch = fold(&g, "folded");
        assert!(patch.is_empty(), "case {i}: {patch}");
    }
}

/// Every fixture exported from PyTorch with a cross-entropy loss head has exactly one such
/// gradient, and it folds.
#[test]
fn every_exported_loss_head_folds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for name in [
        "gpt2_d0_aot",
        "hfgpt2_d0_aot",
        "llama_d0_makefx",
        "t5_d0_makefx",
    ] {
        let path = root.join(format!("tests/fixtures/{name}.onnx"));
        let g = ckpt_ir::import_file(&path).unwrap();
        let patch = fold_onehot_gradients(&g, "folded");
        let scatters = patch
            .substitutes
            .iter()
            .filter(|s| s.op_type == "ScatterElements")
            .count();
        assert_eq!(scatters, 1, "{name}: {patch}");
    }
}
