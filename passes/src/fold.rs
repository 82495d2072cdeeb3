//! Zero-FLOP folds of copies into the node that reads or writes them ([`fold`]), each
//! computing the same values bit for bit on ONNX Runtime's CPU provider (the one-hot
//! gradients but for the sign of a zero)
//! (`scripts/ort_probe/loss_head_probe.py`):
//! - a 2-D `Transpose` whose readers are `MatMul`s and `Gemm`s of 2-D operands and
//!   Transposes back: the products take it as the `transA`/`transB` of a `Gemm` that reads
//!   the operand itself, the Transposes back are dropped, and the transposed copy is never
//!   made ([`fold_transposes`]). Every weight gradient of a linear layer (`mm(t(dY), X)`) is
//!   such a product (the language-model head's copy is as large as the logits), and so is
//!   every forward `mm(X, t(W))`, whose copy of the weight is otherwise held to the backward;
//! - a slice's gradient scattered into a table of zeros becomes one `Pad`
//!   ([`fold_scattered_slices`]): no zeros, no transposed copies;
//! - the negative log-likelihood's gradient, a one-hot table of the targets times the loss's
//!   gradient less the softmax times its row sums, becomes the softmax times the loss's
//!   gradient with the targets' terms scattered in ([`fold_onehot_gradients`]): no one-hot
//!   table and no copy of it, and the same values but for the sign of a zero in rows the loss
//!   ignores.
//!
//! A shared weight's gradient summed from a table of zeros ([`fold_tied_gradients`]) is
//! folded too where asked: the same sum in another order, not bit for bit.

mod onehot;
mod tied;

pub use onehot::fold_onehot_gradients;
pub use tied::fold_tied_gradients;

use std::collections::{HashMap, HashSet};

use ckpt_ir::build::attr_i;
use ckpt_ir::ops::kernels::{KernelTable, Provider};
use ckpt_ir::{DType, Graph, NewConstant, NodeId, Patch, Rewire, Substitute, TensorId, TensorRef};

/// The transposed operands of `graph` folded, as one patch labelled `label` (empty when there
/// is none; ONNX opset 11 on, where a Gemm's bias is optional). A 2-D `Transpose` of a 2-D f32
/// or f64 value folds when every reader can do without the copy:
/// - a `MatMul` of two 2-D f32/f64 operands becomes a `Gemm` with `transA`/`transB` reading
///   the value itself (every weight gradient of a linear layer, `mm(t(dY), X)`, and every
///   forward `mm(X, t(W))`);
/// - a `Gemm` reading it as A or B flips its `transA`/`transB`;
/// - a `Transpose` back (the backward's `t(t(W))`, which is `W`) is dropped, and its readers
///   read the value itself.
///
/// A linear layer's transposed weight, read by its forward product and by the transpose back
/// its backward makes, is otherwise held from the forward to the backward: as large as the
/// weight.
pub fn fold_transposes(graph: &Graph, label: &str) -> Patch {
    let mut patch = Patch::new(label);
    if graph.opset(ckpt_ir::ONNX_DOMAIN).is_none_or(|v| v < 11) {
        return patch;
    }
    // Each folded Transpose's output, and each Transpose back's, maps to the value itself.
    let mut source: HashMap<TensorId, TensorId> = HashMap::new();
    let mut folded: HashSet<TensorId> = HashSet::new();
    for &n in graph.nodes() {
        let Some(FoldableTranspose { src, out, backs }) = foldable_transpose(graph, n) else {
            continue;
        };
        if source.contains_key(&out) {
            continue; // a Transpose back, dropped with the one before it
        }
        source.insert(out, src);
        folded.insert(out);
        // The Transposes back first: a removal must leave nothing reading what it removes.
        for (back, back_out) in backs {
            source.insert(back_out, src);
            patch.removals.push(back);
        }
        patch.removals.push(n);
    }
    let substituted = substitute_products(graph, &folded, &source, &mut patch);
    // Readers of a Transpose back that no substitute rewrites read the value itself.
    let removed: HashSet<NodeId> = patch.removals.iter().copied().collect();
    for &n in graph.nodes() {
        if substituted.contains(&n) || removed.contains(&n) {
            continue;
        }
        for (slot, input) in graph.node(n).inputs.iter().enumerate() {
            let Some(t) = *input else { continue };
            if let (false, Some(&src)) = (folded.contains(&t), source.get(&t)) {
                patch.rewires.push(Rewire {
                    node: n,
                    slot,
                    from: t,
                    to: TensorRef::Existing(src),
                });
            }
        }
    }
    patch
}

