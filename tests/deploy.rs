//! What a written model records for its runner, and that every byte the device holds is in
//! the total: the caller's feeds and outputs, the constants (frozen weights among them) where
//! ONNX Runtime keeps them, what loading reserves from the arena, and the steps' arena.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// The BERT fixture with its encoder and embeddings frozen, as an exporter leaves them:
/// parameters turned into initializers, their gradients dropped, dead nodes pruned
/// (`scripts/fixtures/freeze.py`).
fn frozen_bert(dir: &Path) -> PathBuf {
    let out = dir.join("bert_frozen.onnx");
    let o = Command::new(python())
        .arg(root().join("scripts/fixtures/freeze.py"))
        .arg(root().join("tests/fixtures/bert_d01_aot.onnx"))
        .arg(&out)
        .args(["bert.encoder.*", "bert.embeddings.*"])
        .output()
        .expect("run freeze.py");
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

fn metadata(path: &Path) -> Vec<(String, String)> {
    let g = ckpt_ir::import_file(path).expect("import");
    g.model()
        .metadata_props
        .iter()
        .map(|p| {
            (
                p.key.clone().unwrap_or_default(),
                p.value.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn deployment(path: &Path) -> ckpt_ir::Deployment {
    let md = metadata(path);
    ckpt_ir::Deployment::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .expect("a consistent deployment")
        .expect("the model records a deployment")
}

#[test]
fn frozen_weights_are_in_the_device_total_and_the_measured_need() {
    let dir = tempfile::tempdir().unwrap();
    let model = frozen_bert(dir.path());
    let out = dir.path().join("out.onnx");
    let r = validated_run(&model, "95%", &out, &["--int-range", "attention_mask=0:2"]);
    let before = &r["ledger"]["before"];
    // 343,740 B of frozen weights and constants above 127 B each, held outside the arena.
    let init = before["initializer_bytes"].as_u64().unwrap();
    assert!(init >= 340_000, "initializers {init}");
    let m = &r["memory"];
    for side in ["original", "rewritten"] {
        let d = &m[side];
        // What loading reserves from the arena (the constants of at most 127 B) is predicted
        // to the byte, and the totals include it.
        assert_eq!(
            d["predicted_load_bytes"], d["measured_load_bytes"],
            "{side}: {d}"
        );
        assert!(d["measured_load_bytes"].as_u64().unwrap() > 0, "{side}");
        assert_eq!(
            d["predicted_total_bytes"], d["measured_total_bytes"],
            "{side}: {d}"
        );
    }
    let d = deployment(&out);
    assert_eq!(d.initializer_bytes, init);
    assert_eq!(
        d.caller_bytes + d.initializer_bytes + d.arena_cap_bytes,
        d.ceiling_bytes
    );
    let rewritten_total = m["rewritten"]["measured_total_bytes"].as_u64().unwrap();
    assert!(rewritten_total <= d.ceiling_bytes);
    // The caller holds the outputs it got back: the gradients and the loss.
    let outputs = before["outputs_bytes"].as_u64().unwrap();
    assert_eq!(outputs, 4 + 4 * (64 * 64 + 64 + 4 * 64 + 4));
    assert_eq!(
        d.caller_bytes,
        before["parameters_bytes"].as_u64().unwrap()
            + before["data_bytes"].as_u64().unwrap()
            + outputs
    );
}

#[test]
fn every_output_records_the_runner_keys_beside_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp.onnx");
    let o = run(&[
        path_str(&root().join("tests/fixtures/mlp_d0_aot.onnx")),
        "--ceiling",
        "1GiB",
        "-o",
        path_str(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let md = metadata(&out);
    for key in [
        "ckpt-opt.version",
        "ckpt-opt.ceiling_bytes",
        "ckpt-opt.arena_cap_bytes",
        "ckpt-opt.caller_bytes",
        "ckpt-opt.initializer_bytes",
        "ckpt-opt.profile.caller_outputs",
        "ckpt-opt.session_config.optimization.disable_specified_optimizers",
    ] {
        assert!(md.iter().any(|(k, _)| k == key), "{key} missing: {md:?}");
    }
    let d = deployment(&out);
    assert_eq!(d.ceiling_bytes, 1 << 30);
    // The first region is the steps' budget: the cap less what loading reserves (88 B of
    // constants of at most 127 B in this model).
    let chunk: u64 = md
        .iter()
        .find(|(k, _)| k == "ckpt-opt.profile.initial_chunk_size_bytes")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap();
    assert_eq!(d.arena_cap_bytes - chunk, 88);
}

#[test]
fn an_inference_graph_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    // The MLP's forward half: its loss is an output, no gradient is.
    let model = dir.path().join("forward.onnx");
    let o = Command::new(python())
        .arg("-c")
        .arg(
            "import onnx,sys\n\
             m=onnx.load(sys.argv[1])\n\
             keep=[o for o in m.graph.output if o.name=='loss']\n\
             del m.graph.output[:]\n\
             m.graph.output.extend(keep)\n\
             onnx.save(m,sys.argv[2])",
        )
        .arg(root().join("tests/fixtures/mlp_d0_aot.onnx"))
        .arg(&model)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = dir.path().join("out.onnx");
    let o = run(&[path_str(&model), "--ceiling", "1GiB", "-o", path_str(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not a training graph: no output is a gradient"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
}

#[test]
fn write_targets_are_checked_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::copy(root().join("tests/fixtures/mlp_d0_aot.onnx"), &model).unwrap();
    let out = dir.path().join("o.onnx");
    let before = std::fs::read(&model).unwrap();
    for (args, says) in [
        (vec!["--receipt", path_str(&model)], "is the input model"),
        (vec!["--receipt", path_str(&out)], "also -o"),
        (
            vec!["--receipt", "/nonexistent-folder/r.json"],
            "nonexistent-folder",
        ),
    ] {
        let mut a = vec![path_str(&model), "--ceiling", "1GiB", "-o", path_str(&out)];
        a.extend(args);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{says}: {}", stderr(&o));
        assert!(!out.exists());
        assert_eq!(std::fs::read(&model).unwrap(), before);
    }
}

#[test]
fn validate_takes_a_percentage_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = root().join("tests/fixtures/mlp_d0_aot.onnx");
    let out = dir.path().join("o.onnx");
    let o = run(&[
        path_str(&fixture),
        "--ceiling",
        "1GiB",
        "-o",
        path_str(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&[
        "validate",
        path_str(&fixture),
        path_str(&out),
        "--ceiling",
        "100%",
        "--json",
    ]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let m = &v["memory"];
    assert_eq!(m["ceiling_bytes"], m["original"]["predicted_total_bytes"]);
}

/// With the outputs bound to the runner's buffers, ORT writes each output in place and the
/// arena never holds one: predicted to the byte on every standard fixture.
#[test]
fn bound_outputs_are_predicted_to_the_byte() {
    use ckpt_ir::profile::CallerOutputs;
    let p = ckpt_ir::Profile {
        caller_outputs: CallerOutputs::Bound,
        ..ckpt_ir::Profile::default()
    };
    let mut misses = Vec::new();
    for f in std_fixtures() {
        let g = ckpt_ir::import_file(&f.path).expect("import");
        let (predicted, measured) = profile_need(&g, &f.name, &p);
        let (released, _) = default_need(&g, &f.name);
        assert!(
            predicted <= released,
            "{}: {predicted} > {released}",
            f.name
        );
        if predicted != measured {
            misses.push(format!(
                "{}: predicted {predicted}, measured {measured}",
                f.name
            ));
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}

/// Whether `steps` runs of the Python runner (`ckpt_opt.Session`, `python/`) fit with the
/// arena capped at `cap`, fed from the `.npy` files in `feeds`. Each call is a fresh process.
fn python_runs(model: &Path, cap: u64, feeds: &Path, steps: usize) -> bool {
    let script = "import os, sys, numpy as np, ckpt_opt\n\
        path, cap, feeds, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])\n\
        fed = {n[:-4].replace('%2F', '/'): np.load(os.path.join(feeds, n)) for n in os.listdir(feeds)}\n\
        try:\n\
        \x20   s = ckpt_opt.Session(path, arena_cap_bytes=cap, log_severity_level=4)\n\
        \x20   for _ in range(steps):\n\
        \x20       out = s.run(fed)\n\
        \x20   print('ran')\n\
        except ckpt_opt.CeilingExceeded:\n\
        \x20   print('exceeded')\n";
    let o = Command::new(python())
        .env("PYTHONPATH", root().join("python"))
        .arg("-c")
        .arg(script)
        .arg(model)
        .arg(cap.to_string())
        .arg(feeds)
        .arg(steps.to_string())
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", stderr(&o));
    match stdout(&o).trim() {
        "ran" => true,
        "exceeded" => false,
        other => panic!("python runner said {other:?}: {}", stderr(&o)),
    }
}

/// The Rust runner and the Python runner build the same session from a written output: at
/// the recorded arena cap and below it, both run or both raise, on the fixtures.
#[test]
fn rust_and_python_runners_agree_on_the_arena_cap() {
    for name in ["mlp_d0_aot", "gpt2_d0_aot", "bert_d01_aot"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join(format!("{name}.onnx"));
        let o = run(&[
            path_str(&root().join(format!("tests/fixtures/{name}.onnx"))),
            "--ceiling",
            "100%",
            "-o",
            path_str(&out),
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let g = ckpt_ir::import_file(&out).unwrap();
        let profile = ckpt_ir::Profile::from_model(g.model()).unwrap().unwrap();
        let d = deployment(&out);
        let b = ckpt_ir::Bindings::new();
        let overrides =
            ckpt_validate::inputs::InputOverrides::parse(&[], &["attention_mask=1:2".to_string()])
                .unwrap();
        let inputs = ckpt_validate::inputs::make_inputs(&g, &b, 7, &overrides, &[])
            .unwrap()
            .0;
        let feeds = dir.path().join("feeds");
        std::fs::create_dir(&feeds).unwrap();
        for t in &inputs {
            let file = format!("{}.npy", t.name.replace('/', "%2F"));
            ckpt_runtime::write_npy(&feeds.join(file), t).unwrap();
        }
        let bytes = std::fs::read(&out).unwrap();
        let m = ckpt_runtime::Model::new(name, &bytes);
        let cfg = ckpt_validate::memory::session_config(&profile);
        let steps = profile.steps as usize;
        let mut answers = Vec::new();
        // The recorded cap, just below it (the measured need is conservative: the steps may
        // still run there) and half of it.
        for cap in [
            d.arena_cap_bytes,
            d.arena_cap_bytes - 256,
            d.arena_cap_bytes / 2,
        ] {
            let rust = ckpt_runtime::runs_under(m, &inputs, &cfg, steps, false, 0, cap).unwrap();
            let python = python_runs(&out, cap, &feeds, steps);
            assert_eq!(
                rust, python,
                "{name} at {cap} B: rust {rust}, python {python}"
            );
            answers.push(rust);
        }
        assert!(answers[0], "{name}: the recorded cap must run");
        assert!(!answers[2], "{name}: half the cap must not run");
    }
}

#[test]
fn unbound_dims_are_named_at_once_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let model = root().join("tests/fixtures/symbolic/gpt2_d0_dynamic.onnx");
    let o = run(&[path_str(&model), "--ceiling", "90%", "-o", path_str(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "2 unbound symbolic dims: batch, seq; bind each with --dim batch=N --dim seq=N"
        ),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
}

/// The first Python block of the README's "Deploying the output", verbatim.
fn readme_loop() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Deploying the output\n")
        .nth(1)
        .expect("README has a section \"Deploying the output\"");
    let block = section
        .split("```python\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section opens with a python block");
    block.to_string()
}

/// What the README's loop leaves to the user: `weights` (every input with a `_grad` output),
/// `data` (20 batches of the other inputs; one batch repeated so the loss must fall) and
/// `step` (SGD in place on `weights`, recording the loss). `CAP_FRACTION` set rewrites the
/// recorded arena cap (and the ceiling with it) to that fraction of the measured need first.
const README_PRELUDE: &str = r#"
import json, os, sys
import numpy as np, onnx
import ckpt_opt
from ckpt_opt.feeds import random_feeds

need, fraction = int(sys.argv[1]), float(sys.argv[2])
if fraction < 1.0:
    m = onnx.load("model.ckpt.onnx")
    md = {p.key: p for p in m.metadata_props}
    cap = int(md["ckpt-opt.arena_cap_bytes"].value)
    low = int(need * fraction)
    md["ckpt-opt.arena_cap_bytes"].value = str(low)
    md["ckpt-opt.ceiling_bytes"].value = str(int(md["ckpt-opt.ceiling_bytes"].value) - (cap - low))
    onnx.save(m, "model.ckpt.onnx")
probe = ckpt_opt.Session("model.ckpt.onnx") if fraction == 1.0 else None
if probe is None:
    import onnxruntime as ort
    inputs = ort.InferenceSession("model.ckpt.onnx").get_inputs()
else:
    inputs = probe.inputs
high = {i.name: 2 for i in inputs if "mask" in i.name}
feeds = random_feeds(inputs, 7, high)
del probe
outputs = {o.name for o in onnx.load("model.ckpt.onnx", load_external_data=False).graph.output}
weights = {n: v for n, v in feeds.items() if n + "_grad" in outputs}
data = [{n: v for n, v in feeds.items() if n not in weights}] * 20
losses = []
def step(weights, out):
    for n, w in weights.items():
        w -= 1e-2 * out[n + "_grad"]
    losses.append(float(out["loss"]))
try:
    exec(open("readme_loop.py").read())
    print(json.dumps({"ran": len(losses), "losses": losses}))
except ckpt_opt.CeilingExceeded as e:
    print(json.dumps({"exceeded": str(e), "node": e.node, "step": e.step, "ran": len(losses)}))
"#;

fn readme_loop_in(dir: &Path, need: u64, fraction: f64) -> serde_json::Value {
    let o = Command::new(python())
        .current_dir(dir)
        .arg("-c")
        .arg(README_PRELUDE)
        .arg(need.to_string())
        .arg(fraction.to_string())
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", stderr(&o));
    let last = stdout(&o).lines().last().unwrap_or_default().to_string();
    serde_json::from_str(&last).unwrap_or_else(|_| panic!("{}\n{}", stdout(&o), stderr(&o)))
}

/// The README's deployment loop, verbatim, on graphs the tests hold to nothing else here (T5,
/// ViT, and BERT with a frozen encoder): 20 steps run under the recorded cap and the loss
/// falls; with the recorded cap set to 90% of ORT's measured need, it raises `CeilingExceeded`
/// naming the node. The validated device total covers the fed bytes, the initializers and
/// ORT's measured arena need.
#[test]
fn the_readme_loop_runs_twenty_steps_and_a_low_cap_raises() {
    let dir = tempfile::tempdir().unwrap();
    let frozen = frozen_bert(dir.path());
    let cases = [
        (
            root().join("tests/fixtures/t5_d0_makefx.onnx"),
            vec!["--int-range", "attention_mask=0:2"],
        ),
        (root().join("tests/fixtures/vit_d0_aot.onnx"), vec![]),
        (frozen, vec!["--int-range", "attention_mask=0:2"]),
    ];
    for (model, extra) in cases {
        let name = model.file_stem().unwrap().to_string_lossy().to_string();
        let work = dir.path().join(&name);
        std::fs::create_dir(&work).unwrap();
        let out = work.join("model.ckpt.onnx");
        let r = validated_run(&model, "90%", &out, &extra);
        std::fs::write(work.join("readme_loop.py"), readme_loop()).unwrap();
        let d = deployment(&out);
        let m = &r["memory"]["rewritten"];
        let total = m["measured_total_bytes"].as_u64().unwrap();
        assert_eq!(
            m["predicted_total_bytes"].as_u64().unwrap(),
            total,
            "{name}"
        );
        let need = total - d.caller_bytes - d.initializer_bytes;
        assert!(
            need <= d.arena_cap_bytes,
            "{name}: need {need}, cap {}",
            d.arena_cap_bytes
        );
        let ok = readme_loop_in(&work, need, 1.0);
        let losses: Vec<f64> = ok["losses"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {ok}"))
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(losses.len(), 20, "{name}: {ok}");
        assert!(losses.iter().all(|l| l.is_finite()), "{name}: {losses:?}");
        assert!(
            losses[19] < losses[0],
            "{name}: the loss must fall: {losses:?}"
        );
        let low = readme_loop_in(&work, need, 0.9);
        eprintln!(
            "{name}: need {need} B under cap {} B; loss {} -> {}; at 90% of the need: {}",
            d.arena_cap_bytes, losses[0], losses[19], low["exceeded"]
        );
        assert!(low["exceeded"].is_string(), "{name}: {low}");
        assert!(
            !low["node"].as_str().unwrap_or_default().is_empty(),
            "{name}: {low}"
        );
    }
}
