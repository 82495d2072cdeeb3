//! What a shape rule or a FLOP rule sees of its node, and the helpers rules share
//! (numpy broadcasting on symbolic dims, axis normalisation, attribute access).

use std::cell::RefCell;

use crate::dtype::DType;
use crate::graph::{Graph, Node};
use crate::ids::NodeId;
use crate::shape::{Bindings, Dim, Shape, ShapeError};

use super::types::{TensorType, Types};
use super::value::int_of;

/// The node a shape rule is inferring, with its inputs' inferred types.
pub struct InferCtx<'a> {
    pub graph: &'a Graph,
    pub id: NodeId,
    pub node: &'a Node,
    /// The opset of the node's domain the model imports (the entry's range covers it).
    pub opset: i64,
    pub(crate) inputs: Vec<Option<TensorType>>,
    pub(crate) warnings: RefCell<Vec<String>>,
}

impl<'a> InferCtx<'a> {
    pub fn n_inputs(&self) -> usize {
        self.inputs.len()
    }

    pub fn n_outputs(&self) -> usize {
        self.node.outputs.len()
    }

    /// Whether input slot `i` is present.
    pub fn has(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(|t| t.is_some())
    }

    pub fn input(&self, i: usize) -> Result<&TensorType, String> {
        self.inputs
            .get(i)
            .and_then(|t| t.as_ref())
            .ok_or_else(|| format!("input {i} is missing"))
    }

    pub fn opt(&self, i: usize) -> Option<&TensorType> {
        self.inputs.get(i).and_then(|t| t.as_ref())
    }

    pub fn dtype(&self, i: usize) -> Result<DType, String> {
        Ok(self.input(i)?.dtype)
    }

    pub fn shape(&self, i: usize) -> Result<&Shape, String> {
        Ok(&self.input(i)?.shape)
    }

    pub fn rank(&self, i: usize) -> Result<usize, String> {
        Ok(self.input(i)?.shape.rank())
    }

    /// Symbolic elements of input `i`, when tracked.
    pub fn value(&self, i: usize) -> Option<&[Dim]> {
        self.opt(i).and_then(|t| t.value.as_deref())
    }

    /// Elements of input `i` when every one is a known integer.
    pub fn ints(&self, i: usize) -> Option<Vec<i64>> {
        self.value(i)?.iter().map(int_of).collect()
    }

    /// Like [`InferCtx::ints`], but an error naming the input when not constant.
    pub fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>, String> {
        self.ints(i).ok_or_else(|| {
            format!("input {i} ({what}) is not a constant or computable from shapes")
        })
    }

    pub fn attr_i(&self, name: &str) -> Option<i64> {
        self.node.attr_i(name)
    }

    pub fn attr_f(&self, name: &str) -> Option<f32> {
        self.node.attr_f(name)
    }

    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.node.attr(name).map(|a| a.ints.clone())
    }

    pub fn attr_s(&self, name: &str) -> Option<String> {
        self.node.attr_s(name)
    }

    /// Note an assumption the inference had to make (kept in [`Types::warnings`]).
    pub fn warn(&self, msg: String) {
        self.warnings.borrow_mut().push(msg);
    }

    /// Numpy broadcasting of input shapes (equal dims, 1 broadcasts). A known dim against a
    /// symbolic one, or two different symbols, cannot be decided: the known one (else the
    /// first) is taken and the assumption is noted.
    pub fn broadcast(&self, shapes: &[&Shape]) -> Result<Shape, String> {
        let rank = shapes.iter().map(|s| s.rank()).max().unwrap_or(0);
        let mut out = Vec::with_capacity(rank);
        for axis in 0..rank {
            let mut acc = Dim::Known(1);
            for s in shapes {
                let off = rank - s.rank();
                if axis < off {
                    continue;
                }
                let d = &s.dims()[axis - off];
                acc = self.broadcast_dim(&acc, d)?;
            }
            out.push(acc);
        }
        Ok(Shape(out))
    }

    fn broadcast_dim(&self, a: &Dim, b: &Dim) -> Result<Dim, String> {
        if a == b || *b == Dim::Known(1) {
            return Ok(a.clone());
        }
        if *a == Dim::Known(1) {
            return Ok(b.clone());
        }
        match (a.known(), b.known()) {
            (Some(x), Some(y)) => Err(format!("cannot broadcast dims {x} and {y}")),
            (Some(_), None) => {
                self.warn(format!("broadcast assumes {b} == {a}"));
                Ok(a.clone())
            }
            (None, Some(_)) => {
                self.warn(format!("broadcast assumes {a} == {b}"));
                Ok(b.clone())
            }
            (None, None) => {
                self.warn(format!("broadcast assumes {a} == {b}"));
                Ok(a.clone())
            }
        }
    }
}

