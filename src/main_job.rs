//! The main job and `validate` at the CLI edge: the pipeline run ([`ckpt_opt::pipeline`]),
//! what it did printed, and the exit code its verdict gives.

use anyhow::{anyhow, Context};

use ckpt_opt::cli::{OptimizeArgs, ValidateArgs};
use ckpt_opt::exit::Failure;
use ckpt_opt::model_io::{self, bindings as parse_bindings, load};
use ckpt_opt::pipeline::check::{measure_pair, Sides};
use ckpt_opt::pipeline::{self, import::original_at_level, Checked, Finished};
use ckpt_opt::receipt::{DataPlacement, OutputData};
use ckpt_opt::size::human;
use ckpt_planner::{Analysis, Outcome, Rewritten};
use ckpt_validate::measured_cost::MeasuredCost;
use ckpt_validate::memory::MemoryCheck;
use ckpt_validate::paired::Validation;

/// The main job: plan, write, validate, publish; then what it did, and its exit code.
pub fn run(args: OptimizeArgs) -> Result<(), Failure> {
    let finished = pipeline::main_job(&args)?;
    if args.output_args.json {
        let text = serde_json::to_string_pretty(&finished.receipt).map_err(Failure::internal)?;
        println!("{text}");
    } else {
        report(&args, &finished);
    }
    pipeline::verdict(&finished)
}

/// What the job did, in lines: the validation (when it ran), then the outcome.
fn report(args: &OptimizeArgs, f: &Finished) {
    let before = &f.planned.before;
    if let Some(Checked::Ran { validation, memory }) = &f.checked {
        if f.planned.rewritten().is_some() {
            print_validation(validation, args.output_args.verbose);
        }
        print_memory_check(memory);
    }
    let receipt = &f.receipt;
    match &f.planned.outcome {
        Outcome::CannotFit(_) => {}
        Outcome::AlreadyFits => println!(
            "{}: predicted device total {} already fits the ceiling of {} under the profile ({}); nothing to recompute{}",
            f.job.model.display(),
            human(before.ledger.total_bytes),
            human(f.job.ceiling),
            f.profile.describe(),
            if receipt.output.is_some() {
                format!(
                    " (unchanged graph written, with the profile recorded{})",
                    data_note(receipt.output_data.as_ref())
                )
            } else {
                String::new()
            }
        ),
        Outcome::Rewritten(r) => print_summary(
            before,
            r,
            f.output.as_deref(),
            receipt.output_data.as_ref(),
            f.job.ceiling,
            ckpt_planner::step_flops(before, &f.job.analysis.bindings).max(1),
            &f.profile,
            receipt.measured_cost.as_ref(),
        ),
    }
}

/// `validate ORIGINAL REWRITTEN`: the rewrite run against its original under the profile it
/// records, values and memory, and the verdict.
pub fn run_validate(a: &ValidateArgs) -> Result<(), Failure> {
    let original = load(&a.original)?;
    let rewritten = load(&a.rewritten)?;
    same_interface(&original, &rewritten, a)?;
    let b = parse_bindings(&a.model_args.dims, &original)?;
    model_io::require_bound(&original, &b)?;
    let mut options = model_io::analyse_options(&a.model_args, &b)?;
    model_io::on_runtime_of(&mut options.profile, &original)?;
    // The profile the rewritten model records is the one it promises to hold under.
    let recorded = ckpt_ir::Profile::from_model(rewritten.model())
        .with_context(|| format!("reading the profile recorded in {}", a.rewritten.display()))
        .map_err(Failure::input)?;
    if let Some(p) = recorded {
        options.profile = p;
    }
    // The rewrite holds ORT's float16 Casts already; the original is predicted as ORT runs it.
    let (original, _) = model_io::as_ort_runs(original, &options.profile, 4)?;
    model_io::warn_thread_race(&options.profile, &original);
    let (original, reference) = original_at_level(original, &a.original, &options.profile, &a.run)?;
    let before = pipeline::analyse(original, &options).map_err(Failure::planning)?;
    // A percentage is of the original's predicted device total, as in the main job.
    let ceiling = a.ceiling.map(|c| c.resolve(before.ledger.total_bytes));
    let after = pipeline::analyse(rewritten, &options).map_err(Failure::planning)?;
    options
        .profile
        .one_region(after.device.arena_bytes)
        .map_err(|e| Failure::input(anyhow!(e)))?;
    let sides = Sides {
        before: &before,
        after: &after,
        written: None,
    };
    let result = measure_pair(
        sides,
        &b,
        &a.run,
        &options.profile,
        ceiling,
        reference.as_ref(),
    );
    ckpt_opt::progress::finish();
    let (v, m) = result?;
    if a.output_args.json {
        /// `validate --json`: the values and the memory check.
        #[derive(serde::Serialize)]
        struct Report<'a> {
            validation: &'a Validation,
            memory: &'a MemoryCheck,
        }
        let out = Report {
            validation: &v,
            memory: &m,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(Failure::internal)?
        );
    } else {
        print_validation(&v, a.output_args.verbose);
        print_memory_check(&m);
    }
    pipeline::validation_verdict(&v, &m)
}

