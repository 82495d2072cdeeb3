//! The main job and `validate`, at the CLI edge: flags in, files and reports out, exit codes.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use serde_json::json;

use ckpt_opt::inputs::{make_inputs, InputOverrides};
use ckpt_opt::optimize::{self, Job, Outcome};
use ckpt_opt::size::human;
use ckpt_opt::validate::{validate, ValidateOptions, Validation};
use ckpt_passes::TensorKind;
use ckpt_runtime::{OptLevel, Provider, SessionConfig, Tol, Tolerances};

use crate::cli::{OptimizeArgs, RunArgs, ValidateArgs};
use crate::model_io::{bindings as parse_bindings, load};
use crate::Failure;

fn session_config(r: &RunArgs) -> SessionConfig {
    SessionConfig {
        provider: if r.provider == "cuda" {
            Provider::Cuda
        } else {
            Provider::Cpu
        },
        opt_level: match r.ort_opt_level.as_str() {
            "basic" => OptLevel::Basic,
            "extended" => OptLevel::Extended,
            "all" => OptLevel::All,
            _ => OptLevel::Disable,
        },
        ..Default::default()
    }
}

fn tolerances(r: &RunArgs) -> Tolerances {
    let mut t = Tolerances::default();
    if r.rtol.is_some() || r.atol.is_some() {
        let f = Tol {
            rtol: r.rtol.unwrap_or(t.f32.rtol),
            atol: r.atol.unwrap_or(t.f32.atol),
        };
        t.f32 = f;
        t.f64 = f;
        t.f16 = f;
        t.bf16 = f;
    }
    t
}

fn run_validation(
    original: &ckpt_ir::Graph,
    rewritten: &ckpt_ir::Graph,
    bindings: &ckpt_ir::Bindings,
    params: &[ckpt_ir::TensorId],
    r: &RunArgs,
) -> Result<Validation, Failure> {
    if let Some(lib) = &r.ort_lib {
        ckpt_runtime::init(Some(lib)).context("loading ONNX Runtime")?;
    }
    let overrides = InputOverrides::parse(&r.inputs, &r.int_ranges)?;
    // Ranges and shapes of inputs read the inferred types (symbolic graphs name dims `unk__N`).
    let (typed, _) = optimize::with_inferred_types(original.clone())?;
    let (inputs, how) = make_inputs(&typed, bindings, r.seed, &overrides, params)?;
    let opts = ValidateOptions {
        cfg: session_config(r),
        tol: tolerances(r),
        seed: r.seed,
        warmup: 2,
        runs: r.runs.max(1),
        locate_peak: r.locate_peak,
    };
    Ok(validate(
        &ckpt_ir::export(original),
        &ckpt_ir::export(rewritten),
        &inputs,
        how,
        &opts,
    )?)
}

fn print_validation(v: &Validation) {
    println!("validation: {}", if v.passed { "PASSED" } else { "FAILED" });
    for o in &v.outputs {
        println!(
            "  {:<44} max abs {:<10.3e} max rel {:<10.3e} {}{}",
            o.name,
            o.max_abs_err,
            o.max_rel_err,
            if o.bitwise_equal {
                "bitwise identical"
            } else if o.passed {
                "within tolerance"
            } else {
                "MISMATCH"
            },
            o.message
                .as_ref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
    }
    println!(
        "  control (`{}` scaled by 1+1e-3): {}",
        v.control_tensor,
        if v.control_rejected {
            "rejected, as it must be"
        } else {
            "NOT rejected: the comparison cannot tell graphs apart"
        }
    );
    println!("  rng: {}", v.rng_policy);
    if let Some(w) = &v.cse_warning {
        println!("  warning: {w}");
    }
    println!(
        "  {:<12} {:>14} {:>18} {:>9} {:>9}",
        "", "peak (exact)", "peak (ORT arena)", "p50 ms", "p95 ms"
    );
    for (name, m) in [("original", &v.original), ("rewritten", &v.rewritten)] {
        println!(
            "  {:<12} {:>14} {:>18} {:>9.2} {:>9.2}",
            name,
            human(m.peak_bytes),
            human(m.peak_bytes_default_arena),
            m.p50_ms,
            m.p95_ms
        );
    }
    for (name, m) in [("original", &v.original), ("rewritten", &v.rewritten)] {
        if let Some(p) = &m.peak_node {
            println!(
                "  {name}: ORT's arena reaches its largest extent at node `{}` ({}), located in {} runs",
                p.node, p.op, p.runs
            );
        }
    }
}

pub fn run_validate(a: &ValidateArgs) -> Result<(), Failure> {
    let original = load(&a.original)?;
    let rewritten = load(&a.rewritten)?;
    let b = parse_bindings(&a.model_args.dims, &original)?;
    let params: Vec<_> = ckpt_passes::classify(&original, a.model_args.loss.as_deref())
        .map(|c| c.of_kind(TensorKind::Parameter).collect())
        .unwrap_or_default();
    let v = run_validation(&original, &rewritten, &b, &params, &a.run)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(Failure::input)?
        );
    } else {
        print_validation(&v);
    }
    if v.passed {
        Ok(())
    } else {
        Err(Failure {
            code: 3,
            error: anyhow!(
                "validation failed: {}",
                if v.control_rejected {
                    "outputs differ"
                } else {
                    "the broken control was not rejected"
                }
            ),
        })
    }
}

