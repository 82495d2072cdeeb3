//! The main job the flags describe ([`Job`]), and the memory ceiling every command takes
//! ([`Ceiling`]).
//!
//! Rules:
//! - A ceiling is given once, in one form, and parsed by the flag's value parser: a size
//!   (`69GiB`, `70GB`, `512MiB`, `1.5GiB`, a byte count; see [`crate::size::parse_size`]) or a
//!   percentage in (0, 100] of the original graph's predicted device total (its ledger total
//!   under the profile). A ceiling is positive.
//! - A job resolves its ceiling to bytes once ([`Job::from_args`]), against the analysis of
//!   the unmodified graph; everything after (the planner's options, the recorded profile, the
//!   receipt) reads those bytes.
//! - A percentage rounds down to whole bytes.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ckpt_ir::Profile;
use ckpt_planner::{Analysis, PlanError, PlanOptions};

use crate::pipeline::PlannedJob;

use crate::cli::OptimizeArgs;
use crate::size::parse_size;
use ckpt_planner::AnalyseOptions;

/// A memory ceiling as given: bytes, or a percentage of the original graph's predicted
/// device total.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ceiling {
    Bytes(u64),
    /// In (0, 100].
    PercentOfTotal(f64),
}

impl Ceiling {
    /// Parse `90%`, `69GiB`, `70GB`, `512MiB`, `1.5GiB` or a byte count (the flags' value
    /// parser).
    pub fn parse(s: &str) -> Result<Ceiling, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let p = p.trim();
            let plain = !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit() || c == '.')
                && p.matches('.').count() <= 1
                && !p.starts_with('.')
                && !p.ends_with('.');
            let v: f64 = if plain {
                p.parse()
                    .map_err(|_| format!("`{s}`: `{p}` is not a number"))?
            } else {
                return Err(format!(
                    "`{s}`: a percentage is a plain number in (0, 100], e.g. 90%"
                ));
            };
            if !(v > 0.0 && v <= 100.0) {
                return Err(format!(
                    "`{s}`: a percentage of the footprint must lie in (0, 100]"
                ));
            }
            return Ok(Ceiling::PercentOfTotal(v));
        }
        match parse_size(t)? {
            0 => Err(format!("`{s}`: the ceiling must be positive")),
            b => Ok(Ceiling::Bytes(b)),
        }
    }

    /// The ceiling in bytes, given the predicted device total of the unmodified graph; a
    /// percentage rounds down.
    pub fn resolve(self, total_bytes: u64) -> u64 {
        match self {
            Ceiling::Bytes(b) => b,
            Ceiling::PercentOfTotal(p) => {
                // Exact for the percentages people write (up to 6 decimals).
                let millionths = (p * 1e6).round() as u128;
                (total_bytes as u128 * millionths / 100_000_000) as u64
            }
        }
    }

    /// The bytes of a ceiling given as a size; `None` for a percentage.
    pub fn bytes(self) -> Option<u64> {
        match self {
            Ceiling::Bytes(b) => Some(b),
            Ceiling::PercentOfTotal(_) => None,
        }
    }
}

impl fmt::Display for Ceiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ceiling::Bytes(b) => write!(f, "{b}"),
            Ceiling::PercentOfTotal(p) => write!(f, "{p}%"),
        }
    }
}

/// Inputs of the main job.
#[derive(Clone, Debug)]
pub struct Job {
    pub model: PathBuf,
    /// The ceiling in bytes, resolved once.
    pub ceiling: u64,
    pub output: Option<PathBuf>,
    /// Bindings, loss, optimizer and deployment profile: how every graph of the job is
    /// analysed (the original and each rewrite).
    pub analysis: AnalyseOptions,
    pub reserve_pct: f64,
    pub time_limit: Duration,
    /// On a refusal, ceilings between the ceiling and the lowest total found planned to lower
    /// that total ([`ckpt_planner::PlanOptions::refusal_probes`]; the main job's 3, else 0).
    pub refusal_probes: usize,
    /// On a refusal, plan the outputs of plans at and just above the lowest total found again
    /// at the ceiling, and a plan adding over 5% of a step from plans at looser ceilings
    /// ([`ckpt_planner::PlanOptions::plan_again`]; `--plan-again`, on by default in the main
    /// job, off elsewhere).
    pub plan_again: bool,
    /// Schedule steps the plan's searches may simulate in all
    /// ([`ckpt_planner::PlanOptions::pass_steps`]; `--search-steps`).
    pub search_steps: usize,
    /// Also plan the graph with its copies folded away where a plan is needed
    /// ([`ckpt_planner::PlanOptions::fold`]; `--fold`, on by default).
    pub fold: bool,
    /// Also plan the graph with its loss head in chunks of rows where a plan adds anything
    /// or none fits ([`ckpt_planner::PlanOptions::chunk_loss_head`]; `--chunk-loss-head`,
    /// off by default).
    pub chunk_loss_head: bool,
    /// Also fold the shared weights' gradients where a plan is needed
    /// ([`ckpt_planner::PlanOptions::fold_tied`]; `--fold-tied`, off by default).
    pub fold_tied: bool,
}

/// Refusal probes of the main job ([`Job::refusal_probes`]).
const MAIN_JOB_REFUSAL_PROBES: usize = 3;

