//! Command-line surface: the main job (`ckpt-opt MODEL --ceiling SIZE`) and subcommands, and
//! the exit codes every `--help` lists ([`crate::exit`]).
//!
//! Every value is checked here, by clap value parsers, so that a bad flag exits 1 with a
//! message naming it (numeric flags take hyphen values, so `--ceiling -5GiB` reaches its
//! parser and is refused there); what needs the model (`--dim` names, `--ceiling 90%`) is checked after
//! import, in [`crate::model_io`] and the job ([`crate::job::Job::from_args`]).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::job::Ceiling;

/// The exit codes, as every `--help` lists them.
const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  bad input or usage (a flag, a model file, a --dim binding)
  2  the ceiling cannot be met (the diagnosis is printed and written to the receipt)
  3  validation failed (outputs differ, or the broken control was not rejected)
  4  could not validate (no ONNX Runtime, or one without the model's training ops)
  70 internal error (a bug in ckpt-opt, not a fault of the input)";

const MAIN_HELP: &str = "\
Examples:
  ckpt-opt model.onnx --ceiling 69GiB -o model.ckpt.onnx
  ckpt-opt model.onnx --ceiling 90% --validate --receipt receipt.json
  ckpt-opt training_model.onnx --dim batch=8 --dim seq=1024 --ceiling 20GiB
  ckpt-opt inspect training_model.onnx          (lists the dims to bind)

Sizes: 69GiB, 70GB, 512MiB, 1.5GiB or a byte count; 90% is 90% of the predicted
footprint of the unmodified graph (the ledger total that `inspect` prints).";

const INSPECT_HELP: &str = "\
Examples:
  ckpt-opt inspect model.onnx
  ckpt-opt inspect training_model.onnx --dim batch=8 --dim seq=1024 --optimizer adam
  ckpt-opt inspect model.onnx --json | jq .ledger";

const PRINT_HELP: &str = "\
Examples:
  ckpt-opt print model.onnx | less
  diff <(ckpt-opt print model.onnx) <(ckpt-opt print model.ckpt.onnx)";

const EXPORT_HELP: &str = "\
Examples:
  ckpt-opt export model.onnx -o roundtrip.onnx";

const VALIDATE_HELP: &str = "\
Examples:
  ckpt-opt validate model.onnx model.ckpt.onnx
  ckpt-opt validate model.onnx model.ckpt.onnx --seed 7 --rtol 1e-5 --atol 1e-7 --json
  ckpt-opt validate model.onnx model.ckpt.onnx --provider cuda --locate-peak";

#[derive(Parser, Debug)]
#[command(
    name = "ckpt-opt",
    version,
    about = "Fit an ONNX training graph under a memory ceiling by recomputing activations",
    args_conflicts_with_subcommands = true,
    after_help = format!("{MAIN_HELP}\n\n{EXIT_CODES}")
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub optimize: OptimizeArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the model's summary: versions, inputs, outputs, parameters, symbolic dims.
    #[command(after_help = format!("{INSPECT_HELP}\n\n{EXIT_CODES}"))]
    Inspect(InspectArgs),
    /// Print the graph in the stable text form.
    #[command(after_help = format!("{PRINT_HELP}\n\n{EXIT_CODES}"))]
    Print(PrintArgs),
    /// Import and export a model unchanged (a lossless round trip; for checks).
    #[command(after_help = format!("{EXPORT_HELP}\n\n{EXIT_CODES}"))]
    Export(ExportArgs),
    /// Compare a rewritten graph with its original on ONNX Runtime (exit 3 on mismatch).
    #[command(after_help = format!("{VALIDATE_HELP}\n\n{EXIT_CODES}"))]
    Validate(ValidateArgs),
    // Decision reports (frontier, capacity, buckets): src/reports.rs.
    /// Sweep ceilings from no recompute to the floor: DIR/frontier.{json,svg,md}.
    Frontier(FrontierArgs),
    /// The largest value of a symbolic dim that fits, with and without recompute.
    Capacity(CapacityArgs),
    /// Plan only the over-ceiling shape buckets of a trace: DIR/manifest.json, buckets.md.
    Buckets(BucketsArgs),
}

