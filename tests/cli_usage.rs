//! Every refused flag value exits 1 (usage) with a message naming the flag; `--dim` bindings
//! are checked against the model; `--ceiling 90%` resolves against the predicted footprint;
//! every `--help` lists examples and the exit codes.

mod common;

use ckpt_ir::build::{attr_i, ModelBuilder};
use ckpt_ir::DType;
use common::*;

fn mlp() -> String {
    path_str(&root().join("tests/fixtures/mlp_d0_aot.onnx")).to_string()
}

fn ort_gpt2() -> String {
    path_str(&root().join("tests/fixtures/ort_gpt2_training.onnx")).to_string()
}

/// `args` exits 1 and stderr names `flag` and contains `why`.
fn refused(args: &[&str], flag: &str, why: &str) {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(flag), "{args:?}: no `{flag}` in: {err}");
    assert!(err.contains(why), "{args:?}: no `{why}` in: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn refused_ceilings_exit_1() {
    let m = mlp();
    for (c, why) in [
        ("0", "positive"),
        ("0GiB", "positive"),
        ("-5GiB", "no sign"),
        ("+5GiB", "no sign"),
        ("1e9", "exponents"),
        ("69G", "did you mean 69GiB or 69GB?"),
        ("512M", "did you mean 512MiB or 512MB?"),
        ("4K", "did you mean 4KiB or 4KB?"),
        ("0%", "(0, 100]"),
        ("101%", "(0, 100]"),
        ("-5%", "plain number"),
        ("nan%", "plain number"),
        ("NaN", "no number"),
        ("inf", "no number"),
        ("12 parsecs", "unknown unit"),
        ("99999999999TiB", "out of range"),
    ] {
        refused(&[&m, "--ceiling", c], "--ceiling", why);
    }
}

#[test]
fn refused_numbers_exit_1() {
    let m = mlp();
    let main = |flag: &'static str, v: &'static str| {
        vec![
            m.clone(),
            "--ceiling".into(),
            "1GiB".into(),
            flag.into(),
            v.into(),
        ]
    };
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (main("--time-limit", "0"), "--time-limit", "(0, 1e6]"),
        (main("--time-limit", "-1"), "--time-limit", "(0, 1e6]"),
        (main("--time-limit", "1e19"), "--time-limit", "(0, 1e6]"),
        (main("--time-limit", "1e308"), "--time-limit", "(0, 1e6]"),
        (main("--time-limit", "inf"), "--time-limit", "finite"),
        (main("--time-limit", "NaN"), "--time-limit", "finite"),
        (main("--rtol", "-1e-5"), "--rtol", "at least 0"),
        (main("--rtol", "NaN"), "--rtol", "finite"),
        (main("--atol", "inf"), "--atol", "finite"),
        (main("--atol", "-0.1"), "--atol", "at least 0"),
        (main("--runs", "0"), "--runs", "at least 1"),
        (main("--runs", "-3"), "--runs", "whole number"),
        (main("--seed", "-1"), "--seed", "invalid"),
        (main("--seed", "1.5"), "--seed", "invalid"),
        (main("--reserve", "100"), "--reserve", "[0, 100)"),
        (main("--reserve", "-1"), "--reserve", "[0, 100)"),
        (main("--reserve", "NaN"), "--reserve", "finite"),
        (main("--dim", "seq=0"), "--dim", "at least 1"),
        (main("--dim", "seq"), "--dim", "NAME=VALUE"),
        (main("--dim", "seq=-2"), "--dim", "positive integer"),
        (
            vec![
                "validate".into(),
                m.clone(),
                m.clone(),
                "--runs".into(),
                "0".into(),
            ],
            "--runs",
            "at least 1",
        ),
        (
            vec![
                "validate".into(),
                m.clone(),
                m.clone(),
                "--rtol".into(),
                "nan".into(),
            ],
            "--rtol",
            "finite",
        ),
    ];
    for (args, flag, why) in cases {
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        refused(&a, flag, why);
    }
}

