//! Contractions and windows: MatMul (numpy batching), Gemm, com.microsoft FusedMatMul,
//! Conv, pools. FLOPs count a multiply-add as 2: `2·batch·m·n·k`; Conv
//! `2·N·Cout·spatial·(Cin/g)·kernel` (+ bias); pools one per window element.

use crate::shape::{Dim, Shape};

use super::cost;
use super::ctx::{out, FlopCtx, FlopError, InferCtx};
use super::scratch::{Scratch, ScratchCtx};
use super::types::TensorType;
use super::value::int_of;
use super::{FlopRule, OpDef};

type Out = Result<Vec<Option<TensorType>>, String>;

/// Apply FusedMatMul's `transBatch` (move dim 0 to just before the matrix dims) and
/// `trans` (swap the last two) to a rank ≥ 2 shape.
fn transpose_operand(mut d: Vec<Dim>, trans_batch: bool, trans: bool) -> Vec<Dim> {
    let r = d.len();
    if trans_batch && r > 2 {
        let first = d.remove(0);
        d.insert(r - 2, first);
    }
    if trans && r >= 2 {
        d.swap(r - 2, r - 1);
    }
    d
}

/// The output shape and contraction dim of a batched matmul of `a` by `b` (numpy rules:
/// a 1-D operand is promoted and the promoted axis removed).
fn matmul_shape(ctx: &InferCtx<'_>, a: Vec<Dim>, b: Vec<Dim>) -> Result<(Shape, Dim), String> {
    if a.is_empty() || b.is_empty() {
        return Err("MatMul of a scalar".into());
    }
    let (a1, b1) = (a.len() == 1, b.len() == 1);
    let a = if a1 {
        vec![Dim::Known(1), a[0].clone()]
    } else {
        a
    };
    let b = if b1 {
        vec![b[0].clone(), Dim::Known(1)]
    } else {
        b
    };
    let (ra, rb) = (a.len(), b.len());
    let (m, ka) = (&a[ra - 2], &a[ra - 1]);
    let (kb, n) = (&b[rb - 2], &b[rb - 1]);
    if let (Some(x), Some(y)) = (ka.known(), kb.known()) {
        if x != y {
            return Err(format!("contraction dims differ: {x} vs {y}"));
        }
    } else if ka != kb {
        ctx.warn(format!("matmul assumes contraction dims {ka} == {kb}"));
    }
    let k = if ka.known().is_some() {
        ka.clone()
    } else {
        kb.clone()
    };
    let batch = ctx.broadcast(&[&Shape(a[..ra - 2].to_vec()), &Shape(b[..rb - 2].to_vec())])?;
    let mut dims = batch.0;
    if !a1 {
        dims.push(m.clone());
    }
    if !b1 {
        dims.push(n.clone());
    }
    Ok((Shape(dims), k))
}

fn matmul(ctx: &InferCtx<'_>) -> Out {
    let (s, _) = matmul_shape(ctx, ctx.shape(0)?.0.clone(), ctx.shape(1)?.0.clone())?;
    Ok(vec![out(ctx.dtype(0)?, s)])
}

fn fused_operands(ctx: &InferCtx<'_>) -> Result<(Vec<Dim>, Vec<Dim>), String> {
    let flag = |n: &str| ctx.attr_i(n).unwrap_or(0) != 0;
    let a = ctx.shape(0)?.0.clone();
    let b = ctx.shape(1)?.0.clone();
    let a = if a.len() >= 2 {
        transpose_operand(a, flag("transBatchA"), flag("transA"))
    } else {
        a
    };
    let b = if b.len() >= 2 {
        transpose_operand(b, flag("transBatchB"), flag("transB"))
    } else {
        b
    };
    Ok((a, b))
}

fn fused_matmul(ctx: &InferCtx<'_>) -> Out {
    let (a, b) = fused_operands(ctx)?;
    let (s, _) = matmul_shape(ctx, a, b)?;
    Ok(vec![out(ctx.dtype(0)?, s)])
}