/// Each `MatMul` or `Gemm` reading a `folded` Transpose's output as A or B becomes a `Gemm`
/// that reads the value itself with its `transA`/`transB` flipped (every input through
/// `source`). Returns the nodes substituted.
fn substitute_products(
    graph: &Graph,
    folded: &HashSet<TensorId>,
    source: &HashMap<TensorId, TensorId>,
    patch: &mut Patch,
) -> HashSet<NodeId> {
    let mut substituted = HashSet::new();
    for &n in graph.nodes() {
        let node = graph.node(n);
        if node.domain != ckpt_ir::ONNX_DOMAIN
            || !matches!(node.op_type.as_str(), "MatMul" | "Gemm")
        {
            continue;
        }
        let flips: Vec<bool> = (0..2)
            .map(|s| {
                node.inputs
                    .get(s)
                    .copied()
                    .flatten()
                    .is_some_and(|t| folded.contains(&t))
            })
            .collect();
        if !flips.contains(&true) {
            continue;
        }
        let mut attributes: Vec<_> = node
            .attributes()
            .iter()
            .filter(|a| !matches!(a.name.as_deref(), Some("transA" | "transB")))
            .cloned()
            .collect();
        for (slot, name) in ["transA", "transB"].into_iter().enumerate() {
            if (node.attr_i(name).unwrap_or(0) != 0) != flips[slot] {
                attributes.push(attr_i(name, 1));
            }
        }
        let inputs = node
            .inputs
            .iter()
            .map(|i| i.map(|t| TensorRef::Existing(*source.get(&t).unwrap_or(&t))))
            .collect();
        patch.substitutes.push(Substitute {
            node: n,
            op_type: "Gemm".into(),
            attributes,
            inputs,
        });
        substituted.insert(n);
    }
    substituted
}

/// Whether `t` is a 2-D f32 or f64 value: what ONNX Runtime's CPU Gemm takes.
fn gemm_operand(graph: &Graph, t: TensorId) -> bool {
    let tensor = graph.tensor(t);
    matches!(tensor.dtype, Some(DType::F32 | DType::F64))
        && tensor.shape.as_ref().is_some_and(|s| s.rank() == 2)
}

/// The input and output of `n` when it is an ONNX `Transpose` swapping the two axes of a 2-D
/// f32/f64 value and its output is no graph output.
fn swap(graph: &Graph, n: NodeId) -> Option<(TensorId, TensorId)> {
    let node = graph.node(n);
    if node.domain != ckpt_ir::ONNX_DOMAIN || node.op_type != "Transpose" {
        return None;
    }
    let input = node.inputs.first().copied().flatten()?;
    let output = node.outputs.first().copied().flatten()?;
    let swaps = node.attr_ints("perm").is_none_or(|p| p == [1, 0]);
    (swaps && gemm_operand(graph, input) && !graph.tensor(output).is_output)
        .then_some((input, output))
}

/// A 2-D `Transpose` every reader of which can do without it ([`fold_transposes`]).
struct FoldableTranspose {
    /// The value it transposes.
    src: TensorId,
    /// Its output.
    out: TensorId,
    /// The Transposes back among its readers, with their outputs.
    backs: Vec<(NodeId, TensorId)>,
}

/// `n` as a [`FoldableTranspose`], when it is one.
fn foldable_transpose(graph: &Graph, n: NodeId) -> Option<FoldableTranspose> {
    let (src, out) = swap(graph, n)?;
    let readers = graph.tensor(out).consumers();
    let mut backs = Vec::new();
    for &r in readers {
        let reader = graph.node(r);
        let slots = reader.inputs.iter().filter(|&&i| i == Some(out)).count();
        let in_ab = reader.inputs.iter().take(2).any(|&i| i == Some(out));
        let takes = reader.domain == ckpt_ir::ONNX_DOMAIN
            && match reader.op_type.as_str() {
                "MatMul" => {
                    slots == 1
                        && reader.inputs.len() == 2
                        && reader
                            .inputs
                            .iter()
                            .flatten()
                            .all(|&t| gemm_operand(graph, t))
                }
                "Gemm" => slots == 1 && in_ab,
                "Transpose" => match swap(graph, r) {
                    // A Transpose read by a Transpose again is left as it is.
                    Some((_, back))
                        if graph
                            .tensor(back)
                            .consumers()
                            .iter()
                            .all(|&c| graph.node(c).op_type != "Transpose") =>
                    {
                        backs.push((r, back));
                        true
                    }
                    _ => false,
                },
                _ => false,
            };
        if !takes {
            return None;
        }
    }
    (!readers.is_empty()).then_some(FoldableTranspose { src, out, backs })
}

