//! Shared helpers of the integration tests: the fixture corpus and the binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One entry of `tests/fixtures/manifest.json`.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub path: PathBuf,
    pub kind: String,
    pub name: String,
    pub dropout: f64,
    pub manifest: serde_json::Value,
}

pub fn fixtures() -> Vec<Fixture> {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/manifest.json")).expect("manifest");
    let v: serde_json::Value = serde_json::from_str(&text).expect("manifest json");
    v["fixtures"]
        .as_array()
        .expect("fixtures array")
        .iter()
        .map(|f| {
            let file = f["file"].as_str().expect("file");
            let path = root().join(file);
            Fixture {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                path,
                kind: f["kind"].as_str().unwrap_or("").to_string(),
                dropout: f["dropout"].as_f64().unwrap_or(0.0),
                manifest: f.clone(),
            }
        })
        .collect()
}

pub fn std_fixtures() -> Vec<Fixture> {
    fixtures().into_iter().filter(|f| f.kind == "std").collect()
}

/// The project venv's Python (onnx, onnxruntime, the `ckpt_opt` runner), which
/// `scripts/setup.sh` makes.
pub fn python() -> PathBuf {
    let p = root().join(".venv/bin/python");
    assert!(
        p.exists(),
        "this test needs the project venv's Python at {} (scripts/setup.sh makes it)",
        p.display()
    );
    p
}

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ckpt-opt"))
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run ckpt-opt")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The receipt's JSON Schema, as checked in.
pub fn receipt_schema() -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("docs/receipt.schema.json"))
        .expect("docs/receipt.schema.json");
    serde_json::from_str(&text).expect("schema json")
}

/// A receipt validates against `docs/receipt.schema.json`.
pub fn assert_receipt_valid(r: &serde_json::Value, label: &str) {
    let schema = receipt_schema();
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    let errors: Vec<String> = validator
        .iter_errors(r)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{label}: receipt does not match docs/receipt.schema.json: {errors:?}"
    );
}

/// A main-job receipt (`--validate --json`) of a rewrite: it matches the schema; validation
/// passed bitwise with the control rejected; under the deployment profile the rewrite runs
/// in an arena capped at the ceiling, its measured device total is under the ceiling and
/// below the original's, and both predictions are within the validation's 1%. Returns
/// (measured device total before, measured after, predicted after).
pub fn assert_validated_rewrite(r: &serde_json::Value, label: &str) -> (u64, u64, u64) {
    assert_receipt_valid(r, label);
    let v = &r["validation"];
    assert_eq!(v["passed"], true, "{label}");
    assert_eq!(v["control_rejected"], true, "{label}");
    for out in v["outputs"].as_array().unwrap() {
        assert_eq!(out["bitwise_equal"], true, "{label}: {}", out["name"]);
    }
    let m = &r["memory"];
    assert_eq!(m["passed"], true, "{label}: {m}");
    assert_eq!(m["rewritten"]["runs_under_ceiling"], true, "{label}: {m}");
    let ceiling = r["ceiling_bytes"].as_u64().unwrap();
    let (mb, ma) = (
        m["original"]["measured_total_bytes"].as_u64().unwrap(),
        m["rewritten"]["measured_total_bytes"].as_u64().unwrap(),
    );
    assert!(
        ma <= ceiling,
        "{label}: measured {ma} over the ceiling {ceiling}"
    );
    assert!(ma < mb, "{label}: measured {mb} -> {ma}");
    for g in ["original", "rewritten"] {
        let e = m[g]["relative_error"].as_f64().unwrap();
        assert!(e.abs() <= 0.01, "{label}: {g} predicted off by {e}");
    }
    let predicted = r["predicted_peak_bytes"]["after"].as_u64().unwrap();
    assert_eq!(
        predicted,
        m["rewritten"]["predicted_total_bytes"].as_u64().unwrap(),
        "{label}: the receipt's prediction is the one validation checked"
    );
    (mb, ma, predicted)
}