/// How to run graphs on ONNX Runtime.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Seed for inputs and random ops.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub seed: u64,
    /// Feed an input from a .npy file: `--input NAME=file.npy` (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Range of an integer input when no consumer implies one: `--int-range NAME=LO:HI`.
    #[arg(long = "int-range", value_name = "NAME=LO:HI")]
    pub int_ranges: Vec<String>,
    /// Relative tolerance for float outputs (default by dtype: f32 1e-4, f16 1e-2, bf16 5e-2).
    #[arg(long, value_parser = tolerance, allow_hyphen_values = true)]
    pub rtol: Option<f64>,
    /// Absolute tolerance for float outputs (default by dtype: f32 1e-6, f16 1e-3, bf16 1e-2).
    #[arg(long, value_parser = tolerance, allow_hyphen_values = true)]
    pub atol: Option<f64>,
    /// The ONNX Runtime library to use (default: ORT_DYLIB_PATH, .venv, python3's onnxruntime).
    #[arg(long = "ort-lib")]
    pub ort_lib: Option<PathBuf>,
    /// Timed runs for p50/p95 (after 2 discarded warm-ups).
    #[arg(long, default_value_t = 5, value_parser = runs, allow_hyphen_values = true)]
    pub runs: usize,
    /// Also name the node at which ONNX Runtime's arena reaches its largest extent (CPU: the run
    /// is repeated under shrinking arena limits until an allocation fails; about log2(peak/256)
    /// extra runs per graph).
    #[arg(long = "locate-peak")]
    pub locate_peak: bool,
}

#[derive(Args, Debug)]
pub struct ValidateArgs {
    pub original: PathBuf,
    pub rewritten: PathBuf,
    /// Also fail (exit 3) when the rewritten graph's measured device total is above this ceiling
    /// or it does not run in an arena capped at it: a size, or `90%` of the original's
    /// predicted device total.
    #[arg(long, value_parser = Ceiling::parse, allow_hyphen_values = true)]
    pub ceiling: Option<Ceiling>,
    #[command(flatten)]
    pub model_args: ModelArgs,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub output_args: OutputArgs,
}

/// The deployment profile: how the model will be run, which decides what the device must hold.
#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Execution provider.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    pub provider: String,
    /// ORT graph optimization level of the deployment. At `basic`, `extended` or `all` ORT
    /// optimizes the model first (its offline mode) and that graph is planned; the output is
    /// then loaded at `disable`, so that no optimizer undoes the recompute.
    #[arg(long = "ort-opt-level", default_value = "disable", value_parser = ["disable", "basic", "extended", "all"])]
    pub ort_opt_level: String,
    /// ORT's memory pattern (`enable_mem_pattern`): from the second step on, one block of the
    /// first step's traced peak is allocated in the arena.
    #[arg(long = "mem-pattern", default_value = "off", value_parser = ["on", "off"])]
    pub mem_pattern: String,
    /// The arena's extend strategy.
    #[arg(long = "arena-extend", default_value = "kNextPowerOfTwo", value_parser = ["kNextPowerOfTwo", "kSameAsRequested"])]
    pub arena_extend: String,
    /// The arena's first region (`initial_chunk_size_bytes`): `budget` (the default: one
    /// region of the ceiling less what the caller feeds, with the arena capped there; the
    /// written model records the bytes), `default` (ORT's 1 MiB), or a size such as `4MiB`.
    #[arg(long = "initial-chunk", value_name = "SIZE|budget|default", default_value = "budget", value_parser = parse_initial_chunk)]
    pub initial_chunk: String,
    /// Where the step's outputs live: `bound` (the runner binds each to a buffer it allocates
    /// once outside the arena, which ORT writes in place), `released` (ORT allocates them in
    /// the arena; the runner copies them out before the next step) or `held` (the previous
    /// outputs stay in the arena during the next step). The caller holds the runner's buffers
    /// in every case; they are in the device total. `held` is offered only in one CPU region of the budget
    /// with the memory pattern off (`--mem-pattern off --arena-extend kNextPowerOfTwo
    /// --initial-chunk budget`); elsewhere ORT's need depends on the process (where the C
    /// library places the regions), and the profile is refused.
    #[arg(long = "caller-outputs", default_value = "bound", value_parser = ["bound", "released", "held"])]
    pub caller_outputs: String,
    /// The session's intra-op threads (`intra_op_num_threads`, 1-1024): convolutions take a
    /// working buffer per thread from the arena.
    #[arg(long = "intra-op-threads", default_value_t = 1)]
    pub intra_op_threads: u32,
    /// Consecutive steps of one session the device must hold (1-100).
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
}

