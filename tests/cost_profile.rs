//! `--cost profile`: the planner ranks recompute by measured node time instead of FLOPs.
//!
//! The library cases are deterministic: a hand-built graph whose node times disagree with its
//! FLOPs (its Exp slow, its MatMul fast) is planned with a fixed cost vector, and the plan
//! differs from the FLOP plan, each plan the cheaper on its own measure. The CLI cases
//! run ORT's profiler end to end: the receipt states measured milliseconds (and, with
//! `--validate`, the measured step-time increase beside the predicted one), and
//! `--receipt-md` summarises it.

mod common;

use std::collections::BTreeSet;
use std::time::Instant;

use ckpt_ir::{export_bytes, parse_graph, Bindings, Graph, NodeId};
use ckpt_opt::pipeline::analyse;
use ckpt_passes::recompute::candidates;
use ckpt_planner::{AnalyseOptions, Outcome, Rewritten};
use ckpt_runtime::NodeEvent;
use ckpt_validate::measured_cost::{added_ns, apply, node_costs, NodeCosts};
use common::*;

/// Two activations of one size saved across a middle stretch that peaks: `a` from a MatMul
/// (many FLOPs, fast per FLOP on a BLAS kernel), `b` from an Exp (few FLOPs, a transcendental
/// per element). Dropping either one fits the ceilings below.
const TWO_SAVED: &str = r#"
ir_version 10
opset ai.onnx 17
input %0 "x": f32[128,128]
input %1 "w": f32[128,128]
%2 "a": ?[?] = MatMul(%0, %1)  # "MatMul_a"
%3 "b": ?[?] = Exp(%0)  # "Exp_b"
%4 "m1": ?[?] = Add(%2, %3)  # "Add_m1"
%5 "m2": ?[?] = Sin(%4)  # "Sin_m2"
%6 "m3": ?[?] = Cos(%5)  # "Cos_m3"
%7 "m4": ?[?] = Mul(%5, %6)  # "Mul_m4"
%8 "s": f32[] = ReduceSum(%7) {keepdims=0}  # "ReduceSum_s"
%9 "as": ?[?] = Mul(%2, %8)  # "Mul_as"
%10 "v": ?[?] = Mul(%9, %3)  # "Mul_v"
%11 "loss": f32[] = ReduceSum(%10) {keepdims=0}  # "ReduceSum_loss"
%12 "w_grad": f32[128,128] = Mul(%1, %11)  # "Mul_w_grad"
output %11 "loss"
output %12 "w_grad"
"#;

fn two_saved() -> Graph {
    parse_graph(TWO_SAVED).unwrap()
}

/// Node times that disagree with FLOPs: the Exp takes 1 ms, every other node 1 µs.
fn slow_exp(g: &Graph) -> NodeCosts {
    let mut ns = vec![0u64; g.node_bound()];
    for &n in g.nodes() {
        ns[n.index()] = if g.node(n).op_type == "Exp" {
            1_000_000
        } else {
            1_000
        };
    }
    NodeCosts {
        ns,
        runs: 5,
        measured_nodes: g.node_count(),
        unmeasured_nodes: Vec::new(),
        providers: vec!["CPUExecutionProvider".into()],
    }
}

fn total(g: &Graph) -> u64 {
    analyse(g.clone(), &AnalyseOptions::default())
        .unwrap()
        .ledger
        .total_bytes
}

/// The graph planned, and its rewrite at `ceiling`.
fn rewritten(ceiling: u64, costs: Option<&NodeCosts>) -> (ckpt_ir::Graph, Box<Rewritten>) {
    let job = plan_job(std::path::Path::new("two_saved.onnx"), ceiling, 60);
    let before = analyse(two_saved(), &job.analysis).unwrap();
    let options = job.plan_options(Instant::now(), 1, costs);
    let planned = ckpt_opt::pipeline::plan(before, &options).unwrap();
    match planned.outcome {
        Outcome::Rewritten(r) => (planned.before.graph, r),
        Outcome::AlreadyFits => panic!("fits at {ceiling} without recompute"),
        Outcome::CannotFit(diagnosis) => panic!("{}", diagnosis.message),
    }
}

