//! Rewrites of hand-built training graphs, snapshotted, and proven on ONNX Runtime: a
//! 3-layer tanh MLP with its hand-written backward (saved activations, transposed weights read
//! only in backward), and the same with a Dropout, whose output is never recomputed.

mod common;

use std::path::Path;

use ckpt_ir::build::{attr_i, ModelBuilder};
use ckpt_ir::{import_bytes, Bindings, DType};
use ckpt_opt::optimize::{analyse, plan, Job, Outcome};
use ckpt_passes::ledger::Optimizer;
use common::*;

const N: &str = "128,128";

/// loss = sum(tanh(tanh(tanh(x·w1)·w2)·w3) ⊙ c), with backward; `dropout` after layer 1.
fn mlp(dropout: bool) -> Vec<u8> {
    let mut b = ModelBuilder::new(17)
        .input("x", DType::F32, N)
        .input("c", DType::F32, N)
        .input("w1", DType::F32, N)
        .input("w2", DType::F32, N)
        .input("w3", DType::F32, N)
        .init_f32("one", &[], &[1.0])
        .node("MatMul", &["x", "w1"], &["h1"])
        .node("Tanh", &["h1"], &["t1"]);
    let a1 = if dropout {
        b = b
            .init_f32("p", &[], &[0.25])
            .node("Dropout", &["t1", "p", "train"], &["a1", "mask1"])
            .input("train", DType::Bool, "");
        "a1"
    } else {
        "t1"
    };
    b = b
        .node("MatMul", &[a1, "w2"], &["h2"])
        .node("Tanh", &["h2"], &["a2"])
        .node("MatMul", &["a2", "w3"], &["h3"])
        .node("Tanh", &["h3"], &["a3"])
        .node("Mul", &["a3", "c"], &["m"])
        .node_with("ReduceSum", &["m"], &["loss"], vec![attr_i("keepdims", 0)])
        // backward
        .node("Mul", &["a3", "a3"], &["sq3"])
        .node("Sub", &["one", "sq3"], &["d3"])
        .node("Mul", &["c", "d3"], &["gh3"])
        .node("Transpose", &["a2"], &["a2t"])
        .node("MatMul", &["a2t", "gh3"], &["w3_grad"])
        .node("Transpose", &["w3"], &["w3t"])
        .node("MatMul", &["gh3", "w3t"], &["ga2"])
        .node("Mul", &["a2", "a2"], &["sq2"])
        .node("Sub", &["one", "sq2"], &["d2"])
        .node("Mul", &["ga2", "d2"], &["gh2"])
        .node("Transpose", &[a1], &["a1t"])
        .node("MatMul", &["a1t", "gh2"], &["w2_grad"])
        .node("Transpose", &["w2"], &["w2t"])
        .node("MatMul", &["gh2", "w2t"], &["ga1"]);
    let ga1 = if dropout {
        b = b
            .node_in(
                "com.microsoft",
                "DropoutGrad",
                &["ga1", "mask1", "p", "train"],
                &["gd1"],
                vec![],
            )
            .opset("com.microsoft", 1);
        "gd1"
    } else {
        "ga1"
    };
    b.node("Mul", &["t1", "t1"], &["sq1"])
        .node("Sub", &["one", "sq1"], &["d1"])
        .node("Mul", &[ga1, "d1"], &["gh1"])
        .node("Transpose", &["x"], &["xt"])
        .node("MatMul", &["xt", "gh1"], &["w1_grad"])
        .output("loss", DType::F32, "")
        .output("w1_grad", DType::F32, N)
        .output("w2_grad", DType::F32, N)
        .output("w3_grad", DType::F32, N)
        .bytes()
}

fn job(path: &std::path::Path, ceiling: u64) -> Job {
    plan_job(path, ceiling, 60)
}

#[test]
fn hand_built_mlp_rewrites() {
    for (name, dropout) in [("mlp3_tanh", false), ("mlp3_tanh_dropout", true)] {
        let bytes = mlp(dropout);
        let path = Path::new("mlp.onnx");
        let g = import_bytes(bytes.clone().into(), path, None).unwrap();
        let total = analyse(g.clone(), &Bindings::new(), None, Optimizer::None, 32)
            .unwrap()
            .ledger
            .total_bytes;
        for pct in [90u64, 80] {
            let ceiling = total * pct / 100;
            let outcome = plan(&job(path, ceiling), g.clone()).unwrap();
            if let Outcome::Rewritten(r) = &outcome {
                assert!(r.after.ledger.total_bytes <= ceiling);
                // Random ops are never cloned; their outputs may be kept boundaries.
                assert!(
                    !r.patch_text.contains("Dropout"),
                    "{name}: a Dropout was recomputed"
                );
                if dropout {
                    assert!(
                        r.cands.excluded.iter().any(|e| e.op == "Dropout"),
                        "{name}: {:?}",
                        r.cands.excluded
                    );
                }
            }
            let text = outcome_text(&outcome, ceiling);
            insta::assert_snapshot!(format!("{name}_{pct}"), text);
        }
    }
}

#[test]
fn hand_built_mlp_validates_on_ort() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("mlp3.onnx");
    std::fs::write(&model, mlp(false)).unwrap();
    let g = import_bytes(mlp(false).into(), &model, None).unwrap();
    let total = analyse(g, &Bindings::new(), None, Optimizer::None, 32)
        .unwrap()
        .ledger
        .total_bytes;
    let out = dir.path().join("mlp3.ckpt.onnx");
    let c = (total * 80 / 100).to_string();
    let o = run(&[
        path_str(&model),
        "--ceiling",
        &c,
        "-o",
        path_str(&out),
        "--validate",
        "--json",
        "--runs",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let (_, ma, predicted) = assert_validated_rewrite(&r, "mlp3");
    assert_eq!(predicted, ma, "predicted == measured");
    // Added FLOPs are those of the clones in the written model (moves add none), and no
    // more than the model's per-candidate sum.
    let out_graph = ckpt_ir::import_file(&out).unwrap();
    let types = ckpt_ir::ops::infer(&out_graph).unwrap();
    let clones: u64 = out_graph
        .nodes()
        .iter()
        .filter(|&&n| out_graph.node(n).name.ends_with(".recompute"))
        .map(|&n| ckpt_ir::ops::flops(&out_graph, n, &types, &Bindings::new()).unwrap())
        .sum();
    assert_eq!(r["added_flops"].as_u64().unwrap(), clones);
    let cloned = out_graph
        .nodes()
        .iter()
        .filter(|&&n| out_graph.node(n).name.ends_with(".recompute"))
        .count();
    assert_eq!(r["nodes_cloned"].as_u64().unwrap() as usize, cloned);
    assert!(r["nodes_moved"].as_u64().is_some());
    assert!(clones <= r["model_added_flops"].as_u64().unwrap());
    // The receipt names what was moved and what was recomputed.
    let segs = r["segments"].as_array().unwrap();
    assert!(!segs.is_empty());
    assert!(segs
        .iter()
        .all(|s| s["nodes_moved"].is_array() && s["nodes_recomputed"].is_array()));
}