/// Options shared by every command that analyses a model.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Bind a symbolic dim, e.g. `--dim seq=4096` (repeatable; `inspect` lists the dims a
    /// model needs).
    #[arg(long = "dim", value_name = "NAME=VALUE", value_parser = dim_binding, allow_hyphen_values = true)]
    pub dims: Vec<DimBinding>,
    #[command(flatten)]
    pub training: TrainingArgs,
}

/// How a training step is analysed besides its dims: the loss, the optimizer that runs
/// outside the graph, and the deployment profile.
#[derive(Args, Debug, Clone)]
pub struct TrainingArgs {
    /// The loss output (default: the first floating-point scalar output).
    #[arg(long)]
    pub loss: Option<String>,
    /// An optimizer that runs outside the graph, for its state in the ledger.
    #[arg(long, default_value = "none", value_parser = ["none", "sgd", "adam", "adamw"])]
    pub optimizer: String,
    /// Element type of the optimizer state.
    #[arg(long = "optimizer-dtype", default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    pub optimizer_dtype: String,
    #[command(flatten)]
    pub profile: ProfileArgs,
}

impl TrainingArgs {
    pub fn optimizer(&self) -> (ckpt_passes::ledger::Optimizer, u64) {
        use ckpt_passes::ledger::Optimizer;
        let o = match self.optimizer.as_str() {
            "adam" | "adamw" => Optimizer::Adam,
            "sgd" => Optimizer::Sgd,
            _ => Optimizer::None,
        };
        (
            o,
            if self.optimizer_dtype == "f32" {
                32
            } else {
                16
            },
        )
    }
}

