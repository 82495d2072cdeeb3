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
    Profile::from_model(g.model())
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
    let name = model.to_string_lossy();
    if ["hfgpt2", "llama", "t5"].iter().any(|m| name.contains(m)) {
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

/// T5 at level extended: ORT's constant folding turns the tied embedding's all-zero gradient
/// (`ConstantOfShape`) into an initializer that is a graph output, which ORT copies into the
/// arena when the run starts; predicted within 1%, the rewrite included.
#[test]
fn t5_passes_at_extended() {
    job_passes_at(&fixture("t5_d0_makefx"), "extended", "95%");
}

/// A float tensor attribute (a `Constant`'s `value`).
fn tensor_attr(name: &str, dims: &[i64], values: &[f32]) -> ckpt_ir::onnx::AttributeProto {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    ckpt_ir::onnx::AttributeProto {
        name: Some(name.into()),
        r#type: Some(ckpt_ir::onnx::attribute_proto::AttributeType::Tensor as i32),
        t: Some(ckpt_ir::onnx::TensorProto {
            dims: dims.to_vec(),
            data_type: Some(ckpt_ir::DType::F32.code()),
            raw_data: Some(raw.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A graph output that is an initializer or a `Constant` node's value costs an arena buffer of
/// its size for the whole run (ORT copies it at the frame's creation); a graph input that is
/// an output costs nothing. Each is predicted to the byte.
#[test]
fn constant_graph_outputs_are_copied_into_the_arena() {
    use ckpt_ir::build::ModelBuilder;
    use ckpt_ir::DType;
    let body = |m: ModelBuilder| {
        m.input("x", DType::F32, "64,256")
            .node("Relu", &["x"], &["a"])
            .node("Sigmoid", &["a"], &["b"])
            .node("Add", &["a", "b"], &["d"])
            .node("ReduceSum", &["d"], &["y"])
            .output("y", DType::F32, "1,1")
    };
    let zeros = vec![0f32; 256 * 64];
    let plain = body(ModelBuilder::new(17)).bytes();
    let (base, base_ort, _) = exact_peaks(&plain, "plain.onnx");
    assert_eq!(base, base_ort);
    let init = body(ModelBuilder::new(17))
        .init_f32("c", &[256, 64], &zeros)
        .output("c", DType::F32, "256,64")
        .bytes();
    let constant = body(ModelBuilder::new(17))
        .node_with(
            "Constant",
            &[],
            &["c"],
            vec![tensor_attr("value", &[256, 64], &zeros)],
        )
        .output("c", DType::F32, "256,64")
        .bytes();
    for (what, bytes) in [("initializer", init), ("Constant", constant)] {
        let (pred, meas, _) = exact_peaks(&bytes, "out.onnx");
        assert_eq!(
            pred, meas,
            "{what} output: predicted {pred}, measured {meas}"
        );
        assert_eq!(pred, base + 256 * 64 * 4, "{what} output");
    }
    let input = body(ModelBuilder::new(17))
        .input("z", DType::F32, "256,64")
        .output("z", DType::F32, "256,64")
        .bytes();
    let (pred, meas, _) = exact_peaks(&input, "input_out.onnx");
    assert_eq!((pred, meas), (base, base), "a graph input as output");
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

/// The peak of `bytes` (exact arena, level disable, one intra-op thread: MLAS sizes Conv's
/// working buffer per thread): predicted by the simulator, measured by ORT, and the simulated
/// graph.
fn exact_peaks(bytes: &[u8], label: &str) -> (u64, u64, ckpt_ir::Graph) {
    use ckpt_passes::memory::{schedule, simulate};
    let g =
        ckpt_ir::import_bytes(bytes.to_vec().into(), std::path::Path::new(label), None).unwrap();
    let (g, _) = ckpt_planner::with_inferred_types(g).unwrap();
    let b = ckpt_ir::Bindings::new();
    let sim = simulate(&g, &schedule(&g).unwrap(), &b).unwrap();
    let o = ckpt_validate::inputs::InputOverrides::parse(&[], &[]).unwrap();
    let inputs = ckpt_validate::inputs::make_inputs(&g, &b, 7, &o, &[])
        .unwrap()
        .0;
    let cfg = ckpt_runtime::SessionConfig {
        opt_level: ckpt_runtime::OptLevel::Disable,
        arena: ckpt_runtime::Arena::Exact,
        intra_threads: Some(1),
        ..Default::default()
    };
    let measured =
        ckpt_runtime::measure_peak(ckpt_runtime::Model::new(label, bytes), &inputs, &cfg)
            .unwrap()
            .peak_bytes;
    (sim.peak_live, measured, g)
}

/// A 3×3 Conv (padding 1) over `x` [1,16,32,32] with weights `w` and bias `b` (graph inputs,
/// as in training graphs), then a Relu: ORT fuses them into `FusedConv` from level extended.
fn conv_relu() -> ckpt_ir::build::ModelBuilder {
    use ckpt_ir::build::{attr_ints, ModelBuilder};
    use ckpt_ir::DType;
    ModelBuilder::new(17)
        .input("x", DType::F32, "1,16,32,32")
        .input("w", DType::F32, "16,16,3,3")
        .input("b", DType::F32, "16")
        .node_with(
            "Conv",
            &["x", "w", "b"],
            &["c"],
            vec![attr_ints("pads", &[1, 1, 1, 1])],
        )
        .node("Relu", &["c"], &["y"])
        .output("y", DType::F32, "1,16,32,32")
}

/// ORT 1.31.1 fuses Conv + Relu into `FusedConv` at level extended even with the weights as
/// graph inputs; the registry's FusedConv (Conv's shapes and MLAS working buffer) predicts the
/// saved graph's peak to the byte, and its scratch is the Conv's.
#[test]
fn fused_conv_is_predicted_to_the_byte() {
    let given = conv_relu().bytes();
    let cfg = ckpt_runtime::SessionConfig {
        opt_level: ckpt_runtime::OptLevel::Extended,
        ..Default::default()
    };
    let saved = ckpt_runtime::optimize_offline(ckpt_runtime::Model::new("conv_relu", &given), &cfg)
        .unwrap();
    let (pred, meas, g) = exact_peaks(&saved, "conv_relu.extended.onnx");
    assert_eq!(count(&g, "FusedConv"), 1, "ORT did not fuse Conv + Relu");
    assert_eq!(pred, meas, "FusedConv: predicted {pred}, measured {meas}");
    let b = ckpt_ir::Bindings::new();
    let fused = g.nodes()[0];
    let (_, _, orig) = exact_peaks(&given, "conv_relu.onnx");
    let conv = orig.nodes()[0];
    let scratch = ckpt_ir::ops::kernel_scratch(&g, fused, &b, 1).bytes();
    assert!(scratch > 0, "a padded 3x3 Conv takes MLAS's working buffer");
    assert_eq!(
        scratch,
        ckpt_ir::ops::kernel_scratch(&orig, conv, &b, 1).bytes()
    );
}

/// `FusedConv`'s sum input Z (slot 3, `.MayInplace(3, 0)`): Y takes Z's buffer when the node
/// is Z's last reader. Hand-built with a computed Z, predicted to the byte, and in place.
#[test]
fn fused_conv_sum_input_is_shared_in_place() {
    use ckpt_ir::build::{attr_ints, attr_s, ModelBuilder};
    use ckpt_ir::DType;
    let m = ModelBuilder::new(17)
        .opset("com.microsoft", 1)
        .input("x", DType::F32, "1,16,32,32")
        .input("w", DType::F32, "16,16,3,3")
        .input("b", DType::F32, "16")
        .input("s", DType::F32, "1,16,32,32")
        .node("Sigmoid", &["s"], &["z"])
        .node_in(
            "com.microsoft",
            "FusedConv",
            &["x", "w", "b", "z"],
            &["c"],
            vec![
                attr_ints("pads", &[1, 1, 1, 1]),
                attr_s("activation", "Relu"),
            ],
        )
        .node("Neg", &["c"], &["y"])
        .output("y", DType::F32, "1,16,32,32")
        .bytes();
    let (pred, meas, g) = exact_peaks(&m, "fused_conv_sum.onnx");
    assert_eq!(
        pred, meas,
        "FusedConv with Z: predicted {pred}, measured {meas}"
    );
    let fused = g
        .nodes()
        .iter()
        .copied()
        .find(|&n| g.node(n).op_type == "FusedConv")
        .unwrap();
    assert_eq!(ckpt_ir::ops::may_inplace(&g, fused), Some((0, 3)));
}

/// At level all ORT's NchwcTransformer lays out Convs with constant weights in NCHWc on a CPU
/// with NCHWc kernels (AVX2, AVX-512); the registry does not model that layout, and the error
/// says so and names the level that keeps NCHW. On a CPU without them ORT writes no NCHWc op
/// and the graph is planned.
#[test]
fn nchwc_layout_at_level_all_is_named_in_the_error() {
    use ckpt_ir::build::{attr_ints, ModelBuilder};
    use ckpt_ir::DType;
    let w: Vec<f32> = (0..16 * 16 * 9).map(|i| (i % 7) as f32 * 0.01).collect();
    let given = ModelBuilder::new(17)
        .input("x", DType::F32, "1,16,32,32")
        .init_f32("w", &[16, 16, 3, 3], &w)
        .node_with(
            "Conv",
            &["x", "w"],
            &["c"],
            vec![attr_ints("pads", &[1, 1, 1, 1])],
        )
        .node("Relu", &["c"], &["y"])
        .output("y", DType::F32, "1,16,32,32")
        .bytes();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conv_const.onnx");
    std::fs::write(&path, &given).unwrap();
    let online = Profile {
        graph_optimization_level: OptLevel::All,
        ..Profile::default()
    };
    let cfg = ckpt_validate::memory::session_config(&online);
    let saved =
        ckpt_runtime::optimize_offline(ckpt_runtime::Model::new("conv_const", &given), &cfg)
            .unwrap();
    let g = ckpt_ir::import_bytes(saved.into(), &path, None).unwrap();
    let nchwc = g
        .nodes()
        .iter()
        .any(|&n| g.node(n).domain == ckpt_validate::offline::NCHWC_DOMAIN);
    match ckpt_validate::offline::optimize_for_level(&given, &path, &online) {
        Err(e) => {
            let e = format!("{e:#}");
            assert!(nchwc, "an error without NCHWc ops: {e}");
            assert!(
                e.contains("com.microsoft.nchwc::Conv")
                    && e.contains("NCHWc layout")
                    && e.contains("--ort-opt-level extended"),
                "{e}"
            );
        }
        Ok(o) => assert!(!nchwc && o.is_some(), "NCHWc ops were planned"),
    }
}

/// `inspect --ort-opt-level L` analyses the graph ORT saves at L, as the main job plans it:
/// its node count is the saved graph's, its profile records level disable optimized offline
/// at L, and its device total is the receipt's `predicted_peak_bytes.before` at L.
#[test]
fn inspect_at_a_level_analyses_the_saved_graph() {
    let model = fixture("mlp_d0_aot");
    let given = ckpt_ir::import_file(&model).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for level in ["extended", "all"] {
        let o = run(&[
            "inspect",
            path_str(&model),
            "--ort-opt-level",
            level,
            "--json",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert!(
            j["nodes"].as_u64().unwrap() < given.node_count() as u64,
            "{level}: {} nodes, the given graph has {}",
            j["nodes"],
            given.node_count()
        );
        assert_eq!(
            j["profile"]["ckpt-opt.profile.graph_optimization_level"], "disable",
            "{level}"
        );
        assert_eq!(
            j["profile"]["ckpt-opt.profile.offline_optimization_level"], level,
            "{level}"
        );
        let receipt = dir.path().join(format!("{level}.json"));
        let r = run(&[
            path_str(&model),
            "--ceiling",
            "100%",
            "--ort-opt-level",
            level,
            "-o",
            path_str(&dir.path().join(format!("{level}.onnx"))),
            "--receipt",
            path_str(&receipt),
        ]);
        assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
        assert_eq!(
            j["predicted_peak_bytes"], r["predicted_peak_bytes"]["before"],
            "{level}"
        );
    }
    let plain = run(&["inspect", path_str(&model), "--json"]);
    let j: serde_json::Value = serde_json::from_str(&stdout(&plain)).unwrap();
    assert_eq!(j["nodes"].as_u64().unwrap(), given.node_count() as u64);
}
