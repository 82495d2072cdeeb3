//! What the main job checks before it publishes anything: the input against ONNX's rules at
//! import, and, without `--validate`, the output as staged loaded by ONNX Runtime (recorded in
//! the receipt's `output_load`), through the binary.

mod common;

use ckpt_ir::onnx;
use ckpt_ir::Message;
use common::*;

fn example() -> std::path::PathBuf {
    root().join("examples/gpt2_4l_train.onnx")
}

/// The example with `f` applied, written into `dir` as `in.onnx`.
fn example_with(
    dir: &std::path::Path,
    f: impl FnOnce(&mut onnx::ModelProto),
) -> std::path::PathBuf {
    let bytes = std::fs::read(example()).unwrap();
    let mut m = onnx::ModelProto::decode(bytes.as_slice()).unwrap();
    f(&mut m);
    let path = dir.join("in.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path
}

/// A node with an attribute its op's schema does not name breaks ONNX's rules (the checker
/// refuses it): refused at import, exit 1, naming the node and the attribute, nothing written.
#[test]
fn an_input_that_breaks_its_ops_schema_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let mut label = String::new();
    let model = example_with(dir.path(), |m| {
        let g = m.graph.as_mut().unwrap();
        let n = &mut g.node[0];
        label = n.name.clone().unwrap_or_default();
        n.attribute.push(onnx::AttributeProto {
            name: Some("bogus".into()),
            r#type: Some(onnx::attribute_proto::AttributeType::Int as i32),
            i: Some(1),
            ..Default::default()
        });
    });
    assert!(!label.is_empty());
    let (out, receipt) = (dir.path().join("out.onnx"), dir.path().join("r.json"));
    let o = run(&[
        path_str(&model),
        "--ceiling",
        "90%",
        "-o",
        path_str(&out),
        "--receipt",
        path_str(&receipt),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains(&label) && e.contains("`bogus`"), "{e}");
    assert!(e.contains("does not meet the schema"), "{e}");
    assert!(!out.exists() && !receipt.exists());
}

/// The example planned at 90% with `extra` flags and without `--validate`: exit 0, the
/// output written, and its receipt, valid under the schema (checked as `label`).
fn planned_receipt(extra: &[&str], label: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let (out, receipt) = (dir.path().join("out.onnx"), dir.path().join("r.json"));
    let model = example();
    let mut args = vec![
        path_str(&model),
        "--ceiling",
        "90%",
        "-o",
        path_str(&out),
        "--receipt",
        path_str(&receipt),
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.exists());
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_receipt_valid(&r, label);
    r
}

/// Without `--validate`, ONNX Runtime loads the output as staged before it is published; the
/// receipt says so, with the version that loaded it.
#[test]
fn without_validate_the_output_is_loaded_on_onnx_runtime_before_it_is_published() {
    let r = planned_receipt(&[], "load check");
    assert_eq!(r["output_load"]["result"], "loaded", "{}", r["output_load"]);
    assert_eq!(
        r["output_load"]["ort_version"],
        ckpt_ir::ort::ORT_VERSION,
        "{}",
        r["output_load"]
    );
}

/// With no ONNX Runtime to load it on, the output is still published (the rules were
/// checked), and the receipt says the load check did not run, naming the library tried.
#[test]
fn without_a_runtime_the_receipt_says_the_load_check_did_not_run() {
    let lib = "/nonexistent/libonnxruntime.so";
    let r = planned_receipt(&["--ort-lib", lib], "load check not run");
    assert_eq!(
        r["output_load"]["result"], "not_run",
        "{}",
        r["output_load"]
    );
    let why = r["output_load"]["reason"].as_str().unwrap();
    assert!(why.contains(lib), "{why}");
}

/// An input that ONNX's rules and its checker accept and ONNX Runtime refuses (a `Relu` of an
/// int16, which ONNX allows and no CPU kernel runs): its output is refused too, and the run
/// blames the input (exit 1, naming it and ORT's refusal), not itself; nothing is written.
#[test]
fn an_output_refused_like_its_input_is_the_inputs_fault() {
    let dir = tempfile::tempdir().unwrap();
    let model = example_with(dir.path(), |m| {
        let g = m.graph.as_mut().unwrap();
        g.initializer.push(onnx::TensorProto {
            name: Some("small".into()),
            dims: vec![1],
            data_type: Some(ckpt_ir::DType::I16.code()),
            int32_data: vec![-3],
            ..Default::default()
        });
        g.node.push(onnx::NodeProto {
            op_type: Some("Relu".into()),
            name: Some("rectified".into()),
            input: vec!["small".into()],
            output: vec!["rectified_small".into()],
            ..Default::default()
        });
        g.output.push(ckpt_ir::build::value_info(
            "rectified_small",
            ckpt_ir::DType::I16,
            "1",
        ));
    });
    let (out, receipt) = (dir.path().join("out.onnx"), dir.path().join("r.json"));
    let o = run(&[
        path_str(&model),
        "--ceiling",
        "90%",
        "-o",
        path_str(&out),
        "--receipt",
        path_str(&receipt),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("ONNX Runtime refuses") && e.contains("in.onnx") && e.contains("Relu"),
        "{e}"
    );
    assert!(!e.contains("internal error"), "{e}");
    assert!(!out.exists() && !receipt.exists());
}
