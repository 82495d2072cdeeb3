//! The memory model's truth table, for every standard fixture (and the bundled example) at
//! level `disable`:
//! - one step: the predicted peak against ORT's on the always-splitting arena (live tensors
//!   rounded to 256 B) and on ORT's own session arena (the BFC replay);
//! - the device: under the default deployment profile and eight variants (memory pattern on
//!   and off × power-of-two or request-sized regions × outputs released or held), the
//!   predicted arena need (the smallest `max_mem` under which the profile's steps run, from
//!   the replay) against ORT's (bisection on `max_mem`), with in-use and reserved bytes.
//!
//!     cargo run --release --example truth_table [FILTER]
//!
//! With `TRUTH_TABLE_PROVIDER=cuda` (a build with `--features cuda`, scripts/gpu_check.sh) every profile runs on
//! the CUDA provider with ORT's default first region (the CUDA EP's options take no initial chunk), the need is
//! bisected on `gpu_mem_limit`, and the one-step rows are ORT's CUDA session arena only.

use std::path::PathBuf;

use anyhow::Result;
use ckpt_ir::profile::{CallerOutputs, ExtendStrategy, InitialChunk, Profile};
use ckpt_ir::Bindings;
use ckpt_opt::inputs::{make_inputs, InputOverrides};
use ckpt_opt::profile::session_config;
use ckpt_passes::device::device_need;
use ckpt_passes::memory::{schedule, simulate};
use ckpt_runtime::{measure_need, measure_peak, Arena, Model, OptLevel, SessionConfig};

fn main() -> Result<()> {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("tests/fixtures"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.ends_with(".onnx") && !n.starts_with("ort_") && !n.starts_with("neg_")
        })
        .collect();
    files.sort();
    files.push(root.join("examples/gpt2_4l_train.onnx"));
    files.retain(|f| f.to_string_lossy().contains(&filter));
    let cuda = std::env::var("TRUTH_TABLE_PROVIDER").is_ok_and(|p| p == "cuda");
    let mut profiles = vec![Profile::default()];
    for pattern in [false, true] {
        for extend in [
            ExtendStrategy::SameAsRequested,
            ExtendStrategy::NextPowerOfTwo,
        ] {
            for caller in [CallerOutputs::Released, CallerOutputs::Held] {
                profiles.push(Profile {
                    enable_mem_pattern: pattern,
                    arena_extend_strategy: extend,
                    initial_chunk: InitialChunk::OrtDefault,
                    caller_outputs: caller,
                    ..Profile::default()
                });
            }
        }
    }
    if cuda {
        for p in &mut profiles {
            p.execution_provider = ckpt_ir::profile::ExecutionProvider::Cuda;
            p.initial_chunk = InitialChunk::OrtDefault;
        }
        profiles.dedup();
    }
    println!(
        "{:<24} {:<46} {:>11} {:>11} {:>8} {:>11} {:>11} {:>11} {:>11}",
        "model",
        "profile",
        "pred need",
        "ORT need",
        "error",
        "pred inuse",
        "ORT inuse",
        "pred resv",
        "ORT resv"
    );
    let mut worst: f64 = 0.0;
    for f in files {
        let g = ckpt_ir::import_file(&f)?;
        let b = Bindings::new();
        let s = schedule(&g)?;
        let sim = simulate(&g, &s, &b)?;
        let overrides = InputOverrides::parse(&[], &["attention_mask=1:2".to_string()])?;
        let (inputs, _) = make_inputs(&g, &b, 1, &overrides, &[])?;
        let bytes = std::fs::read(&f)?;
        let name = f
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (arena, predicted, what) in [
            (Arena::Exact, sim.peak_live, "one step, exact arena"),
            (
                Arena::Session,
                sim.arena_peak,
                "one step, ORT session arena",
            ),
        ] {
            if cuda && arena == Arena::Exact {
                continue;
            }
            let cfg = SessionConfig {
                opt_level: OptLevel::Disable,
                arena,
                provider: if cuda {
                    ckpt_runtime::Provider::Cuda
                } else {
                    ckpt_runtime::Provider::Cpu
                },
                ..Default::default()
            };
            let measured = measure_peak(Model::new(&name, &bytes), &inputs, &cfg)?.peak_bytes;
            let err = predicted as f64 / measured as f64 - 1.0;
            worst = worst.max(err.abs());
            println!(
                "{name:<24} {what:<46} {predicted:>11} {measured:>11} {:>7.2}%",
                100.0 * err
            );
        }
        for p in &profiles {
            let pred = device_need(&sim, p);
            let cfg = session_config(p);
            let m = measure_need(
                Model::new(&name, &bytes),
                &inputs,
                &cfg,
                p.steps as usize,
                p.caller_outputs == CallerOutputs::Held,
            )?;
            let err = pred.arena_bytes as f64 / m.arena_bytes as f64 - 1.0;
            worst = worst.max(err.abs());
            let short = if *p == Profile::default() {
                "default profile (one region)".to_string()
            } else {
                format!(
                    "pattern {} {} {}",
                    if p.enable_mem_pattern { "on " } else { "off" },
                    p.arena_extend_strategy,
                    p.caller_outputs
                )
            };
            println!(
                "{name:<24} {short:<46} {:>11} {:>11} {:>7.2}% {:>11} {:>11} {:>11} {:>11}",
                pred.arena_bytes,
                m.arena_bytes,
                100.0 * err,
                pred.uncapped.in_use_peak,
                m.uncapped.in_use_peak(),
                pred.uncapped.reserved,
                m.uncapped.reserved()
            );
        }
    }
    println!("worst deviation: {:.2}%", worst * 100.0);
    Ok(())
}
