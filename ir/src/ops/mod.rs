//! The op registry: one table keyed by (domain, op type, opset range).
//!
//! Each [`OpDef`] gives output dtypes and shapes (symbolic, see [`infer`]), a FLOP cost
//! (constants in [`cost`]), the output that shares an input's buffer in ONNX Runtime's
//! CPU execution provider ([`alias`]), and a recompute policy with its reason
//! ([`policy`]). The table is an allowlist: an op that is not in it is
//! [`Policy::Unknown`], never recomputed, and takes its shapes from value_info.
//!
//! One file per op family; [`registry`] concatenates them. Invariants: no two entries
//! of one (domain, op type) have overlapping opset ranges (tested), and every entry's
//! policy states a reason.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::graph::{Graph, ONNX_DOMAIN};
use crate::ids::NodeId;

pub mod cost;
mod ctx;
mod elementwise;
mod infer;
mod loss;
mod matmul;
mod normalization;
mod random;
mod reduction;
mod shape_ops;
mod training;
mod value;

pub use cost::{flops, FlopError};
pub use ctx::{FlopCtx, InferCtx};
pub use infer::{infer, infer_into, InferError, TensorType, Types};
pub use value::{constant_f64, constant_i64};

/// The Microsoft contrib/training domain.
pub const MS_DOMAIN: &str = "com.microsoft";

/// Whether a node may be recomputed, and why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Pure and deterministic: recomputing gives the same bytes.
    Recomputable,
    /// Draws random numbers: a recompute would give another mask or sample; keep its outputs.
    Stochastic(&'static str),
    /// Writes a buffer, synchronises or talks to the outside: never recomputed.
    Stateful(&'static str),
    /// Not in the registry: never recomputed.
    Unknown,
}

impl Policy {
    pub fn is_recomputable(&self) -> bool {
        matches!(self, Policy::Recomputable)
    }

    /// The reason, for reports.
    pub fn reason(&self) -> &'static str {
        match self {
            Policy::Recomputable => "pure and deterministic",
            Policy::Stochastic(r) | Policy::Stateful(r) => r,
            Policy::Unknown => "not in the op registry: kept by default",
        }
    }
}

/// Computes a node's output types from its inputs' (one entry per output slot).
pub type InferFn = fn(&InferCtx<'_>) -> Result<Vec<Option<TensorType>>, String>;
/// Decides the policy of ops whose policy depends on attributes or constant inputs.
pub type PolicyFn = fn(&Graph, NodeId) -> Policy;
/// Counts FLOPs for ops without a per-element rule.
pub type FlopFn = fn(&FlopCtx<'_>) -> Result<u64, FlopError>;

/// How an entry's policy is decided.
#[derive(Clone, Copy, Debug)]
pub enum PolicyRule {
    Fixed(Policy),
    /// Depends on the node (e.g. Dropout's `training_mode` input).
    Dynamic(PolicyFn),
}

/// How an entry's FLOPs are counted.
#[derive(Clone, Copy, Debug)]
pub enum FlopRule {
    /// Data movement only (shape ops, gathers, copies).
    Zero,
    /// This many FLOPs per element of output 0.
    PerOutput(u64),
    /// This many FLOPs per element of the given input slot.
    PerInput(usize, u64),
    Custom(FlopFn),
}

/// One registry entry.
#[derive(Clone, Debug)]
pub struct OpDef {
    /// Normalised domain (`ai.onnx`, `com.microsoft`).
    pub domain: &'static str,
    pub op_type: &'static str,
    /// First opset version of `domain` this entry covers.
    pub since: i64,
    /// Last opset version covered (inclusive); `i64::MAX` when open.
    pub until: i64,
    pub infer: InferFn,
    pub flops: FlopRule,
    /// `(output slot, input slot)`: the output is the input's buffer in ONNX Runtime's CPU
    /// EP (a kernel registered with `.Alias(input, output)`), so it costs no new memory.
    pub alias: Option<(usize, usize)>,
    /// `(output slot, input slot)`: the kernel is registered `.MayInplace(input, output)`;
    /// ONNX Runtime's planner gives the output the input's buffer when this node is the
    /// buffer's last reader and the sizes match (docs/ort-internals.md, rule 3.3).
    pub may_inplace: Option<(usize, usize)>,
    pub policy: PolicyRule,
}

impl OpDef {
    /// A recomputable entry with no alias, open-ended from `since`.
    pub(crate) fn new(
        domain: &'static str,
        op_type: &'static str,
        since: i64,
        infer: InferFn,
        flops: FlopRule,
    ) -> OpDef {
        OpDef {
            domain,
            op_type,
            since,
            until: i64::MAX,
            infer,
            flops,
            alias: None,
            may_inplace: None,
            policy: PolicyRule::Fixed(Policy::Recomputable),
        }
    }

    pub(crate) fn onnx(
        op_type: &'static str,
        since: i64,
        infer: InferFn,
        flops: FlopRule,
    ) -> OpDef {
        OpDef::new(ONNX_DOMAIN, op_type, since, infer, flops)
    }

    pub(crate) fn ms(op_type: &'static str, infer: InferFn, flops: FlopRule) -> OpDef {
        OpDef::new(MS_DOMAIN, op_type, 1, infer, flops)
    }

    pub(crate) fn until(mut self, last: i64) -> OpDef {
        self.until = last;
        self
    }

    pub(crate) fn alias(mut self, out: usize, input: usize) -> OpDef {
        self.alias = Some((out, input));
        self
    }

    pub(crate) fn inplace(mut self, out: usize, input: usize) -> OpDef {
        self.may_inplace = Some((out, input));
        self
    }

    pub(crate) fn policy(mut self, p: Policy) -> OpDef {
        self.policy = PolicyRule::Fixed(p);
        self
    }

    pub(crate) fn dynamic(mut self, f: PolicyFn) -> OpDef {
        self.policy = PolicyRule::Dynamic(f);
        self
    }

    /// Whether this entry covers `opset`.
    pub fn covers(&self, opset: i64) -> bool {
        self.since <= opset && opset <= self.until
    }
}

struct Registry {
    entries: Vec<OpDef>,
    by_key: HashMap<(&'static str, &'static str), Vec<usize>>,
}

fn reg() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        let mut entries = Vec::new();
        entries.extend(elementwise::ops());
        entries.extend(matmul::ops());
        entries.extend(normalization::ops());
        entries.extend(reduction::ops());
        entries.extend(shape_ops::ops());
        entries.extend(random::ops());
        entries.extend(loss::ops());
        entries.extend(training::ops());
        let mut by_key: HashMap<(&'static str, &'static str), Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            by_key.entry((e.domain, e.op_type)).or_default().push(i);
        }
        Registry { entries, by_key }
    })
}

