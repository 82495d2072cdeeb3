//! A shared weight's gradient folded (`--fold-tied`, `ckpt_passes::fold::fold_tied_gradients`):
//! on a tied HF GPT-2 (one layer, vocabulary 8192, its head tied to the token embedding) the
//! embedding's rows scattered into the head's gradient free two weight-sized values at the end
//! of the backward, so the main job fits a ceiling it refuses without; validated on ONNX
//! Runtime, the gradient within tolerances and the need predicted to the byte.

mod common;
use common::*;

const TIED: &str = "tests/fixtures/tied/hfgpt2_v8k_d0_aot_tied.onnx";

/// The main job on `model` at `ceiling` with `--fold-tied flag` (validated where `validate`):
/// its exit code, receipt, and the receipt in Markdown with what it printed.
fn main_job(
    model: &str,
    ceiling: &str,
    flag: &str,
    validate: bool,
) -> (Option<i32>, serde_json::Value, String) {
    let mut extra = vec!["--fold-tied", flag];
    if validate {
        extra.extend([
            "--validate",
            "--runs",
            "1",
            "--int-range",
            "attention_mask=1:2",
        ]);
    }
    main_job_receipt(&root().join(model), ceiling, &extra)
}

/// At 60% of the tied graph's total the main job refuses without the fold (its lowest total
/// holds the table of zeros and both addends at the last step) and fits with it at no added
/// FLOPs; the plan runs on ONNX Runtime capped at the ceiling, its need predicted to the byte,
/// the shared weight's gradient within 1e-5 of the original's, and the receipt, its Markdown
/// and the summary say which gradient is folded and that it is not bit for bit.
#[test]
fn the_main_job_folds_a_tied_gradient_where_it_binds_and_says_so() {
    let (code, off, _) = main_job(TIED, "60%", "off", false);
    assert_eq!(code, Some(2), "{off}");
    let (code, r, md) = main_job(TIED, "60%", "on", true);
    assert_eq!(code, Some(0), "{r}");
    assert_receipt_valid(&r, "the tied fold at 60%");
    assert_eq!(r["added_flops"], 0, "{r}");
    let t = &r["tied_gradients"];
    assert_eq!(
        t["gradients"],
        serde_json::json!(["transformer.wte.weight_grad"]),
        "{t}"
    );
    assert_eq!(t["bitwise"], false, "{t}");
    let m = &r["memory"]["rewritten"];
    assert_eq!(
        m["measured_total_bytes"], r["predicted_peak_bytes"]["after"],
        "{m}"
    );
    assert_eq!(m["runs_under_ceiling"], true, "{m}");
    let v = &r["validation"];
    assert_eq!(v["passed"], true, "{v}");
    let grad = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "transformer.wte.weight_grad")
        .unwrap();
    assert!(grad["max_rel_err"].as_f64().unwrap() < 1e-5, "{grad}");
    assert!(
        md.contains("- Shared weights' gradients: `transformer.wte.weight_grad` scattered"),
        "{md}"
    );
    assert!(
        md.contains("shared weights' gradients (`transformer.wte.weight_grad`) scattered"),
        "{md}"
    );
}

/// Where there is no tied sum (the HF GPT-2 fixture as exported takes the head's weight and
/// the embedding's as two inputs) the flag changes nothing: the same plan, and no
/// `tied_gradients` in the receipt.
#[test]
fn a_graph_with_no_tied_sum_plans_the_same() {
    let model = "tests/fixtures/hfgpt2_d0_aot.onnx";
    let (code_off, off, _) = main_job(model, "70%", "off", false);
    let (code_on, on, _) = main_job(model, "70%", "on", false);
    assert_eq!((code_off, code_on), (Some(0), Some(0)), "{on}");
    assert!(on.get("tied_gradients").is_none(), "{on}");
    assert_eq!(on["patch"], off["patch"]);
    assert_eq!(on["predicted_peak_bytes"], off["predicted_peak_bytes"]);
}

/// `frontier --fold-tied on` plans as the main job with the flag: its floor on the tied graph
/// is lower than with `off` by nine tenths of the table of zeros (8192 × 64 f32, 2 MiB) at
/// least (2,081,296 B was measured).
#[test]
fn the_frontier_takes_the_flag() {
    let floor = |flag: &str| {
        let dir = tempfile::tempdir().unwrap();
        let model = root().join(TIED);
        let o = run(&[
            "frontier",
            path_str(&model),
            "--points",
            "2",
            "--fold-tied",
            flag,
            "--out",
            path_str(dir.path()),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let f = std::fs::read_to_string(dir.path().join("frontier.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&f).unwrap();
        v["floor_bytes"].as_u64().unwrap()
    };
    let (off, on) = (floor("off"), floor("on"));
    let table = 8192 * 64 * 4;
    assert!(
        on + table * 9 / 10 <= off,
        "floor {off} B with off, {on} B with on"
    );
}
