//! The loss head in chunks of rows as a variant ([`with_head_chunked`]): where the plan in
//! hand adds anything or none fits, the graph with its head in chunks
//! ([`ckpt_passes::loss_head`]) is planned too, and its plan kept only where it adds fewer
//! FLOPs or fits where nothing did. Its outputs match the original's within rounding, not bit
//! for bit, so it is never a tie-break.

use ckpt_passes::loss_head::{Accumulate, ChunkedHead, LossHead};

use crate::analysis::Analysis;
use crate::options::PlanOptions;
use crate::outcome::{LossHeadChunks, Outcome};
use crate::plan::passes;
use crate::trace::Event;
use crate::variants::{applied, Variant};
use crate::PlanError;

/// `outcome`, or where it adds anything or refuses and the loss head can be written in
/// chunks of rows ([`chunked`]), the plan of that graph where it adds fewer
/// FLOPs than `outcome` or fits where `outcome` refuses (its passes asked to beat `outcome`),
/// or, of two refusals, the chunked graph's where its lowest total is lower.
pub(crate) fn with_head_chunked(
    before: &Analysis,
    folded: Option<&Variant>,
    outcome: Outcome,
    o: &PlanOptions,
) -> Result<Outcome, PlanError> {
    let in_hand = match &outcome {
        Outcome::Rewritten(r) => match r.added_cost(&before.graph, o) {
            0 => return Ok(outcome),
            cost => Some(cost),
        },
        Outcome::CannotFit(_) => None,
        Outcome::AlreadyFits => return Ok(outcome),
    };
    let Some((v, head)) = chunked(before, folded, o)? else {
        return Ok(outcome);
    };
    let mut r = match v.based(
        passes(v.analysis(), before.ledger.total_bytes, o, in_hand)?,
        o,
    )? {
        Outcome::Rewritten(r) => r,
        Outcome::CannotFit(b) => {
            return Ok(match outcome {
                Outcome::CannotFit(a)
                    if b.lowest_reachable_total_bytes < a.lowest_reachable_total_bytes =>
                {
                    Outcome::CannotFit(b)
                }
                kept => kept,
            })
        }
        Outcome::AlreadyFits => return Ok(outcome),
    };
    r.folded = folded.is_some();
    r.tied_gradients = folded.and_then(|f| f.tied().cloned());
    r.loss_head = Some(head);
    let cost = r.added_cost(&before.graph, o);
    Ok(match in_hand {
        Some(c) if cost >= c => outcome,
        _ => Outcome::Rewritten(r),
    })
}

/// How many chunks of rows the loss head is tried in ([`chunked`]), each with its weight
/// gradient summed by a `Gemm` chain and in place ([`Accumulate`]).
const HEAD_CHUNKS: [u64; 3] = [2, 4, 8];

/// `base` (the folded graph where there is one, else `before`) with its loss head in chunks
/// of rows ([`ckpt_passes::loss_head`]), verified and analysed, in the number of
/// [`HEAD_CHUNKS`], its weight gradient summed each way ([`Accumulate`]: the `Gemm` chain first),
/// that gives the lowest device total (the fewest chunks on a tie), when that is
/// below the base's; else `None`. Measured costs belong to the given graph's nodes: then
/// `None`; so with [`PlanOptions::chunk_loss_head`] off.
fn chunked(
    before: &Analysis,
    folded: Option<&Variant>,
    o: &PlanOptions,
) -> Result<Option<(Variant, LossHeadChunks)>, PlanError> {
    if o.costs.is_some() || !o.chunk_loss_head {
        return Ok(None);
    }
    let base = folded.map_or(before, Variant::analysis);
    let Some(found) = LossHead::find(&base.graph) else {
        return Ok(None);
    };
    let mut best: Option<(ChunkedHead, Accumulate, Analysis)> = None;
    // `FusedConv` overwriting its sum input is the CPU provider's kernel (the op registry's
    // `MayInplace`); on CUDA only the Gemm chain.
    let ways: &[Accumulate] = match o.analysis.profile.execution_provider {
        ckpt_ir::profile::ExecutionProvider::Cpu => &[Accumulate::Gemm, Accumulate::InPlace],
        ckpt_ir::profile::ExecutionProvider::Cuda => &[Accumulate::Gemm],
    };
    let tries = HEAD_CHUNKS
        .into_iter()
        .flat_map(|k| ways.iter().map(move |&a| (k, a)));
    for (k, accumulate) in tries {
        let Some(head) = found.in_chunks(&base.graph, k, accumulate, "loss head in chunks") else {
            continue;
        };
        // A graph the analysis refuses (an op the registry cannot type at the chunks'
        // shapes) is not a variant: the head stays as it is.
        let Ok(Some(analysis)) = applied(base, &head.patch, o) else {
            continue;
        };
        let lowest = best
            .as_ref()
            .map_or(base.ledger.total_bytes, |(_, _, a)| a.ledger.total_bytes);
        if analysis.ledger.total_bytes < lowest {
            best = Some((head, accumulate, analysis));
        }
    }
    let Some((head, accumulate, analysis)) = best else {
        return Ok(None);
    };
    o.emit(|| Event::LossHeadChunked {
        chunks: head.chunks,
        total_bytes: base.ledger.total_bytes,
        chunked_bytes: analysis.ledger.total_bytes,
    });
    let patch_text = match folded {
        Some(f) => format!("{}\n{}", f.patch_text(), head.patch),
        None => head.patch.to_string(),
    };
    let info = LossHeadChunks {
        logits: head.logits,
        chunks: head.chunks,
        rows_per_chunk: head.rows_per_chunk,
        region_nodes: head.region_nodes,
        summed_in_place: accumulate == Accumulate::InPlace,
        bitwise: false,
    };
    let variant = Variant::of_patches(analysis, patch_text);
    Ok(Some((variant, info)))
}
