//! The negative log-likelihood's gradient without its one-hot table ([`fold_onehot_gradients`]).
//!
//! PyTorch's decomposition of `nll_loss_backward` followed by `_log_softmax_backward_data`,
//! as every exporter writes it, holds three logits-sized values besides the log-softmax: a
//! table of zeros with -1 scattered at each row's target (`S`), that table times the
//! per-row weights `W` (`M`), and `exp(log_softmax) * rowsum(M)` (`P`) before the result
//! `D = M - P`:
//!
//! ```text
//! S = ScatterElements(zeros[N,V], target[N,1], -1[N,1], axis=1)
//! M = Mul(S, W)                 W: [N,1] (the loss's gradient where the row counts, else 0)
//! R = ReduceSum(M, axes=[1], keepdims=1)
//! P = Mul(E, R)                 E: [N,V] (exp of the log-softmax)
//! D = Sub(M, P)
//! ```
//!
//! Each row of `M` holds one value, `-W` at the target, so `R = -W` and `D = E*W - W` at
//! the target, `E*W` elsewhere. The fold computes that with the log-softmax's gradient as the
//! only logits-sized value besides `E`:
//!
//! ```text
//! R = Mul(-1[N,1], W)          (the ReduceSum, substituted)
//! P = Mul(E, W)                (the Mul, substituted)
//! D = ScatterElements(P, target, R, axis=1, reduction=add)   (the Sub, substituted)
//! ```
//!
//! `S`, `M` and the zeros are removed. ONNX Runtime runs the scatter in place on `P`. The
//! values are the same bit for bit but for the sign of a zero: where `W` is +0 (a row the loss
//! ignores) the target's `-0` becomes `+0` (IEEE: `(-w) - e*(-w)` and `e*w + (-w)` round
//! alike, and `0 - e*(-w)` is `e*w`). A comparison within tolerances does not tell them apart.

use ckpt_ir::build::{attr_i, attr_s};
use ckpt_ir::{DType, Dim, Graph, NodeId, Patch, Substitute, TensorId, TensorRef};

use super::{cpu_takes, onnx_node, zero_fill};

/// The one-hot gradients of `graph` folded, as one patch labelled `label` (empty where there
/// is none; ONNX opset 16 on, where ScatterElements takes `reduction`, and where ONNX
/// Runtime's CPU ScatterElements takes the element type). See the module doc for the pattern
/// and what the fold computes; every value it removes must be read only inside the pattern
/// and be no graph output.
pub fn fold_onehot_gradients(graph: &Graph, label: &str) -> Patch {
    let mut patch = Patch::new(label);
    let Some(opset) = graph.opset(ckpt_ir::ONNX_DOMAIN).filter(|&v| v >= 16) else {
        return patch;
    };
    for &n in graph.nodes() {
        let Some(f) = onehot_gradient(graph, n) else {
            continue;
        };
        if !cpu_takes("ScatterElements", opset, f.dtype) {
            continue;
        }
        let existing = |t| Some(TensorRef::Existing(t));
        patch.substitutes.push(Substitute {
            node: f.reduce,
            op_type: "Mul".into(),
            attributes: Vec::new(),
            inputs: vec![existing(f.minus_ones), existing(f.weights)],
        });
        patch.substitutes.push(Substitute {
            node: f.product,
            op_type: "Mul".into(),
            attributes: Vec::new(),
            inputs: vec![existing(f.exp), existing(f.weights)],
        });
        patch.substitutes.push(Substitute {
            node: f.sub,
            op_type: "ScatterElements".into(),
            attributes: vec![attr_i("axis", 1), attr_s("reduction", "add")],
            inputs: vec![
                existing(f.product_out),
                existing(f.target),
                existing(f.reduce_out),
            ],
        });
        // Readers first: a removal must leave nothing reading what it removes.
        patch.removals.push(f.weighted);
        patch.removals.push(f.scatter);
        patch.removals.extend(f.zeros);
    }
    patch
}