/// Every registry entry, family by family.
pub fn registry() -> &'static [OpDef] {
    &reg().entries
}

/// The entry for `domain::op_type` at `opset` (`None`: the newest entry, for a domain
/// the model does not import).
pub fn lookup(domain: &str, op_type: &str, opset: Option<i64>) -> Option<&'static OpDef> {
    let r = reg();
    let idx = r.by_key.get(&(domain, op_type))?;
    match opset {
        Some(v) => idx.iter().map(|&i| &r.entries[i]).find(|e| e.covers(v)),
        None => idx.iter().map(|&i| &r.entries[i]).max_by_key(|e| e.until),
    }
}

/// The entry for a node, using the model's opset import of the node's domain.
pub fn op_def(graph: &Graph, node: NodeId) -> Option<&'static OpDef> {
    let n = graph.node(node);
    lookup(&n.domain, &n.op_type, graph.opset(&n.domain))
}

/// The recompute policy of a node: [`Policy::Unknown`] for ops not in the registry.
pub fn policy(graph: &Graph, node: NodeId) -> Policy {
    match op_def(graph, node).map(|d| d.policy) {
        None => Policy::Unknown,
        Some(PolicyRule::Fixed(p)) => p,
        Some(PolicyRule::Dynamic(f)) => f(graph, node),
    }
}

fn present_pair(
    graph: &Graph,
    node: NodeId,
    pair: Option<(usize, usize)>,
) -> Option<(usize, usize)> {
    let (o, i) = pair?;
    let n = graph.node(node);
    let present =
        |v: &Vec<Option<crate::ids::TensorId>>, k: usize| v.get(k).is_some_and(|t| t.is_some());
    (present(&n.outputs, o) && present(&n.inputs, i)).then_some((o, i))
}

/// `(output slot, input slot)` when the node's output always shares the input's buffer in
/// ONNX Runtime's CPU EP; `None` when it allocates, or either slot is absent on this node.
pub fn alias(graph: &Graph, node: NodeId) -> Option<(usize, usize)> {
    present_pair(graph, node, op_def(graph, node)?.alias)
}

/// `(output slot, input slot)` when the node's kernel may run in place: ONNX Runtime reuses
/// the input's buffer iff this node is its last reader and the element sizes and shapes
/// match (the caller's memory model decides that).
pub fn may_inplace(graph: &Graph, node: NodeId) -> Option<(usize, usize)> {
    present_pair(graph, node, op_def(graph, node)?.may_inplace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_of_one_op_do_not_overlap() {
        let r = reg();
        for ((d, op), idx) in &r.by_key {
            for (a, &i) in idx.iter().enumerate() {
                let x = &r.entries[i];
                assert!(x.since <= x.until, "{d}::{op} has an empty range");
                for &j in &idx[a + 1..] {
                    let y = &r.entries[j];
                    assert!(
                        x.until < y.since || y.until < x.since,
                        "{d}::{op}: ranges {}..={} and {}..={} overlap",
                        x.since,
                        x.until,
                        y.since,
                        y.until
                    );
                }
            }
        }
    }

    #[test]
    fn every_non_recomputable_policy_has_a_reason() {
        for e in registry() {
            if let PolicyRule::Fixed(p @ (Policy::Stochastic(_) | Policy::Stateful(_))) = e.policy {
                assert!(!p.reason().is_empty(), "{}::{}", e.domain, e.op_type);
            }
        }
    }
}
