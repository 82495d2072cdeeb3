//! The main job and `validate`, at the CLI edge: flags in, files and reports out, exit codes.

use std::time::Instant;

use anyhow::{anyhow, Context};

use ckpt_opt::exit::{Failure, CANNOT_FIT, VALIDATION_FAILED};
use ckpt_opt::job::Job;
use ckpt_opt::optimize::{self, Outcome};
use ckpt_opt::receipt::build::JobRecord;
use ckpt_opt::receipt::{DataPlacement, FileHash, OutputData, RandomOpSeeds, Receipt, Status};
use ckpt_opt::size::human;
use ckpt_passes::TensorKind;
use ckpt_runtime::{Tol, Tolerances};
use ckpt_validate::inputs::{make_inputs, InputOverrides};
use ckpt_validate::measured_cost::{MeasuredCost, NodeCosts};
use ckpt_validate::memory::session_config;
use ckpt_validate::memory::{check_memory, MemoryCheck, MemoryExpectation};
use ckpt_validate::paired::{ValidateOptions, Validation};

use ckpt_opt::cli::{OptimizeArgs, RunArgs, ValidateArgs};
use ckpt_opt::model_io::{self, bindings as parse_bindings, load};

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

/// Validate `rewritten` against `original`; both are analysed graphs (their types inferred
/// once, by the analysis: input ranges and shapes read them, and symbolic graphs name dims
/// `unk__N` in the file). With a `reference` (a graph optimized offline), the values are
/// compared against the reference run online at its level instead.
fn run_validation(
    original: &ckpt_ir::Graph,
    rewritten: &ckpt_ir::Graph,
    bindings: &ckpt_ir::Bindings,
    params: &[ckpt_ir::TensorId],
    r: &RunArgs,
    profile: &ckpt_ir::Profile,
    reference: Option<&Reference>,
) -> Result<(Validation, Vec<ckpt_runtime::HostTensor>), Failure> {
    if let Some(lib) = &r.ort_lib {
        ckpt_runtime::init(Some(lib))
            .context("loading ONNX Runtime")
            .map_err(Failure::could_not_validate)?;
    }
    let overrides = InputOverrides::parse(&r.inputs, &r.int_ranges).map_err(Failure::input)?;
    let (inputs, how) =
        make_inputs(original, bindings, r.seed, &overrides, params).map_err(Failure::input)?;
    let opts = ValidateOptions {
        cfg: session_config(profile),
        tol: tolerances(r),
        seed: r.seed,
        warmup: 2,
        runs: r.runs.max(1),
        locate_peak: r.locate_peak,
        original_dir: original.dir().map(std::path::Path::to_path_buf),
        rewritten_dir: rewritten.dir().map(std::path::Path::to_path_buf),
        original_cfg: reference.map(|x| session_config(&x.profile)),
    };
    let v = ckpt_validate::check(
        &ckpt_ir::export(reference.map_or(original, |x| &x.graph)),
        &ckpt_ir::export(rewritten),
        &inputs,
        how,
        &opts,
    )
    .map_err(Failure::could_not_validate)?;
    Ok((v, inputs))
}

/// Validate `after` against `before` under the profile: the paired values and the control
/// (of `written`, the output read back from the files staged for it, when there is one),
/// then both graphs' device memory against their analyses (with `ceiling`, also the capped
/// run).
fn validate_analyses(
    (before, after, written): (
        &optimize::Analysis,
        &optimize::Analysis,
        Option<&ckpt_ir::Graph>,
    ),
    bindings: &ckpt_ir::Bindings,
    r: &RunArgs,
    profile: &ckpt_ir::Profile,
    ceiling: Option<u64>,
    reference: Option<&Reference>,
) -> Result<(Validation, MemoryCheck), Failure> {
    let params: Vec<_> = before.class.of_kind(TensorKind::Parameter).collect();
    let (v, inputs) = run_validation(
        &before.graph,
        written.unwrap_or(&after.graph),
        bindings,
        &params,
        r,
        profile,
        reference,
    )?;
    let m = run_memory_check(before, after, &inputs, profile, ceiling)?;
    Ok((v, m))
}