#[derive(Args, Debug)]
pub struct OptimizeArgs {
    /// The ONNX training graph (forward + loss + backward).
    pub model: Option<PathBuf>,
    /// The memory ceiling: `69GiB`, `70GB`, `512MiB`, `1.5GiB`, a byte count, or `90%` of the
    /// predicted footprint of the unmodified graph.
    #[arg(long, value_parser = Ceiling::parse, allow_hyphen_values = true)]
    pub ceiling: Option<Ceiling>,
    /// Output path (default: `<model>.ckpt.onnx` beside the input).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub model_args: ModelArgs,
    /// Keep this percentage of the ceiling free (allocator slack, other buffers).
    #[arg(long, default_value_t = 0.0, value_parser = reserve, allow_hyphen_values = true)]
    pub reserve: f64,
    /// The run's time limit in seconds, in (0, 1e6], counted from its start: import, analysis,
    /// the search, refusal probes and the output's load check (`--validate`'s runs are
    /// outside it). The best plan found so far is returned, labelled. A run still short of its
    /// output at the limit plus 10% (at least 2 s) ends with exit 2 and writes nothing.
    #[arg(
        long = "time-limit",
        default_value_t = 30.0,
        value_parser = time_limit,
        allow_hyphen_values = true
    )]
    pub time_limit: f64,
    /// Schedule steps the searches may simulate in all (each trial simulates the graph's
    /// schedule once): a count, so a plan or a refusal is the same on any machine. A refusal
    /// says when it ran out; a larger budget may then find a plan.
    #[arg(long = "search-steps", default_value_t = ckpt_planner::PASS_STEPS, value_parser = search_steps)]
    pub search_steps: usize,
    /// Where a plan is needed, also plan the graph with its copies folded away, and keep the
    /// cheaper plan: each 2-D Transpose every reader of which can do without folded into its
    /// readers (MatMuls and Gemms of 2-D f32/f64 operands take it as transA/transB, a
    /// Transpose back reads the value itself), and each slice's gradient scattered into zeros
    /// made one Pad: zero FLOPs, no copy, every output bitwise equal on ONNX Runtime's CPU
    /// provider.
    #[arg(long = "fold", default_value = "on", value_parser = ["on", "off"])]
    pub fold: String,
    /// Where the plan found recomputes anything or none fits, also plan the graph with its
    /// loss head (the vocabulary projection, the log-softmax and the cross-entropy, forward
    /// and backward) in chunks of rows, so that no logits-sized value exists whole, and keep
    /// that plan where it adds fewer FLOPs or fits where none did. The chunks sum the loss
    /// and the head's weight gradient in another order: validation then compares those
    /// within tolerances, not bit for bit, and the receipt says so.
    #[arg(long = "chunk-loss-head", default_value = "off", value_parser = ["on", "off"])]
    pub chunk_loss_head: String,
    /// Where a plan is needed, also fold each shared weight's gradient (a language-model
    /// head tied to its token embedding): the embedding's rows are scattered into the head's
    /// gradient instead of into a table of zeros that an Add then sums, so neither the table
    /// nor a second weight-sized gradient exists. A row two tokens hit is summed in another
    /// order: validation then compares that gradient within tolerances, not bit for bit, and
    /// the receipt says so.
    #[arg(long = "fold-tied", default_value = "off", value_parser = ["on", "off"])]
    pub fold_tied: String,
    /// Where no plan fits, make the plans at the lowest total found and at the next two whole
    /// percents above it real, and plan each output again at the ceiling, keeping the
    /// cheapest: the second pass recomputes values the first plan's clones read and guards
    /// and reorders the clones, and reaches totals one pass does not. Where the plan found
    /// adds more than 5% of a step, do the same from the plans at the 2nd, 4th and 6th whole
    /// percents above the ceiling, and keep the plan that adds the least. The output then
    /// holds both plans' recomputes, and the receipt lists both.
    #[arg(long = "plan-again", default_value = "on", value_parser = ["on", "off"])]
    pub plan_again: String,
    /// Validate the rewritten graph against the original on ONNX Runtime.
    #[arg(long)]
    pub validate: bool,
    /// Write the receipt (JSON) here.
    #[arg(long)]
    pub receipt: Option<PathBuf>,
    /// Write a Markdown summary of the receipt here: what was predicted and measured, under
    /// which profile and shape, and what was not.
    #[arg(long = "receipt-md", value_name = "FILE")]
    pub receipt_md: Option<PathBuf>,
    /// What the planner minimises: `flops` (the op registry's count) or `profile` (each node's
    /// kernel time on ONNX Runtime under the deployment profile, the median of --runs runs
    /// after one warm-up; the receipt then states added milliseconds).
    #[arg(long, default_value = "flops", value_parser = ["flops", "profile"])]
    pub cost: String,
    /// Write an explicit `seed` attribute (from --seed and the node's name) into every random
    /// op of the output (Dropout, RandomNormal, …). Without it the output's random ops keep no
    /// seed, and ORT derives theirs as it does for the original.
    #[arg(long = "seed-random-ops")]
    pub seed_random_ops: bool,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub output_args: OutputArgs,
}

impl OptimizeArgs {
    /// The model, which the main job needs.
    pub fn model_path(&self) -> Result<&std::path::Path, String> {
        self.model
            .as_deref()
            .ok_or_else(|| "no model given: ckpt-opt MODEL --ceiling SIZE (see --help)".into())
    }

    /// The ceiling as given, which the main job needs.
    pub fn ceiling(&self) -> Result<Ceiling, String> {
        self.ceiling
            .ok_or_else(|| "--ceiling is required, e.g. --ceiling 69GiB".into())
    }
}

