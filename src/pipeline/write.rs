//! The write stage: the output staged under temporary names with its external data, read
//! back under the rules every input meets, hashed into the receipt; then the output, its data
//! file and the receipts published as one set ([`publish`]).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};

use ckpt_planner::Outcome;

use super::import::Imported;
use super::PlannedJob;
use crate::cli::OptimizeArgs;
use crate::exit::Failure;
use crate::job::Job;
use crate::receipt::{DataPlacement, FileHash, OutputData, Receipt};

/// An output staged for publishing, as read back from its temporary files.
pub struct Staged {
    /// Where it will be published.
    pub path: PathBuf,
    /// The model read back (the bytes validation runs).
    pub proto: ckpt_ir::onnx::ModelProto,
}

impl Staged {
    /// The folder its external data resolves against.
    pub fn dir(&self) -> PathBuf {
        folder_of(&self.path).to_path_buf()
    }
}

/// The folder an output's external data resolves against: its parent, or `.`.
fn folder_of(out: &Path) -> &Path {
    match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The profile the output records is one ORT offers: held outputs are offered in one region
/// only, and the planner holds the need under the largest first region ORT accepts
/// ([`ckpt_ir::Profile::arena_bound`]), so a plan that breaks this is an internal error.
pub fn check_profile(job: &Job, planned: &PlannedJob) -> Result<(), Failure> {
    let fixed = planned.before.ledger.fixed_bytes;
    let need = match &planned.outcome {
        Outcome::CannotFit(_) => return Ok(()),
        Outcome::AlreadyFits => planned.before.device.arena_bytes,
        Outcome::Rewritten(r) => r.after.device.arena_bytes,
    };
    job.recorded_profile(fixed)
        .one_region(need)
        .map_err(|e| Failure::internal(anyhow!(e)))
}

/// Stage the job's output: the rewrite (at `-o` or the default output), or the unchanged
/// graph with its profile recorded when `-o` is given; nothing when the ceiling cannot be met.
pub fn stage_output(
    args: &OptimizeArgs,
    job: &Job,
    input: &Imported,
    planned: &PlannedJob,
    staging: &mut ckpt_ir::Staging,
    receipt: &mut Receipt,
) -> Result<Option<Staged>, Failure> {
    crate::progress::stage("writing the output");
    let before = &planned.before;
    let (graph, out) = match &planned.outcome {
        Outcome::CannotFit(_) => return Ok(None),
        Outcome::AlreadyFits => {
            let Some(out) = &args.output else {
                return Ok(None);
            };
            let mut g = before.graph.clone();
            let metadata = ckpt_planner::recorded_metadata(
                &input.options.profile,
                job.ceiling,
                &before.ledger,
            );
            record_profile(&mut g, metadata)?;
            (std::borrow::Cow::Owned(g), out.clone())
        }
        Outcome::Rewritten(r) => (
            std::borrow::Cow::Borrowed(&r.after.graph),
            args.output
                .clone()
                .unwrap_or_else(|| crate::job::default_output(&input.model)),
        ),
    };
    let seed = args.seed_random_ops.then_some(args.run.seed);
    write_output(
        staging,
        receipt,
        before.graph.model(),
        &graph,
        &out,
        &input.model,
        seed,
    )?;
    let proto = read_back(staging, &out)?;
    Ok(Some(Staged { path: out, proto }))
}

/// Without `--validate` (whose runs load the output), ONNX Runtime loads the output as staged
/// before it is published, when a runtime is there, for what is `left` of the time limit
/// ([`ckpt_validate::loads`]). An output it refuses is never published: the input's fault
/// (exit 1) when it refuses the input, `model`, too, else an internal error (the input met
/// the rules the output is held to).
pub fn load_check(
    staged: &Staged,
    profile: &ckpt_ir::Profile,
    args: &OptimizeArgs,
    model: &Path,
    left: std::time::Duration,
) -> Result<ckpt_validate::loads::LoadCheck, Failure> {
    crate::progress::stage("loading the output on ONNX Runtime");
    let t0 = std::time::Instant::now();
    let label = staged.path.display().to_string();
    let cfg = ckpt_validate::memory::session_config(profile);
    let lib = args.run.ort_lib.as_deref();
    ckpt_validate::loads::load_check(&staged.proto, &label, Some(&staged.dir()), &cfg, lib, left)
        .map_err(|refused| {
            let left = left.saturating_sub(t0.elapsed());
            match input_refused(model, &cfg, lib, left) {
                Some(e) => Failure::input(anyhow::Error::new(e).context(format!(
                    "ONNX Runtime refuses {}, and the output planned from it",
                    model.display()
                ))),
                None => Failure::internal(refused),
            }
        })
}

/// ONNX Runtime's refusal of the input `model`, loaded as the output was (`None`: it loads,
/// or could not be tried in the time `left`).
fn input_refused(
    model: &Path,
    cfg: &ckpt_runtime::SessionConfig,
    lib: Option<&Path>,
    left: std::time::Duration,
) -> Option<ckpt_validate::ValidateError> {
    use ckpt_ir::Message;
    let bytes = std::fs::read(model).ok()?;
    let proto = ckpt_ir::onnx::ModelProto::decode(bytes.as_slice()).ok()?;
    let label = model.display().to_string();
    ckpt_validate::loads::load_check(&proto, &label, Some(folder_of(model)), cfg, lib, left).err()
}

/// Write `graph` to `out` (never over `model`) with its external data, into the receipt: its
/// hash, and where its data lives with each data file's hash. With `seed`, every random op
/// gets an explicit `seed` attribute first (`--seed-random-ops`).
fn write_output(
    staging: &mut ckpt_ir::Staging,
    receipt: &mut Receipt,
    original: &ckpt_ir::onnx::ModelProto,
    graph: &ckpt_ir::Graph,
    out: &Path,
    model: &Path,
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
        sha256: crate::receipt::sha256_hex(&written.bytes),
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

/// The output staged for `out`, read back from its temporary files, checked against ONNX's
/// rules ([`ckpt_ir::check_model_rules`]) and imported under the rules every input meets
/// (opsets, ops, attributes, initializer and external-data sizes): an output that breaks
/// them is never published, and is an internal error (the input met them). Returns the model
/// as read.
fn read_back(staging: &ckpt_ir::Staging, out: &Path) -> Result<ckpt_ir::onnx::ModelProto, Failure> {
    let proto = staging
        .read_back(out)
        .with_context(|| format!("reading back {}", out.display()))
        .map_err(Failure::input)?;
    let dir = folder_of(out);
    ckpt_ir::check_model_rules(&proto, Some(dir))
        .with_context(|| {
            format!(
                "the output staged for {} breaks ONNX's rules",
                out.display()
            )
        })
        .map_err(Failure::internal)?;
    ckpt_ir::import_model(proto.clone(), out, Some(dir))
        .with_context(|| format!("the output staged for {} does not read back", out.display()))
        .map_err(Failure::internal)?;
    Ok(proto)
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

/// Each file's SHA-256 as it will be published: a staged file's from its temporary name,
/// recorded under its own.
fn hash_staged(staging: &ckpt_ir::Staging, files: &[PathBuf]) -> Result<Vec<FileHash>, Failure> {
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

/// Stage the receipt (`--receipt`, `--receipt-md`) beside whatever `staging` holds (the
/// output and its data file) and publish them as one set.
pub fn publish(
    args: &OptimizeArgs,
    receipt: &Receipt,
    mut staging: ckpt_ir::Staging,
) -> Result<(), Failure> {
    crate::progress::finish();
    if let Some(path) = &args.receipt {
        let text = serde_json::to_string_pretty(receipt).map_err(Failure::internal)?;
        staging
            .stage(path, text.as_bytes(), args.model.as_deref())
            .with_context(|| format!("writing receipt {}", path.display()))
            .map_err(Failure::input)?;
    }
    if let Some(path) = &args.receipt_md {
        let md = crate::receipt::markdown::render(receipt);
        staging
            .stage(path, md.as_bytes(), args.model.as_deref())
            .with_context(|| format!("writing receipt summary {}", path.display()))
            .map_err(Failure::input)?;
    }
    staging
        .publish()
        .context("publishing the output, its data file and the receipts")
        .map_err(Failure::input)?;
    Ok(())
}
