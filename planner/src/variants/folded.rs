//! The folded variant ([`folded`]): the given graph with its copies folded away, and where
//! asked its shared weights' gradients.

use super::{applied, fits_as_recorded, Variant};
use crate::analysis::Analysis;
use crate::options::PlanOptions;
use crate::outcome::TiedGradients;
use crate::trace::Event;
use crate::PlanError;

/// The given graph with its copies folded away ([`ckpt_passes::fold::fold`]: a `Gemm` reads
/// a transposed operand itself, a `Pad` writes a slice's gradient, and the copies are never
/// made, at zero FLOPs), and with [`PlanOptions::fold_tied`] its shared weights' gradients
/// scattered into one another ([`ckpt_passes::fold::fold_tied_gradients`]), verified and
/// analysed, when that lowers the device total; else `None`. Measured costs belong to the
/// given graph's nodes: then `None`; so with [`PlanOptions::fold`] and `fold_tied` off, and
/// where the given graph needs no plan.
pub(crate) fn folded(before: &Analysis, o: &PlanOptions) -> Result<Option<Variant>, PlanError> {
    if o.costs.is_some() || !(o.fold || o.fold_tied) || fits_as_recorded(before, o) {
        return Ok(None);
    }
    // Every fold, and the transposes' alone where the slices' Pads add constants that may not
    // pay for themselves: the lower total (the first on a tie).
    let label = "copies folded";
    let graph = &before.graph;
    let tied = if o.fold_tied {
        ckpt_passes::fold::fold_tied_gradients(graph, label)
    } else {
        ckpt_ir::Patch::new(label)
    };
    let mut patches = Vec::new();
    if o.fold {
        patches.push(ckpt_passes::fold::fold(graph, label));
        if !patches[0].constants.is_empty() {
            patches.push(ckpt_passes::fold::fold_transposes(graph, label));
        }
    } else {
        patches.push(ckpt_ir::Patch::new(label));
    }
    for p in &mut patches {
        ckpt_passes::fold::merge_apart(p, tied.clone());
    }
    let total = before.ledger.total_bytes;
    let mut best: Option<(ckpt_ir::Patch, Analysis)> = None;
    for patch in patches {
        if patch.substitutes.is_empty() {
            continue;
        }
        let Some(analysis) = applied(before, &patch, o)? else {
            continue;
        };
        let lowest = best.as_ref().map_or(total, |(_, a)| a.ledger.total_bytes);
        if analysis.ledger.total_bytes < lowest {
            best = Some((patch, analysis));
        }
    }
    let Some((patch, analysis)) = best else {
        return Ok(None);
    };
    let folded = analysis.ledger.total_bytes;
    o.emit(|| Event::Folded {
        folds: patch.substitutes.len(),
        total_bytes: total,
        folded_bytes: folded,
    });
    // The tied folds the patch kept (a node another fold took is not folded twice).
    let gradients: Vec<String> = tied
        .substitutes
        .iter()
        .filter(|t| patch.substitutes.contains(t))
        .filter_map(|t| graph.node(t.node).outputs.first().copied().flatten())
        .map(|t| graph.tensor(t).name.clone())
        .collect();
    Ok(Some(Variant {
        analysis,
        patch_text: patch.to_string(),
        lowered: false,
        guarded: false,
        tied: (!gradients.is_empty()).then_some(TiedGradients {
            gradients,
            bitwise: false,
        }),
    }))
}
