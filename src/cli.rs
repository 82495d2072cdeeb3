//! Command-line surface: the main job (`ckpt-opt MODEL --ceiling SIZE`) and subcommands.

use std::path::PathBuf;

use anyhow::{anyhow, Context};

use clap::{Args, Parser, Subcommand};

use ckpt_ir::Bindings;

use crate::Failure;

#[derive(Parser, Debug)]
#[command(
    name = "ckpt-opt",
    version,
    about = "Fit an ONNX training graph under a memory ceiling by recomputing activations",
    args_conflicts_with_subcommands = true
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
    Inspect(InspectArgs),
    /// Print the graph in the stable text form.
    Print(PrintArgs),
    /// Import and export a model unchanged (a lossless round trip; for checks).
    Export(ExportArgs),
    /// Compare a rewritten graph with its original on ONNX Runtime (exit 3 on mismatch).
    Validate(ValidateArgs),
}

/// How to run graphs on ONNX Runtime.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Seed for inputs and random ops.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Feed an input from a .npy file: `--input NAME=file.npy` (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Range of an integer input when no consumer implies one: `--int-range NAME=LO:HI`.
    #[arg(long = "int-range", value_name = "NAME=LO:HI")]
    pub int_ranges: Vec<String>,
    /// Relative tolerance for float outputs (default by dtype: f32 1e-4, f16 1e-2, bf16 5e-2).
    #[arg(long)]
    pub rtol: Option<f64>,
    /// Absolute tolerance for float outputs (default by dtype: f32 1e-6, f16 1e-3, bf16 1e-2).
    #[arg(long)]
    pub atol: Option<f64>,
    /// The ONNX Runtime library to use (default: ORT_DYLIB_PATH, .venv, python3's onnxruntime).
    #[arg(long = "ort-lib")]
    pub ort_lib: Option<PathBuf>,
    /// Timed runs for p50/p95 (after 2 discarded warm-ups).
    #[arg(long, default_value_t = 5)]
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
    /// or it does not run in an arena capped at it.
    #[arg(long)]
    pub ceiling: Option<String>,
    #[command(flatten)]
    pub model_args: ModelArgs,
    #[command(flatten)]
    pub run: RunArgs,
    #[arg(long)]
    pub json: bool,
}

/// The deployment profile: how the model will be run, which decides what the device must hold.
#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Execution provider.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    pub provider: String,
    /// ORT graph optimization level of the deployment. Plans are made for `disable`: the graph
    /// ORT runs is then the graph that was planned (levels basic and above fuse and reorder).
    #[arg(long = "ort-opt-level", default_value = "disable", value_parser = ["disable", "basic", "extended", "all"])]
    pub ort_opt_level: String,
    /// ORT's memory pattern (`enable_mem_pattern`): from the second step on, one block of the
    /// first step's traced peak is allocated in the arena.
    #[arg(long = "mem-pattern", default_value = "off", value_parser = ["on", "off"])]
    pub mem_pattern: String,
    /// The arena's extend strategy.
    #[arg(long = "arena-extend", default_value = "kSameAsRequested", value_parser = ["kSameAsRequested", "kNextPowerOfTwo"])]
    pub arena_extend: String,
    /// The arena's first region (`initial_chunk_size_bytes`, ORT's default 1 MiB), e.g. `4MiB`.
    #[arg(long = "initial-chunk", value_name = "SIZE")]
    pub initial_chunk: Option<String>,
    /// What the caller holds between steps: `released` (outputs dropped or copied out before
    /// the next step) or `held` (`outs = sess.run(...)` in a loop keeps the previous outputs in
    /// the arena during the next step).
    #[arg(long = "caller-outputs", default_value = "released", value_parser = ["released", "held"])]
    pub caller_outputs: String,
    /// Consecutive steps of one session the device must hold (1-100).
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
}