/// Validate `after` against `before` into the receipt, printing the result unless `--json`
/// (the value comparison only when `after` is not `before` itself). `Some`: the failure (exit 3), or why validation
/// could not run (exit 4, or 1); the receipt's status and reason say which.
fn validate_into(
    receipt: &mut Receipt,
    (before, after, written): (
        &optimize::Analysis,
        &optimize::Analysis,
        Option<&ckpt_ir::Graph>,
    ),
    bindings: &ckpt_ir::Bindings,
    args: &OptimizeArgs,
    profile: &ckpt_ir::Profile,
    ceiling: u64,
    reference: Option<&Reference>,
) -> Result<Option<Failure>, Failure> {
    // An unchanged graph is validated against itself: its values need no printing.
    let values = !std::ptr::eq(before, after);
    let result = validate_analyses(
        (before, after, written),
        bindings,
        &args.run,
        profile,
        Some(ceiling),
        reference,
    );
    ckpt_opt::progress::finish();
    match result {
        Ok((v, m)) => {
            if !args.output_args.json {
                if values {
                    print_validation(&v, args.output_args.verbose);
                }
                print_memory_check(&m);
            }
            let failed = verdict(&v, &m).err();
            receipt
                .record_validation(&v, m)
                .map_err(Failure::internal)?;
            if let Some(f) = &failed {
                receipt.status = Status::ValidationFailed;
                receipt.reason = Some(format!("{:#}", f.error));
            }
            Ok(failed)
        }
        Err(f) => {
            receipt.status = Status::NotValidated;
            receipt.reason = Some(format!("{:#}", f.error));
            Ok(Some(f))
        }
    }
}

/// Write `graph` to `out` (never over `model`) with its external data, into the receipt: its
/// hash, and where its data lives with each data file's hash. With `seed`, every random op
/// gets an explicit `seed` attribute first (`--seed-random-ops`).
fn write_output(
    staging: &mut ckpt_ir::Staging,
    receipt: &mut Receipt,
    original: &ckpt_ir::onnx::ModelProto,
    graph: &ckpt_ir::Graph,
    out: &std::path::Path,
    model: &std::path::Path,
    seed: Option<u64>,
) -> Result<(), Failure> {
    let mut proto = ckpt_ir::export(graph);
    match seed {
        Some(seed) => {
            ckpt_validate::paired::seed_random_ops(&mut proto, seed);
        }
        None => receipt.random_ops_shifted = shifted_random_ops(original, &proto),
    }
    let written = staging
        .stage_model(proto, graph.dir(), out, Some(model))
        .with_context(|| format!("writing {}", out.display()))
        .map_err(Failure::input)?;
    receipt.output = Some(FileHash {
        path: out.display().to_string(),
        sha256: optimize::sha256_hex(&written.bytes),
    });
    let placement = match written.placement {
        ckpt_ir::DataPlacement::None => None,
        ckpt_ir::DataPlacement::Referenced => Some(DataPlacement::Referenced),
        ckpt_ir::DataPlacement::Copied => Some(DataPlacement::Copied),
    };
    receipt.output_data = match placement {
        None => None,
        Some(placement) => Some(OutputData {
            placement,
            files: hash_staged(staging, &written.data_files)?,
        }),
    };
    Ok(())
}

/// The output staged for `out`, read back from its temporary files and imported under the
/// rules every input meets (opsets, ops, attributes, initializer and external-data sizes):
/// an output that breaks them is never published, and is an internal error (the input met
/// them).
fn read_back(staging: &ckpt_ir::Staging, out: &std::path::Path) -> Result<ckpt_ir::Graph, Failure> {
    let proto = staging
        .read_back(out)
        .with_context(|| format!("reading back {}", out.display()))
        .map_err(Failure::input)?;
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let graph = ckpt_ir::import_model(proto, out, Some(dir))
        .with_context(|| format!("the output staged for {} does not read back", out.display()))
        .map_err(Failure::internal)?;
    Ok(graph)
}

