//! The main job, one call per stage: import → analyse → plan → write → validate → receipt
//! ([`main_job`]), and the one [`verdict`] that decides its exit code.
//!
//! Rules:
//! - Every file the run writes is checked before any work ([`import::import`]); the output
//!   is staged under temporary names, read back, and what validation judges is those bytes
//!   ([`write::stage_output`], [`check::validate`]).
//! - The output, its data file and the receipts are published as one set, or none
//!   ([`write::publish`]): a validation that fails or cannot run publishes the receipts only.
//! - Each graph is exported once: the output's bytes are the ones staged, and validation
//!   and the memory check run on one export of each side.
//! - The exit code is [`verdict`]'s, from what [`Finished`] holds: 2 when the ceiling cannot
//!   be met, 3 when validation failed, 4 (or 1) when it could not run.

pub mod check;
pub mod deadline;
pub mod import;
pub mod write;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use ckpt_planner::{AnalyseOptions, Analysis, Outcome, PlanError, PlanOptions, Rewritten};
use ckpt_validate::memory::MemoryCheck;
use ckpt_validate::paired::Validation;

use crate::cli::OptimizeArgs;
use crate::exit::{Failure, CANNOT_FIT, VALIDATION_FAILED};
use crate::job::Job;
use crate::receipt::build::JobRecord;
use crate::receipt::{RandomOpSeeds, Receipt};
use crate::size::human;

/// A job planned: the analysis of the graph given and what the planner made of it.
pub struct PlannedJob {
    pub before: Analysis,
    pub outcome: Outcome,
}

impl PlannedJob {
    /// The rewrite, when the planner made one.
    pub fn rewritten(&self) -> Option<&Rewritten> {
        match &self.outcome {
            Outcome::Rewritten(r) => Some(r),
            _ => None,
        }
    }

    /// The analysis of the graph the job ends with: the rewrite's, else the graph given.
    pub fn after(&self) -> &Analysis {
        self.rewritten().map_or(&self.before, |r| &r.after)
    }
}

/// How a validation ended.
pub enum Checked {
    /// It ran: the values and the memory check (each passed or failed).
    Ran {
        validation: Validation,
        memory: MemoryCheck,
    },
    /// It could not run: the exit code (4 without a usable runtime, else 1 or 70) and why.
    CouldNot { code: u8, reason: String },
}

/// What the main job did: the plan, the receipt it published, where the output went.
pub struct Finished {
    pub job: Job,
    pub planned: PlannedJob,
    pub receipt: Receipt,
    /// The output published (`None`: nothing written).
    pub output: Option<PathBuf>,
    /// `--validate`'s result (`None`: not asked, or nothing to validate).
    pub checked: Option<Checked>,
    /// The deployment profile the job planned under (as the flags gave it).
    pub profile: ckpt_ir::Profile,
}

/// The analysis of a graph ([`ckpt_planner::analyse`]), shown on the progress line.
pub fn analyse(graph: ckpt_ir::Graph, o: &AnalyseOptions) -> Result<Analysis, PlanError> {
    analysing();
    ckpt_planner::analyse(graph, o)
}

/// The analysis stage, on the progress line.
pub(crate) fn analysing() {
    crate::progress::stage("analysing: shape inference, ORT's schedule, the simulated arena");
}

/// Plan `job` from the analysis of its graph under `options` ([`Job::plan_options`]).
pub fn plan(before: Analysis, options: &PlanOptions) -> Result<PlannedJob, PlanError> {
    let outcome = ckpt_planner::plan(&before, options)?;
    Ok(PlannedJob { before, outcome })
}