/// A rewrite keeps its original's graph inputs and outputs, by name and in order: two
/// unrelated graphs are refused (exit 1), naming the first difference.
fn same_interface(
    original: &ckpt_ir::Graph,
    rewritten: &ckpt_ir::Graph,
    a: &ValidateArgs,
) -> Result<(), Failure> {
    let names = |g: &ckpt_ir::Graph, ts: &[ckpt_ir::TensorId]| -> Vec<String> {
        ts.iter()
            .filter(|&&t| !g.tensor(t).is_initializer())
            .map(|&t| g.tensor(t).name.clone())
            .collect()
    };
    for (what, o, r) in [
        (
            "inputs",
            names(original, original.inputs()),
            names(rewritten, rewritten.inputs()),
        ),
        (
            "outputs",
            names(original, original.outputs()),
            names(rewritten, rewritten.outputs()),
        ),
    ] {
        if o != r {
            let first = o
                .iter()
                .zip(&r)
                .position(|(x, y)| x != y)
                .unwrap_or(o.len().min(r.len()));
            return Err(Failure::input(anyhow!(
                "{} is not a rewrite of {}: their graph {what} differ (#{first}: `{}` vs `{}`; {} vs {} {what})",
                a.rewritten.display(),
                a.original.display(),
                o.get(first).map_or("(none)", String::as_str),
                r.get(first).map_or("(none)", String::as_str),
                o.len(),
                r.len()
            )));
        }
    }
    Ok(())
}

fn print_memory_check(m: &MemoryCheck) {
    println!(
        "memory under the deployment profile ({}): {}",
        m.profile,
        if m.passed { "PASSED" } else { "FAILED" }
    );
    println!(
        "  {:<12} {:>16} {:>16} {:>8} {:>16}",
        "", "predicted", "measured", "error", "runs capped"
    );
    for (name, d) in [("original", &m.original), ("rewritten", &m.rewritten)] {
        println!(
            "  {:<12} {:>16} {:>16} {:>+7.2}% {:>16}",
            name,
            human(d.predicted_total_bytes),
            human(d.measured_total_bytes),
            100.0 * d.relative_error,
            match d.runs_under_ceiling {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
        );
    }
    if let Some(c) = m.ceiling_bytes {
        println!(
            "  device totals are {} beside the arena (the caller's feeds and outputs, constants, what loading reserves) + the smallest arena {} steps run in; ceiling {}",
            human(m.fixed_bytes),
            m.steps,
            human(c)
        );
    }
    for f in &m.failures {
        println!("  failure: {f}");
    }
}

/// The group an output's comparison is summarised in: the first output (the loss), the
/// gradients, everything else.
fn output_group(index: usize, name: &str) -> &'static str {
    if index == 0 {
        "loss"
    } else if name.to_ascii_lowercase().contains("grad") {
        "gradients"
    } else {
        "other outputs"
    }
}

