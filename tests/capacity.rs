//! `ckpt-opt capacity`: the largest batch and the largest seq that fit a ceiling, with and
//! without recompute, each checked one step above by planning and simulating it.

mod common;

use common::{path_str, root, run, stderr, stdout};
use serde_json::Value;

fn model() -> std::path::PathBuf {
    root().join("tests/fixtures/symbolic/gpt2_d0_dynamic.onnx")
}

/// The predicted device total of the unmodified graph at `m` and the bindings (`inspect`, independent of
/// the capacity search).
fn total_of(m: &std::path::Path, dims: &[&str]) -> u64 {
    let mut args = vec!["inspect", path_str(m), "--json"];
    for d in dims {
        args.extend(["--dim", d]);
    }
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["ledger"]["total_bytes"].as_u64().unwrap()
}

fn capacity(args: &[&str]) -> Value {
    capacity_of(&model(), args)
}

/// [`capacity`] of the model at `m`.
fn capacity_of(m: &std::path::Path, args: &[&str]) -> Value {
    let mut a = vec!["capacity", path_str(m), "--json", "--time-limit", "120"];
    a.extend(args);
    let o = run(&a);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn check(c: &Value, dim: &str, other: &str, ceiling: u64) {
    check_of(&model(), c, dim, other, ceiling)
}

/// [`check`] of the model at `m`.
fn check_of(m: &std::path::Path, c: &Value, dim: &str, other: &str, ceiling: u64) {
    let total = |dims: &[&str]| total_of(m, dims);
    let nr = c["no_recompute"]["max_value"]
        .as_u64()
        .expect("no_recompute.max_value");
    let wr = c["with_recompute"]["max_value"]
        .as_u64()
        .expect("with_recompute.max_value");
    // No recompute: the answer fits and one above does not, by inspect's own ledger.
    assert!(total(&[&format!("{dim}={nr}"), other]) <= ceiling, "{c}");
    assert!(
        total(&[&format!("{dim}={}", nr + 1), other]) > ceiling,
        "{c}"
    );
    // With recompute: a larger value, a plan under the ceiling that adds FLOPs, and one step
    // above planned and simulated: it does not fit.
    assert!(wr > nr, "recompute should unlock more than {nr}: {c}");
    let w = &c["with_recompute"];
    // The estimated step-time increase is the added FLOPs' share of the step (moves add none).
    let added = w["added_flops"].as_u64().unwrap() as f64;
    let step = w["step_flops"].as_u64().unwrap() as f64;
    assert!(
        (w["step_time_increase_percent"].as_f64().unwrap() - 100.0 * added / step).abs() < 1e-9,
        "{c}"
    );
    assert!(
        w["predicted_peak_bytes"].as_u64().unwrap() <= ceiling,
        "{c}"
    );
    assert!(
        total(&[&format!("{dim}={wr}"), other]) > ceiling,
        "{wr} fits without recompute: {c}"
    );
    let above = &w["above"];
    assert_eq!(above["value"].as_u64(), Some(wr + 1), "{c}");
    assert_eq!(above["fits"].as_bool(), Some(false), "{c}");
    assert!(
        above["predicted_peak_bytes"].as_u64().unwrap() > ceiling,
        "{c}"
    );
    assert_eq!(
        c["no_recompute"]["above"]["fits"].as_bool(),
        Some(false),
        "{c}"
    );
    // Throughput is estimated relative to no recompute; accumulation stands beside it.
    let rel = w["throughput_relative"].as_f64().unwrap();
    assert!(rel > 0.0 && rel.is_finite(), "{c}");
    assert_eq!(c["accumulation"]["microbatch"].as_u64(), Some(nr));
    assert!(c["accumulation"]["steps"].as_u64().unwrap() * nr >= wr);
}

/// The batch search of [`capacity_finds_the_largest_batch_checked_one_above`].
const BATCH_AT_6MB: [&str; 8] = [
    "--dim",
    "batch",
    "--dim",
    "seq=32",
    "--ceiling",
    "6000000",
    "--max",
    "64",
];

#[test]
fn capacity_finds_the_largest_batch_checked_one_above() {
    let ceiling = 6_000_000u64;
    // With --out the answer printed is also written as capacity.json beside a Markdown summary.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap");
    let mut args = BATCH_AT_6MB.to_vec();
    args.extend(["--out", path_str(&out)]);
    let written = capacity(&args);
    let c = written.clone();
    check(&c, "batch", "seq=32", ceiling);
    assert_eq!(c["items"], "samples");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("capacity.json")).unwrap()).unwrap();
    assert_eq!(file, written);
    assert_eq!(
        file["no_recompute"]["max_value"],
        c["no_recompute"]["max_value"]
    );
    let md = std::fs::read_to_string(out.join("capacity.md")).unwrap();
    assert!(md.starts_with("# Capacity: "), "{md}");
    assert!(md.contains("| no recompute | "), "{md}");
    assert!(
        md.contains(&format!(
            "| with recompute | {} |",
            file["with_recompute"]["max_value"]
        )),
        "{md}"
    );
}

#[test]
fn capacity_finds_the_largest_seq_checked_one_above() {
    // Under the fixture's 32 positions: seq=32 fits 2.7 MB with its copies folded, and its
    // lowest total found is 2.55 MiB.
    let ceiling = 2_650_000u64;
    let c = capacity(&[
        "--dim",
        "seq",
        "--dim",
        "batch=4",
        "--ceiling",
        "2650000",
        "--max",
        "32",
    ]);
    check(&c, "seq", "batch=4", ceiling);
    assert_eq!(c["items"], "tokens");
}