pub(super) fn gemm(ctx: &InferCtx<'_>) -> Out {
    let (a, b) = (ctx.shape(0)?, ctx.shape(1)?);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(format!("Gemm needs 2-D operands, got {a} and {b}"));
    }
    let m = if ctx.attr_i("transA").unwrap_or(0) != 0 {
        &a.0[1]
    } else {
        &a.0[0]
    };
    let n = if ctx.attr_i("transB").unwrap_or(0) != 0 {
        &b.0[0]
    } else {
        &b.0[1]
    };
    Ok(vec![out(ctx.dtype(0)?, Shape(vec![m.clone(), n.clone()]))])
}

/// One spatial output dim of a convolution or pooling window.
fn window_dim(
    ctx: &InferCtx<'_>,
    input: &Dim,
    k: u64,
    stride: u64,
    dil: u64,
    pads: (i64, i64),
    auto_pad: &str,
) -> Result<Dim, String> {
    let eff = dil * (k - 1) + 1;
    match auto_pad {
        "SAME_UPPER" | "SAME_LOWER" => {
            if stride == 1 {
                return Ok(input.clone());
            }
            match input.known() {
                Some(i) => Ok(Dim::Known(i.div_ceil(stride))),
                None => input
                    .add(&Dim::Known(stride - 1))
                    .div_exact(&Dim::Known(stride))
                    .ok_or_else(|| format!("cannot divide {input} by stride {stride}")),
            }
        }
        _ => {
            let (pb, pe) = if auto_pad == "VALID" { (0, 0) } else { pads };
            let span = input
                .add(&super::value::dim_of(pb + pe))
                .sub(&Dim::Known(eff));
            match int_of(&span) {
                Some(s) if s < 0 => Err(format!("window of {eff} does not fit input dim {input}")),
                Some(s) => Ok(Dim::Known(s as u64 / stride + 1)),
                None if stride == 1 => Ok(span.add(&Dim::Known(1))),
                None => {
                    ctx.warn(format!(
                        "strided window on symbolic dim {input}: assumes it divides"
                    ));
                    span.div_exact(&Dim::Known(stride))
                        .map(|d| d.add(&Dim::Known(1)))
                        .ok_or_else(|| format!("cannot divide {span} by stride {stride}"))
                }
            }
        }
    }
}

/// Spatial output dims of a window op (Conv, pools) over input `x` with `kernel`.
fn window_dims(ctx: &InferCtx<'_>, x: &Shape, kernel: &[u64]) -> Result<Vec<Dim>, String> {
    let sp = x.rank() - 2;
    if kernel.len() != sp {
        return Err(format!("kernel {kernel:?} does not fit input {x}"));
    }
    let strides = ctx
        .attr_ints("strides")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| vec![1; sp]);
    let dils = ctx
        .attr_ints("dilations")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| vec![1; sp]);
    let pads = ctx
        .attr_ints("pads")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| vec![0; 2 * sp]);
    let auto_pad = ctx.attr_s("auto_pad").unwrap_or_else(|| "NOTSET".into());
    if strides.len() != sp || dils.len() != sp || pads.len() != 2 * sp {
        return Err(format!(
            "strides {strides:?}, dilations {dils:?} or pads {pads:?} do not fit {sp} spatial dims"
        ));
    }
    if kernel.contains(&0) || strides.iter().chain(&dils).any(|&v| v < 1) {
        return Err(format!(
            "kernel {kernel:?}, strides {strides:?} and dilations {dils:?} must be positive"
        ));
    }
    if ctx.attr_i("ceil_mode").unwrap_or(0) != 0 {
        return Err("ceil_mode is not supported".into());
    }
    (0..sp)
        .map(|i| {
            window_dim(
                ctx,
                &x.0[2 + i],
                kernel[i],
                strides[i] as u64,
                dils[i] as u64,
                (pads[i], pads[i + sp]),
                &auto_pad,
            )
        })
        .collect()
}

pub(super) fn conv(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.shape(0)?;
    let w = ctx.shape(1)?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(format!("Conv input {x} and weight {w} ranks do not fit"));
    }
    let kernel: Vec<u64> = match ctx.attr_ints("kernel_shape") {
        Some(k) if !k.is_empty() => k.iter().map(|&v| v as u64).collect(),
        _ => w.0[2..]
            .iter()
            .map(|d| {
                d.known()
                    .ok_or_else(|| format!("kernel dim {d} is symbolic"))
            })
            .collect::<Result<_, _>>()?,
    };
    let mut dims = vec![x.0[0].clone(), w.0[0].clone()];
    dims.extend(window_dims(ctx, x, &kernel)?);
    Ok(vec![out(ctx.dtype(0)?, Shape(dims))])
}

