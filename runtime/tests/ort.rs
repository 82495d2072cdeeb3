//! Runs the tiny models in `tests/data/` (built by `tests/data/make_models.py`) on the ONNX Runtime found the
//! usual way (`scripts/setup.sh` provides it).

use std::path::{Path, PathBuf};

use ckpt_runtime::{
    compare, generate, init, input_specs, measure_peak, profile_order, read_npy, run, time_steps,
    Arena, DType, Distribution, HostTensor, Model, OptLevel, OrtLibrarySearch, Provider,
    RuntimeError, SessionConfig, Tolerances,
};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn model(name: &str) -> Vec<u8> {
    init(None).expect("ONNX Runtime (run scripts/setup.sh)");
    std::fs::read(data(name)).expect("test model")
}

fn small_inputs(seed: u64) -> Vec<HostTensor> {
    vec![
        generate(
            "x",
            DType::F32,
            &[5, 3],
            Distribution::Normal { std: 1.0 },
            seed,
        )
        .unwrap(),
        generate(
            "ids",
            DType::I64,
            &[5],
            Distribution::IntRange { lo: -100, hi: 100 },
            seed + 1,
        )
        .unwrap(),
    ]
}

#[test]
fn reports_the_loaded_library() {
    let info = init(None).unwrap();
    assert!(info.library.exists(), "{info:?}");
    assert!(info.version.starts_with("1."), "{info:?}");
    assert!(
        info.available_providers
            .iter()
            .any(|p| p == "CPUExecutionProvider"),
        "{info:?}"
    );
    eprintln!(
        "ORT {} from {} providers {:?}",
        info.version,
        info.library.display(),
        info.available_providers
    );
}

#[test]
fn runs_and_compares_a_small_graph() {
    let bytes = model("small.onnx");
    let m = Model::new("small.onnx", &bytes);
    let inputs = small_inputs(3);
    let out = run(m, &inputs, &SessionConfig::default()).unwrap();
    assert_eq!(
        out.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["y", "neg_ids"]
    );
    assert_eq!(out[0].shape, vec![5, 4]);

    // y = relu(x @ W + b), computed here independently.
    let x = inputs[0].to_f32_vec().unwrap();
    let w: Vec<f32> = (0..12).map(|i| i as f32 / 10.0 - 0.5).collect();
    let b = [0.1f32, -0.2, 0.3, -0.4];
    let mut expected = Vec::new();
    for r in 0..5 {
        for c in 0..4 {
            let dot: f32 = (0..3).map(|k| x[r * 3 + k] * w[k * 4 + c]).sum();
            expected.push((dot + b[c]).max(0.0));
        }
    }
    let expected = vec![
        HostTensor::from_values("y", vec![5, 4], &expected).unwrap(),
        HostTensor::from_values(
            "neg_ids",
            vec![5],
            &inputs[1]
                .to_f64_vec()
                .iter()
                .map(|v| -*v as i64)
                .collect::<Vec<_>>(),
        )
        .unwrap(),
    ];
    let cmp = compare(&expected, &out, &Tolerances::default());
    assert!(cmp.passed, "{cmp:#?}");
    assert!(cmp.outputs[1].bitwise_equal);

    let mut perturbed = out.clone();
    perturbed[0].data[0] ^= 0x40; // flip a mantissa bit far above rtol
    perturbed[0].data[3] ^= 0x40;
    let cmp = compare(&out, &perturbed, &Tolerances::default());
    let y = &cmp.outputs[0];
    assert!(!cmp.passed && !y.passed && !y.bitwise_equal, "{cmp:#?}");
    let json = serde_json::to_string(&cmp.outputs).unwrap();
    assert!(
        json.contains("\"max_abs_err\"") && json.contains("\"bitwise_equal\":false"),
        "{json}"
    );
}