#[test]
fn capacity_refuses_a_bound_or_missing_search_dim() {
    let m = model();
    let o = run(&[
        "capacity",
        path_str(&m),
        "--ceiling",
        "6MB",
        "--dim",
        "seq=32",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bare name"), "{}", stderr(&o));
    let o = run(&[
        "capacity",
        path_str(&m),
        "--ceiling",
        "6MB",
        "--dim",
        "width",
        "--dim",
        "seq=32",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a symbolic dim"), "{}", stderr(&o));
    let o = run(&[
        "capacity",
        path_str(&m),
        "--ceiling",
        "6MB",
        "--dim",
        "batch",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--dim seq=VALUE"), "{}", stderr(&o));
}

/// An ORT training artifact (onnxruntime-training's `generate_artifacts`, symbolic batch and
/// seq), plan only: the capacity search runs on the training runtime's graph without running
/// it, and each answer holds by inspect's ledger and the check one above.
#[test]
fn capacity_plans_an_ort_training_artifact() {
    let m = root().join("tests/fixtures/ort_gpt2_training.onnx");
    let c = capacity_of(
        &m,
        &[
            "--dim",
            "batch",
            "--dim",
            "seq=16",
            "--ceiling",
            "3000000",
            "--max",
            "32",
        ],
    );
    check_of(&m, &c, "batch", "seq=16", 3_000_000);
}

/// The main job with the flags of a capacity search and `--dim DIM=VALUE`: its exit code and
/// receipt.
fn main_job_at(m: &std::path::Path, ceiling: &str, binding: &str) -> (Option<i32>, Value) {
    main_job_at_dims(m, ceiling, &[binding])
}

/// [`main_job_at`] with several `--dim` bindings.
fn main_job_at_dims(m: &std::path::Path, ceiling: &str, dims: &[&str]) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let (out, receipt) = (dir.path().join("out.onnx"), dir.path().join("r.json"));
    // Capacity plans one pass by default (`--plan-again off`): so is the main job run here.
    let mut args = vec![
        path_str(m),
        "--ceiling",
        ceiling,
        "--time-limit",
        "120",
        "--plan-again",
        "off",
    ];
    for d in dims {
        args.extend(["--dim", d]);
    }
    args.extend(["-o", path_str(&out), "--receipt", path_str(&receipt)]);
    let o = run(&args);
    let r = serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap())
        .unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (o.status.code(), r)
}

/// Capacity's answer is what the main job plans: on the ORT MLP artifact (planned under
/// onnxruntime-training's model, as the main job plans it) at 256 KiB, the main job at the
/// answer writes the same plan (its total and added FLOPs), and at one above refuses (exit 2).
#[test]
fn capacity_answers_are_what_the_main_job_plans() {
    let m = root().join("tests/fixtures/ort_mlp_training.onnx");
    let ceiling = "262144";
    let c = capacity_of(
        &m,
        &["--dim", "batch", "--ceiling", ceiling, "--max", "512"],
    );
    let w = &c["with_recompute"];
    let wr = w["max_value"].as_u64().expect("with_recompute.max_value");
    assert!(
        wr < 512,
        "the search must end below --max for the check above: {c}"
    );
    let (code, r) = main_job_at(&m, ceiling, &format!("batch={wr}"));
    assert_eq!(code, Some(0), "{r}");
    let total = r["predicted_peak_bytes"]["after"]
        .as_u64()
        .or(r["predicted_peak_bytes"]["before"].as_u64())
        .unwrap();
    assert_eq!(Some(total), w["predicted_peak_bytes"].as_u64(), "{r}\n{c}");
    assert_eq!(r["added_flops"], w["added_flops"], "{r}\n{c}");
    let (code, r) = main_job_at(&m, ceiling, &format!("batch={}", wr + 1));
    assert_eq!(code, Some(2), "{r}");
}

/// The symbolic fixture with an input `mask` of shape `[batch_x_seq]`, multiplied into the
/// flattened `input_ids` (inference assumes `batch*seq == batch_x_seq`), the product a graph
/// output.
fn with_a_following_dim(dir: &std::path::Path) -> std::path::PathBuf {
    use ckpt_ir::build::value_info;
    use ckpt_ir::{onnx, DType, Message};
    let bytes = std::fs::read(model()).unwrap();
    let mut m = onnx::ModelProto::decode(bytes.as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    g.input.push(value_info("mask", DType::I64, "batch_x_seq"));
    g.initializer.push(onnx::TensorProto {
        name: Some("flat_shape".into()),
        dims: vec![1],
        data_type: Some(DType::I64.code()),
        int64_data: vec![-1],
        ..Default::default()
    });
    let node = |op: &str, inputs: [&str; 2], output: &str| onnx::NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{output}")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    };
    g.node
        .push(node("Reshape", ["input_ids", "flat_shape"], "ids_flat"));
    g.node.push(node("Mul", ["ids_flat", "mask"], "masked_ids"));
    g.output
        .push(value_info("masked_ids", DType::I64, "batch_x_seq"));
    let p = dir.join("masked.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

/// A dim that follows the searched one needs no binding: `batch_x_seq` is derived from
/// `batch*seq` at each value searched, and the main job at the answer, given `batch` and
/// `seq` only, plans it too.
#[test]
fn capacity_derives_the_dims_that_follow_the_searched_one() {
    let dir = tempfile::tempdir().unwrap();
    let m = with_a_following_dim(dir.path());
    let c = capacity_of(&m, &BATCH_AT_6MB);
    let wr = c["with_recompute"]["max_value"]
        .as_u64()
        .expect("with_recompute.max_value");
    let (code, r) = main_job_at_dims(&m, "6000000", &[&format!("batch={wr}"), "seq=32"]);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(
        r["added_flops"], c["with_recompute"]["added_flops"],
        "{r}\n{c}"
    );
}
