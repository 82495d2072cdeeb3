//! Seeded inputs for every graph input, from its dtype and bound shape: floats from a
//! seeded normal (std 0.02 for parameters, 1 for data), integers inside the range their
//! consumers imply (`passes::inputs::int_range`), or as the user overrides them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ckpt_ir::{Bindings, DType, Graph};
use ckpt_passes::inputs::int_range;
use ckpt_runtime::{derive_seed, generate, read_npy, Distribution, HostTensor};

use crate::error::ValidateError;

type Result<T, E = ValidateError> = std::result::Result<T, E>;

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
                .ok_or_else(|| ValidateError::InputFlag { flag: s.clone() })?;
            o.files.insert(n.to_string(), PathBuf::from(f));
        }
        for s in ranges {
            let malformed = || ValidateError::IntRangeFlag { flag: s.clone() };
            let (n, r) = s.split_once('=').ok_or_else(malformed)?;
            let (lo, hi) = r.split_once(':').ok_or_else(malformed)?;
            let bound = |text: &str, bound| {
                text.trim()
                    .parse::<i64>()
                    .map_err(|source| ValidateError::IntRangeBound {
                        flag: s.clone(),
                        bound,
                        source,
                    })
            };
            let (lo, hi) = (bound(lo, "LO")?, bound(hi, "HI")?);
            if hi <= lo {
                return Err(ValidateError::IntRangeEmpty { flag: s.clone() });
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
            return Err(ValidateError::NoSuchInput { name: name.clone() });
        }
    }
    for &t in graph.inputs() {
        let tensor = graph.tensor(t);
        if tensor.is_initializer() {
            continue;
        }
        let dtype = tensor.dtype.ok_or_else(|| ValidateError::InputNoDtype {
            tensor: tensor.name.clone(),
        })?;
        let rdt = runtime_dtype(dtype).ok_or_else(|| ValidateError::InputDtype {
            tensor: tensor.name.clone(),
            dtype,
        })?;
        if let Some(path) = overrides.files.get(&tensor.name) {
            let h = read_npy(path, &tensor.name, Some(rdt)).map_err(|source| {
                ValidateError::ReadInput {
                    tensor: tensor.name.clone(),
                    source,
                }
            })?;
            out.push(h);
            how.push(format!("{}: from {}", tensor.name, path.display()));
            continue;
        }
        let shape = tensor
            .shape
            .as_ref()
            .ok_or_else(|| ValidateError::InputNoShape {
                tensor: tensor.name.clone(),
            })?;
        let dims: Vec<usize> = shape
            .eval(bindings)
            .map_err(|source| ValidateError::InputShape {
                tensor: tensor.name.clone(),
                source,
            })?
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
            return Err(ValidateError::InputRange {
                tensor: tensor.name.clone(),
                dtype,
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(inputs: &[&str], ranges: &[&str]) -> String {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        InputOverrides::parse(&own(inputs), &own(ranges))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn malformed_flags_are_named() {
        assert_eq!(
            refusal(&["x.npy"], &[]),
            "--input `x.npy`: expected NAME=file.npy"
        );
        assert_eq!(
            refusal(&[], &["ids=3"]),
            "--int-range `ids=3`: expected NAME=LO:HI"
        );
        assert_eq!(refusal(&[], &["ids=a:3"]), "--int-range `ids=a:3`: LO");
        assert_eq!(
            refusal(&[], &["ids=3:3"]),
            "--int-range `ids=3:3`: HI must be greater than LO"
        );
    }

    #[test]
    fn flags_parse() {
        let o = InputOverrides::parse(&["x=x.npy".into()], &["ids= 0:5".into()]).unwrap();
        assert_eq!(o.files["x"], PathBuf::from("x.npy"));
        assert_eq!(o.ranges["ids"], (0, 5));
    }
}
