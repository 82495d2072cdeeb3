//! `ckpt-opt inspect`: what a model is, at a glance (and as JSON).
//!
//! At `--ort-opt-level basic|extended|all` what is inspected is the graph ORT saves at that
//! level (`ckpt_validate::offline`), under the profile it is loaded at (`disable`, optimized
//! offline): the graph the main job plans and the output runs, with ORT's fusions.

use serde_json::json;

use ckpt_ir::{type_str, Graph};
use ckpt_passes::ort_casts::NoKernel;
use ckpt_passes::{classify, Classification, ClassifyError, TensorKind};

use ckpt_opt::cli::InspectArgs;
use ckpt_opt::exit::Failure;
use ckpt_opt::model_io::{self, bindings, load, required_dims, OrtFallback};
use ckpt_opt::receipt::{Ledger, Trace};
use ckpt_opt::size::human;
use ckpt_planner::Analysis;

/// The phases of a graph, or why they could not be found.
type Phases = Result<Classification, ClassifyError>;

pub fn run(a: &InspectArgs) -> Result<(), Failure> {
    let given = load(&a.model)?;
    let bindings = bindings(&a.model_args.dims, &given)?;
    let mut options = model_io::analyse_options(&a.model_args, &bindings)?;
    let graph = at_level(given, a, &mut options)?;
    // The runtime the model needs (training ops: onnxruntime-training) is the one predicted.
    model_io::on_runtime_of(&mut options.profile, &graph)?;
    model_io::warn_thread_race(&options.profile, &graph);
    let class = classify(&graph, a.model_args.training.loss.as_deref());
    let params = Parameters::of(&graph, &class, &bindings);
    // What the profile's provider cannot run, and the graph ORT runs for it.
    let (runs, fallback, missing) = match model_io::ort_runs(graph.clone(), &options.profile) {
        Ok((runs, fallback)) => (runs, fallback, Vec::new()),
        Err(ckpt_passes::ort_casts::FallbackError::NoKernel { nodes, .. }) => {
            (graph.clone(), None, nodes)
        }
        Err(e) => return Err(Failure::input(anyhow::anyhow!(e))),
    };
    let analysis = if missing.is_empty() {
        ckpt_opt::pipeline::analyse(runs, &options).map_err(anyhow::Error::from)
    } else {
        Err(anyhow::anyhow!(
            "ONNX Runtime {}'s CPU provider has no kernel for {} node(s)",
            options.profile.ort_version,
            missing.len()
        ))
    };
    let found = Found {
        graph: &graph,
        class: &class,
        params: &params,
        fallback,
        missing: &missing,
        analysis: &analysis,
    };
    if a.json {
        let v = json_of(a, &found, &bindings, &options.profile);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(Failure::internal)?
        );
        return Ok(());
    }
    print_human(&graph, a, &bindings, &class, &params);
    print_missing(&missing, &options.profile);
    if let Some(f) = fallback {
        println!("{f}");
    }
    match &analysis {
        Ok(an) => print_memory(an, &options.profile),
        Err(e) => println!("memory model: unavailable ({e:#})"),
    }
    Ok(())
}

/// What `inspect` found of a model.
struct Found<'a> {
    graph: &'a Graph,
    class: &'a Phases,
    params: &'a Parameters,
    fallback: Option<OrtFallback>,
    missing: &'a [NoKernel],
    analysis: &'a anyhow::Result<Analysis>,
}

/// The model's parameters: how many tensors, elements and bytes (or why the bytes are unknown).
struct Parameters {
    count: u64,
    elements: u64,
    bytes: Result<u64, String>,
}

impl Parameters {
    fn of(graph: &Graph, class: &Phases, bindings: &ckpt_ir::Bindings) -> Parameters {
        let mut p = Parameters {
            count: 0,
            elements: 0,
            bytes: Ok(0),
        };
        let Ok(c) = class else {
            return p;
        };
        for t in c.of_kind(TensorKind::Parameter) {
            p.count += 1;
            let t = graph.tensor(t);
            let (Some(shape), Some(dtype)) = (&t.shape, t.dtype) else {
                continue;
            };
            match (
                shape.numel_under(bindings),
                shape.bytes_under(dtype.bits(), bindings),
            ) {
                (Ok(n), Ok(b)) => {
                    p.elements += n;
                    if let Ok(total) = &mut p.bytes {
                        *total += b;
                    }
                }
                (Err(e), _) | (_, Err(e)) => p.bytes = Err(format!("{}: {e}", t.name)),
            }
        }
        p
    }
}

