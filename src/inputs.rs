//! Seeded inputs for every graph input, from its dtype and bound shape: floats from a
//! seeded normal (std 0.02 for parameters, 1 for data), integers inside the range their
//! consumers imply (`passes::inputs::int_range`), or as the user overrides them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};

use ckpt_ir::{Bindings, DType, Graph};
use ckpt_passes::inputs::int_range;
use ckpt_runtime::{derive_seed, generate, read_npy, Distribution, HostTensor};

/// What the user said about inputs.
#[derive(Clone, Debug, Default)]
pub struct InputOverrides {
    /// `--input NAME=file.npy`
    pub files: BTreeMap<String, PathBuf>,
    /// `--int-range NAME=LO:HI`
    pub ranges: BTreeMap<String, (i64, i64)>,
}

impl InputOverrides {
    /// Parse `--input NAME=FILE` and `--int-range NAME=LO:HI` flags.
    pub fn parse(inputs: &[String], ranges: &[String]) -> Result<InputOverrides> {
        let mut o = InputOverrides::default();
        for s in inputs {
            let (n, f) = s
                .split_once('=')
                .ok_or_else(|| anyhow!("--input `{s}`: expected NAME=file.npy"))?;
            o.files.insert(n.to_string(), PathBuf::from(f));
        }
        for s in ranges {
            let (n, r) = s
                .split_once('=')
                .ok_or_else(|| anyhow!("--int-range `{s}`: expected NAME=LO:HI"))?;
            let (lo, hi) = r
                .split_once(':')
                .ok_or_else(|| anyhow!("--int-range `{s}`: expected NAME=LO:HI"))?;
            let lo: i64 = lo
                .trim()
                .parse()
                .with_context(|| format!("--int-range `{s}`: LO"))?;
            let hi: i64 = hi
                .trim()
                .parse()
                .with_context(|| format!("--int-range `{s}`: HI"))?;
            if hi <= lo {
                bail!("--int-range `{s}`: HI must be greater than LO");
            }
            o.ranges.insert(n.to_string(), (lo, hi));
        }
        Ok(o)
    }
}

/// The runtime's name for an element type.
pub fn runtime_dtype(d: DType) -> Option<ckpt_runtime::DType> {
    use ckpt_runtime::DType as R;
    Some(match d {
        DType::F32 => R::F32,
        DType::F64 => R::F64,
        DType::F16 => R::F16,
        DType::BF16 => R::BF16,
        DType::I64 => R::I64,
        DType::I32 => R::I32,
        DType::I16 => R::I16,
        DType::I8 => R::I8,
        DType::U8 => R::U8,
        DType::U16 => R::U16,
        DType::U32 => R::U32,
        DType::U64 => R::U64,
        DType::Bool => R::Bool,
        _ => return None,
    })
}

/// One seeded tensor per graph input (initializers excluded), plus how each was made.
pub fn make_inputs(
    graph: &Graph,
    bindings: &Bindings,
    seed: u64,
    overrides: &InputOverrides,
    parameters: &[ckpt_ir::TensorId],
) -> Result<(Vec<HostTensor>, Vec<String>)> {
    let mut out = Vec::new();
    let mut how = Vec::new();
    for name in overrides.files.keys() {
        if !graph
            .inputs()
            .iter()
            .any(|&t| &graph.tensor(t).name == name)
        {
            bail!("--input {name}: the model has no input named `{name}`");
        }
    }
    for &t in graph.inputs() {
        let tensor = graph.tensor(t);
        if tensor.is_initializer() {
            continue;
        }
        let dtype = tensor
            .dtype
            .ok_or_else(|| anyhow!("input `{}` has no element type", tensor.name))?;
        let rdt = runtime_dtype(dtype).ok_or_else(|| {
            anyhow!(
                "input `{}`: element type {dtype} is not supported",
                tensor.name
            )
        })?;
        if let Some(path) = overrides.files.get(&tensor.name) {
            let h = read_npy(path, &tensor.name, Some(rdt))
                .with_context(|| format!("--input {}", tensor.name))?;
            out.push(h);
            how.push(format!("{}: from {}", tensor.name, path.display()));
            continue;
        }
        let shape = tensor
            .shape
            .as_ref()
            .ok_or_else(|| anyhow!("input `{}` has no shape", tensor.name))?;
        let dims: Vec<usize> = shape
            .eval(bindings)
            .with_context(|| format!("input `{}`", tensor.name))?
            .into_iter()
            .map(|d| d as usize)
            .collect();
        let (dist, why) = if dtype.is_float() {
            let std = if parameters.contains(&t) { 0.02 } else { 1.0 };
            (Distribution::Normal { std }, format!("normal(0, {std})"))
        } else if dtype == DType::Bool {
            (Distribution::Ones, "all true".to_string())
        } else if let Some(&(lo, hi)) = overrides.ranges.get(&tensor.name) {
            (
                Distribution::IntRange { lo, hi },
                format!("integers in [{lo}, {hi}) from --int-range"),
            )
        } else if let Some(r) = int_range(graph, t, bindings) {
            (
                Distribution::IntRange { lo: r.lo, hi: r.hi },
                format!("integers in [{}, {}): {}", r.lo, r.hi, r.why),
            )
        } else {
            bail!(
                "input `{}` ({dtype}): no consumer implies a valid range; give one with --int-range {}=LO:HI or --input {}=file.npy",
                tensor.name,
                tensor.name,
                tensor.name
            );
        };
        out.push(generate(
            &tensor.name,
            rdt,
            &dims,
            dist,
            derive_seed(seed, &tensor.name),
        )?);
        how.push(format!("{}: {why}", tensor.name));
    }
    Ok((out, how))
}