#[test]
fn reports_input_specs_and_input_errors() {
    let bytes = model("small.onnx");
    let specs = input_specs(&bytes, &SessionConfig::default()).unwrap();
    assert_eq!(specs[0].name, "x");
    assert_eq!(specs[0].shape, vec![None, Some(3)]);
    assert_eq!(specs[0].dim_names[0], "batch");
    assert_eq!(specs[1].dtype, DType::I64);

    let m = Model::new("small.onnx", &bytes);
    let mut inputs = small_inputs(1);
    inputs.pop();
    let err = run(m, &inputs, &SessionConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("small.onnx") && err.contains("`ids`") && err.contains("not given"),
        "{err}"
    );
    let wrong = vec![
        inputs[0].clone(),
        generate("ids", DType::I32, &[5], Distribution::Zeros, 0).unwrap(),
    ];
    let err = run(m, &wrong, &SessionConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("`ids`") && err.contains("given i32"), "{err}");
}

#[test]
fn same_seed_gives_identical_inputs_and_outputs() {
    let bytes = model("small.onnx");
    let (a, b) = (small_inputs(42), small_inputs(42));
    assert_eq!(a, b);
    assert_ne!(a, small_inputs(43));
    let cfg = SessionConfig::default();
    let (out_a, out_b) = (
        run(&bytes, &a, &cfg).unwrap(),
        run(&bytes, &b, &cfg).unwrap(),
    );
    assert_eq!(out_a, out_b);
    assert!(compare(&out_a, &out_b, &Tolerances::default())
        .outputs
        .iter()
        .all(|o| o.bitwise_equal));
}

#[test]
fn npy_inputs_from_numpy_run() {
    let x = read_npy(&data("x.npy"), "x", Some(DType::F32)).unwrap();
    assert_eq!(x.shape, vec![2, 3]);
    assert_eq!(
        x.to_f32_vec().unwrap(),
        vec![1.5, -2.0, 0.25, 3.0, 0.0, -0.125]
    );
    let err = read_npy(&data("x.npy"), "x", Some(DType::F64))
        .unwrap_err()
        .to_string();
    assert!(err.contains("x.npy") && err.contains("holds f32"), "{err}");
    let bytes = model("small.onnx");
    let ids = HostTensor::from_values("ids", vec![2], &[1i64, 2]).unwrap();
    let out = run(&bytes, &[x, ids], &SessionConfig::default()).unwrap();
    assert_eq!(out[0].shape, vec![2, 4]);
}

#[test]
fn keeping_a_tensor_alive_raises_the_peak_by_its_bytes() {
    let free = model("chain_free.onnx");
    let keep = model("chain_keep.onnx");
    let n = 1usize << 20;
    let x = vec![generate("x", DType::F32, &[n], Distribution::Normal { std: 1.0 }, 9).unwrap()];
    let cfg = SessionConfig::default();
    let p_free = measure_peak(Model::new("chain_free.onnx", &free), &x, &cfg).unwrap();
    let p_keep = measure_peak(Model::new("chain_keep.onnx", &keep), &x, &cfg).unwrap();
    eprintln!("chain_free {p_free:#?}\nchain_keep {p_keep:#?}");
    let tensor = (n * 4) as u64;
    let diff = p_keep.peak_bytes as i64 - p_free.peak_bytes as i64;
    // The BFC arena rounds each request up to 256 bytes; allow one rounding step per live tensor.
    assert!(
        (diff - tensor as i64).abs() <= 3 * 256,
        "diff {diff} vs {tensor}: {p_free:?} {p_keep:?}"
    );
    // And the free chain's peak is two live 4 MiB tensors (plus the scalar sum), not three.
    assert!(
        p_free.peak_bytes >= 2 * tensor && p_free.peak_bytes < 2 * tensor + 4096,
        "{p_free:?}"
    );

    // Both models compute the same y (keep also returns `a`).
    let comparison = compare(
        &run(Model::new("chain_free.onnx", &free), &x, &cfg).unwrap(),
        &run(Model::new("chain_keep.onnx", &keep), &x, &cfg).unwrap(),
        &Tolerances::default(),
    );
    assert!(
        comparison.passed && comparison.outputs[0].bitwise_equal,
        "{comparison:?}"
    );
    assert_eq!(comparison.extra_outputs, ["a"]);

    // Same measurement twice on fresh sessions: identical.
    assert_eq!(
        measure_peak(&free, &x, &cfg).unwrap().peak_bytes,
        p_free.peak_bytes
    );
}

