//! The deployment profile end to end: the device need predicted by the replay equals what
//! ONNX Runtime needs (the smallest `max_mem` under which the profile's steps run, found by
//! bisection), the output model records its profile, and validation fails a rewrite whose
//! measured need is over its ceiling.

mod common;

use ckpt_ir::profile::{CallerOutputs, ExtendStrategy, InitialChunk, Profile};
use ckpt_ir::Bindings;
use ckpt_opt::inputs::{make_inputs, InputOverrides};
use ckpt_opt::profile::session_config;
use ckpt_passes::device::device_need;
use ckpt_passes::memory::{schedule, simulate};
use ckpt_runtime::{measure_need, Model};
use common::*;

/// (predicted, measured) arena need of `path` under `profile`.
fn need(path: &std::path::Path, profile: &Profile) -> (u64, u64) {
    let g = ckpt_ir::import_file(path).unwrap();
    let b = Bindings::new();
    let sim = simulate(&g, &schedule(&g).unwrap(), &b).unwrap();
    let overrides = InputOverrides::parse(&[], &["attention_mask=1:2".to_string()]).unwrap();
    let (inputs, _) = make_inputs(&g, &b, 1, &overrides, &[]).unwrap();
    let bytes = std::fs::read(path).unwrap();
    let measured = measure_need(
        Model::new("m", &bytes),
        &inputs,
        &session_config(profile),
        profile.steps as usize,
        profile.caller_outputs == CallerOutputs::Held,
    )
    .unwrap();
    (device_need(&sim, profile).arena_bytes, measured.arena_bytes)
}

/// Under the default profile (level disable, memory pattern off, one kNextPowerOfTwo region
/// of the arena budget, outputs released, 3 steps) the predicted arena need is ORT's to the
/// byte on every standard fixture and the bundled example (the conv nets included: MLAS's
/// working buffers are in the registry).
#[test]
fn default_profile_is_predicted_to_the_byte_on_every_fixture() {
    let mut files: Vec<_> = std_fixtures().into_iter().map(|f| f.path).collect();
    files.push(root().join("examples/gpt2_4l_train.onnx"));
    let p = Profile::default();
    let mut misses = Vec::new();
    for f in &files {
        let (pred, meas) = need(f, &p);
        if pred != meas {
            misses.push(format!(
                "{}: predicted {pred}, measured {meas}",
                f.display()
            ));
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}

/// With two intra-op threads MLAS splits a segmented convolution over two working buffers
/// (ViT's weight-gradient convolution: 128 KiB instead of 64 KiB): still to the byte on the
/// conv nets and a transformer.
#[test]
fn two_intra_op_threads_are_predicted_to_the_byte() {
    let p = Profile {
        intra_op_num_threads: 2,
        ..Profile::default()
    };
    for name in ["vit_d0_aot", "resnet18_d0_aot", "gpt2_d0_aot"] {
        let path = root().join(format!("tests/fixtures/{name}.onnx"));
        let g = ckpt_ir::import_file(&path).unwrap();
        let sim =
            ckpt_passes::memory::simulate_threads(&g, &schedule(&g).unwrap(), &Bindings::new(), 2)
                .unwrap();
        let overrides = InputOverrides::parse(&[], &[]).unwrap();
        let (inputs, _) = make_inputs(&g, &Bindings::new(), 1, &overrides, &[]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let measured = measure_need(
            Model::new(name, &bytes),
            &inputs,
            &session_config(&p),
            3,
            false,
        )
        .unwrap();
        assert_eq!(
            device_need(&sim, &p).arena_bytes,
            measured.arena_bytes,
            "{name} with two threads"
        );
    }
}

/// The memory pattern on and off, outputs released and held, in one region of the budget, on
/// three fixtures: each predicted within 1% (most to the byte). Arenas of several regions are
/// left out on purpose — kSameAsRequested is one of them whatever its first region, since it
/// grows by each request: ORT breaks ties between equal free chunks by heap address, so its
/// own need changes from run to run (README, "How close").
#[test]
fn other_profiles_are_predicted_within_one_percent() {
    let mut worst = (0.0f64, String::new());
    for name in ["mlp_d0_aot", "gpt2_d0_aot", "llama_d0_makefx"] {
        let path = root().join(format!("tests/fixtures/{name}.onnx"));
        for pattern in [false, true] {
            {
                let extend = ExtendStrategy::NextPowerOfTwo;
                for caller in [CallerOutputs::Released, CallerOutputs::Held] {
                    let p = Profile {
                        enable_mem_pattern: pattern,
                        arena_extend_strategy: extend,
                        caller_outputs: caller,
                        ..Profile::default()
                    };
                    let (pred, meas) = need(&path, &p);
                    let e = (pred as f64 / meas as f64 - 1.0).abs();
                    let label = format!("{name} under {}: {pred} vs {meas}", p.describe());
                    assert!(e <= 0.01, "{label}");
                    if e >= worst.0 {
                        worst = (e, label);
                    }
                }
            }
        }
    }
    eprintln!("worst: {:.3}% ({})", 100.0 * worst.0, worst.1);
}

/// The output model records the profile it was planned under, and `validate` of that model
/// with a ceiling below its measured device total fails with exit 3, naming the ceiling.
#[test]
fn output_records_its_profile_and_validation_fails_over_the_ceiling() {
    let model = root().join("tests/fixtures/gpt2_d0_aot.onnx");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let i = run(&[
        "inspect",
        path_str(&model),
        "--json",
        "--arena-extend",
        "kSameAsRequested",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&i)).unwrap();
    let c = (v["ledger"]["total_bytes"].as_u64().unwrap() * 95 / 100).to_string();
    let o = run(&[
        path_str(&model),
        "--ceiling",
        &c,
        "--arena-extend",
        "kSameAsRequested",
        "-o",
        path_str(&out),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let g = ckpt_ir::import_file(&out).unwrap();
    let recorded = Profile::from_model(g.model())
        .unwrap()
        .expect("a recorded profile");
    assert_eq!(
        recorded.arena_extend_strategy,
        ExtendStrategy::SameAsRequested
    );
    // The arena budget is recorded as bytes: the ceiling less what the caller feeds.
    let fixed = v["ledger"]["fixed_bytes"].as_u64().unwrap();
    let budget = c.parse::<u64>().unwrap() - fixed;
    assert_eq!(
        recorded,
        Profile {
            arena_extend_strategy: ExtendStrategy::SameAsRequested,
            initial_chunk: InitialChunk::Bytes(budget),
            ..Profile::default()
        }
    );
    // validate reads the recorded profile; 1 MiB is far below what the rewrite needs.
    let v = run(&[
        "validate",
        path_str(&model),
        path_str(&out),
        "--ceiling",
        "1MiB",
        "--runs",
        "1",
    ]);
    assert_eq!(v.status.code(), Some(3), "{}", stdout(&v));
    assert!(stderr(&v).contains("above the ceiling"), "{}", stderr(&v));
    assert!(stdout(&v).contains("kSameAsRequested"), "{}", stdout(&v));
}
