//! A model and its `--dim` bindings, as every command loads them.
//!
//! Bindings are checked against the imported graph: a name must be a symbolic dim of the
//! model, given once; and the bound values must not contradict what shape inference relates:
//! a dim the file declares (`unk__3`, `batch_x_seq`) where inference derives an expression of
//! the inputs' dims (`batch*seq`) must equal it, and a broadcast that inference had to assume
//! (`batch*seq == batch_x_seq`) must hold. Inference that fails is reported by the analysis,
//! not here.

use std::collections::BTreeSet;

use anyhow::{anyhow, Context};

use ckpt_ir::ops::Types;
use ckpt_ir::{Bindings, Dim, Graph};

use crate::cli::DimBinding;
use crate::exit::Failure;

/// Import a model, naming the file in any error.
pub fn load(path: &std::path::Path) -> Result<Graph, Failure> {
    ckpt_ir::import_file(path)
        .with_context(|| format!("importing {}", path.display()))
        .map_err(Failure::input)
}

/// The symbolic dims of the graph's inputs: what `--dim` must bind, less what
/// [`derive_bindings`] derives (inference derives the rest).
pub fn required_dims(graph: &Graph) -> Vec<String> {
    let set: BTreeSet<String> = graph
        .inputs()
        .iter()
        .filter_map(|&t| graph.tensor(t).shape.as_ref())
        .flat_map(|s| s.symbols())
        .collect();
    set.into_iter().collect()
}

/// Every dim the graph's inputs need that `b` leaves unbound, named at once: the main job and
/// `validate` need every size before any work.
pub fn require_bound(graph: &Graph, b: &Bindings) -> Result<(), Failure> {
    let unbound: Vec<String> = required_dims(graph)
        .into_iter()
        .filter(|d| !b.contains_key(d))
        .collect();
    if unbound.is_empty() {
        return Ok(());
    }
    Err(Failure::input(anyhow!(
        "the model's inputs have {} unbound symbolic dim{}: {}; bind {} with {}",
        unbound.len(),
        if unbound.len() == 1 { "" } else { "s" },
        unbound.join(", "),
        if unbound.len() == 1 { "it" } else { "each" },
        unbound
            .iter()
            .map(|d| format!("--dim {d}=N"))
            .collect::<Vec<_>>()
            .join(" ")
    )))
}

/// The model's dims, for an error: the required ones, then how many inference derives.
fn dims_listing(graph: &Graph) -> String {
    let required = required_dims(graph);
    let derived = graph
        .symbols()
        .into_iter()
        .filter(|s| !required.contains(s))
        .count();
    let req = if required.is_empty() {
        "none required".to_string()
    } else {
        format!("required: {}", required.join(", "))
    };
    if derived == 0 {
        req
    } else {
        format!("{req}; {derived} more that inference derives from them (unk__…)")
    }
}

/// `--dim` flags as bindings, checked against `graph` (see the module doc).
pub fn bindings(dims: &[DimBinding], graph: &Graph) -> Result<Bindings, Failure> {
    let known = graph.symbols();
    let mut b = Bindings::new();
    for d in dims {
        if let Some(v) = b.get(&d.name) {
            return Err(Failure::input(anyhow!(
                "--dim {}: given twice ({0}={v} and {0}={}); bind each dim once",
                d.name,
                d.value
            )));
        }
        if !known.contains(&d.name) {
            return Err(Failure::input(if known.is_empty() {
                anyhow!(
                    "--dim {}={}: the model has no symbolic dims; drop --dim",
                    d.name,
                    d.value
                )
            } else {
                anyhow!(
                    "--dim {}={}: `{0}` is not a symbolic dim of the model ({})",
                    d.name,
                    d.value,
                    dims_listing(graph)
                )
            }));
        }
        b.insert(d.name.clone(), d.value);
    }
    let required = required_dims(graph);
    if b.is_empty() && required.is_empty() {
        return Ok(b);
    }
    // One inference serves the derivation and the check (one that fails is the analysis's).
    let Ok(types) = ckpt_ir::ops::infer(graph) else {
        return Ok(b);
    };
    derive_from(&types, &required, &mut b);
    if !b.is_empty() {
        check_relations(graph, &types, &b)?;
    }
    Ok(b)
}