/// The folds of `graph` as one patch labelled `label`: the transposed operands
/// ([`fold_transposes`]), the scattered slices ([`fold_scattered_slices`]) and the one-hot
/// gradients ([`fold_onehot_gradients`]), each where it touches no node an earlier one does.
pub fn fold(graph: &Graph, label: &str) -> Patch {
    let mut patch = fold_transposes(graph, label);
    for more in [
        fold_scattered_slices(graph, label),
        fold_onehot_gradients(graph, label),
    ] {
        merge_apart(&mut patch, more);
    }
    patch
}

/// `more`'s constants, substitutes and removals added to `patch` where it touches no node
/// `patch` does; else `patch` unchanged.
pub fn merge_apart(patch: &mut Patch, more: Patch) {
    let taken: HashSet<NodeId> = touched(patch).collect();
    if !touched(&more).any(|n| taken.contains(&n)) {
        patch.constants.extend(more.constants);
        patch.substitutes.extend(more.substitutes);
        patch.removals.extend(more.removals);
    }
}

/// The nodes `patch` substitutes, rewires or removes.
fn touched(patch: &Patch) -> impl Iterator<Item = NodeId> + '_ {
    patch
        .substitutes
        .iter()
        .map(|s| s.node)
        .chain(patch.rewires.iter().map(|r| r.node))
        .chain(patch.removals.iter().copied())
}

/// A slice's gradient as exporters write it (`slice_scatter`): the gradient `x` written into a
/// table of zeros at a run of consecutive positions along one axis, by a `ScatterND` over the
/// table's first axis (the axis brought to the front by a `Transpose` of the zeros and of `x`,
/// and put back by a `Transpose` after, or with no Transposes where it is the first). One
/// `Pad` of `x` computes the same values bit for bit and needs no buffer besides its output
/// (`scripts/ort_probe/loss_head_probe.py`: the language-model head's 8.36 MB against 4.20 MB).
/// The patch substitutes a `Pad` for the node that writes the result, with its `pads` a new
/// constant, and removes the ScatterND, the Transposes and the zeros each fold leaves unread.
/// The zeros must be +0.0 (or integer 0) from a `ConstantOfShape` of a constant shape, the
/// positions a constant `[L, 1]` run `a, a+1, ..., a+L-1` inside the axis, `x` shaped as the
/// table but `L` along the axis, and ONNX Runtime's CPU `Pad` must take the element type.
pub fn fold_scattered_slices(graph: &Graph, label: &str) -> Patch {
    let mut patch = Patch::new(label);
    let Some(opset) = graph.opset(ckpt_ir::ONNX_DOMAIN).filter(|&v| v >= 11) else {
        return patch;
    };
    let mut folds = Vec::new();
    for &n in graph.nodes() {
        if let Some(f) = scattered_slice(graph, n, opset) {
            folds.push(f);
        }
    }
    // One constant per distinct pads, before the first Pad in file order that reads it.
    let mut by_pads: HashMap<Vec<i64>, usize> = HashMap::new();
    let mut removed = HashSet::new();
    for f in &folds {
        let c = *by_pads.entry(f.pads.clone()).or_insert_with(|| {
            let mut name = format!("{}.pads", graph.tensor(f.out).name);
            while graph.tensor_id(&name).is_some() {
                name.push('_');
            }
            patch.constants.push(NewConstant {
                name,
                value: i64_tensor(&f.pads),
                before: f.writer,
            });
            patch.constants.len() - 1
        });
        patch.substitutes.push(Substitute {
            node: f.writer,
            op_type: "Pad".into(),
            attributes: Vec::new(),
            inputs: vec![Some(TensorRef::Existing(f.x)), Some(TensorRef::Constant(c))],
        });
        removed.extend(f.scatter.iter().copied());
    }
    // The Transposes and zeros left unread once every fold is made: a node that becomes a
    // Pad reads only its `x` then.
    let kept: HashSet<TensorId> = folds.iter().map(|f| f.x).collect();
    let mut gone: HashSet<NodeId> = removed.iter().copied().collect();
    gone.extend(folds.iter().map(|f| f.writer));
    let candidates: Vec<NodeId> = folds
        .iter()
        .flat_map(|f| f.feeders.iter().copied())
        .collect();
    let mut grew = true;
    while grew {
        grew = false;
        for &c in &candidates {
            if !gone.contains(&c) && unread_once(graph, c, &gone, &kept) {
                removed.insert(c);
                gone.insert(c);
                grew = true;
            }
        }
    }
    let order = graph.file_positions();
    let mut removals: Vec<NodeId> = removed.into_iter().collect();
    removals.sort_by_key(|n| std::cmp::Reverse(order[n.index()]));
    patch.removals = removals;
    patch
}

