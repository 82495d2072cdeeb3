//! The op registry: one table keyed by (domain, op type, opset range).
//!
//! Each [`OpDef`] gives output dtypes and shapes (symbolic, see [`infer`]), a FLOP cost
//! (constants in [`cost`]), the output that shares an input's buffer in ONNX Runtime's
//! CPU execution provider ([`alias`], [`may_inplace`]), the kernel's scratch
//! ([`kernel_scratch`]), and a recompute policy with its reason ([`policy`]); and the
//! facts other crates ask about an op: whether it exists only in ORT's training build
//! ([`training_only`]), is an optimizer step ([`optimizer_step`]), has optional trailing
//! outputs ([`optional_tail`]), passes an input's values through ([`pass_through`]),
//! indexes another input with an integer one ([`index_use`]), draws random numbers from a
//! `seed` attribute ([`seed_attr`]), or is folded into an initializer when ORT loads the
//! model ([`folded_at_load`]). The table is an allowlist: an op that is not in it is
//! [`Policy::Unknown`], never recomputed, and takes its shapes from value_info.
//!
//! One file per op family; [`registry`] concatenates them. Invariants: no two entries
//! of one (domain, op type) have overlapping opset ranges (tested), and every entry's
//! policy states a reason.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::graph::{Graph, ONNX_DOMAIN};
use crate::ids::{NodeId, TensorId};

mod contrib;
pub mod cost;
mod ctx;
mod elementwise;
mod infer;
pub mod kernels;
mod loss;
mod matmul;
mod normalization;
pub(crate) mod onnx_ops;
mod random;
mod reduction;
mod scratch;
mod shape_ops;
mod training;
mod types;
mod value;

pub use cost::flops;
pub use ctx::{FlopCtx, FlopError, InferCtx};
pub use infer::{infer, infer_into, infer_node, sanitized, source_type, InferError};
pub use scratch::{kernel_scratch, Scratch, ScratchCtx, ScratchFn};
pub use types::{TensorType, Types};
pub use value::{constant_f64, constant_i64, is_one_positive_zero, one_float};
pub(crate) use value::{decode, ConstData};

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

/// The type of a random op's `seed` attribute (ONNX's Random* ops take a float, Dropout
/// and ORT's dropouts an int).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedAttr {
    Int,
    Float,
}

/// What an optimizer-step op updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerStep {
    /// Adds input 1 (a gradient) into input 0 (the accumulation buffer).
    Accumulate,
    /// Updates parameters or state read from its other operands.
    Update,
}