pub fn run(args: OptimizeArgs) -> Result<(), Failure> {
    let t0 = Instant::now();
    let model = args.model.clone().ok_or_else(|| {
        Failure::input(anyhow!(
            "no model given: ckpt-opt MODEL --ceiling SIZE (see --help)"
        ))
    })?;
    let ceiling_spec = args
        .ceiling
        .ok_or_else(|| Failure::input(anyhow!("--ceiling is required, e.g. --ceiling 69GiB")))?;
    let input_bytes =
        std::fs::read(&model).with_context(|| format!("reading {}", model.display()))?;
    let graph = load(&model)?;
    let bindings = parse_bindings(&args.model_args.dims, &graph)?;
    let (optimizer, bits) = args.model_args.optimizer();
    // A percentage ceiling is of the unmodified graph's predicted footprint: analyse first.
    let t_plan = Instant::now();
    let before = optimize::analyse(
        graph,
        &bindings,
        args.model_args.loss.as_deref(),
        optimizer,
        bits,
    )?;
    let ceiling = ceiling_spec.resolve(before.ledger.total_bytes);
    let job = Job {
        model: model.clone(),
        ceiling,
        output: args.output.clone(),
        bindings: bindings.clone(),
        loss: args.model_args.loss.clone(),
        optimizer,
        optimizer_bits: bits,
        reserve_pct: args.reserve,
        time_limit: Duration::from_secs_f64(args.time_limit),
    };
    let outcome = optimize::plan_analysed(&job, before, t_plan)?;
    let mut receipt = json!({
        "tool": {"name": "ckpt-opt", "version": env!("CARGO_PKG_VERSION")},
        "model": {"path": model.display().to_string(), "sha256": optimize::sha256_hex(&input_bytes)},
        "bindings": bindings,
        "ceiling": ceiling_spec.to_string(),
        "ceiling_bytes": ceiling,
        "reserve_percent": args.reserve,
        "session_config": {optimize::CSE_KEY: optimize::CSE_VALUE},
        "rng_policy": ckpt_opt::validate::RNG_POLICY,
    });
    match outcome {
        Outcome::CannotFit {
            before,
            message,
            lowest_total,
        } => {
            receipt["status"] = json!("ceiling_cannot_be_met");
            receipt["diagnosis"] = json!(message);
            receipt["lowest_reachable_total_bytes"] = json!(lowest_total);
            receipt["ledger"] = optimize::ledger_json(&before.ledger);
            write_receipt(&args, &receipt)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&receipt).map_err(Failure::input)?
                );
            }
            Err(Failure {
                code: 2,
                error: anyhow!("the ceiling of {} cannot be met: {message}", human(ceiling)),
            })
        }
        Outcome::AlreadyFits { before } => {
            receipt["status"] = json!("already_fits");
            receipt["predicted_peak_bytes"] =
                json!({"before": before.ledger.total_bytes, "after": before.ledger.total_bytes});
            receipt["ledger"] = optimize::ledger_json(&before.ledger);
            receipt["added_flops"] = json!(0);
            receipt["segments"] = json!([]);
            if let Some(out) = &args.output {
                optimize::write(&before.graph, out, &model)?;
                receipt["output"] = json!(out.display().to_string());
            }
            write_receipt(&args, &receipt)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&receipt).map_err(Failure::input)?
                );
            } else {
                println!(
                    "{}: predicted peak {} already fits the ceiling of {}; nothing to recompute{}",
                    model.display(),
                    human(before.ledger.total_bytes),
                    human(ceiling),
                    if args.output.is_some() {
                        " (unchanged graph written)"
                    } else {
                        ""
                    }
                );
            }
            Ok(())
        }
        Outcome::Rewritten(r) => {
            let out = args
                .output
                .clone()
                .unwrap_or_else(|| optimize::default_output(&model));
            let bytes = optimize::write(&r.after.graph, &out, &model)?;
            let step = optimize::step_flops(&r.before, &bindings).max(1);
            let info = &r.plan.info;
            receipt["status"] = json!("rewritten");
            receipt["output"] =
                json!({"path": out.display().to_string(), "sha256": optimize::sha256_hex(&bytes)});
            receipt["predicted_peak_bytes"] =
                json!({"before": r.before.ledger.total_bytes, "after": r.after.ledger.total_bytes});
            receipt["predicted_arena_peak_bytes"] =
                json!({"before": r.before.sim.peak_live, "after": r.after.sim.peak_live});
            receipt["predicted_default_arena_peak_bytes"] =
                json!({"before": r.before.sim.arena_peak, "after": r.after.sim.arena_peak});
            receipt["ledger"] = json!({"before": optimize::ledger_json(&r.before.ledger), "after": optimize::ledger_json(&r.after.ledger)});
            receipt["trace"] = json!({"before": optimize::trace_json(&r.before), "after": optimize::trace_json(&r.after)});
            receipt["added_flops"] = json!(r.counts.added_flops);
            receipt["model_added_flops"] = json!(r.plan.cost);
            receipt["nodes_cloned"] = json!(r.counts.cloned);
            receipt["nodes_moved"] = json!(r.counts.moved);
            receipt["step_flops"] = json!(step);
            receipt["added_flops_percent"] =
                json!(100.0 * r.counts.added_flops as f64 / step as f64);
            receipt["segments"] = json!(optimize::segments_json(&r));
            receipt["candidates"] = json!(r.cands.list.len());
            receipt["excluded"] = json!(r.cands.excluded.iter().map(|e| json!({
                "tensor": r.before.graph.tensor(e.tensor).name, "node": r.before.graph.node(e.node).name, "op": e.op, "reason": e.reason
            })).collect::<Vec<_>>());
            receipt["solver"] = json!({
                "method": format!("{:?}", info.method),
                "status": format!("{:?}", info.status),
                "objective": info.objective,
                "bound": info.bound,
                "gap": info.gap,
                "seconds": info.wall.as_secs_f64(),
                "fallback": info.fallback.as_ref().map(|f| format!("{f:?}")),
                "attempts": r.solve_attempts,
                "arena_ceiling_bytes": r.arena_ceiling,
                "ilp": r.ilp,
            });
            receipt["patch"] = json!(r.patch_text);
            let mut validation_failed = None;
            if args.validate {
                let params: Vec<_> = r.before.class.of_kind(TensorKind::Parameter).collect();
                let v = run_validation(
                    &r.before.graph,
                    &r.after.graph,
                    &bindings,
                    &params,
                    &args.run,
                )?;
                if !v.passed {
                    validation_failed = Some(v.control_rejected);
                }
                if !args.json {
                    print_validation(&v);
                }
                receipt["validation"] = serde_json::to_value(&v).map_err(Failure::input)?;
            }
            receipt["seconds"] = json!(t0.elapsed().as_secs_f64());
            write_receipt(&args, &receipt)?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&receipt).map_err(Failure::input)?
                );
            } else {
                print_summary(&r, &out, ceiling, step);
            }
            match validation_failed {
                Some(control) => Err(Failure {
                    code: 3,
                    error: anyhow!(
                        "validation failed: {}",
                        if control {
                            "outputs differ"
                        } else {
                            "the broken control was not rejected"
                        }
                    ),
                }),
                None => Ok(()),
            }
        }
    }
}