/// The broadcasts inference had to assume, from its warnings: (the node, in words; the left
/// side; the right side), each side a dim as `Dim`'s `Display` prints it.
fn assumed_broadcasts(types: &Types) -> Vec<(&str, &str, &str)> {
    types
        .warnings()
        .iter()
        .filter_map(|w| {
            let (at, sides) = w.split_once(": broadcast assumes ")?;
            let (l, r) = sides.split_once(" == ")?;
            Some((at, l.trim(), r.trim()))
        })
        .collect()
}

/// Bind the dims of the graph's inputs that `b` leaves unbound where inference relates them to
/// bound ones: a broadcast it assumed between an expression and a lone input dim
/// (`batch*seq == batch_x_seq`) gives that dim the expression's value. Repeated until nothing
/// more follows; a value of 1 (a broadcast, not an equality) derives nothing. Returns the
/// names bound.
pub fn derive_bindings(graph: &Graph, b: &mut Bindings) -> Vec<String> {
    let required = required_dims(graph);
    if required.iter().all(|d| b.contains_key(d)) {
        return Vec::new();
    }
    let Ok(types) = ckpt_ir::ops::infer(graph) else {
        return Vec::new();
    };
    derive_from(&types, &required, b)
}

/// [`derive_bindings`] on the graph's inferred `types`, for its `required` dims.
fn derive_from(types: &Types, required: &[String], b: &mut Bindings) -> Vec<String> {
    let relations = assumed_broadcasts(types);
    let mut derived = Vec::new();
    loop {
        let before = derived.len();
        for &(_, l, r) in &relations {
            for (symbol, expr) in [(r, l), (l, r)] {
                if !required.iter().any(|d| d == symbol) || b.contains_key(symbol) {
                    continue;
                }
                if let Some(v) = eval_printed(expr, b).and_then(|v| u64::try_from(v).ok()) {
                    if v > 1 {
                        b.insert(symbol.to_string(), v);
                        derived.push(symbol.to_string());
                    }
                }
            }
        }
        if derived.len() == before {
            return derived;
        }
    }
}

/// The bindings against inference: declared dims where inference derives another expression,
/// and broadcasts inference had to assume.
fn check_relations(graph: &Graph, types: &Types, b: &Bindings) -> Result<(), Failure> {
    let mentions_bound = |d: &Dim| d.symbols().iter().any(|s| b.contains_key(s));
    for t in graph.tensor_ids() {
        let tensor = graph.tensor(t);
        let (Some(declared), Some(inferred)) = (&tensor.shape, types.shape(t)) else {
            continue;
        };
        if declared.rank() != inferred.rank() {
            continue;
        }
        for (axis, (d, i)) in declared.dims().iter().zip(inferred.dims()).enumerate() {
            if d == i || !mentions_bound(d) {
                continue;
            }
            if let (Ok(dv), Ok(iv)) = (d.eval(b), i.eval(b)) {
                if dv != iv {
                    let derived = match i {
                        Dim::Known(_) => format!("{iv}"),
                        _ => format!("`{i}` = {iv}"),
                    };
                    return Err(Failure::input(anyhow!(
                        "--dim bindings contradict the model: tensor `{}` axis {axis} is declared `{d}` = {dv}, but shape inference derives {derived} from the inputs{}",
                        tensor.name,
                        hint(d, graph)
                    )));
                }
            }
        }
    }
    for (at, l, r) in assumed_broadcasts(types) {
        if let (Some(lv), Some(rv)) = (eval_printed(l, b), eval_printed(r, b)) {
            if lv != rv && lv != 1 && rv != 1 {
                return Err(Failure::input(anyhow!(
                    "--dim bindings contradict the model: node {at} broadcasts `{l}` = {lv} against `{r}` = {rv}; they must be equal (or 1)"
                )));
            }
        }
    }
    Ok(())
}

/// A hint for a contradicted declared dim: derived dims need no binding.
fn hint(d: &Dim, graph: &Graph) -> String {
    let required = required_dims(graph);
    let derived: Vec<String> = d
        .symbols()
        .into_iter()
        .filter(|s| !required.contains(s))
        .collect();
    if derived.is_empty() {
        String::new()
    } else {
        format!(
            "; drop --dim {} (inference derives it), or bind only {}",
            derived.join(", --dim "),
            if required.is_empty() {
                "nothing".to_string()
            } else {
                required.join(", ")
            }
        )
    }
}

