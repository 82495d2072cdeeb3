//! The receipt of the main job: one typed value, written as JSON (`--receipt`, `--json`), whose
//! JSON Schema is `docs/receipt.schema.json` (checked by `tests/receipt_schema.rs`), and as
//! Markdown ([`markdown`], `--receipt-md`).
//!
//! Rules:
//! - Every field is a typed value; the receipt is made in one place ([`build`]) from the
//!   planner's outcome, then the validation and the written output add theirs.
//! - Fields that do not apply to a status are absent (`null`), never made up.
//! - Field order is the JSON's key order: a receipt written twice from the same job is the
//!   same bytes (less the timings).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Serialize, Serializer};

use ckpt_validate::memory::MemoryCheck;
use ckpt_validate::paired::Validation;

pub mod build;
pub mod markdown;

/// How the job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The graph already fits; nothing was recomputed.
    AlreadyFits,
    /// Rewritten (and, with `--validate`, validated).
    Rewritten,
    /// No plan fits: see `diagnosis`.
    CeilingCannotBeMet,
    /// Validation ran and failed: see `reason`, `validation` and `memory`. Nothing written.
    ValidationFailed,
    /// `--validate` was asked for but could not run (no ONNX Runtime, no training ops, ORT
    /// refused the graph): see `reason`. Nothing written.
    NotValidated,
}

pub use ckpt_planner::{Diagnosis, DiagnosisKind};

/// A before/after pair.
#[derive(Clone, Copy, Debug, Serialize, JsonSchema)]
pub struct BeforeAfter<T> {
    pub before: T,
    pub after: T,
}

/// A file and its SHA-256.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct FileHash {
    pub path: String,
    pub sha256: String,
}

impl FileHash {
    /// The SHA-256 of the file at `path`, read in 1 MiB pieces (data files can be large).
    pub fn of_file(path: &std::path::Path) -> std::io::Result<FileHash> {
        use sha2::Digest;
        use std::io::Read;
        let mut f = std::fs::File::open(path)?;
        let mut h = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(FileHash {
            path: path.display().to_string(),
            sha256: hex(&h.finalize()),
        })
    }
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the output model's external data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DataPlacement {
    /// The output was written in its input's directory and references the input's data files.
    Referenced,
    /// The data the output uses was copied into one file beside it (`<output>.data`).
    Copied,
}

/// The output model's external data: where it lives and each file's hash.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OutputData {
    pub placement: DataPlacement,
    pub files: Vec<FileHash>,
}

/// How random ops (Dropout, RandomNormal, …) of the output are seeded when it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RandomOpSeeds {
    /// No seed is written; ORT derives them as for any model. Random ops are never cloned
    /// and keep their order among themselves, so Dropouts (ORT's global generator, in
    /// execution order) draw what the original's draw under the same `onnxruntime.set_seed`;
    /// Random*/Bernoulli/Multinomial seed from their node's index, and those whose index the
    /// rewrite shifted are listed in `random_ops_shifted`: their draws differ.
    OrtDerived,
    /// `--seed-random-ops`: every random op carries an explicit `seed` attribute, derived
    /// from `--seed` and the node's name, as validation sets them.
    Explicit,
}

/// The tool that wrote the receipt.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