#[test]
fn exact_arena_counts_live_tensors_without_chunk_slack() {
    // small.onnx at batch 100000: at its peak xw and xwb (1.6 MB each) and the output neg_ids (0.8 MB) are live.
    let bytes = model("small.onnx");
    let batch = 100_000;
    let inputs = vec![
        generate(
            "x",
            DType::F32,
            &[batch, 3],
            Distribution::Normal { std: 1.0 },
            5,
        )
        .unwrap(),
        generate("ids", DType::I64, &[batch], Distribution::Zeros, 5).unwrap(),
    ];
    let live = (2 * batch * 4 * 4 + batch * 8) as u64;
    let exact = measure_peak(
        &bytes,
        &inputs,
        &SessionConfig {
            arena: Arena::Exact,
            ..SessionConfig::default()
        },
    )
    .unwrap();
    assert_eq!(exact.peak_bytes, live, "{exact:?}");
    // ORT's own arena hands out whole chunks of up to twice the request, so it reports at least as much.
    let own = measure_peak(&bytes, &inputs, &SessionConfig::default()).unwrap();
    eprintln!(
        "small batch {batch}: exact arena {} B, session arena {} B",
        exact.peak_bytes, own.peak_bytes
    );
    assert!(own.peak_bytes >= exact.peak_bytes, "{own:?}");
    // Outputs are the same whichever arena holds them.
    let cfg = SessionConfig {
        arena: Arena::Exact,
        ..SessionConfig::default()
    };
    assert_eq!(
        run(&bytes, &inputs, &cfg).unwrap(),
        run(&bytes, &inputs, &SessionConfig::default()).unwrap()
    );
}

#[test]
fn profile_order_returns_every_node_once() {
    let bytes = model("five.onnx");
    let x = vec![generate(
        "x",
        DType::F32,
        &[4, 8],
        Distribution::Normal { std: 1.0 },
        1,
    )
    .unwrap()];
    let events = profile_order(&bytes, &x, &SessionConfig::default()).unwrap();
    eprintln!("{events:#?}");
    let mut names: Vec<&str> = events.iter().map(|e| e.node_name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["n0_sin", "n1_cos", "n2_mul", "n3_relu", "n4_sigmoid"]
    );
    let mut indices: Vec<usize> = events.iter().map(|e| e.node_index.unwrap()).collect();
    indices.sort();
    assert_eq!(indices, [0, 1, 2, 3, 4]);
    // Dependencies respected: mul after sin and cos, sigmoid last.
    let pos = |n: &str| events.iter().position(|e| e.node_name == n).unwrap();
    assert!(pos("n2_mul") > pos("n0_sin") && pos("n2_mul") > pos("n1_cos"));
    assert_eq!(events.last().unwrap().op_type, "Sigmoid");
    assert!(
        events.iter().all(|e| e.provider == "CPUExecutionProvider"),
        "{events:?}"
    );
}

#[test]
fn disabling_cse_keeps_identical_nodes_apart() {
    let bytes = model("cse.onnx");
    let x = vec![generate("x", DType::F32, &[16], Distribution::Normal { std: 1.0 }, 1).unwrap()];
    let exps = |disable_cse: bool| {
        let cfg = SessionConfig {
            disable_cse,
            opt_level: OptLevel::Basic,
            ..SessionConfig::default()
        };
        profile_order(&bytes, &x, &cfg)
            .unwrap()
            .iter()
            .filter(|e| e.op_type == "Exp")
            .count()
    };
    assert_eq!(exps(true), 2);
    assert_eq!(exps(false), 1);
}

#[test]
fn times_steps_on_a_warm_session() {
    let bytes = model("small.onnx");
    let t = time_steps(&bytes, &small_inputs(0), &SessionConfig::default(), 2, 9).unwrap();
    assert_eq!(t.runs.len(), 9);
    assert!(t.p50_ms > 0.0 && t.p50_ms <= t.p95_ms, "{t:?}");
}

#[test]
fn cuda_request_errors_clearly() {
    let bytes = model("small.onnx");
    let cfg = SessionConfig {
        provider: Provider::Cuda,
        ..SessionConfig::default()
    };
    let err = run(&bytes, &small_inputs(0), &cfg).unwrap_err();
    assert!(matches!(err, RuntimeError::CudaUnavailable { .. }), "{err}");
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(
        msg.contains("onnxruntime-gpu==1.31.1") && msg.contains("CUDA 13"),
        "{msg}"
    );
}