/// One one-hot gradient to fold: the nodes of the module doc's pattern and the values the
/// substitutes read.
struct OneHotGradient {
    scatter: NodeId,
    /// The node writing the zeros, where the scatter is its only reader.
    zeros: Option<NodeId>,
    weighted: NodeId,
    reduce: NodeId,
    reduce_out: TensorId,
    product: NodeId,
    product_out: TensorId,
    sub: NodeId,
    target: TensorId,
    minus_ones: TensorId,
    weights: TensorId,
    exp: TensorId,
    dtype: DType,
}

/// The pattern whose result the `Sub` `n` writes, when it is one.
fn onehot_gradient(graph: &Graph, n: NodeId) -> Option<OneHotGradient> {
    let sub = onnx_node(graph, n, "Sub")?;
    let [Some(m), Some(p)] = sub.inputs[..] else {
        return None;
    };
    let weighted = graph.tensor(m).producer()?;
    let product = graph.tensor(p).producer()?;
    let (s, weights) = operands_of(graph, weighted, "Mul", |t| {
        is_written_by(graph, t, "ScatterElements")
    })?;
    let scatter = graph.tensor(s).producer()?;
    let (r, exp) = operands_of(graph, product, "Mul", |t| {
        is_written_by(graph, t, "ReduceSum")
    })?;
    let reduce = graph.tensor(r).producer()?;
    if graph.node(reduce).inputs.first().copied().flatten() != Some(m)
        || !reduces_axis_1(graph, reduce)
    {
        return None;
    }
    let sc = onnx_node(graph, scatter, "ScatterElements")?;
    let [Some(zeros_t), Some(target), Some(minus_ones)] = sc.inputs[..] else {
        return None;
    };
    if !matches!(sc.attr_i("axis"), Some(1) | Some(-1))
        || sc.attr_s("reduction").is_some_and(|r| r != "none")
    {
        return None;
    }
    // Each value the fold removes is read inside the pattern only; the rest are kept.
    let only_read_by = |t: TensorId, readers: &[NodeId]| {
        let tensor = graph.tensor(t);
        !tensor.is_output && {
            let mut c = tensor.consumers().to_vec();
            c.sort();
            c.dedup();
            let mut want = readers.to_vec();
            want.sort();
            c == want
        }
    };
    if !(only_read_by(s, &[weighted])
        && only_read_by(m, &[reduce, n])
        && only_read_by(r, &[product])
        && only_read_by(p, &[n]))
    {
        return None;
    }
    let shapes = Shapes::of(
        graph,
        [
            s,
            m,
            p,
            exp,
            target,
            minus_ones,
            weights,
            r,
            graph.node(n).outputs.first().copied().flatten()?,
        ],
    )?;
    let dtype = graph.tensor(s).dtype?;
    let same_type = [m, p, exp, minus_ones, weights, r]
        .iter()
        .all(|&t| graph.tensor(t).dtype == Some(dtype));
    if !same_type || !shapes.fit() || !zeros_of(graph, zeros_t) || !minus_ones_of(graph, minus_ones)
    {
        return None;
    }
    let zeros = graph
        .tensor(zeros_t)
        .producer()
        .filter(|_| only_read_by(zeros_t, &[scatter]));
    Some(OneHotGradient {
        scatter,
        zeros,
        weighted,
        reduce,
        reduce_out: r,
        product,
        product_out: p,
        sub: n,
        target,
        minus_ones,
        weights,
        exp,
        dtype,
    })
}

/// The shapes the pattern needs, in the order [`Shapes::of`] takes them.
struct Shapes {
    table: Vec<Dim>,
    weighted: Vec<Dim>,
    product: Vec<Dim>,
    exp: Vec<Dim>,
    target: Vec<Dim>,
    minus_ones: Vec<Dim>,
    weights: Vec<Dim>,
    reduced: Vec<Dim>,
    result: Vec<Dim>,
}

