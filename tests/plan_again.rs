//! `--plan-again`: below one pass's floor, a refusal is planned again on the output of the
//! plan at its lowest total, through the binary.

mod common;

use std::path::Path;

use common::*;

/// The main job at `ceiling` bytes without validation, `--plan-again` as `again` says: its
/// exit code and receipt.
fn job(model: &Path, ceiling: u64, out: &Path, again: &str) -> (Option<i32>, serde_json::Value) {
    let receipt = out.with_extension("receipt.json");
    let ceiling = ceiling.to_string();
    let o = run(&[
        path_str(model),
        "--ceiling",
        &ceiling,
        "-o",
        path_str(out),
        "--receipt",
        path_str(&receipt),
        "--plan-again",
        again,
        "--time-limit",
        "300",
    ]);
    let r = std::fs::read_to_string(&receipt).expect("receipt");
    (o.status.code(), serde_json::from_str(&r).expect("json"))
}

/// The 2-layer Llama's ceiling under one pass's floor, and the total of the plan one pass
/// makes at its lowest total there (a block checkpointing cut, +4,649,536 FLOPs), at which
/// one pass refuses too.
const CEILING: u64 = 1_326_448;
const FIRST_TOTAL: u64 = 1_334_800;
const FIRST_FLOPS: u64 = 4_649_536;

fn llama() -> std::path::PathBuf {
    root().join("tests/fixtures/llama_d0_makefx.onnx")
}

/// The 2-layer Llama at 1,326,448 B, under one pass's floor: with `--plan-again off` it is
/// refused and nothing is written. On, plans at and above the lowest total found are made real
/// and their outputs planned at the ceiling. The output validates on ORT: predicted to the
/// byte, run capped, every output bitwise equal. It is the plan two runs make by hand (the
/// plan at the ceiling the receipt names, then its output at the ceiling, each with
/// `--plan-again off`): the same device total, the added FLOPs both plans', the patch the
/// first's followed by the second's, the same graph written. The receipt (and its Markdown)
/// names the first plan's total, and lists both passes' recomputes, the first's first.
#[test]
fn below_one_passs_floor_a_refusal_is_planned_again() {
    let dir = tempfile::tempdir().unwrap();
    let model = llama();
    let ceiling = CEILING;
    let off = dir.path().join("off.onnx");
    let (code, refused) = job(&model, ceiling, &off, "off");
    assert_eq!(code, Some(2), "{refused}");
    assert!(!off.exists());
    let lowest = refused["lowest_reachable_total_bytes"].as_u64().unwrap();
    assert!(lowest > ceiling, "{lowest}");

    let out = dir.path().join("again.onnx");
    let md = dir.path().join("again.md");
    let extra = [
        "--int-range",
        "attention_mask=0:2",
        "--receipt-md",
        path_str(&md),
    ];
    let r = validated_run(&model, &ceiling.to_string(), &out, &extra);
    let (_, measured, predicted) = assert_validated_rewrite(&r, "planned again");
    assert_eq!(measured, predicted, "planned again: predicted to the byte");
    let first_total = r["solver"]["planned_again_from_bytes"].as_u64().unwrap();
    let start = r["solver"]["planned_again_at_ceiling_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        start >= lowest && first_total > ceiling,
        "{start} {first_total}"
    );
    let label = r["solver"]["label"].as_str().unwrap();
    assert!(label.contains(", its output planned again by "), "{label}");
    let md = std::fs::read_to_string(&md).unwrap();
    let first_human = ckpt_opt::size::human(first_total);
    assert!(
        md.contains(&format!(
            "{label} (the first plan's device total: {first_human})"
        )),
        "{md}"
    );
    let passes: Vec<u64> = r["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["pass"].as_u64().unwrap())
        .collect();
    assert!(
        passes.first() == Some(&0) && passes.last() == Some(&1),
        "{passes:?}"
    );
    assert!(passes.windows(2).all(|w| w[0] <= w[1]), "{passes:?}");

    // By hand: the plan at the ceiling the receipt names, then its output at the ceiling.
    let first = dir.path().join("first.onnx");
    let (code, a) = job(&model, start, &first, "off");
    assert_eq!(code, Some(0), "{a}");
    assert_eq!(
        a["ledger"]["after"]["total_bytes"].as_u64(),
        Some(first_total)
    );
    let second = dir.path().join("second.onnx");
    let (code, b) = job(&first, ceiling, &second, "off");
    assert_eq!(code, Some(0), "{b}");
    assert_eq!(
        b["ledger"]["after"]["total_bytes"].as_u64(),
        Some(predicted)
    );
    let flops = |x: &serde_json::Value| x["added_flops"].as_u64().unwrap();
    assert_eq!(flops(&r), flops(&a) + flops(&b));
    // The second pass plans the first plan's output as written and read back.
    let patch = |x: &serde_json::Value| x["patch"].as_str().unwrap().to_string();
    assert_eq!(patch(&r), format!("{}\n{}", patch(&a), patch(&b)));
    let text = |p: &Path| ckpt_ir::print_graph(&ckpt_ir::import_file(p).unwrap());
    assert_eq!(text(&out), text(&second));
}

/// At the first plan's own total (1,334,800 B) one pass refuses too: the search is not
/// monotone in the ceiling. Planned again, that first plan fits as it is, so the plan adds no
/// more than it, and the output records the ceiling asked for, not one a plan was made at.
#[test]
fn a_first_plan_that_fits_as_it_is_records_the_ceiling_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let model = llama();
    let first_total = FIRST_TOTAL;
    let (code, _) = job(&model, first_total, &dir.path().join("x.onnx"), "off");
    assert_eq!(code, Some(2));
    let at_first = dir.path().join("at_first.onnx");
    let (code, c) = job(&model, first_total, &at_first, "on");
    assert_eq!(code, Some(0), "{c}");
    let total = c["ledger"]["after"]["total_bytes"].as_u64().unwrap();
    assert!(total <= first_total, "{total}");
    let added = c["added_flops"].as_u64().unwrap();
    assert!(added > 0 && added <= FIRST_FLOPS, "{added}");
    let g = ckpt_ir::import_file(&at_first).unwrap();
    let recorded = g
        .model()
        .metadata_props
        .iter()
        .find(|p| p.key.as_deref() == Some("ckpt-opt.ceiling_bytes"))
        .and_then(|p| p.value.clone());
    assert_eq!(recorded, Some(first_total.to_string()));
}

