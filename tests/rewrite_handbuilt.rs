//! Rewrites of hand-built training graphs, snapshotted, and proven on ONNX Runtime: a
//! 3-layer tanh MLP with its hand-written backward (saved activations, transposed weights read
//! only in backward), and the same with a Dropout, whose output is never recomputed. The
//! graphs are written in the text form; one case per test and snapshot.

mod common;

use std::path::Path;

use ckpt_ir::{parse_graph, Bindings, Graph};
use ckpt_opt::job::Job;
use ckpt_opt::pipeline::analyse;
use ckpt_planner::Outcome;
use common::*;

/// loss = sum(tanh(tanh(tanh(x·w1)·w2)·w3) ⊙ c), with its backward.
const MLP3: &str = r#"
ir_version 10
opset ai.onnx 17
input %0 "x": f32[128,128]
input %1 "c": f32[128,128]
input %2 "w1": f32[128,128]
input %3 "w2": f32[128,128]
input %4 "w3": f32[128,128]
init %5 "one": f32[] = [1.0]
%6 "h1": ?[?] = MatMul(%0, %2)  # "MatMul_h1"
%7 "t1": ?[?] = Tanh(%6)  # "Tanh_t1"
%8 "h2": ?[?] = MatMul(%7, %3)  # "MatMul_h2"
%9 "a2": ?[?] = Tanh(%8)  # "Tanh_a2"
%10 "h3": ?[?] = MatMul(%9, %4)  # "MatMul_h3"
%11 "a3": ?[?] = Tanh(%10)  # "Tanh_a3"
%12 "m": ?[?] = Mul(%11, %1)  # "Mul_m"
%13 "loss": f32[] = ReduceSum(%12) {keepdims=0}  # "ReduceSum_loss"
%14 "sq3": ?[?] = Mul(%11, %11)  # "Mul_sq3"
%15 "d3": ?[?] = Sub(%5, %14)  # "Sub_d3"
%16 "gh3": ?[?] = Mul(%1, %15)  # "Mul_gh3"
%17 "a2t": ?[?] = Transpose(%9)  # "Transpose_a2t"
%18 "w3_grad": f32[128,128] = MatMul(%17, %16)  # "MatMul_w3_grad"
%19 "w3t": ?[?] = Transpose(%4)  # "Transpose_w3t"
%20 "ga2": ?[?] = MatMul(%16, %19)  # "MatMul_ga2"
%21 "sq2": ?[?] = Mul(%9, %9)  # "Mul_sq2"
%22 "d2": ?[?] = Sub(%5, %21)  # "Sub_d2"
%23 "gh2": ?[?] = Mul(%20, %22)  # "Mul_gh2"
%24 "a1t": ?[?] = Transpose(%7)  # "Transpose_a1t"
%25 "w2_grad": f32[128,128] = MatMul(%24, %23)  # "MatMul_w2_grad"
%26 "w2t": ?[?] = Transpose(%3)  # "Transpose_w2t"
%27 "ga1": ?[?] = MatMul(%23, %26)  # "MatMul_ga1"
%28 "sq1": ?[?] = Mul(%7, %7)  # "Mul_sq1"
%29 "d1": ?[?] = Sub(%5, %28)  # "Sub_d1"
%30 "gh1": ?[?] = Mul(%27, %29)  # "Mul_gh1"
%31 "xt": ?[?] = Transpose(%0)  # "Transpose_xt"
%32 "w1_grad": f32[128,128] = MatMul(%31, %30)  # "MatMul_w1_grad"
output %13 "loss"
output %32 "w1_grad"
output %25 "w2_grad"
output %18 "w3_grad"
"#;