/// The receipt.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Receipt {
    pub tool: Tool,
    /// The command line, as given.
    pub command_line: Vec<String>,
    /// The seed of inputs and random ops.
    pub seed: u64,
    pub model: FileHash,
    /// The input model's external data files, hashed (empty: it has none).
    pub model_data: Vec<FileHash>,
    pub bindings: BTreeMap<String, u64>,
    /// Graph input shapes under the bindings (`null` dims: not bound).
    pub input_shapes: BTreeMap<String, Vec<Option<u64>>>,
    /// The ceiling as given (`69GiB`, `90%` of the predicted device total).
    pub ceiling: String,
    pub ceiling_bytes: u64,
    pub reserve_percent: f64,
    /// The deployment profile: the `metadata_props` keys the output model records.
    pub profile: BTreeMap<String, String>,
    /// The profile in words.
    pub profile_description: String,
    /// Session config entries a run of the output needs.
    pub session_config: BTreeMap<String, String>,
    pub rng_policy: String,
    /// How the output's random ops are seeded.
    pub random_op_seeds: RandomOpSeeds,
    /// With `ort_derived`: the output's random ops that ORT seeds by node index whose index
    /// differs from the original's (their draws differ from the original's; empty with
    /// `explicit`, or when nothing was written).
    pub random_ops_shifted: Vec<String>,
    pub status: Status,
    /// Why validation failed or could not run, in one sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// `diagnosis.lowest_reachable_total_bytes`, for scripts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lowest_reachable_total_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<FileHash>,
    /// Without `--validate`: whether ONNX Runtime loaded the output as staged, before it was
    /// published (absent: validated, or nothing written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_load: Option<ckpt_validate::loads::LoadCheck>,
    /// The output's external data (absent: none, or nothing written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_data: Option<OutputData>,
    /// What the device must hold under the profile (fixed + arena need): the ceiling's number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_peak_bytes: Option<BeforeAfter<u64>>,
    /// The arena need alone (the smallest cap the profile's steps run in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_device_arena_bytes: Option<BeforeAfter<u64>>,
    /// In-use peak under the profile (uncapped replay, all steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_in_use_bytes: Option<BeforeAfter<u64>>,
    /// Diagnostic: one step on an always-splitting arena (live tensors rounded to 256 B).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_arena_peak_bytes: Option<BeforeAfter<u64>>,
    /// Diagnostic: one step on ORT's default session arena (in use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_default_arena_peak_bytes: Option<BeforeAfter<u64>>,
    /// Where the arena need is decided, before and after ([`ArenaBinding`]; `null` where no
    /// step's request decides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arena_binding: Option<BeforeAfter<Option<ArenaBinding>>>,
    /// The memory ledger (`ledger.before` / `ledger.after`).
    pub ledger: BeforeAfter<Ledger>,
    /// Per-phase peaks and the high-water mark of the simulated run (a rewrite).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<BeforeAfter<Trace>>,
    pub added_flops: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_added_flops: Option<u64>,
    pub nodes_cloned: usize,
    pub nodes_moved: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_flops: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_flops_percent: Option<f64>,
    /// What the planner minimised (`--cost`).
    pub cost_model: ckpt_validate::measured_cost::CostKind,
    /// `--cost profile`: what was measured, and the milliseconds the rewrite adds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_cost: Option<ckpt_validate::measured_cost::MeasuredCost>,
    /// Why each recompute exists, what it costs.
    pub segments: Vec<Segment>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<usize>,
    /// Activations never recomputed, with the reason.
    pub excluded: Vec<Excluded>,
    /// How the plan was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solver: Option<Solver>,
    /// The plan is of the graph with its loss head in chunks of rows (`--chunk-loss-head`):
    /// what was chunked, and how its outputs compare (absent: the head is as given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_head: Option<ckpt_planner::LossHeadChunks>,
    /// The plan is of the graph with its shared weights' gradients folded (`--fold-tied`):
    /// which, and how they compare (absent: none folded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tied_gradients: Option<ckpt_planner::TiedGradients>,
    /// The applied patch in the text form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// Paired values, the control, timings (`--validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "validation_schema")]
    pub validation: Option<Validation>,
    /// Device memory predicted against measured under the profile (`--validate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryCheck>,
    /// The ONNX Runtime that validated (`--validate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ort: Option<Ort>,
    pub seconds: f64,
}