/// `inspect --json`.
fn json_of(
    a: &InspectArgs,
    f: &Found,
    bindings: &ckpt_ir::Bindings,
    profile: &ckpt_ir::Profile,
) -> serde_json::Value {
    let graph = f.graph;
    let kind_of = |t| {
        f.class
            .as_ref()
            .ok()
            .map(|c| c.kind(t).name())
            .unwrap_or("?")
    };
    let io = |ts: &[ckpt_ir::TensorId]| -> Vec<serde_json::Value> {
        ts.iter()
            .map(|&t| {
                let tensor = graph.tensor(t);
                json!({
                    "name": tensor.name,
                    "dtype": tensor.dtype.map(|d| d.name()),
                    "shape": tensor.shape.as_ref().map(|s| s.dims().iter().map(|d| d.to_string()).collect::<Vec<_>>()),
                    "kind": kind_of(t),
                })
            })
            .collect()
    };
    let opsets: serde_json::Map<String, serde_json::Value> = graph
        .opsets()
        .into_iter()
        .map(|(d, v)| (d, json!(v)))
        .collect();
    let missing: Vec<serde_json::Value> = f
        .missing
        .iter()
        .map(|m| json!({"node": m.node, "op": m.op, "input_types": m.types}))
        .collect();
    let mut v = json!({
        "model": a.model.display().to_string(),
        "ir_version": graph.ir_version(),
        "opsets": opsets,
        "nodes": graph.node_count(),
        "tensors": graph.tensor_count(),
        "inputs": io(graph.inputs()),
        "outputs": io(graph.outputs()),
        "loss": f.class.as_ref().ok().map(|c| graph.tensor(c.loss).name.clone()),
        "parameters": {
            "count": f.params.count,
            "elements": f.params.elements,
            "bytes": f.params.bytes.as_ref().ok(),
        },
        "symbolic_dims": graph.symbols(),
        "required_dims": required_dims(graph),
        "bindings": bindings,
        "ort_version": profile.ort_version,
        "missing_kernels": missing,
        "ort_fallback": f.fallback.map(|f| json!({
            "converted_nodes": f.converted,
            "inserted_casts": f.inserted,
            "removed_casts": f.removed,
        })),
    });
    match f.analysis {
        Ok(an) => {
            let trace = Trace::of(an);
            v["predicted_peak_bytes"] = json!(an.ledger.total_bytes);
            v["predicted_device_arena_bytes"] = json!(an.device.arena_bytes);
            v["predicted_exact_arena_peak_bytes"] = json!(an.sim.peak_live);
            v["predicted_default_arena_peak_bytes"] = json!(an.sim.arena_peak());
            v["profile"] = ckpt_validate::memory::profile_json(profile);
            v["ledger"] = json!(Ledger::of(&an.ledger));
            v["peak"] = json!(trace.peak);
            v["phases"] = json!(trace.phases);
        }
        Err(e) => v["memory_model_error"] = json!(format!("{e:#}")),
    }
    v
}

/// The nodes the profile's provider has no kernel for.
fn print_missing(missing: &[NoKernel], profile: &ckpt_ir::Profile) {
    if missing.is_empty() {
        println!("missing kernels: none on {}", profile.execution_provider);
    } else {
        println!(
            "missing kernels: ONNX Runtime {}'s CPU provider cannot run {} node(s) (it runs float16 nodes without a kernel in float32 between Casts, not bfloat16 ones); plan for --provider cuda:",
            profile.ort_version,
            missing.len()
        );
        for m in missing {
            println!("  {m}");
        }
    }
}

/// The graph to inspect: as given at level `disable`; at basic, extended or all the graph ORT
/// saves at that level, with `options` switched to the profile it is loaded at.
fn at_level(
    given: Graph,
    a: &InspectArgs,
    options: &mut ckpt_planner::AnalyseOptions,
) -> Result<Graph, Failure> {
    if options.profile.graph_optimization_level == ckpt_ir::profile::OptLevel::Disable {
        return Ok(given);
    }
    let bytes = std::fs::read(&a.model)
        .map_err(|e| Failure::input(anyhow::anyhow!("reading {}: {e}", a.model.display())))?;
    let optimized = ckpt_validate::offline::optimize_for_level(&bytes, &a.model, &options.profile)
        .map_err(Failure::input)?
        .ok_or_else(|| Failure::input(anyhow::anyhow!("no offline graph at level disable")))?;
    options.profile = optimized.profile;
    Ok(optimized.graph)
}