/// How much is printed.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Emit JSON on stdout (with every output's comparison).
    #[arg(long)]
    pub json: bool,
    /// Print every output's comparison, not only the worst of each group.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// No progress on stderr (it is shown only when stderr is a terminal).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    pub model: PathBuf,
    #[command(flatten)]
    pub model_args: ModelArgs,
    /// Emit JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PrintArgs {
    pub model: PathBuf,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    pub model: PathBuf,
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

// --- Decision reports (frontier, capacity, buckets) ---

/// Flags the report commands share: planning and measuring.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Bind a symbolic dim, `--dim seq=32` (repeatable); `capacity` also takes the dim it
    /// searches as a bare name, `--dim batch`.
    #[arg(long = "dim", value_name = "NAME[=VALUE]", allow_hyphen_values = true)]
    pub dims: Vec<String>,
    #[command(flatten)]
    pub training: TrainingArgs,
    /// Solver time limit per plan, in seconds, in (0, 1e6].
    #[arg(long = "time-limit", default_value_t = 10.0, value_parser = time_limit, allow_hyphen_values = true)]
    pub time_limit: f64,
    /// Seed for the measured runs' inputs.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub seed: u64,
    /// Timed runs per measured graph (after 2 warm-ups).
    #[arg(long, default_value_t = 10, value_parser = runs, allow_hyphen_values = true)]
    pub runs: usize,
    /// Plan as the main job with the same `--fold` does: `on` also plans the graph with its
    /// copies folded away and keeps the cheaper plan, `off` plans the graph as given.
    #[arg(long = "fold", default_value = "on", value_parser = ["on", "off"])]
    pub fold: String,
    /// Plan as the main job with the same `--plan-again` does: `on` plans a refusal, and a plan
    /// adding over 5% of a step, again on the outputs of first plans, `off` (the reports' default, where the main
    /// job's is `on`: a capacity or floor search meets many refusals, each planned again at
    /// the cost of up to six passes more) keeps one pass's refusal.
    #[arg(long = "plan-again", default_value = "off", value_parser = ["on", "off"])]
    pub plan_again: String,
    /// Plan as the main job with the same `--fold-tied` does: `on` also folds each shared
    /// weight's gradient (its rows scattered into the head's gradient instead of a table of
    /// zeros; not bit for bit).
    #[arg(long = "fold-tied", default_value = "off", value_parser = ["on", "off"])]
    pub fold_tied: String,
}

impl ReportArgs {
    /// How each plan is searched: the time limit, `--fold`, `--plan-again` and `--fold-tied`.
    pub fn search(&self) -> crate::reports::frontier::PlanSearch {
        crate::reports::frontier::PlanSearch {
            time_limit: std::time::Duration::from_secs_f64(self.time_limit),
            fold: self.fold == "on",
            plan_again: self.plan_again == "on",
            fold_tied: self.fold_tied == "on",
        }
    }

    /// The model flags, and the bare `--dim NAME`s (the dims to search).
    pub fn model_args(&self) -> Result<(ModelArgs, Vec<String>), String> {
        let mut dims = Vec::new();
        let mut bare = Vec::new();
        for d in &self.dims {
            if d.contains('=') {
                dims.push(dim_binding(d).map_err(|e| format!("--dim {e}"))?);
            } else if d.trim().is_empty() {
                return Err("--dim: no dim name".into());
            } else {
                bare.push(d.trim().to_string());
            }
        }
        Ok((
            ModelArgs {
                dims,
                training: self.training.clone(),
            },
            bare,
        ))
    }
}

#[derive(Args, Debug)]
pub struct FrontierArgs {
    pub model: PathBuf,
    /// Ceilings evenly spaced from no recompute down to the floor (at least 2; default 6).
    #[arg(long, conflicts_with = "ceilings", value_parser = clap::value_parser!(u32).range(2..=200))]
    pub points: Option<u32>,
    /// Ceilings to sweep, e.g. `95%,90%,80%` (of the no-recompute total) or sizes.
    #[arg(long, value_delimiter = ',', value_parser = Ceiling::parse, allow_hyphen_values = true)]
    pub ceilings: Vec<Ceiling>,
    /// Measure each plan's device total and step time on ONNX Runtime under the profile.
    #[arg(long)]
    pub validate: bool,
    /// What a recompute costs: `flops` (the op registry's count) or `profile` (ONNX Runtime's
    /// measured per-node medians under the profile, over --runs runs; points then state the
    /// added milliseconds and take the plan adding the least time).
    #[arg(long, default_value = "flops", value_parser = ["flops", "profile"])]
    pub cost: String,
    /// Output folder: frontier.json, frontier.svg, frontier.md.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub report: ReportArgs,
}

