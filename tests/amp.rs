//! Mixed-precision training graphs (`tests/fixtures/amp/`): float16 under autocast and pure
//! float16 are planned as ONNX Runtime's CPU provider runs them (float16 nodes without a
//! kernel in float32 between the Casts ORT inserts) and validated to the byte; bfloat16,
//! which the CPU provider cannot run, is refused before any work, naming the nodes.

mod common;

use std::process::Command;

use common::*;

fn amp(name: &str) -> std::path::PathBuf {
    root().join(format!("tests/fixtures/amp/{name}.onnx"))
}

#[test]
fn float16_graphs_are_planned_as_ort_runs_them_and_fit_to_the_byte() {
    for name in ["llama_amp_fp16_makefx", "llama_fp16_makefx"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.onnx");
        let r = validated_run(
            &amp(name),
            "85%",
            &out,
            &["--int-range", "attention_mask=1:2"],
        );
        let m = &r["memory"];
        for side in ["original", "rewritten"] {
            assert_eq!(
                m[side]["predicted_total_bytes"], m[side]["measured_total_bytes"],
                "{name} {side}: {}",
                m[side]
            );
        }
        let ceiling = r["ceiling_bytes"].as_u64().unwrap();
        assert!(m["rewritten"]["measured_total_bytes"].as_u64().unwrap() <= ceiling);
        // The output holds ORT's Casts: ORT inserts none when it loads it.
        let g = ckpt_ir::import_file(&out).unwrap();
        assert!(g.nodes().iter().any(|&n| g
            .node(n)
            .name
            .starts_with(ckpt_passes::ort_casts::INSERTED_CAST_PREFIX)));
        assert!(
            ckpt_passes::ort_casts::lower(&g, ckpt_ir::ort::ORT_VERSION)
                .unwrap()
                .is_none(),
            "{name}: the output is what ORT runs"
        );
    }
}

#[test]
fn bfloat16_on_cpu_is_refused_naming_the_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let model = amp("llama_amp_bf16_makefx");
    let o = run(&[path_str(&model), "--ceiling", "85%", "-o", path_str(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("no kernel for 99 node(s): `node_mm` (MatMul on bf16, bf16)"),
        "{e}"
    );
    assert!(e.contains("--provider cuda"), "{e}");
    assert!(!out.exists());
    // `validate` cannot validate it on this ONNX Runtime: exit 4.
    let o = run(&[
        "validate",
        path_str(&model),
        path_str(&model),
        "--int-range",
        "attention_mask=1:2",
    ]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("`node_mm` (MatMul on bf16, bf16)"));
}

#[test]
fn inspect_names_the_missing_kernels_or_none() {
    let json = |name: &str| -> serde_json::Value {
        let o = run(&["inspect", path_str(&amp(name)), "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    };
    let bf = json("llama_amp_bf16_makefx");
    let missing = bf["missing_kernels"].as_array().unwrap();
    assert_eq!(missing.len(), 99);
    assert_eq!(missing[0]["node"], "node_mm");
    assert!(bf["memory_model_error"].is_string());
    for (name, converted) in [("llama_amp_fp16_makefx", 109), ("llama_fp16_makefx", 191)] {
        let v = json(name);
        assert_eq!(v["missing_kernels"].as_array().unwrap().len(), 0, "{name}");
        assert_eq!(v["ort_fallback"]["converted_nodes"], converted, "{name}");
        assert!(v["predicted_peak_bytes"].as_u64().is_some(), "{name}");
    }
    let fp32 = json_of(&root().join("tests/fixtures/mlp_d0_aot.onnx"));
    assert_eq!(fp32["missing_kernels"].as_array().unwrap().len(), 0);
    assert!(fp32["ort_fallback"].is_null());
}

fn json_of(path: &std::path::Path) -> serde_json::Value {
    let o = run(&["inspect", path_str(path), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// The registry's kernel table is the installed ONNX Runtime's (`scripts/ort_kernels.py`).
#[test]
fn the_kernel_table_is_the_installed_ort_s() {
    let o = Command::new(python())
        .arg(root().join("scripts/ort_kernels.py"))
        .arg("--check")
        .arg(root().join("ir/src/ops/ort_kernels_cpu.tsv"))
        .output()
        .expect("run ort_kernels.py");
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}