/// A plan's outcome as snapshot text: the patch and the rewritten graph in schedule order
/// with phases, or the refusal. The patch prints against the numbering of the rewritten graph
/// as printed ([`ckpt_ir::print_patch`]), so each tensor has one `%N` in the snapshot.
pub fn outcome_text(planned: &ckpt_opt::pipeline::PlannedJob, ceiling: u64) -> String {
    use ckpt_planner::Outcome;
    let before = &planned.before;
    match &planned.outcome {
        Outcome::Rewritten(r) => {
            let a = &r.after;
            // Schedule order, after the nodes that are not steps (Constant nodes, which ORT
            // turns into initializers): every tensor is printed before it is read, so the
            // snapshot reads back.
            let order: Vec<ckpt_ir::NodeId> = a
                .graph
                .nodes()
                .iter()
                .copied()
                .filter(|&n| a.sim.schedule.step_of(n).is_none())
                .chain(a.sim.schedule.order.iter().copied())
                .collect();
            let note = |n| Some(format!("[{}]", a.class.phase(n)));
            // The patch the plan wrote, rebuilt from the plan as the job built it (on the
            // variant it planned: after the variant's own moves and guards).
            let mut patch = ckpt_passes::recompute::rewrite(
                r.planned(&before.graph),
                &r.cands,
                &r.plan,
                &format!("recompute for ceiling {ceiling}"),
            );
            patch.metadata.extend(ckpt_planner::recorded_metadata(
                &plan_job(std::path::Path::new("-"), ceiling, 0)
                    .analysis
                    .profile,
                ceiling,
                &before.ledger,
            ));
            assert!(
                r.patch_text == patch.to_string()
                    || (r.planned_graph.is_some() && r.patch_text.ends_with(&format!("\n{patch}"))),
                "the rebuilt patch is the job's:\n{}\n---\n{patch}",
                r.patch_text
            );
            format!(
                "ceiling {ceiling}: predicted {} -> {}\n{}\n{}",
                before.ledger.total_bytes,
                a.ledger.total_bytes,
                ckpt_ir::print_patch(&patch, &a.graph, &order),
                {
                    let text = ckpt_ir::print_graph_with(&a.graph, &order, &note);
                    // The snapshot's graph reads back: parsed (the phase notes are comments), it
                    // prints as the rewritten graph does in the same order.
                    let back = ckpt_ir::parse_graph(&text)
                        .unwrap_or_else(|e| panic!("the snapshot's graph does not parse: {e}"));
                    assert_eq!(
                        ckpt_ir::print_graph(&back),
                        ckpt_ir::print_graph_with(&a.graph, &order, &|_| None),
                        "the snapshot's graph reads back as another graph"
                    );
                    text
                }
            )
        }
        Outcome::CannotFit(diagnosis) => {
            format!(
                "ceiling {ceiling}: refused, lowest {}\n{}\n",
                diagnosis.lowest_reachable_total_bytes, diagnosis.message
            )
        }
        Outcome::AlreadyFits => format!("ceiling {ceiling}: already fits\n"),
    }
}

/// A main job on `path` at `ceiling`, defaults otherwise, with room to finish deterministically.
pub fn plan_job(path: &Path, ceiling: u64, time_limit_secs: u64) -> ckpt_opt::job::Job {
    ckpt_opt::job::Job {
        model: path.to_path_buf(),
        ceiling,
        output: None,
        analysis: ckpt_planner::AnalyseOptions::default(),
        reserve_pct: 0.0,
        time_limit: std::time::Duration::from_secs(time_limit_secs),
        refusal_probes: 0,
        plan_again: false,
        search_steps: ckpt_planner::PASS_STEPS,
        fold: true,
        chunk_loss_head: false,
        fold_tied: false,
    }
}

/// The main job on `model` at `ceiling` with `extra` flags, writing its output, receipt and
/// the receipt in Markdown to a temporary folder: its exit code, the receipt, and the
/// Markdown followed by what it printed.
pub fn main_job_receipt(
    model: &Path,
    ceiling: &str,
    extra: &[&str],
) -> (Option<i32>, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, receipt, md) = (
        dir.path().join("out.onnx"),
        dir.path().join("receipt.json"),
        dir.path().join("receipt.md"),
    );
    let mut args = vec![
        path_str(model),
        "--ceiling",
        ceiling,
        "-o",
        path_str(&out),
        "--receipt",
        path_str(&receipt),
        "--receipt-md",
        path_str(&md),
    ];
    args.extend(extra);
    let o = run(&args);
    let r = serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap())
        .unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let md = std::fs::read_to_string(&md).unwrap_or_default();
    (o.status.code(), r, format!("{md}\n{}", stdout(&o)))
}