/// [`MLP3`] with a Dropout after layer 1 (and its DropoutGrad in backward).
const MLP3_DROPOUT: &str = r#"
ir_version 10
opset ai.onnx 17
opset com.microsoft 1
input %0 "x": f32[128,128]
input %1 "c": f32[128,128]
input %2 "w1": f32[128,128]
input %3 "w2": f32[128,128]
input %4 "w3": f32[128,128]
input %5 "train": bool[]
init %6 "one": f32[] = [1.0]
init %7 "p": f32[] = [0.25]
%8 "h1": ?[?] = MatMul(%0, %2)  # "MatMul_h1"
%9 "t1": ?[?] = Tanh(%8)  # "Tanh_t1"
%10 "a1": ?[?], %11 "mask1": ?[?] = Dropout(%9, %7, %5)  # "Dropout_a1"
%12 "h2": ?[?] = MatMul(%10, %3)  # "MatMul_h2"
%13 "a2": ?[?] = Tanh(%12)  # "Tanh_a2"
%14 "h3": ?[?] = MatMul(%13, %4)  # "MatMul_h3"
%15 "a3": ?[?] = Tanh(%14)  # "Tanh_a3"
%16 "m": ?[?] = Mul(%15, %1)  # "Mul_m"
%17 "loss": f32[] = ReduceSum(%16) {keepdims=0}  # "ReduceSum_loss"
%18 "sq3": ?[?] = Mul(%15, %15)  # "Mul_sq3"
%19 "d3": ?[?] = Sub(%6, %18)  # "Sub_d3"
%20 "gh3": ?[?] = Mul(%1, %19)  # "Mul_gh3"
%21 "a2t": ?[?] = Transpose(%13)  # "Transpose_a2t"
%22 "w3_grad": f32[128,128] = MatMul(%21, %20)  # "MatMul_w3_grad"
%23 "w3t": ?[?] = Transpose(%4)  # "Transpose_w3t"
%24 "ga2": ?[?] = MatMul(%20, %23)  # "MatMul_ga2"
%25 "sq2": ?[?] = Mul(%13, %13)  # "Mul_sq2"
%26 "d2": ?[?] = Sub(%6, %25)  # "Sub_d2"
%27 "gh2": ?[?] = Mul(%24, %26)  # "Mul_gh2"
%28 "a1t": ?[?] = Transpose(%10)  # "Transpose_a1t"
%29 "w2_grad": f32[128,128] = MatMul(%28, %27)  # "MatMul_w2_grad"
%30 "w2t": ?[?] = Transpose(%3)  # "Transpose_w2t"
%31 "ga1": ?[?] = MatMul(%27, %30)  # "MatMul_ga1"
%32 "gd1": ?[?] = com.microsoft::DropoutGrad(%31, %11, %7, %5)  # "DropoutGrad_gd1"
%33 "sq1": ?[?] = Mul(%9, %9)  # "Mul_sq1"
%34 "d1": ?[?] = Sub(%6, %33)  # "Sub_d1"
%35 "gh1": ?[?] = Mul(%32, %34)  # "Mul_gh1"
%36 "xt": ?[?] = Transpose(%0)  # "Transpose_xt"
%37 "w1_grad": f32[128,128] = MatMul(%36, %35)  # "MatMul_w1_grad"
output %17 "loss"
output %37 "w1_grad"
output %29 "w2_grad"
output %22 "w3_grad"
"#;

fn mlp(dropout: bool) -> Graph {
    parse_graph(if dropout { MLP3_DROPOUT } else { MLP3 }).unwrap()
}

/// The main job with `--fold off`: the snapshots pin the recompute's rewrite of the graph as
/// given (the folds have their own tests: `tests/fold.rs`, `passes/tests/fold*.rs`).
fn job(path: &std::path::Path, ceiling: u64) -> Job {
    Job {
        fold: false,
        ..plan_job(path, ceiling, 60)
    }
}

/// The hand-built MLP (`dropout`: with its Dropout) planned at `pct`% of its predicted total:
/// the plan fits, never recomputes a Dropout, and is snapshotted.
fn case(name: &str, dropout: bool, pct: u64) {
    let g = mlp(dropout);
    let path = Path::new("mlp.onnx");
    let total = analyse(g.clone(), &ckpt_planner::AnalyseOptions::default())
        .unwrap()
        .ledger
        .total_bytes;
    let ceiling = total * pct / 100;
    let job = job(path, ceiling);
    let outcome = job.plan(analyse(g, &job.analysis).unwrap()).unwrap();
    if let Outcome::Rewritten(r) = &outcome.outcome {
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
    insta::assert_snapshot!(format!("{name}__ceiling_{pct}pct"), text);
}

#[test]
fn mlp3_tanh_at_90pct() {
    case("mlp3_tanh", false, 90);
}

#[test]
fn mlp3_tanh_at_80pct() {
    case("mlp3_tanh", false, 80);
}

#[test]
fn mlp3_tanh_dropout_at_90pct() {
    case("mlp3_tanh_dropout", true, 90);
}

#[test]
fn mlp3_tanh_dropout_at_80pct() {
    case("mlp3_tanh_dropout", true, 80);
}

#[test]
fn hand_built_mlp_validates_on_ort() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("mlp3.onnx");
    std::fs::write(&model, ckpt_ir::export_bytes(&mlp(false))).unwrap();
    let total = analyse(mlp(false), &ckpt_planner::AnalyseOptions::default())
        .unwrap()
        .ledger
        .total_bytes;
    let out = dir.path().join("mlp3.ckpt.onnx");
    let c = (total * 75 / 100).to_string();
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
        // The recompute is what this checks: folded, the MLP's weight gradients are Gemms
        // and 75% needs none.
        "--fold",
        "off",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let (_, ma, predicted) = assert_validated_rewrite(&r, "mlp3");
    assert_eq!(predicted, ma, "predicted device total == measured");
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
