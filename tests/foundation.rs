//! The foundation on the real fixture corpus: lossless round trip, text form, inspect,
//! and bad input through the CLI.

mod common;

use ckpt_ir::{export, import_file, onnx, print_graph, Message};
use common::*;

#[test]
fn every_fixture_round_trips_losslessly() {
    let all = fixtures();
    assert!(all.len() >= 16, "fixture corpus incomplete: {}", all.len());
    for f in all {
        let bytes = std::fs::read(&f.path).unwrap();
        let original = onnx::ModelProto::decode(bytes.as_slice()).unwrap();
        let g = import_file(&f.path).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        ckpt_ir::verify(&g).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let out = export(&g);
        assert!(
            out == original,
            "{}: export(import(f)) differs from f",
            f.name
        );
        assert!(
            ckpt_ir::export_bytes(&g) == bytes,
            "{}: re-encoding is not byte-identical",
            f.name
        );
    }
}

#[test]
fn text_form_of_every_fixture() {
    for f in fixtures() {
        let g = import_file(&f.path).unwrap();
        insta::assert_snapshot!(format!("text_{}", f.name), print_graph(&g));
    }
}

#[test]
fn inspect_works_on_every_fixture() {
    for f in fixtures() {
        let o = run(&["inspect", path_str(&f.path), "--json"]);
        assert!(o.status.success(), "{}: {}", f.name, stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert!(v["nodes"].as_u64().unwrap() > 10, "{}", f.name);
        assert!(v["ir_version"].as_i64().unwrap() >= 8, "{}", f.name);
        let params = f.manifest["parameter_inputs"]
            .as_array()
            .map_or(0, |a| a.len()) as u64;
        assert_eq!(
            v["parameters"]["count"].as_u64(),
            Some(params),
            "{}: parameter count",
            f.name
        );
        if f.kind == "std" {
            assert!(
                v["predicted_peak_bytes"].as_u64().unwrap() > 0,
                "{}",
                f.name
            );
            for key in [
                "parameters_bytes",
                "gradients_bytes",
                "optimizer_state_bytes",
                "saved_activations_bytes",
                "saved_activations_count",
            ] {
                assert!(v["ledger"][key].is_u64(), "{}: ledger.{key}", f.name);
            }
            assert!(
                v["ledger"]["saved_activations_count"].as_u64().unwrap() > 0,
                "{}",
                f.name
            );
            assert!(
                v["peak"]["phase"].is_string() && v["peak"]["node"].is_string(),
                "{}",
                f.name
            );
        }
        let o = run(&["inspect", path_str(&f.path)]);
        assert!(o.status.success(), "{}", f.name);
        assert!(stdout(&o).contains("parameters"), "{}", f.name);
    }
}

#[test]
fn bad_input_exits_1_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty.onnx", vec![]),
        ("truncated.onnx", {
            let b = std::fs::read(root().join("tests/fixtures/mlp_d0_aot.onnx")).unwrap();
            b[..b.len() / 3].to_vec()
        }),
        ("garbage.onnx", b"\xff\xfe\xfd not protobuf at all".to_vec()),
    ];
    for (name, bytes) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        for cmd in ["inspect", "print"] {
            let o = run(&[cmd, path_str(&p)]);
            assert_eq!(o.status.code(), Some(1), "{cmd} {name}");
            assert!(stderr(&o).contains(name), "{cmd} {name}: {}", stderr(&o));
            assert!(!stderr(&o).contains("panicked"), "{cmd} {name}");
        }
    }
    let o = run(&["inspect", "/no/such/model.onnx"]);
    assert_eq!(o.status.code(), Some(1));
    let o = run(&[
        "inspect",
        path_str(&root().join("tests/fixtures/mlp_d0_aot.onnx")),
        "--dim",
        "seq",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("NAME=VALUE"));
    let o = run(&["--frobnicate"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn symbolic_dims_are_reported_and_bindable() {
    let p = root().join("tests/fixtures/ort_mlp_training.onnx");
    let o = run(&["inspect", path_str(&p), "--json", "--dim", "batch=8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["symbolic_dims"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d == "batch"));
    assert_eq!(v["bindings"]["batch"], 8);
}