impl Shapes {
    fn of(graph: &Graph, [s, m, p, e, t, u, w, r, d]: [TensorId; 9]) -> Option<Shapes> {
        let dims = |t: TensorId| Some(graph.tensor(t).shape.as_ref()?.dims().to_vec());
        Some(Shapes {
            table: dims(s)?,
            weighted: dims(m)?,
            product: dims(p)?,
            exp: dims(e)?,
            target: dims(t)?,
            minus_ones: dims(u)?,
            weights: dims(w)?,
            reduced: dims(r)?,
            result: dims(d)?,
        })
    }

    /// A 2-D table `[N, V]` (the scatter's, its weighted copy's, `E`'s, `P`'s and the
    /// result's), the target, the -1s and the row sums `[N, 1]`, and weights that broadcast to
    /// `[N, 1]` without growing it: `[]`, `[1]`, `[1, 1]` or `[N, 1]`.
    fn fit(&self) -> bool {
        let one = Dim::Known(1);
        let rows = match &self.table[..] {
            [n, _] => n,
            _ => return false,
        };
        let column = [rows.clone(), one.clone()];
        let weights = match &self.weights[..] {
            [] => true,
            [d] => *d == one,
            [a, b] => (*a == one || a == rows) && *b == one,
            _ => false,
        };
        [&self.weighted, &self.product, &self.exp, &self.result]
            .iter()
            .all(|d| **d == self.table)
            && [&self.target, &self.minus_ones, &self.reduced]
                .iter()
                .all(|d| d[..] == column[..])
            && weights
    }
}

/// Whether `t` is written by an ONNX-domain `op`.
fn is_written_by(graph: &Graph, t: TensorId, op: &str) -> bool {
    graph
        .tensor(t)
        .producer()
        .is_some_and(|p| onnx_node(graph, p, op).is_some())
}

/// The two operands of the binary `op` node `n`, the one `first` picks first (either order).
fn operands_of(
    graph: &Graph,
    n: NodeId,
    op: &str,
    first: impl Fn(TensorId) -> bool,
) -> Option<(TensorId, TensorId)> {
    let node = onnx_node(graph, n, op)?;
    match node.inputs[..] {
        [Some(a), Some(b)] if first(a) => Some((a, b)),
        [Some(a), Some(b)] if first(b) => Some((b, a)),
        _ => None,
    }
}

/// Whether the ReduceSum `n` sums axis 1 (or -1) only, keeping it.
fn reduces_axis_1(graph: &Graph, n: NodeId) -> bool {
    let node = graph.node(n);
    if node.attr_i("keepdims").is_some_and(|k| k != 1) {
        return false;
    }
    let axes = match node.inputs.get(1).copied().flatten() {
        Some(t) => ckpt_ir::ops::constant_i64(graph, t),
        None => node.attr_ints("axes").map(<[i64]>::to_vec),
    };
    matches!(axes.as_deref(), Some([1]) | Some([-1]))
}

/// Whether `t` is a table of +0.0: a [`zero_fill`], or an `Expand` of a constant +0.0.
fn zeros_of(graph: &Graph, t: TensorId) -> bool {
    let Some(p) = graph.tensor(t).producer() else {
        return false;
    };
    if zero_fill(graph, p).is_some() {
        return true;
    }
    onnx_node(graph, p, "Expand")
        .and_then(|node| node.inputs.first().copied().flatten())
        .and_then(|c| ckpt_ir::ops::constant_f64(graph, c))
        .is_some_and(|v| !v.is_empty() && v.iter().all(|&x| x == 0.0 && x.is_sign_positive()))
}

/// Whether `t` is a `ConstantOfShape` of -1.
fn minus_ones_of(graph: &Graph, t: TensorId) -> bool {
    graph
        .tensor(t)
        .producer()
        .and_then(|p| onnx_node(graph, p, "ConstantOfShape"))
        .and_then(|node| node.attr_t("value"))
        .and_then(ckpt_ir::ops::one_float)
        == Some(-1.0)
}
