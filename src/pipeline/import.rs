//! The import stage: the flags checked, every file the run will write checked before any
//! work, the model read and hashed, its dims bound, its profile resolved, and the graph to
//! plan made (the model as given, or as ORT runs it at an offline level or with float16
//! Casts).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, Context};

use ckpt_planner::{AnalyseOptions, Analysis};

use crate::cli::{OptimizeArgs, RunArgs};
use crate::exit::Failure;
use crate::job::Ceiling;
use crate::model_io::{self, bindings as parse_bindings, load};
use crate::receipt::FileHash;

/// The model, ready to analyse.
pub struct Imported {
    pub model: PathBuf,
    /// The ceiling as given.
    pub ceiling: Ceiling,
    /// The model file's hash.
    pub hash: FileHash,
    /// Its external data files' hashes.
    pub data_hashes: Vec<FileHash>,
    /// How every graph of the job is analysed (its bindings; its profile: the one the graph
    /// is loaded at).
    pub options: AnalyseOptions,
    /// What values are validated against when the planned graph is not the one given.
    pub reference: Option<Reference>,
    /// When planning's time limit starts.
    pub planning_from: Instant,
}

/// What values are validated against when the planned graph is not the one given: the
/// original graph and the profile it runs online at (level basic, extended or all).
pub struct Reference {
    pub graph: ckpt_ir::Graph,
    pub profile: ckpt_ir::Profile,
}

/// Check the flags and every target, read, hash and bind the model, and make the graph to
/// plan (at level `disable`, with ORT's float16 Casts explicit).
pub fn import(args: &OptimizeArgs) -> Result<(Imported, ckpt_ir::Graph), Failure> {
    let model = args
        .model_path()
        .map_err(|e| Failure::input(anyhow!(e)))?
        .to_path_buf();
    let ceiling = args.ceiling().map_err(|e| Failure::input(anyhow!(e)))?;
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
    crate::progress::stage(format!("importing {}", model.display()));
    let input_bytes = std::fs::read(&model)
        .with_context(|| format!("reading {}", model.display()))
        .map_err(Failure::input)?;
    let graph = load(&model)?;
    let reads = match graph.dir() {
        Some(dir) => ckpt_ir::external_data_files(graph.model(), dir),
        None => Vec::new(),
    };
    check_targets(args, &model, &reads)?;
    let data_hashes = hash_files(&reads)?;
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
    let imported = Imported {
        hash: FileHash {
            path: model.display().to_string(),
            sha256: crate::receipt::sha256_hex(&input_bytes),
        },
        model,
        ceiling,
        data_hashes,
        options,
        reference,
        planning_from: Instant::now(),
    };
    Ok((imported, graph))
}

/// The graph to plan under the flags' profile: at level `disable` the model as given; at
/// basic, extended or all the graph ORT runs at that level (`ckpt_validate::offline`), with
/// `options` switched to the profile it is loaded at (`disable`, optimized offline) and the
/// original kept as the reference for validation.
pub fn graph_at_level(
    graph: ckpt_ir::Graph,
    bytes: &[u8],
    model: &Path,
    options: &mut AnalyseOptions,
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
pub fn original_at_level(
    original: ckpt_ir::Graph,
    path: &Path,
    recorded: &ckpt_ir::Profile,
    r: &RunArgs,
) -> Result<(ckpt_ir::Graph, Option<Reference>), Failure> {
    if recorded.offline_optimization_level.is_none() {
        return Ok((original, None));
    }
    let bytes = std::fs::read(path)
        .with_context(|| format!("reading {}", path.display()))
        .map_err(Failure::input)?;
    let mut options = AnalyseOptions {
        profile: ckpt_validate::offline::online_profile(recorded),
        ..AnalyseOptions::default()
    };
    graph_at_level(original, &bytes, path, &mut options, r)
}

/// Refuse a graph that computes no gradient: there is no training step to plan.
pub fn require_training_graph(a: &Analysis) -> Result<(), Failure> {
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

/// Check every file the run will write before any work ([`crate::targets`]): `-o` (or the
/// default output), its data file when the input has external data, `--receipt` and
/// `--receipt-md`.
fn check_targets(args: &OptimizeArgs, model: &Path, reads: &[PathBuf]) -> Result<(), Failure> {
    use crate::targets::{check, data_file_of, Target};
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| crate::job::default_output(model));
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

/// Each file's SHA-256, naming the file that could not be read.
fn hash_files(files: &[PathBuf]) -> Result<Vec<FileHash>, Failure> {
    files
        .iter()
        .map(|f| FileHash::of_file(f).with_context(|| format!("hashing {}", f.display())))
        .map(|r| r.map_err(Failure::input))
        .collect()
}
