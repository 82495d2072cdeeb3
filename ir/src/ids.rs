//! Typed ids. They print as in the text form: nodes `n7`, tensors `%7`.

use std::fmt;

/// A node of a [`crate::Graph`]. Stable across removals; never a petgraph index in the API.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) u32);

/// A tensor (value) of a [`crate::Graph`]: graph input, initializer or node output.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub(crate) u32);

impl NodeId {
    /// The dense index, for side tables indexed by node.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The id with dense index `i` (inverse of [`NodeId::index`]).
    pub fn from_index(i: usize) -> NodeId {
        NodeId(i as u32)
    }
}

impl TensorId {
    /// The dense index, for side tables indexed by tensor.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The id with dense index `i` (inverse of [`TensorId::index`]).
    pub fn from_index(i: usize) -> TensorId {
        TensorId(i as u32)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

impl fmt::Display for TensorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}
