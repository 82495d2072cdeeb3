//! Optimization levels end to end: at `--ort-opt-level basic|extended|all` the main job plans
//! the graph ORT saves at that level (its offline mode), writes it for loading at `disable`,
//! records both levels, and `--validate` passes: values against the original run online at
//! the level, the device need of both graphs within 1% of ORT's, the rewrite under its
//! ceiling.

mod common;

use common::*;

use ckpt_ir::profile::OptLevel;
use ckpt_ir::Profile;

const LEVELS: [&str; 3] = ["basic", "extended", "all"];

fn recorded_profile(g: &ckpt_ir::Graph) -> Profile {
    Profile::from_metadata(
        g.model()
            .metadata_props
            .iter()
            .filter_map(|p| Some((p.key.as_deref()?, p.value.as_deref()?))),
    )
    .unwrap()
    .expect("a recorded profile")
}

/// The main job at `level` with `--validate` on `model` at `ceiling` (a share of its
/// predicted device total at that level):
/// exit 0, rewritten, validation and the memory check passed, both predictions within 1%,
/// and the output records level `disable`, optimized offline at `level`.
fn job_passes_at(model: &std::path::Path, level: &str, ceiling: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let receipt = dir.path().join("receipt.json");
    let mut args = vec![
        path_str(model),
        "--ceiling",
        ceiling,
        "--ort-opt-level",
        level,
        "-o",
        path_str(&out),
        "--validate",
        "--runs",
        "1",
        "--receipt",
        path_str(&receipt),
    ];
    // The HF models' attention mask has no consumer that bounds it.
    if model.to_string_lossy().contains("hfgpt2") || model.to_string_lossy().contains("llama") {
        args.extend(["--int-range", "attention_mask=1:2"]);
    }
    let o = run(&args);
    let label = format!("{} at level {level}", model.display());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{label}\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_eq!(r["status"], "rewritten", "{label}");
    assert_eq!(r["validation"]["passed"], true, "{label}");
    let m = &r["memory"];
    assert_eq!(m["passed"], true, "{label}: {m:#}");
    for which in ["original", "rewritten"] {
        let e = m[which]["relative_error"].as_f64().unwrap();
        assert!(
            e.abs() <= 0.01,
            "{label}: the {which} graph's device need predicted {} vs measured {} ({:+.2}%)",
            m[which]["predicted_arena_bytes"],
            m[which]["measured_arena_bytes"],
            100.0 * e
        );
    }
    assert!(
        m["rewritten"]["measured_total_bytes"].as_u64().unwrap()
            <= r["ceiling_bytes"].as_u64().unwrap(),
        "{label}: {m:#}"
    );
    assert_eq!(
        r["profile"]["ckpt-opt.profile.graph_optimization_level"], "disable",
        "{label}"
    );
    assert_eq!(
        r["profile"]["ckpt-opt.profile.offline_optimization_level"], level,
        "{label}"
    );
    // The values were compared with the original run online at the level; the rewrite ran
    // at level disable.
    assert_eq!(
        r["validation"]["session"]["opt_level"], "disable",
        "{label}: {}",
        r["validation"]["session"]
    );
    let g = ckpt_ir::import_file(&out).unwrap();
    // The plan is of ORT's graph: from level extended on, ORT fuses transposes into
    // FusedMatMul on every model tested here, at basic it fuses nothing.
    let fused = count(&g, "FusedMatMul");
    if level == "basic" {
        assert_eq!(fused, 0, "{label}");
    } else {
        assert!(fused > 0, "{label}: no FusedMatMul in the output");
    }
    let p = recorded_profile(&g);
    assert_eq!(p.graph_optimization_level, OptLevel::Disable, "{label}");
    assert_eq!(
        p.offline_optimization_level,
        Some(level.parse().unwrap()),
        "{label}"
    );
}

fn count(g: &ckpt_ir::Graph, op: &str) -> usize {
    g.nodes()
        .iter()
        .filter(|&&n| g.node(n).domain == "com.microsoft" && g.node(n).op_type == op)
        .count()
}

fn fixture(name: &str) -> std::path::PathBuf {
    root().join(format!("tests/fixtures/{name}.onnx"))
}

#[test]
fn example_passes_at_every_level() {
    for level in LEVELS {
        job_passes_at(&root().join("examples/gpt2_4l_train.onnx"), level, "90%");
    }
}

#[test]
fn gpt2_passes_at_every_level() {
    for level in LEVELS {
        job_passes_at(&fixture("hfgpt2_d0_aot"), level, "95%");
    }
}

#[test]
fn llama_passes_at_every_level() {
    for level in LEVELS {
        job_passes_at(&fixture("llama_d0_makefx"), level, "95%");
    }
}

#[test]
fn vit_passes_at_every_level() {
    for level in LEVELS {
        job_passes_at(&fixture("vit_d0_aot"), level, "95%");
    }
}

/// At level all the graph written is ORT's fused graph: the MLP (which fits its ceiling
/// as optimized) is written with the `FusedGemm` and `FusedMatMul` nodes ORT made of its
/// first Gemm+Relu and its transposed weight gradients; the file the tool was given has none.
/// `validate` of that output, which reads the recorded levels, passes too.
#[test]
fn level_all_output_has_the_fused_ops_and_validates() {
    let model = fixture("mlp_d0_aot");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let o = run(&[
        path_str(&model),
        "--ceiling",
        "100%",
        "--ort-opt-level",
        "all",
        "-o",
        path_str(&out),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let given = ckpt_ir::import_file(&model).unwrap();
    let written = ckpt_ir::import_file(&out).unwrap();
    assert_eq!(count(&given, "FusedGemm") + count(&given, "FusedMatMul"), 0);
    assert!(count(&written, "FusedGemm") >= 1, "no FusedGemm");
    assert!(count(&written, "FusedMatMul") >= 3, "no FusedMatMul");
    let p = recorded_profile(&written);
    assert_eq!(p.graph_optimization_level, OptLevel::Disable);
    assert_eq!(p.offline_optimization_level, Some(OptLevel::All));
    assert!(
        stdout(&o).contains("level disable (optimized offline at all)"),
        "{}",
        stdout(&o)
    );
    let v = run(&[
        "validate",
        path_str(&model),
        path_str(&out),
        "--runs",
        "1",
        "--json",
    ]);
    assert_eq!(v.status.code(), Some(0), "{}\n{}", stdout(&v), stderr(&v));
    let j: serde_json::Value = serde_json::from_str(&stdout(&v)).unwrap();
    assert_eq!(j["memory"]["passed"], true, "{:#}", j["memory"]);
    assert_eq!(j["validation"]["passed"], true);
}

/// At level `disable` nothing is optimized offline: no offline key is recorded.
#[test]
fn level_disable_records_no_offline_level() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let o = run(&[
        path_str(&fixture("mlp_d0_aot")),
        "--ceiling",
        "100%",
        "-o",
        path_str(&out),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let g = ckpt_ir::import_file(&out).unwrap();
    assert!(!g
        .model()
        .metadata_props
        .iter()
        .any(|p| p.key.as_deref() == Some("ckpt-opt.profile.offline_optimization_level")));
    assert_eq!(recorded_profile(&g).offline_optimization_level, None);
}