/// `axis` in `[-rank, rank)` as an index.
pub(crate) fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

/// A typed output with no tracked value.
pub(crate) fn out(dtype: DType, shape: Shape) -> Option<TensorType> {
    Some(TensorType {
        dtype,
        shape,
        value: None,
    })
}

/// A typed output with tracked elements.
pub(crate) fn out_v(dtype: DType, shape: Shape, value: Option<Vec<Dim>>) -> Option<TensorType> {
    Some(TensorType {
        dtype,
        shape,
        value,
    })
}

/// Outputs whose shapes depend on data or on the outside (NonZero, optimizers, PythonOp):
/// their dtypes and shapes as value_info declares them, else an error.
pub(crate) fn declared(ctx: &InferCtx<'_>) -> Result<Vec<Option<TensorType>>, String> {
    ctx.node
        .outputs
        .iter()
        .map(|slot| {
            let Some(t) = slot else { return Ok(None) };
            let tensor = ctx.graph.tensor(*t);
            match (tensor.dtype, &tensor.shape) {
                (Some(d), Some(s)) => Ok(out(d, s.clone())),
                _ => Err(format!(
                    "output `{}` depends on data; give it a dtype and shape in value_info",
                    tensor.name
                )),
            }
        })
        .collect()
}

/// Why FLOPs could not be counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlopError {
    #[error("node {node} ({op}) is not in the op registry: no FLOP rule")]
    NotInRegistry { node: String, op: String },
    #[error("node {node}: tensor `{tensor}` has no inferred type")]
    Untyped { node: String, tensor: String },
    #[error("node {node}: {what} is absent")]
    Missing { node: String, what: String },
    #[error("node {node}: {source}")]
    Shape { node: String, source: ShapeError },
    #[error("node {node}: FLOP count overflows 64 bits")]
    Overflow { node: String },
}

/// What a FLOP rule sees: the node and the inferred types under bindings.
pub struct FlopCtx<'a> {
    pub graph: &'a Graph,
    pub id: NodeId,
    pub node: &'a Node,
    pub types: &'a Types,
    pub bindings: &'a Bindings,
}

impl<'a> FlopCtx<'a> {
    fn label(&self) -> String {
        self.node.display_name(self.id)
    }

    fn shape_of(&self, t: Option<crate::ids::TensorId>, what: String) -> Result<&Shape, FlopError> {
        let t = t.ok_or_else(|| FlopError::Missing {
            node: self.label(),
            what: what.clone(),
        })?;
        self.types.shape(t).ok_or_else(|| FlopError::Untyped {
            node: self.label(),
            tensor: self.graph.tensor(t).name.clone(),
        })
    }

    /// The symbolic shape of input `i`.
    pub fn in_shape(&self, i: usize) -> Result<&Shape, FlopError> {
        self.shape_of(
            self.node.inputs.get(i).copied().flatten(),
            format!("input {i}"),
        )
    }

    /// The symbolic shape of output `i`.
    pub fn out_shape(&self, i: usize) -> Result<&Shape, FlopError> {
        self.shape_of(
            self.node.outputs.get(i).copied().flatten(),
            format!("output {i}"),
        )
    }

    pub fn has_input(&self, i: usize) -> bool {
        self.node.inputs.get(i).is_some_and(|t| t.is_some())
    }

    /// Concrete dims of a shape under the bindings.
    pub fn dims(&self, s: &Shape) -> Result<Vec<u64>, FlopError> {
        s.eval(self.bindings).map_err(|e| FlopError::Shape {
            node: self.label(),
            source: e,
        })
    }

    pub fn numel(&self, s: &Shape) -> Result<u64, FlopError> {
        s.numel_under(self.bindings).map_err(|e| FlopError::Shape {
            node: self.label(),
            source: e,
        })
    }

    /// Checked sum of FLOP terms.
    pub fn sum(&self, terms: &[u64]) -> Result<u64, FlopError> {
        terms
            .iter()
            .try_fold(0u64, |acc, &t| acc.checked_add(t))
            .ok_or_else(|| FlopError::Overflow { node: self.label() })
    }

    /// Checked product of FLOP factors.
    pub fn product(&self, factors: &[u64]) -> Result<u64, FlopError> {
        factors
            .iter()
            .try_fold(1u64, |acc, &f| acc.checked_mul(f))
            .ok_or_else(|| FlopError::Overflow { node: self.label() })
    }
}