/// The schema of `validation`: an object ([`ckpt_validate::paired::Validation`] holds the fields;
/// the validation defines no schema of its own).
fn validation_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// One line of the memory ledger (bytes the graph needs, by kind), as the receipt and
/// `inspect --json` state it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Ledger {
    pub parameters_count: u64,
    pub parameters_bytes: u64,
    pub gradients_bytes: u64,
    pub optimizer_state_bytes: u64,
    pub data_bytes: u64,
    pub saved_activations_bytes: u64,
    pub saved_activations_count: u64,
    /// The largest saved activations, largest first.
    pub largest_saved_activations: Vec<NamedBytes>,
    pub transient_at_peak_bytes: u64,
    /// One step on an always-splitting arena (live tensors rounded to 256 B).
    pub arena_peak_bytes: u64,
    /// The smallest arena the profile's steps run in.
    pub device_arena_bytes: u64,
    pub outputs_bytes: u64,
    pub initializer_bytes: u64,
    /// What loading takes from the arena before the first step.
    pub load_bytes: u64,
    /// What the caller feeds and holds outside the arena.
    pub caller_bytes: u64,
    /// The arena cap: what loading takes + the arena need.
    pub arena_cap_bytes: u64,
    pub fixed_bytes: u64,
    /// What the device must hold: the ceiling's number.
    pub total_bytes: u64,
    /// The largest line.
    pub dominant: String,
}

/// A tensor and its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct NamedBytes {
    pub name: String,
    pub bytes: u64,
}

/// Per-phase peaks and the high-water mark of one simulated run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Trace {
    /// Each phase's peak of live arena bytes, in phase order.
    pub phases: Vec<PhasePeak>,
    pub peak: Peak,
    /// Diagnostic: one step on ORT's default session arena (in use).
    pub default_arena_peak_bytes: u64,
}

/// The peak of live arena bytes within one phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct PhasePeak {
    /// `forward`, `loss`, `backward`, `optimizer` or `recompute`.
    pub phase: String,
    pub peak_bytes: u64,
    pub step: usize,
    /// The node run at that step.
    pub node: Option<String>,
}

/// The high-water mark of live arena bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Peak {
    pub bytes: u64,
    pub step: usize,
    pub node: Option<String>,
    /// The node's op (`domain::Op` outside the default domain).
    pub op: Option<String>,
    pub phase: Option<String>,
    /// The largest tensors live there (at most 5), largest first.
    pub largest_live: Vec<LiveTensor>,
}

/// A tensor live at the high-water mark.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LiveTensor {
    pub tensor: String,
    pub bytes: u64,
    /// Its kind (`activation`, `parameter`, `gradient`, ...).
    pub kind: String,
}

/// One recompute of the plan: what it drops, what it recomputes, and why.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Segment {
    /// The plan the recompute belongs to: 0, the plan of the given graph; 1, the plan of that
    /// plan's output, planned again where one pass found no plan (`--plan-again`).
    pub pass: usize,
    pub activations_dropped: Vec<String>,
    pub bytes_saved: u64,
    /// Nodes cloned to recompute the activations (not those only moved).
    pub nodes_recomputed: Vec<String>,
    /// Nodes moved to run later (no FLOPs added).
    pub nodes_moved: Vec<String>,
    /// The op registry's FLOPs of the clones (with `--cost profile`, too).
    pub flops_added: u64,
    pub dropped_from_step: usize,
    pub rematerialised_at_step: Option<usize>,
    pub next_use_step: usize,
    /// The values the recompute reads that stay, each with why it stays.
    pub boundary: Vec<String>,
    pub why: String,
    /// `--cost profile`: the milliseconds the clones add (ONNX Runtime's measured node times).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ms_added: Option<f64>,
}

/// An activation the op policy never recomputes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Excluded {
    pub tensor: String,
    pub node: String,
    pub op: String,
    pub reason: String,
}