impl ProfileArgs {
    /// The profile these flags select.
    pub fn profile(&self) -> Result<ckpt_ir::Profile, Failure> {
        let mut p = ckpt_ir::Profile::default();
        let set = |p: &mut ckpt_ir::Profile, k: &str, v: &str| {
            p.set(k, v).map_err(|e| Failure::input(anyhow!(e)))
        };
        set(&mut p, "execution_provider", &self.provider)?;
        set(&mut p, "graph_optimization_level", &self.ort_opt_level)?;
        set(
            &mut p,
            "enable_mem_pattern",
            if self.mem_pattern == "on" {
                "true"
            } else {
                "false"
            },
        )?;
        set(&mut p, "arena_extend_strategy", &self.arena_extend)?;
        set(&mut p, "caller_outputs", &self.caller_outputs)?;
        set(&mut p, "steps", &self.steps.to_string())?;
        if let Some(c) = &self.initial_chunk {
            let bytes = ckpt_opt::size::parse_size(c)
                .map_err(|e| Failure::input(anyhow!("--initial-chunk {e}")))?;
            set(&mut p, "initial_chunk_size_bytes", &bytes.to_string())?;
        }
        Ok(p)
    }
}

/// Options shared by every command that analyses a model.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Bind a symbolic dim, e.g. `--dim seq=4096` (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
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

impl ModelArgs {
    /// The analysis these flags ask for, with `bindings` already parsed.
    pub fn analyse_options(
        &self,
        bindings: &Bindings,
    ) -> Result<ckpt_opt::optimize::AnalyseOptions, Failure> {
        let (optimizer, optimizer_bits) = self.optimizer();
        Ok(ckpt_opt::optimize::AnalyseOptions {
            bindings: bindings.clone(),
            loss: self.loss.clone(),
            optimizer,
            optimizer_bits,
            profile: self.profile.profile()?,
        })
    }

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
    /// The memory ceiling, e.g. `69GiB`, `70GB`, `512MiB`, `1234`.
    #[arg(long)]
    pub ceiling: Option<String>,
    /// Output path (default: `<model>.ckpt.onnx` beside the input).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub model_args: ModelArgs,
    /// Keep this percentage of the ceiling free (allocator slack, other buffers).
    #[arg(long, default_value_t = 0.0)]
    pub reserve: f64,
    /// Solver time limit in seconds (the best plan found so far is returned, labelled).
    #[arg(long = "time-limit", default_value_t = 30.0)]
    pub time_limit: f64,
    /// Validate the rewritten graph against the original on ONNX Runtime.
    #[arg(long)]
    pub validate: bool,
    /// Write the receipt (JSON) here.
    #[arg(long)]
    pub receipt: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
    /// Emit JSON on stdout.
    #[arg(long)]
    pub json: bool,
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

/// `--dim NAME=VALUE` flags as bindings.
pub fn parse_bindings(dims: &[String]) -> Result<Bindings, Failure> {
    let mut b = Bindings::new();
    for d in dims {
        let (name, value) = d.split_once('=').ok_or_else(|| {
            Failure::input(anyhow!(
                "--dim `{d}`: expected NAME=VALUE, e.g. --dim seq=4096"
            ))
        })?;
        let v: u64 = value.trim().parse().map_err(|_| {
            Failure::input(anyhow!(
                "--dim `{d}`: `{value}` is not a non-negative integer"
            ))
        })?;
        b.insert(name.trim().to_string(), v);
    }
    Ok(b)
}

/// Import a model, naming the file in any error.
pub fn load(path: &std::path::Path) -> Result<ckpt_ir::Graph, Failure> {
    ckpt_ir::import_file(path)
        .with_context(|| format!("importing {}", path.display()))
        .map_err(Failure::input)
}

pub fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Some(Command::Inspect(a)) => crate::inspect::run(&a),
        Some(Command::Print(a)) => {
            let g = load(&a.model)?;
            print!("{}", ckpt_ir::print_graph(&g));
            Ok(())
        }
        Some(Command::Export(a)) => {
            let g = load(&a.model)?;
            ckpt_ir::write_atomic(&a.output, &ckpt_ir::export_bytes(&g), Some(&a.model))?;
            Ok(())
        }
        Some(Command::Validate(a)) => crate::main_job::run_validate(&a),
        None => crate::main_job::run(cli.optimize),
    }
}
