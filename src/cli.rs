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
}

/// Options shared by every command that analyses a model.
#[derive(Args, Debug, Clone, Default)]
pub struct ModelArgs {
    /// Bind a symbolic dim, e.g. `--dim seq=4096` (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// The loss output (default: the first floating-point scalar output).
    #[arg(long)]
    pub loss: Option<String>,
}

#[derive(Args, Debug, Default)]
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

/// `--dim NAME=VALUE` flags as bindings.
pub fn parse_bindings(dims: &[String]) -> Result<Bindings, Failure> {
    let mut b = Bindings::new();
    for d in dims {
        let (name, value) = d
            .split_once('=')
            .ok_or_else(|| Failure::input(anyhow!("--dim `{d}`: expected NAME=VALUE, e.g. --dim seq=4096")))?;
        let v: u64 = value
            .trim()
            .parse()
            .map_err(|_| Failure::input(anyhow!("--dim `{d}`: `{value}` is not a non-negative integer")))?;
        b.insert(name.trim().to_string(), v);
    }
    Ok(b)
}

/// Import a model, naming the file in any error.
pub fn load(path: &std::path::Path) -> Result<ckpt_ir::Graph, Failure> {
    ckpt_ir::import_file(path).with_context(|| format!("importing {}", path.display())).map_err(Failure::input)
}

pub fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Some(Command::Inspect(a)) => crate::inspect::run(&a),
        Some(Command::Print(a)) => {
            let g = load(&a.model)?;
            print!("{}", ckpt_ir::print_graph(&g));
            Ok(())
        }
        None => {
            let args = cli.optimize;
            let Some(_model) = args.model else {
                return Err(Failure::input(anyhow!("no model given: ckpt-opt MODEL --ceiling SIZE (see --help)")));
            };
            Err(Failure::input(anyhow!("the main job is not available yet")))
        }
    }
}