#[test]
fn training_ops_give_the_missing_op_error() {
    let bytes = model("gelugrad.onnx");
    let inputs = vec![
        generate("dy", DType::F32, &[8], Distribution::Ones, 0).unwrap(),
        generate("x", DType::F32, &[8], Distribution::Normal { std: 1.0 }, 0).unwrap(),
    ];
    let err = run(
        Model::new("gelugrad.onnx", &bytes),
        &inputs,
        &SessionConfig::default(),
    )
    .unwrap_err();
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(
        matches!(&err, RuntimeError::MissingTrainingOps { ops, .. } if ops == &["com.microsoft:GeluGrad"]),
        "{msg}"
    );
    assert!(
        msg.contains("gelugrad.onnx") && msg.contains("--ort-lib") && msg.contains("training ops"),
        "{msg}"
    );
}

#[test]
fn ort_not_found_names_the_install_command() {
    let empty = OrtLibrarySearch {
        explicit: None,
        env_path: None,
        roots: vec![],
        python: None,
    };
    let msg = empty.find().unwrap_err().to_string();
    assert!(
        msg.contains("scripts/setup.sh")
            && msg.contains("python3 -m pip install onnxruntime==1.31.1"),
        "{msg}"
    );

    let nowhere = OrtLibrarySearch {
        roots: vec![PathBuf::from("/nonexistent/ckpt")],
        ..empty.clone()
    };
    let msg = nowhere.find().unwrap_err().to_string();
    assert!(
        msg.contains("/nonexistent/ckpt") && msg.contains("onnxruntime==1.31.1"),
        "{msg}"
    );

    let explicit = OrtLibrarySearch {
        explicit: Some(PathBuf::from("/nonexistent/libonnxruntime.so")),
        ..empty
    };
    let err = explicit.find().unwrap_err().to_string();
    assert!(
        err.contains("/nonexistent/libonnxruntime.so") && err.contains("--ort-lib"),
        "{err}"
    );
}

#[test]
fn search_finds_the_project_venv_and_asks_python() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let from_root = OrtLibrarySearch {
        roots: vec![manifest.clone()],
        ..OrtLibrarySearch::default()
    }
    .find()
    .unwrap();
    assert!(
        from_root.to_string_lossy().contains("libonnxruntime.so"),
        "{from_root:?}"
    );

    let venv_python = manifest.parent().unwrap().join(".venv/bin/python3");
    if venv_python.exists() {
        let python = Some(venv_python.to_string_lossy().into_owned());
        let found = OrtLibrarySearch {
            python,
            ..OrtLibrarySearch::default()
        }
        .find()
        .unwrap();
        assert!(
            found.is_file() && found.to_string_lossy().contains("libonnxruntime.so"),
            "{found:?}"
        );
    }
}

/// ORT's offline mode writes the graph it will run: at level basic with CSE on, the two identical Exps are one;
/// with CSE disabled both stay.
#[test]
fn offline_optimization_saves_the_graph_ort_runs() {
    use ckpt_ir::onnx::ModelProto;
    use ckpt_ir::Message;
    let bytes = model("cse.onnx");
    let saved = |opt_level: OptLevel, disable_cse: bool| {
        let cfg = SessionConfig {
            opt_level,
            disable_cse,
            ..SessionConfig::default()
        };
        let out = ckpt_runtime::optimize_offline(&bytes, &cfg).unwrap();
        ModelProto::decode(out.as_slice()).unwrap().graph.unwrap()
    };
    let exps = |g: &ckpt_ir::onnx::GraphProto| {
        g.node
            .iter()
            .filter(|n| n.op_type.as_deref() == Some("Exp"))
            .count()
    };
    assert_eq!(exps(&saved(OptLevel::Basic, false)), 1);
    assert_eq!(exps(&saved(OptLevel::Basic, true)), 2);
    // At level disable ORT saves the graph as given: the same nodes, and value_info only where the file declared
    // it (measured on 1.31.1: ORT does not write the shapes it infers at load).
    let plain = saved(OptLevel::Disable, true);
    assert_eq!(exps(&plain), 2);
    assert!(plain.value_info.is_empty(), "{:?}", plain.value_info);
}