/// How an op reads an integer input as positions into another input: what bounds the
/// values an integer graph input may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexUse {
    /// Input 1 indexes input 0 along the `axis` attribute (default 0): Gather,
    /// GatherElements, ScatterElements.
    Indices,
    /// Input 1 holds class labels: positions on axis 1 of input 0 (the losses).
    Labels,
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
    /// buffer's last reader and the sizes match (docs/design/ort-internals.md, rule 3.3).
    pub may_inplace: Option<(usize, usize)>,
    /// Temporaries the kernel takes from the arena during its step; `None`: none measured.
    pub scratch: Option<ScratchFn>,
    pub policy: PolicyRule,
    /// The kernel exists only in ONNX Runtime builds with training enabled
    /// (`orttraining/.../training_op_defs.cc`).
    pub training_only: bool,
    /// An optimizer step: updates parameters, optimizer state or gradient accumulators.
    pub optimizer_step: Option<OptimizerStep>,
    /// The outputs after the first are optional (the schema lets a node omit them).
    pub optional_tail: bool,
    /// Input slots whose values reach the outputs unchanged (reshaped, reordered, cast or
    /// padded, but not computed on).
    pub pass_through: &'static [usize],
    pub index_use: Option<IndexUse>,
    /// Draws random numbers seeded by a `seed` attribute of this type.
    pub seed: Option<SeedAttr>,
    /// ONNX Runtime turns the node into an initializer when it loads the model (it is
    /// never an execution step).
    pub folded_at_load: bool,
    /// With a `reduction` attribute other than `none`, ORT's CPU kernel combines updates into
    /// the same element from several intra-op threads without synchronisation.
    pub reduction_races: bool,
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
            scratch: None,
            policy: PolicyRule::Fixed(Policy::Recomputable),
            training_only: false,
            optimizer_step: None,
            optional_tail: false,
            pass_through: &[],
            index_use: None,
            seed: None,
            folded_at_load: false,
            reduction_races: false,
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

    pub(crate) fn scratch(mut self, rule: ScratchFn) -> OpDef {
        self.scratch = Some(rule);
        self
    }

    pub(crate) fn training(mut self) -> OpDef {
        self.training_only = true;
        self
    }

    pub(crate) fn optimizer_step(mut self, s: OptimizerStep) -> OpDef {
        self.optimizer_step = Some(s);
        self
    }

    pub(crate) fn optional_tail(mut self) -> OpDef {
        self.optional_tail = true;
        self
    }

    pub(crate) fn pass_through(mut self, slots: &'static [usize]) -> OpDef {
        self.pass_through = slots;
        self
    }

    pub(crate) fn index_use(mut self, u: IndexUse) -> OpDef {
        self.index_use = Some(u);
        self
    }

    pub(crate) fn seed(mut self, s: SeedAttr) -> OpDef {
        self.seed = Some(s);
        self
    }

    pub(crate) fn folded_at_load(mut self) -> OpDef {
        self.folded_at_load = true;
        self
    }

    pub(crate) fn reduction_races(mut self) -> OpDef {
        self.reduction_races = true;
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
        entries.extend(contrib::ops());
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
    let opset = graph.opset(&n.domain);
    let &(at, def) = n
        .def
        .get_or_init(|| (opset, lookup(&n.domain, &n.op_type, opset)));
    if at == opset {
        def
    } else {
        lookup(&n.domain, &n.op_type, opset)
    }
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
    let present = |v: &Vec<Option<TensorId>>, k: usize| v.get(k).is_some_and(|t| t.is_some());
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

/// Whether `domain::op_type` exists only in ONNX Runtime's training build. Ops not in the
/// registry follow ORT's naming: every com.microsoft `*Grad` kernel is a training kernel.
pub fn training_only(domain: &str, op_type: &str) -> bool {
    match lookup(domain, op_type, None) {
        Some(d) => d.training_only,
        None => domain == MS_DOMAIN && op_type.ends_with("Grad"),
    }
}

/// What kind of optimizer step the node is, if it is one.
pub fn optimizer_step(graph: &Graph, node: NodeId) -> Option<OptimizerStep> {
    op_def(graph, node)?.optimizer_step
}

/// Whether the node's outputs after the first are optional: a copy of it may omit the
/// ones nobody reads.
pub fn optional_tail(graph: &Graph, node: NodeId) -> bool {
    op_def(graph, node).is_some_and(|d| d.optional_tail)
}

/// Input slots of the node whose values reach its outputs unchanged (empty for ops not in
/// the registry).
pub fn pass_through(graph: &Graph, node: NodeId) -> &'static [usize] {
    op_def(graph, node).map_or(&[], |d| d.pass_through)
}

/// How the node reads an integer input as positions into another input, if it does.
pub fn index_use(graph: &Graph, node: NodeId) -> Option<IndexUse> {
    op_def(graph, node)?.index_use
}

/// The type of `domain::op_type`'s `seed` attribute when it is a random op (the newest
/// entry: seeds do not change type across opsets).
pub fn seed_attr(domain: &str, op_type: &str) -> Option<SeedAttr> {
    lookup(domain, op_type, None)?.seed
}

/// Whether ONNX Runtime seeds `domain::op_type`, when it has no `seed` attribute, from its
/// node's index in the graph: the ONNX Random* ops and Bernoulli/Multinomial (float seeds;
/// CPU kernels seed `GetRandomSeed() + node index`), so a node inserted before one changes
/// its draws. Dropouts (int seeds) draw from ORT's process-wide Philox generator in
/// execution order instead: their draws depend only on their order among themselves.
pub fn seeded_by_node_index(domain: &str, op_type: &str) -> bool {
    seed_attr(domain, op_type) == Some(SeedAttr::Float)
}

/// Whether ONNX Runtime folds the node into an initializer at load (`Constant`): it is
/// never an execution step.
pub fn folded_at_load(graph: &Graph, node: NodeId) -> bool {
    op_def(graph, node).is_some_and(|d| d.folded_at_load)
}

/// Why ONNX Runtime 1.31.1's CPU kernel of `node` computes wrong values when the session
/// splits it over more than one intra-op thread (to follow the op type), or `None`: the
/// entries marked `reduction_races` (ScatterND) with a `reduction`
/// adds (or multiplies, takes min or max) updates into the same element without
/// synchronisation when indices repeat, as an embedding's gradient does; measured 7% off
/// for 1024 updates into one row on 2 threads, exact on 1, and not fixed by
/// `session.use_deterministic_compute` (`docs/design/ort-internals.md` 2.7).
pub fn races_on_threads(graph: &Graph, node: NodeId) -> Option<&'static str> {
    let def = op_def(graph, node)?;
    let reduces = graph
        .node(node)
        .attr_s("reduction")
        .is_some_and(|r| r != "none");
    (def.reduction_races && reduces)
        .then_some("with a reduction races on repeated indices over several intra-op threads")
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