#[derive(Args, Debug)]
pub struct CapacityArgs {
    pub model: PathBuf,
    /// The device ceiling (a size, or a percentage of the footprint at the searched dim = 1).
    #[arg(long, value_parser = Ceiling::parse, allow_hyphen_values = true)]
    pub ceiling: Ceiling,
    /// The largest value searched.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub max: u64,
    /// Print the JSON instead of the Markdown summary.
    #[arg(long)]
    pub json: bool,
    /// Also write DIR/capacity.json and DIR/capacity.md.
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub report: ReportArgs,
}

#[derive(Args, Debug)]
pub struct BucketsArgs {
    /// The symbolic model (with --dim-map); or give --manifest.
    pub model: Option<PathBuf>,
    /// The trace: CSV with a header, or JSONL; one row per step.
    #[arg(long)]
    pub trace: PathBuf,
    /// The device ceiling every admitted bucket must fit (a size).
    #[arg(long, value_parser = Ceiling::parse, allow_hyphen_values = true)]
    pub ceiling: Ceiling,
    /// Output folder: manifest.json, buckets.json, buckets.md, a model and receipt per planned bucket.
    #[arg(long)]
    pub out: PathBuf,
    /// Which trace column binds which dim: `seq=max_seq_len,batch=microbatch_size`.
    #[arg(long = "dim-map")]
    pub dim_map: Option<String>,
    /// One static model per bucket: `{"key": COLUMN, "models": [{"up_to": N, "model": PATH,
    /// "dims": {..}}]}` (`dims` optional: bindings for a model with symbolic dims).
    #[arg(long, conflicts_with_all = ["model", "dim_map"])]
    pub manifest: Option<PathBuf>,
    /// The column buckets are cut on (default: the dim map's first column).
    #[arg(long)]
    pub by: Option<String>,
    /// Inclusive upper bounds of the buckets, e.g. `16,24`.
    #[arg(long, conflicts_with = "quantiles")]
    pub boundaries: Option<String>,
    /// Quantiles of the key column as upper bounds (default p50,p90,p99,max).
    #[arg(long)]
    pub quantiles: Option<String>,
    /// Keep this percentage of the ceiling free.
    #[arg(long, default_value_t = 0.0, value_parser = reserve, allow_hyphen_values = true)]
    pub reserve: f64,
    /// Measure every admitted bucket and replay every planned one on ONNX Runtime.
    #[arg(long)]
    pub validate: bool,
    /// Largest accepted regression of the trace's p50 step time, in percent.
    #[arg(long = "max-p50-regression", default_value_t = 2.0, value_parser = tolerance)]
    pub max_p50_regression: f64,
    /// Largest accepted regression of the trace's p99 step time, in percent.
    #[arg(long = "max-p99-regression", default_value_t = 5.0, value_parser = tolerance)]
    pub max_p99_regression: f64,
    #[command(flatten)]
    pub report: ReportArgs,
}

/// One `--dim NAME=VALUE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimBinding {
    pub name: String,
    pub value: u64,
}

fn dim_binding(s: &str) -> Result<DimBinding, String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=VALUE, e.g. --dim seq=4096"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{s}`: no dim name before `=`"));
    }
    let value = value.trim();
    if !value.chars().all(|c| c.is_ascii_digit()) || value.is_empty() {
        return Err(format!("`{s}`: `{value}` is not a positive integer"));
    }
    let v: u64 = value
        .parse()
        .map_err(|_| format!("`{s}`: `{value}` does not fit in 64 bits"))?;
    if v == 0 {
        return Err(format!("`{s}`: a dim must be at least 1"));
    }
    Ok(DimBinding {
        name: name.to_string(),
        value: v,
    })
}