impl Job {
    /// The main job the flags describe, planned under `analysis`; its ceiling resolved against
    /// `original_total_bytes`, the unmodified graph's predicted device total under the profile.
    /// `Err`: the flags name no model or no ceiling.
    pub fn from_args(
        args: &OptimizeArgs,
        analysis: AnalyseOptions,
        original_total_bytes: u64,
    ) -> Result<Job, String> {
        Ok(Job {
            model: args.model_path()?.to_path_buf(),
            ceiling: args.ceiling()?.resolve(original_total_bytes),
            output: args.output.clone(),
            analysis,
            reserve_pct: args.reserve,
            time_limit: Duration::from_secs_f64(args.time_limit),
            refusal_probes: MAIN_JOB_REFUSAL_PROBES,
            plan_again: args.plan_again == "on",
            search_steps: args.search_steps,
            fold: args.fold == "on",
            chunk_loss_head: args.chunk_loss_head == "on",
            fold_tied: args.fold_tied == "on",
        })
    }

    /// The profile the output records: an arena sized to the budget becomes the ceiling less
    /// what the caller feeds (`fixed_bytes`), in bytes.
    pub fn recorded_profile(&self, fixed_bytes: u64) -> Profile {
        self.analysis
            .profile
            .resolved(self.ceiling.saturating_sub(fixed_bytes))
    }

    /// Plan from `before`, the analysis of the job's graph: the time limit counts from now,
    /// recompute costs FLOPs, trials run on [`ckpt_planner::default_threads`].
    pub fn plan(&self, before: Analysis) -> Result<PlannedJob, PlanError> {
        self.plan_on(before, ckpt_planner::default_threads())
    }

    /// [`Job::plan`] with trials simulated on `threads` threads: the same plan on any number.
    pub fn plan_on(&self, before: Analysis, threads: usize) -> Result<PlannedJob, PlanError> {
        crate::pipeline::plan(before, &self.plan_options(Instant::now(), threads, None))
    }

    /// The planner's options for this job: the time limit counts from `t0`.
    pub fn plan_options(
        &self,
        t0: Instant,
        threads: usize,
        costs: Option<&ckpt_validate::measured_cost::NodeCosts>,
    ) -> PlanOptions {
        PlanOptions {
            analysis: self.analysis.clone(),
            ceiling: self.ceiling,
            recorded_ceiling: None,
            reserve_pct: self.reserve_pct,
            time_limit: self.time_limit,
            started: t0,
            reserve: Duration::ZERO,
            threads,
            costs: costs.map(ckpt_validate::measured_cost::NodeCosts::planner_costs),
            trace: std::env::var_os("CKPT_OPT_DEBUG")
                .is_some()
                .then(|| ckpt_planner::Trace::new(|e| eprintln!("{e}"))),
            progress: Some(progress),
            refusal_probes: self.refusal_probes,
            plan_again: self.plan_again,
            ladder_rungs: ckpt_planner::LADDER_RUNGS,
            fold: self.fold,
            chunk_loss_head: self.chunk_loss_head,
            fold_tied: self.fold_tied,
            max_trials: ckpt_planner::MAX_TRIALS,
            pass_steps: self.search_steps,
        }
    }
}

/// `model.onnx` → `model.ckpt.onnx` beside it.
pub fn default_output(model: &std::path::Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    model.with_file_name(format!("{stem}.ckpt.onnx"))
}

/// The planner's progress, on the progress line.
fn progress(p: ckpt_planner::Progress) {
    match p {
        ckpt_planner::Progress::Analysing => crate::pipeline::analysing(),
        ckpt_planner::Progress::Trials {
            count,
            best_total_bytes,
        } => crate::progress::trials(count, best_total_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings() {
        assert_eq!(Ceiling::parse("90%"), Ok(Ceiling::PercentOfTotal(90.0)));
        assert_eq!(Ceiling::parse("100%"), Ok(Ceiling::PercentOfTotal(100.0)));
        assert_eq!(Ceiling::parse("0.5%"), Ok(Ceiling::PercentOfTotal(0.5)));
        assert_eq!(Ceiling::parse("69GiB"), Ok(Ceiling::Bytes(69 << 30)));
        assert_eq!(Ceiling::parse("1"), Ok(Ceiling::Bytes(1)));
        assert_eq!(Ceiling::PercentOfTotal(90.0).resolve(1000), 900);
        assert_eq!(Ceiling::PercentOfTotal(100.0).resolve(1001), 1001);
        assert_eq!(Ceiling::PercentOfTotal(33.3).resolve(1000), 333);
        assert_eq!(
            Ceiling::PercentOfTotal(90.0).resolve(u64::MAX),
            u64::MAX / 10 * 9 + 4
        );
        assert_eq!(Ceiling::Bytes(7).resolve(1000), 7);
        assert_eq!(Ceiling::Bytes(7).bytes(), Some(7));
        assert_eq!(Ceiling::PercentOfTotal(90.0).bytes(), None);
        assert_eq!(Ceiling::PercentOfTotal(90.0).to_string(), "90%");
        assert_eq!(Ceiling::Bytes(1 << 30).to_string(), "1073741824");
        for (s, why) in [
            ("0", "positive"),
            ("0GiB", "positive"),
            ("0.0001B", "positive"),
            ("0%", "(0, 100]"),
            ("100.5%", "(0, 100]"),
            ("150%", "(0, 100]"),
            ("-5%", "plain number"),
            ("nan%", "plain number"),
            ("inf%", "plain number"),
            ("1e2%", "plain number"),
            ("%", "plain number"),
            ("-5GiB", "no sign"),
        ] {
            let e = Ceiling::parse(s).expect_err(s);
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