/// MLAS's per-thread working buffer of a segmented convolution, in floats
/// (`MLAS_CONV_WORKING_BUFFER_SIZE_PER_THREAD`).
const MLAS_CONV_BUFFER_PER_THREAD: u64 = 16384;
/// `MLAS_SGEMM_THREAD_COMPLEXITY`, `MLAS_MAXIMUM_THREAD_COUNT`, `MLAS_SGEMM_STRIDEN_THREAD_ALIGN`.
const MLAS_THREAD_COMPLEXITY: f64 = 65536.0;
const MLAS_MAX_THREADS: u64 = 16;
const MLAS_STRIDEN_ALIGN: u64 = 16;

/// Conv (2-D, float) takes MLAS's working buffer from the arena after its output
/// (`MlasConvPrepare`): none for a pointwise convolution (all strides 1, no padding,
/// 1×1 kernel), `OutputSize·K` floats for a full im2col when the filter count exceeds the
/// output size, else one fixed buffer per thread the GEMM is split over (the thread count from
/// the operation's complexity, capped by the session's intra-op threads).
pub(super) fn conv_scratch(ctx: &ScratchCtx<'_>) -> Scratch {
    let node = ctx.graph.node(ctx.id);
    let (Some((dt, x)), Some((_, w))) = (ctx.concrete(0), ctx.concrete(1)) else {
        return Scratch::default();
    };
    if dt != crate::dtype::DType::F32 || x.len() != 4 || w.len() != 4 {
        return Scratch::default();
    }
    let ints = |name: &str, default: i64, len: usize| {
        node.attr_ints(name)
            .filter(|v| v.len() == len)
            .map_or_else(|| vec![default; len], <[i64]>::to_vec)
    };
    let strides = ints("strides", 1, 2);
    let pads = ints("pads", 0, 4);
    let dils = ints("dilations", 1, 2);
    let group = node.attr_i("group").unwrap_or(1).max(1) as u64;
    let (kh, kw) = (w[2], w[3]);
    let out_dim = |i: usize, k: u64| -> u64 {
        let span = (k.saturating_sub(1)) * dils[i].max(1) as u64 + 1;
        let padded = x[2 + i] + pads[i].max(0) as u64 + pads[i + 2].max(0) as u64;
        if padded < span {
            0
        } else {
            (padded - span) / strides[i].max(1) as u64 + 1
        }
    };
    if node.attr_s("auto_pad").is_some_and(|p| p != "NOTSET") {
        return Scratch::default();
    }
    let output_size = out_dim(0, kh) * out_dim(1, kw);
    let in_channels = x[1] / group;
    let k = in_channels * kh * kw;
    let filters = w[0] / group;
    let pointwise =
        strides.iter().all(|&s| s == 1) && pads.iter().all(|&p| p == 0) && k == in_channels;
    if pointwise || output_size == 0 {
        return Scratch::default();
    }
    let floats = if filters > output_size {
        output_size * k
    } else {
        let complexity = filters as f64 * output_size as f64 * k as f64;
        let mut threads = if complexity < MLAS_THREAD_COMPLEXITY * MLAS_MAX_THREADS as f64 {
            (complexity / MLAS_THREAD_COMPLEXITY) as u64 + 1
        } else {
            MLAS_MAX_THREADS
        };
        threads = threads.min(u64::from(ctx.threads));
        let mut stride_n = output_size.div_ceil(threads);
        if threads > 1 {
            stride_n = stride_n.div_ceil(MLAS_STRIDEN_ALIGN) * MLAS_STRIDEN_ALIGN;
            if stride_n >= output_size {
                threads = 1;
            } else if stride_n * (threads - 1) >= output_size {
                threads -= 1;
            }
        }
        threads * MLAS_CONV_BUFFER_PER_THREAD
    };
    Scratch {
        before: Vec::new(),
        after: vec![floats.saturating_mul(4)],
    }
}