#[test]
fn dims_are_checked_against_the_model() {
    let g = ort_gpt2();
    let bound = ["--dim", "batch=2", "--dim", "seq=8"];
    for (extra, why) in [
        (
            vec!["--dim", "foo=3"],
            "`foo` is not a symbolic dim of the model (required: batch, seq",
        ),
        (
            vec!["--dim", "seq=1", "--dim", "seq=2"],
            "given twice (seq=1 and seq=2)",
        ),
        // Inference derives unk__0 (the Gather of wpe's rows by position) as `seq`.
        (
            [&bound[..], &["--dim", "unk__0=5"]].concat(),
            "declared `unk__0` = 5, but shape inference derives `seq` = 8",
        ),
    ] {
        for cmd in [
            vec!["inspect", g.as_str()],
            vec![g.as_str(), "--ceiling", "1GiB"],
        ] {
            let args = [&cmd[..], &extra[..]].concat();
            refused(&args, "--dim", why);
        }
    }
    // A consistent binding of a derived dim is accepted.
    let args = [
        &["inspect", g.as_str()][..],
        &bound[..],
        &["--dim", "unk__0=8"],
    ]
    .concat();
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    refused(
        &[&mlp(), "--ceiling", "1GiB", "--dim", "seq=4"],
        "--dim",
        "the model has no symbolic dims",
    );
}