/// The random ops of `written` without a `seed` that ORT seeds by node index
/// ([`ckpt_ir::ops::seeded_by_node_index`]) and whose index differs from the one their
/// first output had in `original`.
fn shifted_random_ops(
    original: &ckpt_ir::onnx::ModelProto,
    written: &ckpt_ir::onnx::ModelProto,
) -> Vec<String> {
    let nodes = |m: &ckpt_ir::onnx::ModelProto| m.graph.as_ref().map(|g| g.node.clone());
    let (Some(before), Some(after)) = (nodes(original), nodes(written)) else {
        return Vec::new();
    };
    let index_of = |out: &str| {
        before
            .iter()
            .position(|n| n.output.first().is_some_and(|o| o == out))
    };
    after
        .iter()
        .enumerate()
        .filter(|(_, n)| {
            let d = ckpt_ir::normalise_domain(n.domain.as_deref().unwrap_or(""));
            ckpt_ir::ops::seeded_by_node_index(&d, n.op_type.as_deref().unwrap_or(""))
                && !n
                    .attribute
                    .iter()
                    .any(|a| a.name.as_deref() == Some("seed"))
        })
        .filter(|(i, n)| n.output.first().and_then(|o| index_of(o)) != Some(*i))
        .map(|(_, n)| {
            n.name
                .clone()
                .filter(|s| !s.is_empty())
                .or_else(|| n.output.first().cloned())
                .unwrap_or_default()
        })
        .collect()
}

/// Each file's SHA-256, naming the file that could not be read.
fn hash_files(files: &[std::path::PathBuf]) -> Result<Vec<FileHash>, Failure> {
    files
        .iter()
        .map(|f| FileHash::of_file(f).with_context(|| format!("hashing {}", f.display())))
        .map(|r| r.map_err(Failure::input))
        .collect()
}

/// Each file's SHA-256 as it will be published: a staged file's from its temporary name,
/// recorded under its own.
fn hash_staged(
    staging: &ckpt_ir::Staging,
    files: &[std::path::PathBuf],
) -> Result<Vec<FileHash>, Failure> {
    files
        .iter()
        .map(|f| {
            let read = staging.staged_path(f).unwrap_or(f);
            let hash = FileHash::of_file(read).with_context(|| format!("hashing {}", f.display()));
            hash.map(|h| FileHash {
                path: f.display().to_string(),
                ..h
            })
        })
        .map(|r| r.map_err(Failure::input))
        .collect()
}

/// Measure both graphs' device memory under the profile against their analyses.
fn run_memory_check(
    before: &optimize::Analysis,
    after: &optimize::Analysis,
    inputs: &[ckpt_runtime::HostTensor],
    profile: &ckpt_ir::Profile,
    ceiling: Option<u64>,
) -> Result<MemoryCheck, Failure> {
    let e = MemoryExpectation {
        profile: profile.clone(),
        fixed_bytes: before.ledger.fixed_bytes,
        load_bytes: before.ledger.load_bytes,
        original_arena_bytes: before.device.arena_bytes,
        rewritten_arena_bytes: after.device.arena_bytes,
        ceiling_bytes: ceiling,
        original_dir: before.graph.dir().map(std::path::Path::to_path_buf),
        rewritten_dir: after.graph.dir().map(std::path::Path::to_path_buf),
    };
    check_memory(
        &ckpt_ir::export(&before.graph),
        &ckpt_ir::export(&after.graph),
        inputs,
        &e,
    )
    .map_err(Failure::input)
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
    let before = optimize::analyse(original, &options).map_err(Failure::planning)?;
    // A percentage is of the original's predicted device total, as in the main job.
    let ceiling = a.ceiling.map(|c| c.resolve(before.ledger.total_bytes));
    let after = optimize::analyse(rewritten, &options).map_err(Failure::planning)?;
    options
        .profile
        .one_region(after.device.arena_bytes)
        .map_err(|e| Failure::input(anyhow!(e)))?;
    let result = validate_analyses(
        (&before, &after, None),
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
    verdict(&v, &m)
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

/// Exit 3 when values differ, the control was not rejected, or memory failed its check.
fn verdict(v: &Validation, m: &MemoryCheck) -> Result<(), Failure> {
    let mut why = Vec::new();
    if !v.control_rejected {
        why.push("the broken control was not rejected".to_string());
    } else if !v.passed {
        why.push("outputs differ".to_string());
    }
    why.extend(m.failures.iter().cloned());
    if why.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            code: VALIDATION_FAILED,
            error: anyhow!("validation failed: {}", why.join("; ")),
        })
    }
}