/// ConvTranspose: X [N, C, spatial…], W [C, M/group, k…] → [N, M, spatial…], each spatial
/// dim `output_shape[i]` when given, else `stride·(in−1) + output_padding + (k−1)·dilation
/// + 1 − pad_begin − pad_end` (`auto_pad` SAME_*: `in·stride`).
fn conv_transpose(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.shape(0)?;
    let w = ctx.shape(1)?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(format!(
            "ConvTranspose input {x} and weight {w} ranks do not fit"
        ));
    }
    let sp = x.rank() - 2;
    let group = ctx.attr_i("group").unwrap_or(1);
    if group < 1 {
        return Err(format!("group {group} must be positive"));
    }
    let ints = |name: &str, default: i64, len: usize| -> Result<Vec<i64>, String> {
        let v = ctx
            .attr_ints(name)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec![default; len]);
        if v.len() == len {
            Ok(v)
        } else {
            Err(format!("{name} {v:?} does not fit {sp} spatial dims"))
        }
    };
    let channels = match &w.0[1] {
        Dim::Known(m) => Dim::Known(m.saturating_mul(group as u64)),
        d if group == 1 => d.clone(),
        d => return Err(format!("output channels {d}×{group} are symbolic")),
    };
    let mut dims = vec![x.0[0].clone(), channels];
    if let Some(out_shape) = ctx.attr_ints("output_shape").filter(|v| !v.is_empty()) {
        let tail = &out_shape[out_shape.len().saturating_sub(sp)..];
        if tail.len() != sp || tail.iter().any(|&v| v < 0) {
            return Err(format!(
                "output_shape {out_shape:?} does not fit {sp} spatial dims"
            ));
        }
        dims.extend(tail.iter().map(|&v| Dim::Known(v as u64)));
        return Ok(vec![out(ctx.dtype(0)?, Shape(dims))]);
    }
    let kernel: Vec<i64> = match ctx.attr_ints("kernel_shape").filter(|k| !k.is_empty()) {
        Some(k) => k,
        None => w.0[2..]
            .iter()
            .map(|d| {
                d.known()
                    .map(|v| v as i64)
                    .ok_or_else(|| format!("kernel dim {d} is symbolic"))
            })
            .collect::<Result<_, _>>()?,
    };
    let strides = ints("strides", 1, sp)?;
    let dils = ints("dilations", 1, sp)?;
    let pads = ints("pads", 0, 2 * sp)?;
    let out_pad = ints("output_padding", 0, sp)?;
    let auto_pad = ctx.attr_s("auto_pad").unwrap_or_else(|| "NOTSET".into());
    if kernel.len() != sp || strides.iter().chain(&dils).chain(&kernel).any(|&v| v < 1) {
        return Err(format!(
            "kernel {kernel:?}, strides {strides:?} and dilations {dils:?} must be positive and fit {sp} spatial dims"
        ));
    }
    for i in 0..sp {
        let input = x.0[2 + i]
            .known()
            .ok_or_else(|| format!("spatial dim {} is symbolic", x.0[2 + i]))?
            as i64;
        let v = if auto_pad.starts_with("SAME") {
            input.saturating_mul(strides[i])
        } else {
            strides[i]
                .saturating_mul(input - 1)
                .saturating_add(out_pad[i])
                .saturating_add((kernel[i] - 1).saturating_mul(dils[i]) + 1)
                - pads[i]
                - pads[i + sp]
        };
        if v < 0 {
            return Err(format!("spatial dim {i} comes out negative ({v})"));
        }
        dims.push(Dim::Known(v as u64));
    }
    Ok(vec![out(ctx.dtype(0)?, Shape(dims))])
}

/// ConvTranspose: every input element is scattered through the kernel into M/group output
/// channels: 2·|X|·(M/group)·|k| (+ bias per output element).
fn conv_transpose_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let x = ctx.numel(ctx.in_shape(0)?)?;
    let w = ctx.dims(ctx.in_shape(1)?)?; // [C, M/g, k…]
    let per_in = ctx.product(w.get(1..).unwrap_or_default())?;
    let mac = ctx.product(&[2, x, per_in])?;
    let bias = if ctx.has_input(2) {
        ctx.numel(ctx.out_shape(0)?)?
    } else {
        0
    };
    mac.checked_add(bias).ok_or(FlopError::Overflow {
        node: ctx.node.display_name(ctx.id),
    })
}