/// One scattered slice to fold: the node whose output `out` the `Pad` writes, the ScatterND
/// when that is another node, the gradient `x`, the pads, and the nodes feeding the ScatterND
/// that may be left unread (the Transposes of `x` and of the zeros, the zeros).
struct ScatteredSlice {
    writer: NodeId,
    out: TensorId,
    scatter: Option<NodeId>,
    x: TensorId,
    pads: Vec<i64>,
    feeders: Vec<NodeId>,
}

/// Whether every output of `n` is read only by nodes in `gone`, is no graph output and none
/// of the `kept` values a Pad reads.
fn unread_once(graph: &Graph, n: NodeId, gone: &HashSet<NodeId>, kept: &HashSet<TensorId>) -> bool {
    graph.node(n).output_tensors().all(|t| {
        let tensor = graph.tensor(t);
        !tensor.is_output
            && !kept.contains(&t)
            && tensor.consumers().iter().all(|c| gone.contains(c))
    })
}

/// The scattered slice whose result node `n` writes (a Transpose back, or the ScatterND).
fn scattered_slice(graph: &Graph, n: NodeId, opset: i64) -> Option<ScatteredSlice> {
    let node = graph.node(n);
    let [Some(out)] = node.outputs[..] else {
        return None;
    };
    if node.domain != ckpt_ir::ONNX_DOMAIN {
        return None;
    }
    // The ScatterND, and the permutation the Transpose back undoes (identity without one).
    let (scatter, back) = match node.op_type.as_str() {
        "Transpose" => {
            let s = single_input(graph, n)?;
            let only = graph.tensor(s);
            if only.is_output || only.consumers() != [n] {
                return None;
            }
            (only.producer()?, Some(node.attr_ints("perm")?.to_vec()))
        }
        "ScatterND" => (n, None),
        _ => return None,
    };
    let s = onnx_node(graph, scatter, "ScatterND")?;
    if s.attr_s("reduction").is_some_and(|r| r != "none") {
        return None;
    }
    let [Some(data), Some(indices), Some(updates)] = s.inputs[..] else {
        return None;
    };
    let (zeros_t, zeros_feeder) = untransposed(graph, data, back.as_deref())?;
    let (x, x_feeder) = untransposed(graph, updates, back.as_deref())?;
    let zeros = graph.tensor(zeros_t).producer()?;
    let table = zero_table(graph, zeros)?;
    let dtype = graph.tensor(x).dtype?;
    if graph.tensor(zeros_t).dtype != Some(dtype) || !cpu_takes("Pad", opset, dtype) {
        return None;
    }
    // The ScatterND writes the first axis of the transposed table: the table's `perm[0]`.
    let axis = match zeros_feeder {
        Some(t) => graph.node(t).attr_ints("perm")?.first().copied()?,
        None => 0,
    };
    let axis = usize::try_from(axis).ok().filter(|&a| a < table.len())?;
    let (start, len) = run_of_positions(graph, indices)?;
    let x_shape: Vec<u64> = graph
        .tensor(x)
        .shape
        .as_ref()?
        .dims()
        .iter()
        .map(|d| d.known())
        .collect::<Option<_>>()?;
    let fits = start.checked_add(len).is_some_and(|end| end <= table[axis])
        && x_shape.len() == table.len()
        && x_shape
            .iter()
            .zip(&table)
            .enumerate()
            .all(|(i, (&xd, &td))| if i == axis { xd == len } else { xd == td });
    if !fits {
        return None;
    }
    let rank = table.len();
    let mut pads = vec![0i64; 2 * rank];
    pads[axis] = start as i64;
    pads[rank + axis] = (table[axis] - start - len) as i64;
    let feeders = [x_feeder, zeros_feeder, Some(zeros)]
        .into_iter()
        .flatten()
        .collect();
    Some(ScatteredSlice {
        writer: n,
        out,
        scatter: (scatter != n).then_some(scatter),
        x,
        pads,
        feeders,
    })
}