pub fn run(args: OptimizeArgs) -> Result<(), Failure> {
    let t0 = Instant::now();
    let model = args
        .model_path()
        .map_err(|e| Failure::input(anyhow!(e)))?
        .to_path_buf();
    let ceiling_spec = args.ceiling().map_err(|e| Failure::input(anyhow!(e)))?;
    // Refuse an output the rename would replace (a symlink, FIFO or device) before any work.
    for target in [
        args.output.as_deref(),
        args.receipt.as_deref(),
        args.receipt_md.as_deref(),
    ]
    .into_iter()
    .flatten()
    {
        ckpt_ir::check_output_target(target).map_err(Failure::input)?;
    }
    ckpt_opt::progress::stage(format!("importing {}", model.display()));
    let input_bytes = std::fs::read(&model)
        .with_context(|| format!("reading {}", model.display()))
        .map_err(Failure::input)?;
    let graph = load(&model)?;
    let reads = match graph.dir() {
        Some(dir) => ckpt_ir::external_data_files(graph.model(), dir),
        None => Vec::new(),
    };
    check_targets(&args, &model, &reads)?;
    let model_data = hash_files(&reads)?;
    let bindings = parse_bindings(&args.model_args.dims, &graph)?;
    model_io::require_bound(&graph, &bindings)?;
    let mut options = model_io::analyse_options(&args.model_args, &bindings)?;
    model_io::on_runtime_of(&mut options.profile, &graph)?;
    model_io::warn_thread_race(&options.profile, &graph);
    let (graph, reference) = graph_at_level(graph, &input_bytes, &model, &mut options, &args.run)?;
    let (graph, fallback) = model_io::as_ort_runs(graph, &options.profile, 1)?;
    if let Some(f) = fallback {
        eprintln!("note: {f}");
    }
    let profile = options.profile.clone();
    // A percentage ceiling is of the unmodified graph's predicted device total: analyse first.
    let t_plan = Instant::now();
    let before = optimize::analyse(graph, &options).map_err(Failure::planning)?;
    require_training_graph(&before)?;
    let job = Job::from_args(&args, options, before.ledger.total_bytes)
        .map_err(|e| Failure::input(anyhow!(e)))?;
    let ceiling = job.ceiling;
    let costs = match args.cost.as_str() {
        "profile" => Some(profile_costs(&before, &bindings, &args.run, &profile)?),
        _ => None,
    };
    ckpt_opt::progress::stage("searching for a plan");
    let outcome = optimize::plan_costed(
        &job,
        before,
        t_plan,
        optimize::default_threads(),
        costs.as_ref(),
    )
    .map_err(Failure::planning)?;
    let before = match &outcome {
        Outcome::AlreadyFits { before } | Outcome::CannotFit { before, .. } => before,
        Outcome::Rewritten(r) => &r.before,
    };
    let recorded = job.recorded_profile(before.ledger.fixed_bytes);
    // Held outputs are offered in one region only: a budget above the largest first region
    // ORT accepts resolves to several, which the prediction cannot hold.
    if let Outcome::Rewritten(r) = &outcome {
        recorded
            .one_region(r.after.device.arena_bytes)
            .map_err(|e| Failure::input(anyhow!(e)))?;
    }
    let random_seed = args.seed_random_ops.then_some(args.run.seed);
    let record = JobRecord {
        job: &job,
        ceiling: ceiling_spec,
        command_line: std::env::args().collect(),
        seed: args.run.seed,
        model: FileHash {
            path: model.display().to_string(),
            sha256: optimize::sha256_hex(&input_bytes),
        },
        model_data,
        random_op_seeds: if args.seed_random_ops {
            RandomOpSeeds::Explicit
        } else {
            RandomOpSeeds::OrtDerived
        },
        costs: costs.as_ref(),
    };
    let mut receipt = ckpt_opt::receipt::build::receipt(&record, &outcome);
    // The output, its data file and the receipts, published together by `emit`.
    let mut staging = ckpt_ir::Staging::default();
    match outcome {
        Outcome::CannotFit { diagnosis, .. } => {
            receipt.seconds = t0.elapsed().as_secs_f64();
            emit(&args, &receipt, staging)?;
            Err(Failure {
                code: CANNOT_FIT,
                error: anyhow!(
                    "the ceiling of {} cannot be met: {}",
                    human(ceiling),
                    diagnosis.message
                ),
            })
        }
        Outcome::AlreadyFits { before } => {
            let validation_failed = if args.validate {
                // Nothing was rewritten: what is validated is that the unchanged graph holds
                // under the ceiling on ONNX Runtime (the values are compared with themselves).
                validate_into(
                    &mut receipt,
                    (&before, &before, None),
                    &bindings,
                    &args,
                    &profile,
                    ceiling,
                    reference.as_ref(),
                )?
            } else {
                None
            };
            if validation_failed.is_none() {
                if let Some(out) = &args.output {
                    let mut g = before.graph.clone();
                    record_profile(
                        &mut g,
                        ckpt_planner::recorded_metadata(&profile, ceiling, &before.ledger),
                    )?;
                    write_output(
                        &mut staging,
                        &mut receipt,
                        before.graph.model(),
                        &g,
                        out,
                        &model,
                        random_seed,
                    )?;
                    read_back(&staging, out)?;
                }
            }
            receipt.seconds = t0.elapsed().as_secs_f64();
            emit(&args, &receipt, staging)?;
            if !args.output_args.json {
                println!(
                    "{}: predicted device total {} already fits the ceiling of {} under the profile ({}); nothing to recompute{}",
                    model.display(),
                    human(before.ledger.total_bytes),
                    human(ceiling),
                    profile.describe(),
                    if receipt.output.is_some() {
                        format!(
                            " (unchanged graph written, with the profile recorded{})",
                            data_note(receipt.output_data.as_ref())
                        )
                    } else {
                        String::new()
                    }
                );
            }
            validation_failed.map_or(Ok(()), Err)
        }
        Outcome::Rewritten(r) => {
            let out = args
                .output
                .clone()
                .unwrap_or_else(|| optimize::default_output(&model));
            let step = optimize::step_flops(&r.before, &bindings).max(1);
            // The output is written under temporary names first; what is validated is those
            // files read back, and they are published only if it passes.
            write_output(
                &mut staging,
                &mut receipt,
                r.before.graph.model(),
                &r.after.graph,
                &out,
                &model,
                random_seed,
            )?;
            let written = read_back(&staging, &out)?;
            let validation_failed = if args.validate {
                validate_into(
                    &mut receipt,
                    (&r.before, &r.after, Some(&written)),
                    &bindings,
                    &args,
                    &profile,
                    ceiling,
                    reference.as_ref(),
                )?
            } else {
                None
            };
            if validation_failed.is_some() {
                staging = ckpt_ir::Staging::default(); // the staged files are removed
                receipt.withdraw_output();
            }
            receipt.seconds = t0.elapsed().as_secs_f64();
            emit(&args, &receipt, staging)?;
            if !args.output_args.json {
                print_summary(
                    &r,
                    receipt.output.is_some().then_some(out.as_path()),
                    receipt.output_data.as_ref(),
                    ceiling,
                    step,
                    &profile,
                    receipt.measured_cost.as_ref(),
                );
            }
            validation_failed.map_or(Ok(()), Err)
        }
    }
}