fn print_human(
    graph: &Graph,
    a: &InspectArgs,
    bindings: &ckpt_ir::Bindings,
    class: &Phases,
    params: &Parameters,
) {
    println!("model        {}", a.model.display());
    let opsets: Vec<String> = graph
        .opsets()
        .iter()
        .map(|(d, v)| format!("{d} {v}"))
        .collect();
    println!(
        "ir_version   {}   opsets: {}",
        graph.ir_version(),
        opsets.join(", ")
    );
    println!(
        "nodes        {}   tensors: {}",
        graph.node_count(),
        graph.tensor_count()
    );
    match class {
        Ok(c) => println!("loss         {}", graph.tensor(c.loss).name),
        Err(e) => println!("loss         ? ({e})"),
    }
    let bytes = match &params.bytes {
        Ok(b) => human(*b),
        Err(e) => format!("? ({e})"),
    };
    println!(
        "parameters   {} tensors, {} elements, {bytes}",
        params.count, params.elements
    );
    let required = required_dims(graph);
    if !required.is_empty() {
        let shown: Vec<String> = required
            .iter()
            .map(|d| match bindings.get(d) {
                Some(v) => format!("{d}={v}"),
                None => d.clone(),
            })
            .collect();
        println!(
            "required dims: {} (bind with --dim NAME=VALUE)",
            shown.join(", ")
        );
    }
    let derived: Vec<String> = graph
        .symbols()
        .into_iter()
        .filter(|s| !required.contains(s))
        .collect();
    match derived.len() {
        0 => {}
        n if n <= 8 => println!(
            "derived dims: {} (declared in the file; shape inference relates them to the inputs)",
            derived.join(", ")
        ),
        n => println!(
            "derived dims: {n} ({}, {}, …; declared in the file; shape inference relates them to the inputs)",
            derived[0], derived[1]
        ),
    }
    let kind = |t| class.as_ref().map(|c| c.kind(t).name()).unwrap_or("?");
    println!("inputs ({}):", graph.inputs().len());
    for &t in graph.inputs() {
        println!(
            "  {:<40} {:<24} {}",
            graph.tensor(t).name,
            type_str(graph, t),
            kind(t)
        );
    }
    println!("outputs ({}):", graph.outputs().len());
    for &t in graph.outputs() {
        println!(
            "  {:<40} {:<24} {}",
            graph.tensor(t).name,
            type_str(graph, t),
            kind(t)
        );
    }
}

fn print_memory(an: &ckpt_planner::Analysis, profile: &ckpt_ir::Profile) {
    let l = &an.ledger;
    println!("runs on: ONNX Runtime {}", profile.ort_version);
    println!("ledger (one training step):");
    for (name, bytes) in l.lines() {
        let mark = if name == l.dominant() {
            "  <- dominant"
        } else {
            ""
        };
        println!("  {:<22} {:>12}{mark}", name, human(bytes));
    }
    println!(
        "  {:<22} {:>12}  ({} tensors)",
        "saved activations #", "", l.saved_activations_count
    );
    for (n, b) in &l.largest_saved {
        println!("      {:<40} {:>12}", n, human(*b));
    }
    println!(
        "  {:<22} {:>12}  (the smallest arena the profile's steps run in: {}; in use at most {}, exact arena {})",
        "device arena",
        human(l.device_arena_bytes),
        profile.describe(),
        human(an.device.uncapped.in_use_peak),
        human(l.arena_peak_bytes),
    );
    println!(
        "  {:<22} {:>12}  (what the device must hold; the ceiling is compared with this)",
        "total",
        human(l.total_bytes)
    );
    println!("phase trace (peak live arena bytes per phase):");
    for (p, pk) in an.sim.phase_peaks(&an.class) {
        let node = pk
            .node
            .map(|n| an.graph.node(n).name.clone())
            .unwrap_or_default();
        println!(
            "  {:<10} {:>12}  at step {:>5}  {}",
            p.name(),
            human(pk.bytes),
            pk.step,
            node
        );
    }
    if let Some(n) = ckpt_passes::memory::peak_node(&an.sim) {
        println!(
            "high-water mark: step {} node `{}` ({}, {})",
            an.sim.peak_step,
            an.graph.node(n).name,
            an.graph.node(n).op_label(),
            an.class.phase(n)
        );
        for (t, b) in an.sim.live_tensors_at(an.sim.peak_step).iter().take(5) {
            println!(
                "      {:<40} {:>12}  {}",
                an.graph.tensor(*t).name,
                human(*b),
                an.class.kind(*t).name()
            );
        }
    }
}