/// How the plan was found.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Solver {
    /// Who found the plan (`Ilp`, `Search`, `BlockCut`, `Greedy`, ...).
    #[serde(serialize_with = "debug_name")]
    #[schemars(with = "String")]
    pub method: ckpt_solver::Method,
    /// The method as a reader says it (`ILP, proven optimal`, `order moves only`, ...).
    pub label: String,
    /// How far the plan is from proven optimal (`Optimal`, `WithinGap`, `FeasibleOnTimeout`,
    /// `Heuristic`, `NoRecomputeNeeded`).
    #[serde(serialize_with = "debug_name")]
    #[schemars(with = "String")]
    pub status: ckpt_solver::Status,
    /// The plan's cost: added FLOPs (nanoseconds with `--cost profile`).
    pub objective: u64,
    pub bound: f64,
    pub gap: f64,
    pub seconds: f64,
    /// Why the ILP returned another method's plan instead of its own.
    #[serde(serialize_with = "debug_option")]
    #[schemars(with = "Option<String>")]
    pub fallback: Option<ckpt_solver::Fallback>,
    pub attempts: usize,
    /// The time limit stopped some part of the search: the plan is the best found by then.
    pub time_limit_hit: bool,
    /// The ILP's arena budget of the pass that found the plan: its effective ceiling less the
    /// fixed bytes and the profile's overhead.
    pub arena_ceiling_bytes: u64,
    /// The effective ceiling of the planning pass that found the plan: the ceiling's own, or
    /// a tighter rung's of the planner's ladder (a plan that fits a tighter ceiling fits this
    /// one).
    pub found_at_ceiling_bytes: u64,
    /// Rungs of the ladder below the ceiling that were planned.
    pub rungs_planned: usize,
    /// Where one pass found no plan and the plan at its lowest total was planned again
    /// (`--plan-again`): that first plan's device total. The method, status and ILP rounds
    /// here are the second pass's.
    pub planned_again_from_bytes: Option<u64>,
    /// The ceiling that first plan was planned at, a whole percent of the given graph's total:
    /// for a refusal, above the lowest total one pass found (or that total itself); for a plan
    /// one pass found adding over 5% of a step, above the ceiling.
    pub planned_again_at_ceiling_bytes: Option<u64>,
    pub ilp: Ilp,
}

/// What the ILP rounds did, whether or not their plan was used.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Ilp {
    pub rounds: Vec<IlpRound>,
    /// The plan is a round's.
    pub used: bool,
}

/// One ILP round.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum IlpRound {
    /// The ILP answered with a plan of no proven quality: the rounds stop.
    Unproven {
        round: usize,
        #[serde(serialize_with = "debug_name")]
        #[schemars(with = "String")]
        status: ckpt_solver::Status,
        seconds: f64,
    },
    /// The ILP found no plan (or proved there is none): the rounds stop.
    NoPlan { round: usize, error: String },
    /// A plan, simulated: the linear model's peak beside the simulator's.
    Simulated {
        round: usize,
        #[serde(serialize_with = "debug_name")]
        #[schemars(with = "String")]
        status: ckpt_solver::Status,
        objective: u64,
        seconds: f64,
        recomputed: usize,
        linear_model_peak_bytes: u64,
        simulated_peak_bytes: u64,
    },
}

pub use ckpt_validate::paired::Ort;

/// A solver enum as its variant's name (`Ilp`, `FeasibleOnTimeout`).
fn debug_name<T: std::fmt::Debug, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:?}"))
}

/// [`debug_name`] of an optional value (`null` when absent).
fn debug_option<T: std::fmt::Debug, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => debug_name(v, s),
        None => s.serialize_none(),
    }
}

/// The receipt's JSON Schema, as `docs/receipt.schema.json` holds it.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(Receipt);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// Where an arena need is decided (`ckpt_passes::device::binding`): between an arena the
/// profile's steps fail in and one 256 B larger that they run in, the request that fails and
/// the arena then. Not always the in-use peak: a request can fail with its bytes free, in
/// pieces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ArenaBinding {
    /// The arena the steps fail in, in bytes.
    pub arena_bytes: u64,
    /// The arena 256 B larger, which they run in: at most the arena need, and below it where
    /// the steps' running is not monotone in the cap (the memory pattern in kNextPowerOfTwo
    /// regions), so the need's bisection ended above an arena that runs.
    pub runs_in_bytes: u64,
    /// The step of the run whose request fails, and the node run there.
    pub step: usize,
    pub node: String,
    /// Which of the profile's runs (0: the first).
    pub run: usize,
    pub requested_bytes: u64,
    /// Bytes free in the arena then, and its largest free chunk.
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
    /// The request fails on the arena's layout: its bytes are free, not in one piece.
    pub layout_bound: bool,
}

/// The name of the node run at `step` of `a`'s run (empty past its end), for reports.
pub fn node_name(a: &ckpt_planner::Analysis, step: usize) -> String {
    ckpt_passes::memory::node_at(&a.sim, step)
        .map_or_else(String::new, |n| a.graph.node(n).name.clone())
}