/// What values are validated against when the planned graph is not the one given: the
/// original graph and the profile it runs online at (level basic, extended or all).
struct Reference {
    graph: ckpt_ir::Graph,
    profile: ckpt_ir::Profile,
}

/// The graph to plan under the flags' profile: at level `disable` the model as given; at
/// basic, extended or all the graph ORT runs at that level (`ckpt_validate::offline`), with
/// `options` switched to the profile it is loaded at (`disable`, optimized offline) and the
/// original kept as the reference for validation.
fn graph_at_level(
    graph: ckpt_ir::Graph,
    bytes: &[u8],
    model: &std::path::Path,
    options: &mut optimize::AnalyseOptions,
    r: &RunArgs,
) -> Result<(ckpt_ir::Graph, Option<Reference>), Failure> {
    if options.profile.graph_optimization_level == ckpt_ir::profile::OptLevel::Disable {
        return Ok((graph, None));
    }
    if let Some(lib) = &r.ort_lib {
        ckpt_runtime::init(Some(lib))
            .context("loading ONNX Runtime")
            .map_err(Failure::input)?;
    }
    let online = options.profile.clone();
    let optimized = ckpt_validate::offline::optimize_for_level(bytes, model, &online)
        .map_err(Failure::input)?
        .ok_or_else(|| {
            Failure::input(anyhow!(
                "level {} has no offline graph",
                online.graph_optimization_level
            ))
        })?;
    options.profile = optimized.profile;
    Ok((
        optimized.graph,
        Some(Reference {
            graph,
            profile: online,
        }),
    ))
}