/// The only input of `n`.
fn single_input(graph: &Graph, n: NodeId) -> Option<TensorId> {
    match graph.node(n).inputs[..] {
        [Some(t)] => Some(t),
        _ => None,
    }
}

/// What `t` is before the Transpose `back` undoes, and that Transpose: with no `back`, `t`
/// itself; else `t` must be written by a Transpose whose `perm` `back` inverts.
fn untransposed(
    graph: &Graph,
    t: TensorId,
    back: Option<&[i64]>,
) -> Option<(TensorId, Option<NodeId>)> {
    let Some(back) = back else {
        return Some((t, None));
    };
    let p = graph.tensor(t).producer()?;
    let perm = onnx_node(graph, p, "Transpose")?.attr_ints("perm")?;
    let inverts = perm.len() == back.len()
        && perm.iter().enumerate().all(|(i, &p)| {
            usize::try_from(p)
                .ok()
                .and_then(|p| back.get(p))
                .is_some_and(|&b| b == i as i64)
        });
    inverts.then_some((single_input(graph, p)?, Some(p)))
}

/// The dims of the table of zeros `n` writes: a [`zero_fill`] of a constant shape.
fn zero_table(graph: &Graph, n: NodeId) -> Option<Vec<u64>> {
    zero_fill(graph, n)?;
    let shape = ckpt_ir::ops::constant_i64(graph, single_input(graph, n)?)?;
    shape.iter().map(|&d| u64::try_from(d).ok()).collect()
}

/// `n` when it is a `ConstantOfShape` whose value is +0.0 or an integer 0 (absent: f32 +0.0).
fn zero_fill(graph: &Graph, n: NodeId) -> Option<&ckpt_ir::Node> {
    onnx_node(graph, n, "ConstantOfShape").filter(|node| {
        node.attr_t("value")
            .is_none_or(ckpt_ir::ops::is_one_positive_zero)
    })
}

/// The ONNX-domain node `n` when its op is `op`.
fn onnx_node<'a>(graph: &'a Graph, n: NodeId, op: &str) -> Option<&'a ckpt_ir::Node> {
    let node = graph.node(n);
    (node.domain == ckpt_ir::ONNX_DOMAIN && node.op_type == op).then_some(node)
}

/// `(a, L)` when `indices` is a constant `[L, 1]` of `a, a+1, ..., a+L-1`, `a >= 0`, `L >= 1`.
fn run_of_positions(graph: &Graph, indices: TensorId) -> Option<(u64, u64)> {
    let shape = graph.tensor(indices).shape.as_ref()?;
    let dims: Vec<u64> = shape
        .dims()
        .iter()
        .map(|d| d.known())
        .collect::<Option<_>>()?;
    if dims.len() != 2 || dims[1] != 1 || dims[0] == 0 {
        return None;
    }
    let v = ckpt_ir::ops::constant_i64(graph, indices)?;
    let start = *v.first()?;
    let run = v.len() as u64 == dims[0]
        && start >= 0
        && v.iter()
            .enumerate()
            .all(|(i, &p)| i64::try_from(i).ok().and_then(|i| start.checked_add(i)) == Some(p));
    run.then_some((start as u64, dims[0]))
}

/// Whether ONNX Runtime's CPU kernel of the ONNX op `op` at `opset` takes `dtype` as its `T`
/// (the op registry's kernel table).
fn cpu_takes(op: &str, opset: i64, dtype: DType) -> bool {
    let Some(table) = KernelTable::of(Provider::Cpu, ckpt_ir::ort::ORT_VERSION) else {
        return false;
    };
    let Some(schema) = table.schema(ckpt_ir::ONNX_DOMAIN, op, opset) else {
        return false;
    };
    table.has_kernel_for(ckpt_ir::ONNX_DOMAIN, op, schema.since, &[("T", dtype)])
}

/// A 1-D i64 tensor of `values`.
pub(crate) fn i64_tensor(values: &[i64]) -> ckpt_ir::onnx::TensorProto {
    ckpt_ir::onnx::TensorProto {
        dims: vec![values.len() as i64],
        data_type: Some(DType::I64.code()),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}
