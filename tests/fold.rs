//! Transposes folded into their readers, on ONNX Runtime: with `--fold-transposes`, the main
//! job's first zero-FLOP move where a plan is needed (`ckpt_passes::fold`,
//! `ckpt_planner::plan`).

mod common;

/// With `--fold-transposes`, GPT-2 at 97.5% of its footprint fits by the fold alone: its 18 weight gradients read
/// their operands untransposed through Gemm (2,742,272 B -> 2,660,352 B, -2.99%), nothing
/// recomputed, every output bitwise equal and the device total measured to the byte.
#[test]
fn folded_transposes_alone_fit_gpt2_at_97_5_percent_bitwise() {
    let model = common::root().join("tests/fixtures/gpt2_d0_aot.onnx");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let r = common::validated_run(&model, "97.5%", &out, &["--fold-transposes"]);
    let (_, measured, predicted) = common::assert_validated_rewrite(&r, "gpt2_d0_aot 97.5%");
    assert_eq!(measured, predicted, "measured against predicted");
    assert_eq!(
        r["predicted_peak_bytes"],
        serde_json::json!({"before": 2_742_272, "after": 2_660_352})
    );
    assert_eq!(r["added_flops"].as_u64(), Some(0), "{}", r["added_flops"]);
    assert_eq!(
        r["solver"]["label"], "folded transposes only",
        "{}",
        r["solver"]
    );
    let patch = r["patch"].as_str().unwrap();
    assert_eq!(patch.matches("= Gemm(").count(), 18, "{patch}");
    assert_eq!(patch.matches("  remove n").count(), 18, "{patch}");
    let written = ckpt_ir::import_file(&out).unwrap();
    let ops = |op: &str| {
        written
            .nodes()
            .iter()
            .filter(|&&n| written.node(n).op_type == op)
            .count()
    };
    // The attention products and the forward projections stay MatMuls.
    assert_eq!((ops("MatMul"), ops("Gemm")), (13, 26));
}

/// The fold's share of the device total under the default profile, on three exporters'
/// transformers: GPT-2 -2.99%, the HF GPT-2 -11.40%, ViT -4.91%.
#[test]
fn the_fold_lowers_three_transformers_totals() {
    let totals = |name: &str| {
        let path = common::root().join(format!("tests/fixtures/{name}.onnx"));
        let g = ckpt_ir::import_file(&path).unwrap();
        let o = ckpt_planner::AnalyseOptions::default();
        let before = ckpt_planner::analyse(g, &o).unwrap();
        let patch = ckpt_passes::fold::fold_transposes(&before.graph, "folded");
        let mut folded = before.graph.clone();
        patch.apply(&mut folded).unwrap();
        let after = ckpt_planner::analyse(folded, &o).unwrap();
        let (b, a) = (before.ledger.total_bytes, after.ledger.total_bytes);
        format!("{:+.2}%", (a as f64 / b as f64 - 1.0) * 100.0)
    };
    assert_eq!(
        ["gpt2_d0_aot", "hfgpt2_d0_aot", "vit_d0_aot"].map(totals),
        ["-2.99%", "-11.40%", "-4.91%"]
    );
}