/// `validate` of a rewrite that records an offline optimization level: its original is
/// optimized the same way (the graph the rewrite was planned from, for the memory check) and
/// kept, run online at that level, as the reference for the values.
fn original_at_level(
    original: ckpt_ir::Graph,
    path: &std::path::Path,
    recorded: &ckpt_ir::Profile,
    r: &RunArgs,
) -> Result<(ckpt_ir::Graph, Option<Reference>), Failure> {
    if recorded.offline_optimization_level.is_none() {
        return Ok((original, None));
    }
    let bytes = std::fs::read(path)
        .with_context(|| format!("reading {}", path.display()))
        .map_err(Failure::input)?;
    let mut options = optimize::AnalyseOptions {
        profile: ckpt_validate::offline::online_profile(recorded),
        ..optimize::AnalyseOptions::default()
    };
    graph_at_level(original, &bytes, path, &mut options, r)
}

/// Refuse a graph that computes no gradient: there is no training step to plan.
fn require_training_graph(a: &optimize::Analysis) -> Result<(), Failure> {
    let g = &a.graph;
    let trains = g
        .tensor_ids()
        .any(|t| a.class.kind(t) == ckpt_passes::phases::TensorKind::Gradient);
    if trains {
        return Ok(());
    }
    let outputs: Vec<&str> = g
        .outputs()
        .iter()
        .map(|&t| g.tensor(t).name.as_str())
        .collect();
    Err(Failure::input(anyhow!(
        "not a training graph: no output is a gradient (looked for graph outputs computed from the loss's gradient, and values fed to gradient accumulators; outputs: {}); ckpt-opt plans training steps (forward, loss and backward in one graph)",
        outputs.join(", ")
    )))
}

/// Check every file the run will write before any work ([`ckpt_opt::targets`]): `-o` (or the
/// default output), its data file when the input has external data, `--receipt` and
/// `--receipt-md`.
fn check_targets(
    args: &OptimizeArgs,
    model: &std::path::Path,
    reads: &[std::path::PathBuf],
) -> Result<(), Failure> {
    use ckpt_opt::targets::{check, data_file_of, Target};
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| optimize::default_output(model));
    let data = data_file_of(&out);
    let mut targets = vec![Target {
        flag: "-o",
        path: &out,
    }];
    if !reads.is_empty() {
        targets.push(Target {
            flag: "-o's data file",
            path: &data,
        });
    }
    for (flag, path) in [
        ("--receipt", args.receipt.as_deref()),
        ("--receipt-md", args.receipt_md.as_deref()),
    ] {
        if let Some(path) = path {
            targets.push(Target { flag, path });
        }
    }
    check(model, reads, &targets).map_err(Failure::input)
}

