//! What inference knows of a tensor ([`TensorType`]) and of a whole graph ([`Types`]):
//! written by [`super::infer`], read by shape and FLOP rules.

use crate::dtype::DType;
use crate::ids::{NodeId, TensorId};
use crate::shape::{Dim, Shape};

/// The inferred type of one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
    /// The elements, row-major, for small integer and bool tensors whose contents are
    /// known or computable from shapes (e.g. the output of `Shape`).
    pub value: Option<Vec<Dim>>,
}

/// Inferred types, indexed by tensor.
#[derive(Clone, Debug, Default)]
pub struct Types {
    pub(super) types: Vec<Option<TensorType>>,
    pub(super) warnings: Vec<String>,
    pub(super) from_value_info: Vec<NodeId>,
}

impl Types {
    /// Every tensor's type, indexed by tensor (`None`: untyped).
    pub fn into_vec(self) -> Vec<Option<TensorType>> {
        self.types
    }

    pub fn get(&self, t: TensorId) -> Option<&TensorType> {
        self.types.get(t.index()).and_then(|x| x.as_ref())
    }

    pub fn dtype(&self, t: TensorId) -> Option<DType> {
        self.get(t).map(|x| x.dtype)
    }

    pub fn shape(&self, t: TensorId) -> Option<&Shape> {
        self.get(t).map(|x| &x.shape)
    }

    /// Tracked elements of a small integer tensor.
    pub fn value(&self, t: TensorId) -> Option<&[Dim]> {
        self.get(t).and_then(|x| x.value.as_deref())
    }

    /// Every typed tensor with its type, in tensor order.
    pub fn iter(&self) -> impl Iterator<Item = (TensorId, &TensorType)> + '_ {
        self.types
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|t| (TensorId(i as u32), t)))
    }

    /// Assumptions inference had to make (undecidable broadcasts, slices assumed in range,
    /// dims it could not determine), each naming its node.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Nodes not in the registry, whose outputs were typed from value_info.
    pub fn from_value_info(&self) -> &[NodeId] {
        &self.from_value_info
    }
}