fn print_summary(r: &optimize::Rewritten, out: &std::path::Path, ceiling: u64, step: u64) {
    let chosen = r.plan.recompute.iter().filter(|&&x| x).count();
    println!(
        "predicted peak {} -> {} (ceiling {}); recomputing {} of {} candidate buffers ({} nodes cloned, {} moved), +{} FLOPs ({:.2}% of a step); solver {:?} {:?}, gap {:.4}, {:.2} s",
        human(r.before.ledger.total_bytes),
        human(r.after.ledger.total_bytes),
        human(ceiling),
        chosen,
        r.cands.list.len(),
        r.counts.cloned,
        r.counts.moved,
        r.counts.added_flops,
        100.0 * r.counts.added_flops as f64 / step as f64,
        r.plan.info.method,
        r.plan.info.status,
        r.plan.info.gap,
        r.plan.info.wall.as_secs_f64()
    );
    println!("wrote {}", out.display());
    println!(
        "run it with the session config entry {}={} (recorded in the model's metadata_props), or ONNX Runtime's CSE merges the recompute back",
        optimize::CSE_KEY,
        optimize::CSE_VALUE
    );
}

fn write_receipt(args: &OptimizeArgs, receipt: &serde_json::Value) -> Result<(), Failure> {
    if let Some(path) = &args.receipt {
        let text = serde_json::to_string_pretty(receipt).map_err(Failure::input)?;
        ckpt_ir::write_atomic(path, text.as_bytes(), args.model.as_deref())
            .with_context(|| format!("writing receipt {}", path.display()))?;
    }
    Ok(())
}