/// A finite, non-NaN float (what `f64::from_str` accepts, `inf` and `NaN` refused).
fn finite(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("`{s}` is not a finite number"))
    }
}

fn tolerance(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if v < 0.0 {
        return Err(format!("`{s}`: a tolerance is at least 0"));
    }
    Ok(v)
}

fn reserve(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if !(0.0..100.0).contains(&v) {
        return Err(format!("`{s}`: the reserve is a percentage in [0, 100)"));
    }
    Ok(v)
}

/// The largest `--time-limit`, in seconds (11.6 days; `Duration` holds far more).
const MAX_TIME_LIMIT_S: f64 = 1e6;

fn time_limit(s: &str) -> Result<f64, String> {
    let v = finite(s)?;
    if !(v > 0.0 && v <= MAX_TIME_LIMIT_S) {
        return Err(format!(
            "`{s}`: the time limit is a number of seconds in (0, 1e6]"
        ));
    }
    Ok(v)
}

fn search_steps(s: &str) -> Result<usize, String> {
    s.trim()
        .replace('_', "")
        .parse()
        .map_err(|_| format!("`{s}`: the search budget is a whole number of schedule steps"))
}

fn runs(s: &str) -> Result<usize, String> {
    let v: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if v == 0 {
        return Err(format!("`{s}`: at least 1 timed run"));
    }
    Ok(v)
}

/// `--initial-chunk`: `budget`, `default`, or a size (`4MiB`, bytes) other than zero; as the
/// profile setting's value (`arena_budget`, `default`, bytes).
fn parse_initial_chunk(s: &str) -> Result<String, String> {
    match s {
        "budget" => Ok("arena_budget".into()),
        "default" => Ok("default".into()),
        _ => match crate::size::parse_size(s)? {
            0 => Err("the arena's first region must be at least 1 byte".into()),
            v if v > ckpt_ir::ort::MAX_INITIAL_CHUNK => Err(format!(
                "ORT's arena takes a first region of at most {} bytes (`initial_chunk_size_bytes` is a C int); larger budgets grow further regions after it",
                ckpt_ir::ort::MAX_INITIAL_CHUNK
            )),
            v => Ok(v.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_flags_are_range_checked() {
        assert_eq!(time_limit("0.05"), Ok(0.05));
        assert_eq!(time_limit("1e6"), Ok(1e6));
        for s in ["0", "-1", "1e19", "1e308", "inf", "NaN", "x", "1000001"] {
            assert!(time_limit(s).is_err(), "{s}");
        }
        assert_eq!(tolerance("0"), Ok(0.0));
        assert_eq!(tolerance("1e-5"), Ok(1e-5));
        for s in ["-1e-5", "nan", "inf", "-inf", ""] {
            assert!(tolerance(s).is_err(), "{s}");
        }
        assert_eq!(reserve("0"), Ok(0.0));
        assert_eq!(reserve("99.5"), Ok(99.5));
        for s in ["100", "-1", "nan", "1e3"] {
            assert!(reserve(s).is_err(), "{s}");
        }
        assert_eq!(runs("1"), Ok(1));
        for s in ["0", "-1", "1.5"] {
            assert!(runs(s).is_err(), "{s}");
        }
    }

    #[test]
    fn dim_bindings_parse_strictly() {
        assert_eq!(
            dim_binding(" seq = 4096 "),
            Ok(DimBinding {
                name: "seq".into(),
                value: 4096
            })
        );
        for (s, why) in [
            ("seq", "NAME=VALUE"),
            ("=4", "no dim name"),
            ("seq=0", "at least 1"),
            ("seq=-1", "not a positive integer"),
            ("seq=+1", "not a positive integer"),
            ("seq=1e3", "not a positive integer"),
            ("seq=", "not a positive integer"),
            ("seq=99999999999999999999", "64 bits"),
        ] {
            let e = dim_binding(s).expect_err(s);
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
