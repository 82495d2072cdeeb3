//! The memory model's truth table, for every standard fixture (and the bundled example):
//! - one step at level `disable`: the predicted peak against ORT's on the always-splitting
//!   arena (live tensors rounded to 256 B) and on ORT's own session arena (the BFC replay);
//! - the device: under the default deployment profile and eight variants (memory pattern on
//!   and off × power-of-two or request-sized regions × outputs released or held), the
//!   predicted arena need (the smallest `max_mem` under which the profile's steps run, from
//!   the replay) against ORT's (bisection on `max_mem`), with in-use and reserved bytes;
//! - the optimization levels: the default profile at levels extended and all, and ORT's
//!   defaults (level all, memory pattern on, ORT's 1 MiB first region, CSE on). At a level
//!   above `disable` the prediction is of the graph ORT saves at that level (its offline mode,
//!   what the main job plans), measured on that graph at `disable` (`ORT need`: how the
//!   output is run) and on the original run online at the level (`online`: as a user runs it).
//!
//! - the ORT training artifacts (`tests/fixtures/ort_*_training.onnx`) on their runtime,
//!   onnxruntime-training 1.19.2 through its runner (skipped, saying why, when that runtime
//!   cannot be made): under the default profile and the eight variants, the predicted need
//!   against the runner's (bisection on `max_mem`; that runtime reports no in-use or reserved
//!   bytes).
//!
//! With `--profiles`, instead: only the device rows, under every profile the flags can name
//! at level `disable` (memory pattern on and off × `kNextPowerOfTwo` or `kSameAsRequested` ×
//! first region the arena budget or ORT's 1 MiB × outputs released or held: 16), each
//! measured `TRUTH_TABLE_REPEATS` times (default 1) to show run-to-run variation.
//!
//! With `--levels`, instead: the side-by-side cost of each level (disable, basic, extended,
//! all) × memory pattern off/on, measured online on the original: the device need, ORT's
//! in-use and reserved peaks, and the step time (p50 of 5 runs after 2 warm-ups).
//!
//!     cargo run --release --example truth_table [FILTER] [--levels]
//!
//! With `TRUTH_TABLE_PROVIDER=cuda` (a build with `--features cuda`, scripts/gpu_check.sh) every profile runs on
//! the CUDA provider with ORT's default first region (the CUDA EP's options take no initial chunk), the need is
//! bisected on `gpu_mem_limit`, and the one-step rows are ORT's CUDA session arena only.

use std::path::PathBuf;

use anyhow::Result;
use ckpt_ir::profile::{CallerOutputs, InitialChunk, OptLevel as Level, Profile};
use ckpt_ir::{Bindings, Message};
use ckpt_passes::device::device_need;
use ckpt_passes::memory::{schedule, simulate};
use ckpt_runtime::training::TrainingRunner;
use ckpt_runtime::{
    measure_need, measure_peak, time_steps, Arena, HostTensor, Model, OptLevel, SessionConfig,
};
use ckpt_validate::inputs::{make_inputs, InputOverrides};
use ckpt_validate::memory::session_config;
use ckpt_validate::offline::optimize_for_level;

/// ORT's own defaults: level all, memory pattern on, a power-of-two arena from 1 MiB, CSE on.
fn ort_defaults() -> Profile {
    Profile {
        graph_optimization_level: Level::All,
        enable_mem_pattern: true,
        initial_chunk: InitialChunk::OrtDefault,
        session_config: Default::default(),
        ..Profile::default()
    }
}

fn measure(
    bytes: &[u8],
    name: &str,
    inputs: &[HostTensor],
    p: &Profile,
    failing_end: Option<u64>,
) -> Result<ckpt_runtime::MeasuredNeed> {
    Ok(measure_need(
        Model::new(name, bytes),
        inputs,
        &session_config(p),
        p.steps as usize,
        p.caller_outputs == CallerOutputs::Held,
        failing_end,
    )?)
}

/// The rows of one model at the levels above `disable`.
fn level_rows(
    f: &std::path::Path,
    name: &str,
    bytes: &[u8],
    inputs: &[HostTensor],
    worst: &mut f64,
) -> Result<()> {
    let mut profiles: Vec<(String, Profile)> = [Level::Extended, Level::All]
        .into_iter()
        .map(|l| {
            (
                format!("default profile at level {l}"),
                Profile {
                    graph_optimization_level: l,
                    ..Profile::default()
                },
            )
        })
        .collect();
    profiles.push((
        "ORT's defaults (level all, pattern on)".into(),
        ort_defaults(),
    ));
    for (short, online) in profiles {
        let Some(o) = optimize_for_level(bytes, f, &online)? else {
            continue;
        };
        let b = Bindings::new();
        // ORT writes no value_info for some tensors it creates: inference gives them.
        let (graph, _) = ckpt_planner::with_inferred_types(o.graph)?;
        let sim = simulate(&graph, &schedule(&graph)?, &b)?;
        let pred = device_need(&sim, &o.profile);
        let saved = ckpt_ir::export_bytes(&graph);
        let m = measure(&saved, name, inputs, &o.profile, Some(pred.failing_end))?;
        let on = measure(bytes, name, inputs, &online, None)?;
        let err = pred.arena_bytes as f64 / m.arena_bytes as f64 - 1.0;
        let err_online = pred.arena_bytes as f64 / on.arena_bytes as f64 - 1.0;
        *worst = worst.max(err.abs());
        println!(
            "{name:<24} {short:<46} {:>11} {:>11} {:>7.2}% {:>11} {:>11} {:>11} {:>11} {:>11} {:>7.2}%",
            pred.arena_bytes,
            m.arena_bytes,
            100.0 * err,
            pred.uncapped.in_use_peak,
            m.uncapped.in_use_peak(),
            pred.uncapped.reserved,
            m.uncapped.reserved(),
            on.arena_bytes,
            100.0 * err_online
        );
    }
    Ok(())
}