/// The nodes a plan clones, by name.
fn cloned((g, r): &(ckpt_ir::Graph, Box<Rewritten>)) -> BTreeSet<String> {
    r.cands
        .list
        .iter()
        .enumerate()
        .filter(|(i, _)| r.plan.recompute[*i])
        .flat_map(|(_, c)| {
            c.nodes
                .iter()
                .filter(|n| !c.moved.contains(n))
                .map(|&n| g.node(n).name.clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A candidate's cost under a cost vector is the sum over the nodes it clones (moves free),
/// at least 1; under FLOPs it is their FLOP count.
#[test]
fn a_cost_vector_replaces_each_candidates_flops() {
    let g = two_saved();
    let a = analyse(g.clone(), &AnalyseOptions::default()).unwrap();
    let mut cands = candidates(&a.graph, &a.sim, &a.types, &Bindings::new());
    assert!(!cands.list.is_empty());
    let costs = slow_exp(&g);
    apply(&mut cands, &costs);
    for c in &cands.list {
        let expected: u64 = c
            .nodes
            .iter()
            .filter(|n| !c.moved.contains(n))
            .map(|&n| costs.ns[n.index()])
            .sum::<u64>()
            .max(1);
        assert_eq!(c.model.cost, expected, "{}", c.model.label);
    }
}

/// Where node times disagree with FLOPs, the measured cost changes the plan: by FLOPs the
/// Exp is recomputed (16 KFLOP against the MatMul's 4.2 MFLOP), by time the MatMul (1 µs
/// against 1 ms). Both plans fit, and each is the cheaper on its own measure.
#[test]
fn measured_cost_changes_the_plan_where_times_disagree_with_flops() {
    let g = two_saved();
    let costs = slow_exp(&g);
    for pct in [95, 90] {
        let ceiling = total(&g) * pct / 100;
        let by_flops = rewritten(ceiling, None);
        let by_time = rewritten(ceiling, Some(&costs));
        assert!(by_flops.1.after.ledger.total_bytes <= ceiling);
        assert!(by_time.1.after.ledger.total_bytes <= ceiling);
        assert_eq!(
            cloned(&by_flops),
            BTreeSet::from(["Exp_b".to_string()]),
            "{pct}%"
        );
        assert_eq!(
            cloned(&by_time),
            BTreeSet::from(["MatMul_a".to_string()]),
            "{pct}%"
        );
        let ns = |(g, r): &(ckpt_ir::Graph, Box<Rewritten>)| added_ns(g, &r.cands, &r.plan, &costs);
        assert_eq!((ns(&by_flops), ns(&by_time)), (1_000_000, 1_000), "{pct}%");
        assert!(by_flops.1.counts.added_flops < by_time.1.counts.added_flops);
    }
}

/// Events of a 1 warm-up + 3 timed runs profile become per-node medians of the timed runs,
/// matched by node index; a node ORT never ran costs 0 and is named.
#[test]
fn profile_events_become_per_node_medians() {
    let g = two_saved();
    let order: Vec<NodeId> = g.nodes().to_vec();
    let ev = |i: usize, dur_us: u64, start_us: u64| NodeEvent {
        node_name: g.node(order[i]).name.clone(),
        op_type: g.node(order[i]).op_type.clone(),
        node_index: Some(i),
        provider: "CPUExecutionProvider".into(),
        start_us,
        dur_us,
    };
    let mut events = Vec::new();
    for (run, durs) in [[900u64, 50], [10, 7], [30, 5], [20, 6]].iter().enumerate() {
        events.push(ev(0, durs[0], run as u64 * 100));
        events.push(ev(1, durs[1], run as u64 * 100 + 1));
    }
    let c = node_costs(&g, &events, 1);
    assert_eq!(c.ns[order[0].index()], 20_000); // median of 10, 30, 20 µs; 900 was the warm-up
    assert_eq!(c.ns[order[1].index()], 6_000);
    assert_eq!(c.runs, 3);
    assert_eq!(c.measured_nodes, 2);
    assert_eq!(c.unmeasured_nodes.len(), g.node_count() - 2);
    assert_eq!(c.step_ns(), 26_000);
}

fn write_model(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("two_saved.onnx");
    std::fs::write(&path, export_bytes(&two_saved())).unwrap();
    path
}

/// End to end on ORT: `--cost profile --validate` plans on measured node times; the receipt
/// says so, states the predicted added milliseconds and the measured p50 increase, gives each
/// segment its FLOPs and milliseconds, matches the schema, and `--receipt-md` summarises it.
#[test]
fn profile_cost_end_to_end_states_measured_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let out = dir.path().join("out.onnx");
    let md = dir.path().join("receipt.md");
    let o = run(&[
        path_str(&model),
        "--ceiling",
        "90%",
        "--cost",
        "profile",
        "--validate",
        "--runs",
        "5",
        "-o",
        path_str(&out),
        "--receipt-md",
        path_str(&md),
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_receipt_valid(&r, "cost profile");
    assert_eq!(r["status"], "rewritten");
    assert_eq!(r["cost_model"], "profile");
    let m = &r["measured_cost"];
    assert!(m["step_kernel_ms"].as_f64().unwrap() > 0.0, "{m}");
    assert!(m["predicted_added_ms"].as_f64().unwrap() > 0.0, "{m}");
    assert!(m["measured_added_ms"].as_f64().is_some(), "{m}");
    assert_eq!(m["runs"], 5);
    assert!(m["measured_nodes"].as_u64().unwrap() > 0);
    let segments = r["segments"].as_array().unwrap();
    assert!(!segments.is_empty());
    let seg_ms: f64 = segments
        .iter()
        .map(|s| s["ms_added"].as_f64().unwrap())
        .sum();
    assert!(seg_ms > 0.0);
    let seg_flops: u64 = segments
        .iter()
        .map(|s| s["flops_added"].as_u64().unwrap())
        .sum();
    assert_eq!(r["model_added_flops"].as_u64(), Some(seg_flops));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("measured kernel time"), "{text}");
    assert!(text.contains("Added step time: predicted"), "{text}");
    assert!(text.contains("## Measured on ONNX Runtime"), "{text}");
    assert!(!text.contains("Nothing was run"), "{text}");
}

/// The default is FLOPs: the receipt says so and has no measured cost; the summary says that
/// nothing ran on ORT, that time was not measured, and names the shape and profile.
#[test]
fn receipt_md_of_a_flops_plan_states_what_was_not_measured() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let out = dir.path().join("out.onnx");
    let md = dir.path().join("receipt.md");
    let o = run(&[
        path_str(&model),
        "--ceiling",
        "90%",
        "-o",
        path_str(&out),
        "--receipt-md",
        path_str(&md),
        "--json",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_receipt_valid(&r, "cost flops");
    assert_eq!(r["cost_model"], "flops");
    assert!(r.get("measured_cost").is_none());
    let text = std::fs::read_to_string(&md).unwrap();
    let description = r["profile_description"].as_str().unwrap();
    assert!(text.contains(description), "{text}");
    assert!(text.contains("`x` [128, 128]"), "{text}");
    assert!(text.contains("Nothing was run for validation"), "{text}");
    assert!(
        text.contains("the recompute cost is a FLOP count"),
        "{text}"
    );
    assert!(
        text.contains("Execution modes: only the deployment profile"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Added FLOPs: {}", r["added_flops"])),
        "{text}"
    );
}

/// A graph that needs the training runtime cannot be profiled on plain ONNX Runtime: the job
/// refuses it (exit 1), naming the cause and the way out, and writes nothing.
#[test]
fn profile_cost_refuses_a_graph_that_needs_the_training_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("r.json");
    let model = root().join("tests/fixtures/ort_mlp_training.onnx");
    let o = run(&[
        path_str(&model),
        "--dim",
        "batch=4",
        "--ceiling",
        "80%",
        "--cost",
        "profile",
        "--receipt",
        path_str(&receipt),
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("needs the training runtime"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("--cost flops"), "{}", stderr(&o));
    assert!(!receipt.exists());
}

/// `frontier --cost profile`: the sweep runs ORT's profiler once and costs every plan and
/// baseline by measured node times. Each fitting point states its predicted added
/// milliseconds and their share of the measured step (consistent with each other), points stay
/// monotone in that cost, the Markdown says which cost model ranked the plans, and the plot's
/// axis says the time is predicted from measured node times.
#[test]
fn frontier_with_profile_cost_states_added_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    let out = dir.path().join("frontier");
    let o = run(&[
        "frontier",
        path_str(&model),
        "--ceilings",
        "95%,90%,85%",
        "--cost",
        "profile",
        "--runs",
        "5",
        "--out",
        path_str(&out),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("frontier.json")).unwrap()).unwrap();
    assert_eq!(f["cost_model"], "profile");
    let step = f["step_kernel_ms"].as_f64().unwrap();
    assert!(step > 0.0, "{f}");
    let points = f["points"].as_array().unwrap();
    let fitting: Vec<&serde_json::Value> = points.iter().filter(|p| p["fits"] == true).collect();
    assert!(!fitting.is_empty(), "{f}");
    let mut last = 0.0f64;
    for p in &fitting {
        let ms = p["added_ms"]
            .as_f64()
            .unwrap_or_else(|| panic!("no added_ms: {p}"));
        let pct = p["added_ms_percent"].as_f64().unwrap();
        assert!((pct - 100.0 * ms / step).abs() < 1e-6 * pct.max(1.0), "{p}");
        assert!(
            ms + 1e-9 >= last,
            "added time falls as the ceiling falls: {f}"
        );
        last = ms;
    }
    for b in f["baselines"].as_array().unwrap() {
        assert!(b["added_ms"].as_f64().is_some(), "{b}");
    }
    assert_eq!(f["baselines"][0]["added_ms"].as_f64(), Some(0.0));
    let md = std::fs::read_to_string(out.join("frontier.md")).unwrap();
    assert!(
        md.contains("Cost model: ONNX Runtime's measured node times"),
        "{md}"
    );
    assert!(md.contains("added time (predicted)"), "{md}");
    let svg = std::fs::read_to_string(out.join("frontier.svg")).unwrap();
    assert!(svg.contains("predicted from ONNX Runtime"), "{svg}");
}