/// MaxPool / AveragePool / LpPool: [N, C, spatial…]; MaxPool's optional indices are i64.
fn pool(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.shape(0)?;
    if x.rank() < 3 {
        return Err(format!("pool input {x} needs rank ≥ 3"));
    }
    let kernel: Vec<u64> = ctx
        .attr_ints("kernel_shape")
        .ok_or("no kernel_shape")?
        .iter()
        .map(|&v| v as u64)
        .collect();
    let mut dims = vec![x.0[0].clone(), x.0[1].clone()];
    dims.extend(window_dims(ctx, x, &kernel)?);
    let s = Shape(dims);
    Ok(vec![
        out(ctx.dtype(0)?, s.clone()),
        out(crate::dtype::DType::I64, s),
    ])
}

/// GlobalAveragePool / GlobalMaxPool: spatial dims become 1.
fn global_pool(ctx: &InferCtx<'_>) -> Out {
    let x = ctx.shape(0)?;
    let dims =
        x.0.iter()
            .enumerate()
            .map(|(i, d)| if i < 2 { d.clone() } else { Dim::Known(1) })
            .collect();
    Ok(vec![out(ctx.dtype(0)?, Shape(dims))])
}

/// Pools: one op per input element of each window position ≈ output elements × kernel.
fn pool_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let y = ctx.numel(ctx.out_shape(0)?)?;
    let k: u64 = ctx
        .node
        .attr_ints("kernel_shape")
        .map_or(1, |k| k.iter().map(|&v| v.max(1) as u64).product());
    ctx.product(&[y, k, cost::POOL])
}

/// Parse an Einsum equation into per-operand index letters (an ellipsis is `.`, one entry
/// standing for any number of dims) and the output letters (implicit mode: the letters
/// used once, sorted, after the ellipsis).
fn einsum_terms(eq: &str, n_inputs: usize) -> Result<(Vec<Vec<char>>, Vec<char>), String> {
    let eq: String = eq
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .replace("...", ".");
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let ins: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    if ins.len() != n_inputs {
        return Err(format!(
            "equation has {} operands, node has {n_inputs} inputs",
            ins.len()
        ));
    }
    let out = match rhs {
        Some(r) => r.chars().collect(),
        None => {
            let mut once: Vec<char> = ins
                .iter()
                .flatten()
                .copied()
                .filter(|&c| c != '.' && ins.iter().flatten().filter(|&&d| d == c).count() == 1)
                .collect();
            once.sort();
            let mut o: Vec<char> = if ins.iter().flatten().any(|&c| c == '.') {
                vec!['.']
            } else {
                vec![]
            };
            o.extend(once);
            o
        }
    };
    Ok((ins, out))
}

fn einsum(ctx: &InferCtx<'_>) -> Out {
    let eq = ctx.attr_s("equation").ok_or("Einsum has no equation")?;
    let (ins, outs) = einsum_terms(&eq, ctx.n_inputs())?;
    let mut sizes: std::collections::HashMap<char, Dim> = Default::default();
    let mut ellipsis: Vec<Shape> = Vec::new();
    for (k, term) in ins.iter().enumerate() {
        let s = ctx.shape(k)?;
        let n_ell = s.rank() + 1 - term.len().min(s.rank() + 1);
        let mut dims = s.0.iter();
        for &c in term {
            if c == '.' {
                ellipsis.push(Shape(dims.by_ref().take(n_ell).cloned().collect()));
                continue;
            }
            let d = dims.next().ok_or_else(|| {
                format!(
                    "operand {k} has fewer dims than `{}`",
                    term.iter().collect::<String>()
                )
            })?;
            match sizes.get(&c) {
                Some(prev) if prev != d && *d != Dim::Known(1) => {
                    if *prev == Dim::Known(1) {
                        sizes.insert(c, d.clone());
                    } else if prev.known().is_some() && d.known().is_some() {
                        return Err(format!("index {c} is {prev} and {d}"));
                    } else {
                        ctx.warn(format!("einsum assumes index {c}: {prev} == {d}"));
                    }
                }
                Some(_) => {}
                None => {
                    sizes.insert(c, d.clone());
                }
            }
        }
    }
    let ell = ctx.broadcast(&ellipsis.iter().collect::<Vec<_>>())?;
    let mut dims = Vec::new();
    for c in outs {
        if c == '.' {
            dims.extend(ell.0.iter().cloned());
        } else {
            dims.push(
                sizes
                    .get(&c)
                    .cloned()
                    .ok_or_else(|| format!("output index {c} is not in any operand"))?,
            );
        }
    }
    Ok(vec![out(ctx.dtype(0)?, Shape(dims))])
}