/// The rows of the training artifacts whose names contain `filter`, on their runtime, under
/// each of `profiles`; none, with the reason printed, when that runtime cannot be started.
fn training_rows(
    root: &std::path::Path,
    filter: &str,
    profiles: &[Profile],
    worst: &mut f64,
) -> Result<()> {
    let artifacts = [
        (
            "ort_mlp_training",
            &[("batch", 8)][..],
            &["labels=0:10".to_string()][..],
        ),
        (
            "ort_gpt2_training",
            &[("batch", 2), ("seq", 32)][..],
            &[][..],
        ),
    ];
    let artifacts: Vec<_> = artifacts.iter().filter(|a| a.0.contains(filter)).collect();
    if artifacts.is_empty() {
        return Ok(());
    }
    let mut runner = match TrainingRunner::start() {
        Ok(r) => r,
        Err(e) => {
            println!("training artifacts skipped: the training runtime is unavailable: {e}");
            return Ok(());
        }
    };
    for (name, dims, ranges) in artifacts {
        let path = root.join(format!("tests/fixtures/{name}.onnx"));
        // The artifact's training ops leave some values untyped: inference gives them.
        let (g, _) = ckpt_planner::with_inferred_types(ckpt_ir::import_file(&path)?)?;
        let mut b = Bindings::new();
        for (d, v) in dims.iter() {
            b.insert(d.to_string(), *v);
        }
        let sim = simulate(&g, &schedule(&g)?, &b)?;
        let overrides = InputOverrides::parse(&[], ranges)?;
        let (inputs, _) = make_inputs(&g, &b, 1, &overrides, &[])?;
        let bytes = std::fs::read(&path)?;
        let model = ckpt_ir::onnx::ModelProto::decode(bytes.as_slice())?;
        let staged = runner.stage(
            Model::new(name, &bytes),
            &inputs,
            &ckpt_validate::training::updated_inputs(&model),
        )?;
        for p in profiles {
            let p = Profile {
                ort_version: ckpt_validate::training::ort_version_for(&g),
                ..p.clone()
            };
            let pred = device_need(&sim, &p);
            let m = runner.measure_need(
                &staged,
                &session_config(&p),
                p.steps as usize,
                p.caller_outputs == CallerOutputs::Held,
                Some(pred.arena_bytes),
            )?;
            let err = pred.arena_bytes as f64 / m.arena_bytes as f64 - 1.0;
            *worst = worst.max(err.abs());
            println!(
                "{name:<24} {:<46} {:>11} {:>11} {:>7.2}% {:>11} {:>11} {:>11} {:>11}",
                short(&p),
                pred.arena_bytes,
                m.arena_bytes,
                100.0 * err,
                pred.uncapped.in_use_peak,
                "-",
                pred.uncapped.reserved,
                "-"
            );
        }
    }
    Ok(())
}

/// A profile's label in the table.
fn short(p: &Profile) -> String {
    let base = Profile {
        ort_version: Profile::default().ort_version,
        ..p.clone()
    };
    if base == Profile::default() {
        "default profile (one region)".to_string()
    } else {
        format!(
            "pattern {} {} {}{}",
            if p.enable_mem_pattern { "on " } else { "off" },
            p.arena_extend_strategy,
            match p.initial_chunk {
                InitialChunk::ArenaBudget => "budget ",
                InitialChunk::OrtDefault => "",
                InitialChunk::Bytes(_) => "sized ",
            },
            p.caller_outputs
        )
    }
}

/// Every profile the flags can name at level `disable`, the default first.
fn every_profile() -> Vec<Profile> {
    Profile::every_flag_combination()
}