/// The value of a dim as `Dim`'s `Display` prints it (`7`, `seq`, `(2*batch*seq + 4)`) under
/// `b`; `None` if a symbol is unbound or the text is not such a dim.
fn eval_printed(text: &str, b: &Bindings) -> Option<i128> {
    let t = text.trim();
    let t = t
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .unwrap_or(t);
    let mut total: i128 = 0;
    for term in t.replace(" - ", " + -").split(" + ") {
        let (mut v, term) = match term.trim().strip_prefix('-') {
            Some(r) => (-1i128, r),
            None => (1, term.trim()),
        };
        for f in term.split('*') {
            let f = f.trim();
            let x = if !f.is_empty() && f.chars().all(|c| c.is_ascii_digit()) {
                f.parse::<i128>().ok()?
            } else {
                *b.get(f)? as i128
            };
            v = v.checked_mul(x)?;
        }
        total = total.checked_add(v)?;
    }
    Some(total)
}

/// The deployment profile the flags select; one the tool does not offer is refused (exit 1).
pub fn profile(a: &crate::cli::ProfileArgs) -> Result<ckpt_ir::Profile, Failure> {
    let mut p = ckpt_ir::Profile::default();
    let set = |p: &mut ckpt_ir::Profile, k: &str, v: &str| {
        p.set(k, v).map_err(|e| Failure::input(anyhow!(e)))
    };
    set(&mut p, "execution_provider", &a.provider)?;
    set(&mut p, "graph_optimization_level", &a.ort_opt_level)?;
    set(
        &mut p,
        "enable_mem_pattern",
        if a.mem_pattern == "on" {
            "true"
        } else {
            "false"
        },
    )?;
    set(&mut p, "arena_extend_strategy", &a.arena_extend)?;
    set(&mut p, "caller_outputs", &a.caller_outputs)?;
    set(&mut p, "steps", &a.steps.to_string())?;
    set(
        &mut p,
        "intra_op_num_threads",
        &a.intra_op_threads.to_string(),
    )?;
    set(&mut p, "initial_chunk_size_bytes", &a.initial_chunk)?;
    p.offered(false).map_err(|e| Failure::input(anyhow!(e)))?;
    Ok(p)
}

/// Set `profile`'s ONNX Runtime version to the one `graph` runs on (onnxruntime-training for
/// ORT training artifacts) and refuse a profile the tool does not offer on it (exit 1).
pub fn on_runtime_of(
    profile: &mut ckpt_ir::Profile,
    graph: &ckpt_ir::Graph,
) -> Result<(), Failure> {
    profile.ort_version = ckpt_validate::training::ort_version_for(graph);
    profile
        .offered(false)
        .map_err(|e| Failure::input(anyhow!(e)))
}

/// What ONNX Runtime changes in a graph when it loads it for the profile's provider: nodes
/// whose float16 types have no CPU kernel run in float32 between Casts
/// ([`ckpt_passes::ort_casts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrtFallback {
    pub converted: usize,
    pub inserted: usize,
    pub removed: usize,
}

impl std::fmt::Display for OrtFallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ONNX Runtime's CPU provider has no float16 kernel for {} node(s): they run in float32 between {} Casts it inserts ({} duplicate Casts removed), as planned and written here",
            self.converted, self.inserted, self.removed
        )
    }
}

/// The graph ONNX Runtime runs for `graph` under `profile`: on the CPU provider, with the
/// float16 fallback's Casts made explicit (planned as ORT runs it, and written so). A node
/// the provider has no kernel for even so (bfloat16 on CPU) is refused, naming the nodes;
/// `code` is the exit code of the refusal (1 for the main job, 4 for `validate`).
pub fn as_ort_runs(
    graph: Graph,
    profile: &ckpt_ir::Profile,
    code: u8,
) -> Result<(Graph, Option<OrtFallback>), Failure> {
    use ckpt_passes::ort_casts::FallbackError;
    ort_runs(graph, profile).map_err(|e| match e {
        FallbackError::NoKernel { version, nodes } => {
            let shown: Vec<String> = nodes.iter().take(5).map(|n| n.to_string()).collect();
            let more = if nodes.len() > 5 {
                format!(" and {} more", nodes.len() - 5)
            } else {
                String::new()
            };
            Failure {
                code,
                error: anyhow!(
                    "ONNX Runtime {version}'s CPU provider has no kernel for {} node(s): {}{more}. It runs float16 nodes without one in float32 between Casts, but not bfloat16 ones; plan for a provider with these kernels (--provider cuda)",
                    nodes.len(),
                    shown.join(", ")
                ),
            }
        }
        e => Failure::input(anyhow!(e)),
    })
}