/// Run the main job on `model` at `ceiling` with `--validate` (and `extra` flags), writing to
/// `out`; assert it succeeded and return its receipt. The search's time limit is 300 s: a
/// safety stop, not a budget (ILP rounds stop at a node count), which a debug build on a
/// machine loaded by the whole suite must not reach.
pub fn validated_run(model: &Path, ceiling: &str, out: &Path, extra: &[&str]) -> serde_json::Value {
    validated_run_within(model, ceiling, out, "300", extra)
}

/// [`validated_run`] with the search's time limit `limit` (seconds) in place of 300 s.
pub fn validated_run_within(
    model: &Path,
    ceiling: &str,
    out: &Path,
    limit: &str,
    extra: &[&str],
) -> serde_json::Value {
    let receipt = out.with_extension("receipt.json");
    let mut args = vec![
        path_str(model),
        "--ceiling",
        ceiling,
        "-o",
        path_str(out),
        "--validate",
        "--receipt",
        path_str(&receipt),
        "--runs",
        "2",
        "--time-limit",
        limit,
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    serde_json::from_str(&std::fs::read_to_string(&receipt).expect("receipt")).expect("json")
}

/// (predicted, measured) arena need of `g` under the default profile (attention masks drawn
/// in `1..2`).
pub fn default_need(g: &ckpt_ir::Graph, name: &str) -> (u64, u64) {
    profile_need(g, name, &ckpt_ir::Profile::default())
}

/// (predicted, measured) arena need of `g` under `p` (attention masks drawn in `1..2`).
pub fn profile_need(g: &ckpt_ir::Graph, name: &str, p: &ckpt_ir::Profile) -> (u64, u64) {
    use ckpt_ir::profile::CallerOutputs;
    let b = ckpt_ir::Bindings::new();
    let sched = ckpt_passes::memory::schedule(g).expect("schedule");
    let sim = ckpt_passes::memory::simulate(g, &sched, &b).expect("simulate");
    let o = ckpt_validate::inputs::InputOverrides::parse(&[], &["attention_mask=1:2".to_string()])
        .expect("overrides");
    let inputs = ckpt_validate::inputs::make_inputs(g, &b, 7, &o, &[])
        .expect("inputs")
        .0;
    let bytes = ckpt_ir::export_bytes(g);
    let predicted = ckpt_passes::device::device_need(&sim, p);
    let measured = ckpt_runtime::measure_need(
        ckpt_runtime::Model::new(name, &bytes),
        &inputs,
        &ckpt_validate::memory::session_config(p),
        p.steps as usize,
        p.caller_outputs == CallerOutputs::Held,
        Some(predicted.failing_end),
    )
    .expect("measure");
    (predicted.arena_bytes, measured.arena_bytes)
}

/// An arena binding in a receipt or a frontier (`ckpt_opt::receipt::ArenaBinding`) is a
/// boundary: its request fails in `arena_bytes` (no free chunk holds it) and the steps run in
/// 256 B more, at most `need`; bound by the layout exactly when the bytes were free; at a
/// named node. Returns the node.
#[allow(dead_code)]
pub fn assert_arena_binding(b: &serde_json::Value, need: u64) -> String {
    let num = |k: &str| b[k].as_u64().unwrap_or_else(|| panic!("no {k}: {b}"));
    assert_eq!(num("runs_in_bytes"), num("arena_bytes") + 256, "{b}");
    assert!(num("runs_in_bytes") <= need, "{b}");
    assert!(num("largest_free_bytes") < num("requested_bytes"), "{b}");
    assert!(num("largest_free_bytes") <= num("free_bytes"), "{b}");
    assert_eq!(
        b["layout_bound"].as_bool(),
        Some(num("free_bytes") >= num("requested_bytes")),
        "{b}"
    );
    let node = b["node"].as_str().unwrap_or_default().to_string();
    assert!(!node.is_empty(), "{b}");
    node
}