/// `--profiles`: the predicted need against ORT's under [`every_profile`], `repeats` times each;
/// the worst deviation.
fn profile_matrix(files: Vec<PathBuf>, repeats: usize) -> Result<f64> {
    println!(
        "{:<24} {:<7} {:<16} {:<7} {:<8} {:>11} {:>11} {:>8}",
        "model", "pattern", "extend", "chunk", "outputs", "pred need", "ORT need", "error"
    );
    let mut worst: f64 = 0.0;
    for f in files {
        let g = ckpt_ir::import_file(&f)?;
        let b = Bindings::new();
        let sim = simulate(&g, &schedule(&g)?, &b)?;
        let overrides = InputOverrides::parse(&[], &["attention_mask=1:2".to_string()])?;
        let (inputs, _) = make_inputs(&g, &b, 1, &overrides, &[])?;
        let bytes = std::fs::read(&f)?;
        let name = f
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for p in every_profile() {
            let need = device_need(&sim, &p);
            let pred = need.arena_bytes;
            let mut measured = Vec::new();
            for _ in 0..repeats {
                let m = measure(&bytes, &name, &inputs, &p, Some(need.failing_end))?;
                measured.push(m.arena_bytes);
            }
            let errs: Vec<String> = measured
                .iter()
                .map(|&m| {
                    let e = pred as f64 / m as f64 - 1.0;
                    worst = worst.max(e.abs());
                    format!("{:+.3}%", 100.0 * e)
                })
                .collect();
            let ms: Vec<String> = measured.iter().map(|m| m.to_string()).collect();
            println!(
                "{name:<24} {:<7} {:<16} {:<7} {:<8} {pred:>11} {:>11} {:>8}",
                if p.enable_mem_pattern { "on" } else { "off" },
                p.arena_extend_strategy.as_str(),
                match p.initial_chunk {
                    InitialChunk::ArenaBudget => "budget",
                    _ => "default",
                },
                p.caller_outputs.as_str(),
                ms.join("/"),
                errs.join("/")
            );
        }
    }
    Ok(worst)
}

/// The cost of each level, online on the original, memory pattern off and on.
fn level_costs(name: &str, bytes: &[u8], inputs: &[HostTensor]) -> Result<()> {
    for level in [Level::Disable, Level::Basic, Level::Extended, Level::All] {
        for pattern in [false, true] {
            let p = Profile {
                graph_optimization_level: level,
                enable_mem_pattern: pattern,
                ..Profile::default()
            };
            let m = measure(bytes, name, inputs, &p, None)?;
            let t = time_steps(Model::new(name, bytes), inputs, &session_config(&p), 2, 5)?;
            println!(
                "{name:<24} {:<9} {:<8} {:>11} {:>11} {:>11} {:>9.2}",
                level.as_str(),
                if pattern { "on" } else { "off" },
                m.arena_bytes,
                m.uncapped.in_use_peak(),
                m.uncapped.reserved(),
                t.p50_ms
            );
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let levels = args.iter().any(|a| a == "--levels");
    let all_profiles = args.iter().any(|a| a == "--profiles");
    let repeats: usize = std::env::var("TRUTH_TABLE_REPEATS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let filter = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_default();
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
    // The default, then the 8 variants that start from ORT's 1 MiB first region.
    let mut profiles = vec![Profile::default()];
    profiles.extend(
        Profile::every_flag_combination()
            .into_iter()
            .filter(|p| p.initial_chunk == InitialChunk::OrtDefault),
    );
    if all_profiles {
        let mut worst = profile_matrix(files, repeats)?;
        training_rows(&root, &filter, &every_profile(), &mut worst)?;
        println!("worst deviation: {:.3}%", worst * 100.0);
        return Ok(());
    }
    if levels {
        println!(
            "{:<24} {:<9} {:<8} {:>11} {:>11} {:>11} {:>9}",
            "model", "level", "pattern", "ORT need", "ORT inuse", "ORT resv", "p50 ms"
        );
        for f in files {
            let g = ckpt_ir::import_file(&f)?;
            let overrides = InputOverrides::parse(&[], &["attention_mask=1:2".to_string()])?;
            let (inputs, _) = make_inputs(&g, &Bindings::new(), 1, &overrides, &[])?;
            let name = f
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            level_costs(&name, &std::fs::read(&f)?, &inputs)?;
        }
        return Ok(());
    }
    if cuda {
        for p in &mut profiles {
            p.execution_provider = ckpt_ir::profile::ExecutionProvider::Cuda;
            p.initial_chunk = InitialChunk::OrtDefault;
        }
        profiles.dedup();
    }
    println!(
        "{:<24} {:<46} {:>11} {:>11} {:>8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8}",
        "model",
        "profile",
        "pred need",
        "ORT need",
        "error",
        "pred inuse",
        "ORT inuse",
        "pred resv",
        "ORT resv",
        "online",
        "error"
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
                sim.arena_peak(),
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
                Some(pred.failing_end),
            )?;
            let err = pred.arena_bytes as f64 / m.arena_bytes as f64 - 1.0;
            worst = worst.max(err.abs());
            let short = short(p);
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
        level_rows(&f, &name, &bytes, &inputs, &mut worst)?;
    }
    if !cuda {
        training_rows(&root, &filter, &profiles, &mut worst)?;
    }
    println!("worst deviation: {:.2}%", worst * 100.0);
    Ok(())
}