/// The 2-layer Llama at 52% of its footprint (1,349,736 B): one pass's plan is a block
/// checkpointing cut adding over a twentieth of a step. With `--plan-again on` it is planned
/// again from the plans at the 2nd, 4th and 6th whole percents above the ceiling, and the
/// plan kept adds less than one pass's. It validates on ORT: predicted to the byte, run
/// capped, every output bitwise equal.
#[test]
fn a_dear_plan_is_planned_again_from_looser_plans() {
    let dir = tempfile::tempdir().unwrap();
    let model = llama();
    let total: u128 = 2_595_648;
    let ceiling = (total * 52 / 100) as u64;
    let (code, one) = job(&model, ceiling, &dir.path().join("one.onnx"), "off");
    assert_eq!(code, Some(0), "{one}");
    let flops = |x: &serde_json::Value| x["added_flops"].as_u64().unwrap();
    let share = one["added_flops_percent"].as_f64().unwrap();
    assert!(share > 5.0, "{share}");

    let out = dir.path().join("again.onnx");
    let extra = ["--int-range", "attention_mask=0:2"];
    let r = validated_run(&model, &ceiling.to_string(), &out, &extra);
    let (_, measured, predicted) = assert_validated_rewrite(&r, "a dear plan planned again");
    assert_eq!(measured, predicted, "predicted to the byte");
    assert!(predicted <= ceiling, "{predicted}");
    assert!(
        flops(&r) < flops(&one),
        "{} against {}",
        flops(&r),
        flops(&one)
    );
    let start = r["solver"]["planned_again_at_ceiling_bytes"]
        .as_u64()
        .unwrap();
    let starts: Vec<u64> = [54u128, 56, 58]
        .iter()
        .map(|p| (total * p / 100) as u64)
        .collect();
    assert!(starts.contains(&start), "{start}");
}
