//! Paired validation: run a reference and a candidate model (the original and the rewritten graph) on the same
//! inputs, each on a fresh session, and report whether they agree and what each peaked at.

use crate::compare::{compare, Comparison, Tolerances};
use crate::error::Result;
use crate::locate::{init, OrtInfo};
use crate::measure::{run_measured, PeakStats};
use crate::session::{Model, SessionConfig};
use crate::tensor::HostTensor;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairReport {
    pub ort: OrtInfo,
    pub config: SessionConfig,
    pub comparison: Comparison,
    pub reference_peak: PeakStats,
    pub candidate_peak: PeakStats,
}

/// One measured run of each model; outputs compared with `tol`.
pub fn validate_pair(
    reference: Model<'_>,
    candidate: Model<'_>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    tol: &Tolerances,
) -> Result<PairReport> {
    let ort = init(None)?.clone();
    let (reference_out, reference_peak) = run_measured(reference, inputs, cfg)?;
    let (candidate_out, candidate_peak) = run_measured(candidate, inputs, cfg)?;
    Ok(PairReport {
        ort,
        config: cfg.clone(),
        comparison: compare(&reference_out, &candidate_out, tol),
        reference_peak,
        candidate_peak,
    })
}
