//! The runtime edge of the CLI: inputs, providers, ORT builds without training ops, symbolic
//! training artifacts.

mod common;

use common::*;

#[test]
fn integer_input_without_a_range_is_refused_by_name_and_npy_overrides_it() {
    let f = root().join("tests/fixtures/hfgpt2_d0_aot.onnx");
    let o = run(&["validate", path_str(&f), path_str(&f), "--runs", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("attention_mask") && stderr(&o).contains("--int-range"),
        "{}",
        stderr(&o)
    );
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("mask.npy");
    let ones =
        ckpt_runtime::HostTensor::from_values("attention_mask", vec![2, 32], &vec![1i64; 64])
            .unwrap();
    ckpt_runtime::write_npy(&npy, &ones).unwrap();
    let arg = format!("attention_mask={}", npy.display());
    let o = run(&[
        "validate",
        path_str(&f),
        path_str(&f),
        "--runs",
        "1",
        "--input",
        &arg,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["validation"]["input_generation"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s.as_str().unwrap().contains("mask.npy")));
}

#[test]
fn cuda_without_cuda_is_a_clear_error() {
    let f = root().join("tests/fixtures/mlp_d0_aot.onnx");
    let o = run(&[
        "validate",
        path_str(&f),
        path_str(&f),
        "--provider",
        "cuda",
        "--runs",
        "1",
    ]);
    // Could not validate: exit 4.
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("onnxruntime-gpu==1.31.1"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn training_artifacts_plan_with_bindings_and_name_missing_training_ops() {
    let f = root().join("tests/fixtures/ort_gpt2_training.onnx");
    let o = run(&[
        "inspect",
        path_str(&f),
        "--dim",
        "batch=2",
        "--dim",
        "seq=32",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let total = v["ledger"]["total_bytes"].as_u64().unwrap();
    assert!(
        v["ledger"]["optimizer_state_bytes"].as_u64().unwrap() > 0,
        "accumulation buffers"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.onnx");
    let c = (total * 90 / 100).to_string();
    let o = run(&[
        path_str(&f),
        "--dim",
        "batch=2",
        "--dim",
        "seq=32",
        "--ceiling",
        &c,
        "-o",
        path_str(&out),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(r["predicted_peak_bytes"]["after"].as_u64().unwrap() <= total * 90 / 100);
    // Where each need is decided: a boundary at or below the need, at a named node.
    for side in ["before", "after"] {
        let need = r["predicted_device_arena_bytes"][side].as_u64().unwrap();
        assert_arena_binding(&r["arena_binding"][side], need);
    }
    // Without bindings the symbolic dims cannot be sized: a clear error, exit 1.
    let o = run(&[path_str(&f), "--ceiling", &c]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--dim"), "{}", stderr(&o));
    // Training ops run only on the training runtime: without it, validation says what it
    // needs and how to get it.
    let m = root().join("tests/fixtures/ort_mlp_training.onnx");
    let o = bin()
        .args([
            "validate",
            path_str(&m),
            path_str(&m),
            "--dim",
            "batch=8",
            "--runs",
            "1",
        ])
        .env("CKPT_OPT_ORT_TRAINING", "off")
        .output()
        .unwrap();
    // Could not validate: exit 4.
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("onnxruntime-training 1.19.2")
            && stderr(&o).contains("CKPT_OPT_ORT_TRAINING_VENV"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn declared_optimizer_state_enters_the_ledger() {
    let f = root().join("tests/fixtures/mlp_d0_aot.onnx");
    let ledger = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["inspect", path_str(&f), "--json"];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str::<serde_json::Value>(&stdout(&o)).unwrap()["ledger"].clone()
    };
    let none = ledger(&[]);
    let adam = ledger(&["--optimizer", "adamw"]);
    let adam16 = ledger(&["--optimizer", "adam", "--optimizer-dtype", "bf16"]);
    let params = none["parameters_bytes"].as_u64().unwrap();
    assert_eq!(none["optimizer_state_bytes"], 0);
    assert_eq!(
        adam["optimizer_state_bytes"].as_u64().unwrap(),
        2 * params,
        "two f32 moments per parameter"
    );
    assert_eq!(
        adam16["optimizer_state_bytes"].as_u64().unwrap(),
        params,
        "two bf16 moments"
    );
    assert_eq!(
        adam["total_bytes"].as_u64().unwrap(),
        none["total_bytes"].as_u64().unwrap() + 2 * params
    );
}