/// Inputs `[batch, seq]` and `[batch_x_seq]`: flattening the first and adding the second makes
/// inference assume `batch*seq == batch_x_seq`, which the bindings must keep, and from which
/// `batch_x_seq` is derived when it is not bound.
#[test]
fn bindings_must_keep_the_broadcasts_inference_assumed() {
    let bytes = ModelBuilder::new(17)
        .input("a", DType::F32, "batch,seq")
        .input("b", DType::F32, "batch_x_seq")
        .node_with("Flatten", &["a"], &["f"], vec![attr_i("axis", 0)])
        .init_i64("flat", &[1], &[-1])
        .node("Reshape", &["f", "flat"], &["r"])
        .node("Add", &["r", "b"], &["y"])
        .output("y", DType::F32, "y_len")
        .bytes();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.onnx");
    std::fs::write(&p, bytes).unwrap();
    let m = path_str(&p);
    refused(
        &[
            "inspect",
            m,
            "--dim",
            "batch=2",
            "--dim",
            "seq=8",
            "--dim",
            "batch_x_seq=10",
        ],
        "--dim",
        "= 16 against `batch_x_seq` = 10",
    );
    let o = run(&[
        "inspect",
        m,
        "--dim",
        "batch=2",
        "--dim",
        "seq=8",
        "--dim",
        "batch_x_seq=16",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Left out, `batch_x_seq` is derived from the broadcast: the same ledger.
    let derived = run(&["inspect", m, "--dim", "batch=2", "--dim", "seq=8"]);
    assert!(derived.status.success(), "{}", stderr(&derived));
    assert_eq!(stdout(&derived), stdout(&o));
}

#[test]
fn inspect_lists_the_required_dims_in_one_line() {
    let o = run(&["inspect", &ort_gpt2()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l == "required dims: batch, seq (bind with --dim NAME=VALUE)"),
        "{out}"
    );
    assert!(
        !out.contains("unk__10"),
        "derived dims are summarised: {out}"
    );
    let o = run(&["inspect", &ort_gpt2(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["required_dims"], serde_json::json!(["batch", "seq"]));
}

/// The command of docs/guide/training-artifacts.md, as written (with the fixture).
#[test]
fn readme_training_artifact_example_runs() {
    let o = run(&[
        &ort_gpt2(),
        "--dim",
        "batch=8",
        "--dim",
        "seq=1024",
        "--ceiling",
        "20GiB",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("already fits"), "{}", stdout(&o));
}

#[test]
fn percent_ceiling_resolves_against_the_footprint() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("r.json");
    let out = dir.path().join("o.onnx");
    let o = run(&[
        &mlp(),
        "--ceiling",
        "100%",
        "-o",
        path_str(&out),
        "--receipt",
        path_str(&receipt),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_eq!(r["status"], "already_fits");
    assert_eq!(r["ceiling"], "100%");
    assert_eq!(r["ceiling_bytes"], r["predicted_peak_bytes"]["before"]);

    let o = run(&[
        &mlp(),
        "--ceiling",
        "90%",
        "--time-limit",
        "5",
        "--receipt",
        path_str(&receipt),
        "-o",
        path_str(&out),
    ]);
    assert!(matches!(o.status.code(), Some(0 | 2)), "{}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    let total = r["ledger"]["before"]["total_bytes"]
        .as_u64()
        .or(r["ledger"]["total_bytes"].as_u64())
        .unwrap();
    assert_eq!(r["ceiling_bytes"].as_u64().unwrap(), total * 9 / 10);
}

/// `validate --ceiling` takes the main job's ceiling: a size or a percentage of the original's
/// predicted device total, checked by the flag's parser before any work.
#[test]
fn validate_takes_the_main_jobs_ceiling() {
    let m = mlp();
    for (c, why) in [
        ("5QB", "unknown unit"),
        ("0", "positive"),
        ("101%", "(0, 100]"),
    ] {
        refused(&["validate", &m, &m, "--ceiling", c], "--ceiling", why);
    }
    let total = {
        let o = run(&["inspect", &m, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["ledger"]["total_bytes"].as_u64().unwrap()
    };
    let o = run(&[
        "validate",
        &m,
        &m,
        "--ceiling",
        "90%",
        "--runs",
        "1",
        "--json",
    ]);
    // Measured against 90% of its own total, the graph may or may not run capped there.
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["memory"]["ceiling_bytes"].as_u64(),
        Some(total * 9 / 10),
        "{v}"
    );
}

#[test]
fn every_help_lists_examples_and_exit_codes() {
    for cmd in [
        vec!["--help"],
        vec!["inspect", "--help"],
        vec!["print", "--help"],
        vec!["export", "--help"],
        vec!["validate", "--help"],
    ] {
        let o = run(&cmd);
        assert!(o.status.success(), "{cmd:?}");
        let h = stdout(&o);
        assert!(h.contains("Examples:\n  ckpt-opt "), "{cmd:?}: {h}");
        for code in [
            "0  success",
            "1  bad input or usage",
            "2  the ceiling cannot be met",
            "3  validation failed",
            "4  could not validate",
            "70 internal error",
        ] {
            assert!(h.contains(code), "{cmd:?}: no `{code}` in {h}");
        }
    }
}

/// A copy of `src` whose `metadata_props` record `entries` (a rewritten model's profile).
fn with_metadata(src: &str, entries: &[(&str, &str)], out: &std::path::Path) {
    use ckpt_ir::Message;
    let bytes = std::fs::read(src).unwrap();
    let mut m = ckpt_ir::onnx::ModelProto::decode(bytes.as_slice()).unwrap();
    for (k, v) in entries {
        m.metadata_props
            .push(ckpt_ir::onnx::StringStringEntryProto {
                key: Some(k.to_string()),
                value: Some(v.to_string()),
            });
    }
    std::fs::write(out, m.encode_to_vec()).unwrap();
}

/// The profiles the tool does not offer (held outputs anywhere but one region with the memory
/// pattern off: their need depends on the process) are refused by every command that
/// reads the profile flags, exit 1, naming the flags, the measured reason and the alternative,
/// with nothing written; `validate` refuses a rewritten model that records one, and one whose
/// recorded first region is below its need with held outputs.
#[test]
fn unoffered_profiles_are_refused_with_the_measured_reason() {
    let m = mlp();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let receipt = dir.path().join("receipt.json");
    for flags in [
        &[
            "--arena-extend",
            "kSameAsRequested",
            "--caller-outputs",
            "held",
        ][..],
        &[
            "--arena-extend",
            "kSameAsRequested",
            "--caller-outputs",
            "held",
            "--mem-pattern",
            "on",
        ],
        &["--initial-chunk", "default", "--caller-outputs", "held"],
        &["--initial-chunk", "4MiB", "--caller-outputs", "held"],
        &["--provider", "cuda", "--caller-outputs", "held"],
        &["--mem-pattern", "on", "--caller-outputs", "held"],
        &[
            "--initial-chunk",
            "default",
            "--caller-outputs",
            "held",
            "--mem-pattern",
            "on",
        ],
    ] {
        let mut args = vec![
            m.as_str(),
            "--ceiling",
            "90%",
            "-o",
            path_str(&out),
            "--receipt",
            path_str(&receipt),
        ];
        args.extend_from_slice(flags);
        refused(&args, "--caller-outputs held", "is not offered");
        refused(
            &args,
            "`ckpt-opt.profile.caller_outputs` = `held`",
            "measured",
        );
        refused(&args, "--caller-outputs released", "t5_d0_makefx");
        assert!(!out.exists() && !receipt.exists(), "{flags:?} wrote a file");
        let mut inspect = vec!["inspect", m.as_str()];
        inspect.extend_from_slice(flags);
        refused(&inspect, "--caller-outputs held", "is not offered");
    }
    // Offered: held outputs in one region of the budget with the pattern off; bound or
    // released in any kNextPowerOfTwo arena.
    for flags in [
        &["--caller-outputs", "held"][..],
        &["--mem-pattern", "on", "--initial-chunk", "default"],
        &["--mem-pattern", "on", "--caller-outputs", "released"],
    ] {
        let mut inspect = vec!["inspect", m.as_str()];
        inspect.extend_from_slice(flags);
        let o = run(&inspect);
        assert_eq!(o.status.code(), Some(0), "{flags:?}: {}", stderr(&o));
    }
    // Bound or released outputs: request-sized regions depend on the heap, with the pattern
    // off or on.
    for (flags, named) in [
        (
            &["--arena-extend", "kSameAsRequested"][..],
            "--mem-pattern off --arena-extend kSameAsRequested",
        ),
        (
            &[
                "--arena-extend",
                "kSameAsRequested",
                "--initial-chunk",
                "default",
            ],
            "--mem-pattern off --arena-extend kSameAsRequested",
        ),
        (
            &["--arena-extend", "kSameAsRequested", "--mem-pattern", "on"],
            "--mem-pattern on --arena-extend kSameAsRequested",
        ),
        (
            &[
                "--arena-extend",
                "kSameAsRequested",
                "--mem-pattern",
                "on",
                "--caller-outputs",
                "released",
            ],
            "--mem-pattern on --arena-extend kSameAsRequested",
        ),
    ] {
        let mut args = vec![m.as_str(), "--ceiling", "90%", "-o", path_str(&out)];
        args.extend_from_slice(flags);
        refused(&args, named, "is not offered");
        refused(&args, "by address", "--arena-extend kNextPowerOfTwo");
        assert!(!out.exists(), "{flags:?} wrote a file");
    }
    let request_sized = dir.path().join("request_sized.onnx");
    with_metadata(
        &m,
        &[("ckpt-opt.profile.arena_extend_strategy", "kSameAsRequested")],
        &request_sized,
    );
    refused(
        &["validate", &m, path_str(&request_sized)],
        "`ckpt-opt.profile.arena_extend_strategy` = `kSameAsRequested`",
        "is not offered",
    );
    let recorded = dir.path().join("recorded.onnx");
    with_metadata(
        &m,
        &[
            ("ckpt-opt.profile.arena_extend_strategy", "kSameAsRequested"),
            ("ckpt-opt.profile.caller_outputs", "held"),
        ],
        &recorded,
    );
    refused(
        &["validate", &m, path_str(&recorded)],
        "`ckpt-opt.profile.arena_extend_strategy` = `kSameAsRequested`",
        "is not offered",
    );
    let small = dir.path().join("small_region.onnx");
    with_metadata(
        &m,
        &[
            ("ckpt-opt.profile.initial_chunk_size_bytes", "1024"),
            ("ckpt-opt.profile.caller_outputs", "held"),
        ],
        &small,
    );
    refused(
        &["validate", &m, path_str(&small)],
        "`ckpt-opt.profile.initial_chunk_size_bytes` = `1024` below the arena need",
        "is not offered",
    );
}

/// On an ORT training artifact (onnxruntime-training 1.19.2) only one region of the budget with
/// the memory pattern off is offered: the memory pattern and ORT's 1 MiB first region are
/// refused, exit 1, with the measurement, by the main job and by `inspect`.
#[test]
fn training_artifact_profiles_other_than_one_region_are_refused() {
    let g = ort_gpt2();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let dims = ["--dim", "batch=2", "--dim", "seq=32"];
    for flags in [
        &["--mem-pattern", "on"][..],
        // (Request-sized regions are refused on every runtime, tested above.)
        &["--initial-chunk", "default"],
    ] {
        let mut args = vec![g.as_str(), "--ceiling", "90%", "-o", path_str(&out)];
        args.extend_from_slice(&dims);
        args.extend_from_slice(flags);
        refused(
            &args,
            "on an ORT training artifact",
            "+87.0% on ort_gpt2_training",
        );
        refused(
            &args,
            "`ckpt-opt.profile.ort_version` = `1.19.2`",
            "--initial-chunk budget",
        );
        assert!(!out.exists(), "{flags:?} wrote {}", out.display());
        let mut inspect = vec!["inspect", g.as_str()];
        inspect.extend_from_slice(&dims);
        inspect.extend_from_slice(flags);
        refused(&inspect, "on an ORT training artifact", "is not offered");
    }
    let o = run(&["inspect", &g, "--dim", "batch=2", "--dim", "seq=32"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// A profile of several intra-op threads on a graph with an embedding gradient (ScatterND-add)
/// warns, naming the node: ORT computes it wrong there, rewrite or not. One thread: silent.
#[test]
fn several_threads_warn_of_a_racing_scatter() {
    let bert = root().join("tests/fixtures/bert_d01_aot.onnx");
    let o = run(&["inspect", path_str(&bert), "--intra-op-threads", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "warning: 3 node(s), first `node_ScatterND_664`: ScatterND with a reduction races"
        ) && err.contains("use --intra-op-threads 1"),
        "{err}"
    );
    let o = run(&["inspect", path_str(&bert)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning:"), "{}", stderr(&o));
    // The report commands warn from the options they share, before their own checks (here
    // frontier's refusal of a level it cannot plan at).
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "frontier",
        path_str(&bert),
        "--out",
        path_str(dir.path()),
        "--intra-op-threads",
        "2",
        "--ort-opt-level",
        "basic",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: 3 node(s), first `node_ScatterND_664`"),
        "{}",
        stderr(&o)
    );
}

/// A file that is not an ONNX model (garbage, a truncated model, an empty file) exits 1 with
/// one message naming the file and what is wrong, each cause once, and writes nothing.
#[test]
fn malformed_model_files_are_refused_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let model = std::fs::read(root().join("tests/fixtures/mlp_d0_aot.onnx")).unwrap();
    for (name, bytes, why) in [
        (
            "garbage.onnx",
            b"garbage\n".to_vec(),
            "is not a valid ONNX model",
        ),
        (
            "truncated.onnx",
            model[..model.len() / 2].to_vec(),
            "is the file truncated",
        ),
        ("empty.onnx", Vec::new(), "is empty"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = dir.path().join(format!("{name}.out.onnx"));
        let o = run(&[path_str(&path), "--ceiling", "90%", "-o", path_str(&out)]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(name) && err.contains(why), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: one line: {err}");
        if let Some(cause) = err.split("protobuf decoding failed: ").nth(1) {
            let cause = cause.split(')').next().unwrap();
            assert_eq!(
                err.matches(cause).count(),
                1,
                "{name}: cause repeated: {err}"
            );
        }
        assert!(!out.exists(), "{name}: wrote {}", out.display());
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

/// Opset versions outside the registry's (0, -1, a huge one, one ONNX Runtime does not load
/// yet) and opset imports under IR version 1 exit 1 naming the domain and version (version 0
/// panicked with an index out of bounds), and write nothing.
#[test]
fn opset_imports_outside_the_registry_are_refused() {
    use ckpt_ir::Message;
    let dir = tempfile::tempdir().unwrap();
    let original = ckpt_ir::onnx::ModelProto::decode(
        std::fs::read(root().join("tests/fixtures/mlp_d0_aot.onnx"))
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    for (ir, version, why) in [
        (10, 0, "`ai.onnx` version 0"),
        (10, -1, "`ai.onnx` version -1"),
        (10, i64::MAX, &format!("`ai.onnx` version {}", i64::MAX)),
        (10, 27, "`ai.onnx` version 27"),
        (1, 17, "IR version 1 and opset_import"),
    ] {
        let mut m = original.clone();
        m.ir_version = Some(ir);
        for o in &mut m.opset_import {
            if o.domain.as_deref().unwrap_or("").is_empty() {
                o.version = Some(version);
            }
        }
        let path = dir.path().join(format!("ir{ir}_opset{version}.onnx"));
        std::fs::write(&path, m.encode_to_vec()).unwrap();
        let out = dir.path().join("out.onnx");
        let o = run(&[path_str(&path), "--ceiling", "90%", "-o", path_str(&out)]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{why}: {err}");
        assert!(err.contains(why), "{why}: {err}");
        assert!(!err.contains("panicked"), "{why}: {err}");
        assert!(!out.exists(), "{why}: wrote {}", out.display());
    }
}

/// A profile is offered or refused before planning: on an ORT training artifact, whose arena
/// is one region of at most ORT's largest first region (2 GiB), a ceiling with a larger budget
/// is planned to that region. A need above it is planned down or refused as a ceiling that
/// cannot be met (exit 2, saying why), never written as a profile ORT cannot hold, nor
/// refused as a profile not offered.
#[test]
fn a_budget_past_one_region_is_planned_to_the_region() {
    let g = ort_gpt2();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let args = |batch: &'static str| {
        let mut a = vec![g.as_str(), "--ceiling", "8GiB", "-o", path_str(&out)];
        a.extend_from_slice(&["--dim", batch, "--dim", "seq=1024"]);
        a
    };
    // 2.70 GiB of arena at batch 32: over the region, and no plan brings it under.
    let o = run(&args("batch=32"));
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("the ceiling planned to is 2.00 GiB"), "{e}");
    assert!(!e.contains("not offered"), "{e}");
    assert!(!out.exists());
    // 1.32 GiB at batch 16: fits the region, written.
    let o = run(&args("batch=16"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.exists());
}