fn print_comparison(o: &ckpt_runtime::OutputComparison) {
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

/// The value comparison: with `verbose` every output; else one line per group (its worst
/// relative error, and how many outputs are bitwise identical) and every mismatch.
fn print_validation(v: &Validation, verbose: bool) {
    println!(
        "validation: {} ({} outputs compared, computed under deterministic compute)",
        if v.passed { "PASSED" } else { "FAILED" },
        v.outputs.len()
    );
    if verbose {
        v.outputs.iter().for_each(print_comparison);
    } else {
        for group in ["loss", "gradients", "other outputs"] {
            let members: Vec<&ckpt_runtime::OutputComparison> = v
                .outputs
                .iter()
                .enumerate()
                .filter(|(i, o)| output_group(*i, &o.name) == group)
                .map(|(_, o)| o)
                .collect();
            let Some(worst) = members
                .iter()
                .max_by(|a, b| a.max_rel_err.total_cmp(&b.max_rel_err))
            else {
                continue;
            };
            let bitwise = members.iter().filter(|o| o.bitwise_equal).count();
            let failed = members.iter().filter(|o| !o.passed).count();
            println!(
                "  {group:<14} {:>4} outputs, {bitwise} bitwise identical, {failed} mismatched; worst: `{}`, relative error {:.3e}, absolute {:.3e}",
                members.len(),
                worst.name,
                worst.max_rel_err,
                worst.max_abs_err
            );
        }
        v.outputs
            .iter()
            .filter(|o| !o.passed)
            .for_each(print_comparison);
        println!("  (--verbose or --json: every output)");
    }
    let factor = ckpt_validate::paired::control_factor(v.control_scale);
    let smaller = ckpt_validate::paired::CONTROL_SCALES
        .iter()
        .take_while(|&&s| s < v.control_scale)
        .map(|&s| ckpt_validate::paired::control_factor(s))
        .collect::<Vec<_>>();
    let within = if smaller.is_empty() {
        String::new()
    } else {
        format!(" ({} within the tolerances)", smaller.join(", "))
    };
    println!(
        "  control (`{}` scaled by {factor}): {}{within}",
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

/// Where the output's external data went, for the line that names the output.
fn data_note(data: Option<&OutputData>) -> String {
    let files = |d: &OutputData| {
        d.files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match data {
        None => String::new(),
        Some(d) if d.placement == DataPlacement::Copied => {
            format!(" (external data copied to {})", files(d))
        }
        Some(d) => format!(" (external data: references {})", files(d)),
    }
}

/// A rewrite's lines: the totals, what the plan recomputes and costs, and where it went.
fn print_summary(
    before: &Analysis,
    r: &Rewritten,
    out: Option<&std::path::Path>,
    data: Option<&OutputData>,
    ceiling: u64,
    step: u64,
    profile: &ckpt_ir::Profile,
    measured: Option<&MeasuredCost>,
) {
    let chosen = r.recomputed();
    let info = &r.plan.info;
    let method = r.method_label();
    println!(
        "predicted device total {} -> {} (ceiling {}, profile: {})",
        human(before.ledger.total_bytes),
        human(r.after.ledger.total_bytes),
        human(ceiling),
        profile.describe(),
    );
    println!(
        "recomputing {} of {} candidate activations: {} nodes cloned, {} moved later (moves add no FLOPs), +{} FLOPs ({:.2}% of a step); found by {method} in {:.2} s",
        chosen,
        r.candidate_count(),
        r.counts.cloned,
        r.counts.moved,
        r.counts.added_flops,
        100.0 * r.counts.added_flops as f64 / step as f64,
        info.wall.as_secs_f64()
    );
    if let Some(h) = &r.loss_head {
        println!(
            "loss head (`{}` and the {} nodes reading it row by row) in {} chunks of {} rows{}: the loss and the head's weight gradient are summed in another order, so they match within tolerances, not bit for bit",
            h.logits,
            h.region_nodes,
            h.chunks,
            h.rows_per_chunk,
            if h.summed_in_place {
                ", its weight gradient summed in place"
            } else {
                ""
            }
        );
    }
    if let Some(t) = r.tied_gradients() {
        println!(
            "shared weights' gradients ({}) scattered into one another: a row two tokens hit is summed in another order, so they match within tolerances, not bit for bit",
            t.gradients.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(m) = measured {
        println!(
            "cost measured on ONNX Runtime (--cost profile, median of {} runs per node): +{:.3} ms of a {:.3} ms step predicted{}",
            m.runs,
            m.predicted_added_ms,
            m.step_kernel_ms,
            m.measured_added_ms
                .map_or(String::new(), |x| format!(", {x:+.3} ms measured (p50)"))
        );
    }
    if r.time_limit_hit {
        println!(
            "the time limit stopped the search: this is the best plan found by then (a longer --time-limit or a less loaded machine may find a cheaper one)"
        );
    }
    match out {
        Some(out) => {
            println!("wrote {}{}", out.display(), data_note(data));
            println!(
                "run it with the runner, which builds the session and caps the arena as its metadata_props record: ckpt_opt.Session(\"{}\") (pip install ./python; README, \"Deploying the output\")",
                out.display()
            );
        }
        None => println!("nothing written: validation failed"),
    }
}