/// [`as_ort_runs`] with the refusal as data: `inspect` lists the nodes instead of failing.
pub fn ort_runs(
    graph: Graph,
    profile: &ckpt_ir::Profile,
) -> Result<(Graph, Option<OrtFallback>), ckpt_passes::ort_casts::FallbackError> {
    if profile.execution_provider != ckpt_ir::profile::ExecutionProvider::Cpu {
        return Ok((graph, None));
    }
    Ok(
        match ckpt_passes::ort_casts::lower(&graph, profile.ort_version)? {
            None => (graph, None),
            Some(f) => (
                f.graph,
                Some(OrtFallback {
                    converted: f.converted.len(),
                    inserted: f.inserted,
                    removed: f.removed,
                }),
            ),
        },
    )
}

/// Print a warning when `profile` (the one the command runs under) has more than one
/// intra-op thread and `graph` has nodes whose ORT kernel then computes wrong values (the op
/// registry's `races_on_threads`): the graph, rewritten or not, does not train right under
/// that profile.
pub fn warn_thread_race(profile: &ckpt_ir::Profile, graph: &ckpt_ir::Graph) {
    if profile.intra_op_num_threads <= 1 {
        return;
    }
    let racing: Vec<(ckpt_ir::NodeId, &str)> = graph
        .nodes()
        .iter()
        .filter_map(|&n| ckpt_ir::ops::races_on_threads(graph, n).map(|why| (n, why)))
        .collect();
    let Some(&(first, why)) = racing.first() else {
        return;
    };
    let node = graph.node(first);
    eprintln!(
        "warning: {} node(s), first `{}`: {} {why}; with --intra-op-threads {} ONNX Runtime computes their outputs wrong (an embedding's gradient), in the original and the rewrite alike; use --intra-op-threads 1",
        racing.len(),
        node.name,
        node.op_type,
        profile.intra_op_num_threads
    );
}

/// The analysis the flags ask for, with `bindings` already checked against the graph.
pub fn analyse_options(
    m: &crate::cli::ModelArgs,
    bindings: &Bindings,
) -> Result<ckpt_planner::AnalyseOptions, Failure> {
    let (optimizer, optimizer_bits) = m.training.optimizer();
    Ok(ckpt_planner::AnalyseOptions {
        bindings: bindings.clone(),
        loss: m.training.loss.clone(),
        optimizer,
        optimizer_bits,
        profile: profile(&m.training.profile)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_dims_evaluate() {
        let b: Bindings = [("batch".into(), 2), ("seq".into(), 8)].into();
        assert_eq!(eval_printed("7", &b), Some(7));
        assert_eq!(eval_printed("seq", &b), Some(8));
        assert_eq!(eval_printed("(batch*seq)", &b), Some(16));
        assert_eq!(eval_printed("(2*batch*seq + 4)", &b), Some(36));
        assert_eq!(eval_printed("(batch*seq - seq - 1)", &b), Some(7));
        assert_eq!(eval_printed("(-seq + 10)", &b), Some(2));
        assert_eq!(eval_printed("(seq - 1 + batch)", &b), Some(9));
        assert_eq!(eval_printed("unk__3", &b), None);
        // The printer agrees with the evaluator.
        let d = Dim::sym("batch")
            .mul(&Dim::sym("seq"))
            .mul(&Dim::Known(2))
            .sub(&Dim::sym("seq"))
            .add(&Dim::Known(5));
        assert_eq!(
            eval_printed(&d.to_string(), &b),
            Some(d.eval(&b).unwrap() as i128)
        );
    }
}
