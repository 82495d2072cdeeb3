//! Copies folded away, on ONNX Runtime: where a plan is needed the main job also plans the
//! graph with its copies folded (`--fold on`, the default; `ckpt_passes::fold`,
//! `ckpt_planner::plan`): transposed operands into their readers, scattered slices into Pads,
//! the negative log-likelihood's one-hot gradient into a scatter-add.

mod common;

/// GPT-2 at 97.5% of its footprint fits by the fold alone: its linear layers read their
/// operands untransposed (9 weight gradients and 9 forward products through Gemm, 9 backward
/// products reading the weight itself), the loss head's slice gradient is one Pad and its
/// one-hot gradient one ScatterElements(reduction=add) (2,742,272 B -> 2,219,816 B, -19.05%),
/// nothing recomputed, every output bitwise equal and the device total measured to the byte.
#[test]
fn folded_copies_alone_fit_gpt2_at_97_5_percent_bitwise() {
    let model = common::root().join("tests/fixtures/gpt2_d0_aot.onnx");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let r = common::validated_run(&model, "97.5%", &out, &[]);
    let (_, measured, predicted) = common::assert_validated_rewrite(&r, "gpt2_d0_aot 97.5%");
    assert_eq!(measured, predicted, "measured against predicted");
    assert_eq!(
        r["predicted_peak_bytes"],
        serde_json::json!({"before": 2_742_272, "after": 2_219_816})
    );
    assert_eq!(r["added_flops"].as_u64(), Some(0), "{}", r["added_flops"]);
    assert_eq!(
        r["solver"]["label"], "folded copies only",
        "{}",
        r["solver"]
    );
    let patch = r["patch"].as_str().unwrap();
    assert_eq!(patch.matches("= Gemm(").count(), 18, "{patch}");
    assert_eq!(patch.matches("= Pad(").count(), 1, "{patch}");
    assert_eq!(patch.matches("  rewire n").count(), 9, "{patch}");
    // 27 Transposes (of the gradients, of the weights and back), the slice gradient's
    // ScatterND, two Transposes and zeros, and the one-hot table, its weighted copy and zeros.
    assert_eq!(patch.matches("  remove n").count(), 34, "{patch}");
    assert_eq!(patch.matches("= ScatterElements(").count(), 1, "{patch}");
    let written = ckpt_ir::import_file(&out).unwrap();
    let ops = |op: &str| {
        written
            .nodes()
            .iter()
            .filter(|&&n| written.node(n).op_type == op)
            .count()
    };
    // The attention products stay MatMuls, and so do the backward products that read the
    // weights themselves now.
    assert_eq!((ops("MatMul"), ops("Gemm")), (21, 18));
    assert_eq!((ops("ScatterND"), ops("Pad")), (1, 1));
    // The one-hot gradient's scatter adds the targets' terms into the softmax term.
    assert_eq!(ops("ScatterElements"), 1);
}

/// The Llama's rotary gradients (eight slices scattered into zeros through
/// Transposes) are Pads reading two shared pads constants; every output bitwise equal, the
/// device total measured to the byte.
#[test]
fn the_llamas_rotary_gradients_are_pads_bitwise() {
    let model = common::root().join("tests/fixtures/llama_d0_makefx.onnx");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let extra = ["--int-range", "attention_mask=0:2"];
    let r = common::validated_run(&model, "97%", &out, &extra);
    let (_, measured, predicted) = common::assert_validated_rewrite(&r, "llama_d0_makefx 97%");
    assert_eq!(measured, predicted, "measured against predicted");
    assert_eq!(r["added_flops"].as_u64(), Some(0), "{}", r["added_flops"]);
    let patch = r["patch"].as_str().unwrap();
    assert_eq!(patch.matches("= Pad(").count(), 8, "{patch}");
    assert_eq!(patch.matches("  constant ").count(), 2, "{patch}");
    let written = ckpt_ir::import_file(&out).unwrap();
    let scatters = written
        .nodes()
        .iter()
        .filter(|&&n| {
            let node = written.node(n);
            node.op_type == "ScatterND" && node.attr_s("reduction").as_deref() != Some("add")
        })
        .count();
    assert_eq!(scatters, 0);
}

/// The fold's share of the device total under the default profile, on four exporters'
/// transformers: GPT-2 -19.05%, the HF GPT-2 -11.97% (its Conv1D weights are read
/// untransposed already), ViT -10.74%, the Llama -11.68%, T5 -9.24%. Most of it is the
/// linear layers' transposed weights, otherwise held from the forward to the backward.
#[test]
fn the_fold_lowers_five_transformers_totals() {
    let totals = |name: &str| {
        let path = common::root().join(format!("tests/fixtures/{name}.onnx"));
        let g = ckpt_ir::import_file(&path).unwrap();
        let o = ckpt_planner::AnalyseOptions::default();
        let before = ckpt_planner::analyse(g, &o).unwrap();
        let patch = ckpt_passes::fold::fold(&before.graph, "folded");
        let mut folded = before.graph.clone();
        patch.apply(&mut folded).unwrap();
        let after = ckpt_planner::analyse(folded, &o).unwrap();
        let (b, a) = (before.ledger.total_bytes, after.ledger.total_bytes);
        format!("{:+.2}%", (a as f64 / b as f64 - 1.0) * 100.0)
    };
    assert_eq!(
        [
            "gpt2_d0_aot",
            "hfgpt2_d0_aot",
            "vit_d0_aot",
            "llama_d0_makefx",
            "t5_d0_makefx"
        ]
        .map(totals),
        ["-19.05%", "-11.97%", "-10.74%", "-11.68%", "-9.24%"]
    );
}