/// Record the deployment (the profile and its byte counts) in an unchanged graph's metadata
/// (a patch of metadata only: one that fails is an internal error).
fn record_profile(g: &mut ckpt_ir::Graph, metadata: Vec<(String, String)>) -> Result<(), Failure> {
    let patch = ckpt_ir::Patch {
        label: "record the deployment profile".into(),
        metadata,
        ..Default::default()
    };
    patch
        .apply(g)
        .context("recording the deployment profile in the model's metadata")
        .map_err(Failure::internal)?;
    Ok(())
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

fn print_summary(
    r: &optimize::Rewritten,
    out: Option<&std::path::Path>,
    data: Option<&OutputData>,
    ceiling: u64,
    step: u64,
    profile: &ckpt_ir::Profile,
    measured: Option<&MeasuredCost>,
) {
    let chosen = r.plan.recompute.iter().filter(|&&x| x).count();
    let info = &r.plan.info;
    let method = r.method_label();
    println!(
        "predicted device total {} -> {} (ceiling {}, profile: {})",
        human(r.before.ledger.total_bytes),
        human(r.after.ledger.total_bytes),
        human(ceiling),
        profile.describe(),
    );
    println!(
        "recomputing {} of {} candidate activations: {} nodes cloned, {} moved later (moves add no FLOPs), +{} FLOPs ({:.2}% of a step); found by {method} in {:.2} s",
        chosen,
        r.cands.list.len(),
        r.counts.cloned,
        r.counts.moved,
        r.counts.added_flops,
        100.0 * r.counts.added_flops as f64 / step as f64,
        info.wall.as_secs_f64()
    );
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

/// `--cost profile`: each node's median kernel time on ONNX Runtime under the profile, on
/// inputs made as validation makes them (exit 4 without a usable ONNX Runtime).
fn profile_costs(
    before: &optimize::Analysis,
    bindings: &ckpt_ir::Bindings,
    r: &RunArgs,
    profile: &ckpt_ir::Profile,
) -> Result<NodeCosts, Failure> {
    ckpt_validate::measured_cost::profilable(before).map_err(Failure::input)?;
    if let Some(lib) = &r.ort_lib {
        ckpt_runtime::init(Some(lib))
            .context("loading ONNX Runtime")
            .map_err(Failure::could_not_validate)?;
    }
    let overrides = InputOverrides::parse(&r.inputs, &r.int_ranges).map_err(Failure::input)?;
    ckpt_validate::measured_cost::measure(before, bindings, r.seed, &overrides, r.runs, profile)
        .map_err(Failure::could_not_validate)
}

/// Stage the receipt (`--receipt`, `--receipt-md`) beside whatever `staging` holds (the
/// output and its data file), publish them as one set, and print the receipt (`--json`).
fn emit(
    args: &OptimizeArgs,
    receipt: &Receipt,
    mut staging: ckpt_ir::Staging,
) -> Result<(), Failure> {
    ckpt_opt::progress::finish();
    let text = serde_json::to_string_pretty(receipt).map_err(Failure::internal)?;
    if let Some(path) = &args.receipt {
        staging
            .stage(path, text.as_bytes(), args.model.as_deref())
            .with_context(|| format!("writing receipt {}", path.display()))
            .map_err(Failure::input)?;
    }
    if let Some(path) = &args.receipt_md {
        let md = ckpt_opt::receipt::markdown::render(receipt);
        staging
            .stage(path, md.as_bytes(), args.model.as_deref())
            .with_context(|| format!("writing receipt summary {}", path.display()))
            .map_err(Failure::input)?;
    }
    staging
        .publish()
        .context("publishing the output, its data file and the receipts")
        .map_err(Failure::input)?;
    if args.output_args.json {
        println!("{text}");
    }
    Ok(())
}