/// The main job the flags describe, up to its exit code ([`verdict`]).
pub fn main_job(args: &OptimizeArgs) -> Result<Finished, Failure> {
    let t0 = Instant::now();
    let watchdog = deadline::Watchdog::arm(t0, Duration::from_secs_f64(args.time_limit));
    let (input, graph) = import::import(args)?;
    let before = analyse(graph, &input.options).map_err(Failure::planning)?;
    import::require_training_graph(&before)?;
    let job = Job::from_args(args, input.options.clone(), before.ledger.total_bytes)
        .map_err(|e| Failure::input(anyhow!(e)))?;
    let costs = check::profile_costs(args, &before, &input.options)?;
    crate::progress::stage("searching for a plan");
    // `--time-limit` counts from `t0`: import, analysis, search, probes and the load check;
    // the searches leave time for the write ([`deadline::tail_reserve`]).
    let mut options = job.plan_options(t0, ckpt_planner::default_threads(), costs.as_ref());
    options.reserve = deadline::tail_reserve(t0.elapsed(), job.time_limit);
    let planned = plan(before, &options).map_err(Failure::planning)?;
    write::check_profile(&job, &planned)?;
    let mut receipt =
        crate::receipt::build::receipt(&record(args, &job, &input, costs.as_ref()), &planned);
    let mut staging = ckpt_ir::Staging::default();
    let staged = write::stage_output(args, &job, &input, &planned, &mut staging, &mut receipt)?;
    if !args.validate {
        let left = job.time_limit.saturating_sub(t0.elapsed());
        receipt.output_load = staged
            .as_ref()
            .map(|s| write::load_check(s, &input.options.profile, args, &input.model, left))
            .transpose()?;
    }
    watchdog.disarm(); // `--validate`'s runs and the publish are outside the limit
    let checked = check::validate(
        args,
        &input,
        &planned,
        staged.as_ref(),
        job.ceiling,
        &mut receipt,
    )?;
    if checked.as_ref().is_some_and(|c| !passed(c)) {
        staging = ckpt_ir::Staging::default(); // the staged files are removed
        receipt.withdraw_output();
    }
    receipt.seconds = t0.elapsed().as_secs_f64();
    write::publish(args, &receipt, staging)?;
    let output = receipt.output.as_ref().and(staged.map(|s| s.path));
    Ok(Finished {
        profile: input.options.profile.clone(),
        job,
        planned,
        receipt,
        output,
        checked,
    })
}

/// What the receipt states of the job besides its outcome.
fn record<'a>(
    args: &OptimizeArgs,
    job: &'a Job,
    input: &import::Imported,
    costs: Option<&'a ckpt_validate::measured_cost::NodeCosts>,
) -> JobRecord<'a> {
    JobRecord {
        job,
        ceiling: input.ceiling,
        command_line: std::env::args().collect(),
        seed: args.run.seed,
        model: input.hash.clone(),
        model_data: input.data_hashes.clone(),
        random_op_seeds: if args.seed_random_ops {
            RandomOpSeeds::Explicit
        } else {
            RandomOpSeeds::OrtDerived
        },
        costs,
    }
}

/// A validation that ran and passed both checks.
fn passed(c: &Checked) -> bool {
    match c {
        Checked::Ran { validation, memory } => failures(validation, memory).is_empty(),
        Checked::CouldNot { .. } => false,
    }
}

/// Why a validation that ran failed (empty: it passed).
pub fn failures(v: &Validation, m: &MemoryCheck) -> Vec<String> {
    let mut why = Vec::new();
    if !v.control_rejected {
        why.push("the broken control was not rejected".to_string());
    } else if !v.passed {
        why.push("outputs differ".to_string());
    }
    why.extend(m.failures.iter().cloned());
    why
}

/// Exit 3 when values differ, the control was not rejected, or memory failed its check.
pub fn validation_verdict(v: &Validation, m: &MemoryCheck) -> Result<(), Failure> {
    let why = failures(v, m);
    if why.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            code: VALIDATION_FAILED,
            error: anyhow!("validation failed: {}", why.join("; ")),
        })
    }
}

/// The main job's exit: 2 when the ceiling cannot be met, 3 when validation failed, the
/// validation's own code when it could not run, else success.
pub fn verdict(f: &Finished) -> Result<(), Failure> {
    if let Outcome::CannotFit(d) = &f.planned.outcome {
        return Err(Failure {
            code: CANNOT_FIT,
            error: anyhow!(
                "the ceiling of {} cannot be met: {}{}",
                human(f.job.ceiling),
                d.message,
                one_region_note(f)
            ),
        });
    }
    match &f.checked {
        None => Ok(()),
        Some(Checked::Ran { validation, memory }) => validation_verdict(validation, memory),
        Some(Checked::CouldNot { code, reason }) => Err(Failure {
            code: *code,
            error: anyhow!("{reason}"),
        }),
    }
}

/// Where the profile bounds the arena to one region below the ceiling's budget, why the
/// ceiling planned to is lower than the one given, and the flag that lifts it.
fn one_region_note(f: &Finished) -> String {
    let fixed = f.planned.before.ledger.fixed_bytes;
    let bound = f.profile.arena_bound();
    if f.job.ceiling.saturating_sub(fixed) <= bound {
        return String::new();
    }
    let lift = if f.profile.ort_version == ckpt_ir::ort::TRAINING_ORT_VERSION {
        "onnxruntime-training runs this profile in one region only"
    } else {
        "`--caller-outputs released` lifts this"
    };
    format!(
        "; the profile holds the arena in one region, and ORT's largest first region is {}, so the ceiling planned to is {} ({lift})",
        human(bound),
        human(fixed.saturating_add(bound))
    )
}
