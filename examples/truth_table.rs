//! The memory model's truth table: for every standard fixture (and the bundled example),
//! predicted peak vs ONNX Runtime's measured arena peak, at optimization level `disable`
//! (the graph ORT runs is the graph we planned), in both arena modes:
//! `exact` (always-splitting arena: live bytes rounded to 256) and `session` (ORT's default
//! BFC arena, replayed by the simulator).
//!
//!     cargo run --release --example truth_table

use std::path::PathBuf;

use anyhow::Result;
use ckpt_ir::Bindings;
use ckpt_opt::inputs::{make_inputs, InputOverrides};
use ckpt_passes::memory::{schedule, simulate};
use ckpt_runtime::{measure_peak, Arena, Model, OptLevel, SessionConfig};

fn main() -> Result<()> {
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
    println!(
        "{:<28} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7}",
        "model", "pred exact", "ORT exact", "ratio", "pred arena", "ORT arena", "ratio"
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
        let mut cfg = SessionConfig {
            opt_level: OptLevel::Disable,
            arena: Arena::Exact,
            ..Default::default()
        };
        let exact = measure_peak(Model::new(&name, &bytes), &inputs, &cfg)?.peak_bytes;
        cfg.arena = Arena::Session;
        let session = measure_peak(Model::new(&name, &bytes), &inputs, &cfg)?.peak_bytes;
        let r1 = sim.peak_live as f64 / exact as f64;
        let r2 = sim.arena_peak as f64 / session as f64;
        worst = worst.max((r1 - 1.0).abs()).max((r2 - 1.0).abs());
        println!(
            "{name:<28} {:>12} {exact:>12} {r1:>7.3} {:>12} {session:>12} {r2:>7.3}",
            sim.peak_live, sim.arena_peak
        );
    }
    println!("worst deviation: {:.2}%", worst * 100.0);
    Ok(())
}