/// Einsum: 2 × the product of every distinct index (and the broadcast ellipsis) — one
/// multiply-add per point of the joint index space.
fn einsum_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let label = || ctx.node.display_name(ctx.id);
    let eq = ctx.node.attr_s("equation").unwrap_or_default();
    let n = ctx.node.inputs.len();
    let (ins, _) = einsum_terms(&eq, n).map_err(|what| FlopError::Missing {
        node: label(),
        what,
    })?;
    let mut sizes: std::collections::HashMap<char, u64> = Default::default();
    let mut ell = 1u64;
    for (k, term) in ins.iter().enumerate() {
        let dims = ctx.dims(ctx.in_shape(k)?)?;
        let n_ell = dims.len() + 1 - term.len().min(dims.len() + 1);
        let mut it = dims.iter();
        for &c in term {
            if c == '.' {
                ell = ell.max(it.by_ref().take(n_ell).product());
            } else if let Some(&d) = it.next() {
                let e = sizes.entry(c).or_insert(d);
                *e = (*e).max(d);
            }
        }
    }
    let mut f: Vec<u64> = sizes.into_values().collect();
    f.extend([2, ell]);
    ctx.product(&f)
}

fn matmul_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let a = ctx.dims(ctx.in_shape(0)?)?;
    let trans_a = ctx.node.attr_i("transA").unwrap_or(0) != 0 && a.len() >= 2;
    let k = match (a.len(), trans_a) {
        (0, _) => 1,
        (r, false) => a[r - 1],
        (r, true) => a[r - 2],
    };
    let out = ctx.numel(ctx.out_shape(0)?)?;
    ctx.product(&[2, out, k])
}

pub(super) fn gemm_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let mnk2 = matmul_flops(ctx)?;
    let bias = if ctx.has_input(2) {
        ctx.numel(ctx.out_shape(0)?)?
    } else {
        0
    };
    mnk2.checked_add(bias).ok_or(FlopError::Overflow {
        node: ctx.node.display_name(ctx.id),
    })
}

pub(super) fn conv_flops(ctx: &FlopCtx<'_>) -> Result<u64, FlopError> {
    let y = ctx.numel(ctx.out_shape(0)?)?; // N·Cout·spatial
    let w = ctx.dims(ctx.in_shape(1)?)?; // [Cout, Cin/g, k…]
    let per_out = ctx.product(w.get(1..).unwrap_or_default())?;
    let mac = ctx.product(&[2, y, per_out])?;
    let bias = if ctx.has_input(2) { y } else { 0 };
    mac.checked_add(bias).ok_or(FlopError::Overflow {
        node: ctx.node.display_name(ctx.id),
    })
}

pub(super) fn ops() -> Vec<OpDef> {
    vec![
        OpDef::onnx("MatMul", 1, matmul, FlopRule::Custom(matmul_flops)),
        OpDef::onnx("Gemm", 1, gemm, FlopRule::Custom(gemm_flops)),
        OpDef::onnx("Conv", 1, conv, FlopRule::Custom(conv_flops)).scratch(conv_scratch),
        OpDef::onnx(
            "ConvTranspose",
            1,
            conv_transpose,
            FlopRule::Custom(conv_transpose_flops),
        )
        .scratch(super::scratch::conv_transpose_scratch),
        OpDef::onnx("MaxPool", 1, pool, FlopRule::Custom(pool_flops)).optional_tail(),
        OpDef::onnx("AveragePool", 1, pool, FlopRule::Custom(pool_flops)),
        OpDef::onnx("LpPool", 1, pool, FlopRule::Custom(pool_flops)),
        OpDef::onnx(
            "GlobalAveragePool",
            1,
            global_pool,
            FlopRule::PerInput(0, cost::REDUCTION),
        ),
        OpDef::onnx(
            "GlobalMaxPool",
            1,
            global_pool,
            FlopRule::PerInput(0, cost::REDUCTION),
        ),
        OpDef::onnx("Einsum", 12, einsum, FlopRule::Custom(einsum_flops)),
        OpDef::ms("FusedMatMul", fused_matmul, FlopRule::Custom(matmul_flops)),
    ]
}
