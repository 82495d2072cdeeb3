//! Tail-aware shape buckets over a trace: group the trace's steps into shape buckets, plan only
//! the buckets over the ceiling, and price the policy against blanket recompute.
//!
//! Rooms: [`trace`] reads the trace and cuts the buckets, [`plan`] plans them and writes the
//! planned buckets' models and receipts, [`decide`] applies the decision rule; this module
//! holds the report ([`BucketsReport`]), its Markdown and the deployment manifest
//! ([`Manifest`]).
//!
//! Rules:
//! - A trace is CSV (a header row) or JSONL (one object per line), one row per step; columns
//!   are numbers (`max_seq_len`, `valid_tokens`, `padding_fraction`, `microbatch_size`,
//!   `peak_allocated_bytes`, `peak_reserved_bytes`, `forward_ms`, `backward_ms`, `oom_retry`;
//!   unknown columns are kept and ignored). A column the bucketing or the dim map names must be
//!   in every row.
//! - Buckets are ranges of the key column, upper bounds inclusive: declared boundaries (the
//!   last bucket runs to the trace's maximum) or quantiles (nearest rank) of the key column.
//!   Empty buckets are dropped. A bucket is planned at its largest shape: each mapped column's
//!   maximum over its rows.
//! - A bucket whose predicted device total is at most the ceiling less the reserve gets no
//!   recompute; one above it gets the cheapest known plan that fits (the planner's, a
//!   baseline's, or the tail's plan applied at its shape); one that nothing fits, recompute-all
//!   included, cannot be admitted: its shapes must be refused by input validation.
//! - The weighted cost is Σ share × added FLOPs over the buckets; the blanket cost applies the
//!   tail's plan (the planned bucket with the largest key) to every admitted bucket.
//! - The decision accepts the policy only if every admitted bucket stays under the ceiling less
//!   the reserve (measured with validation, else predicted), every planned bucket's replay
//!   passes (values, control, device memory), and the trace's p50 and p99 step times (each row
//!   timed as its bucket's measured p50) regress by at most the given percentages. Without
//!   validation the replay and step times are not measured, and the policy is rejected for it.

pub mod decide;
pub mod plan;
pub mod trace;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::size::human;

/// What validation measured of one bucket.
#[derive(Clone, Debug, Serialize)]
pub struct BucketMeasurement {
    pub original_p50_ms: f64,
    pub policy_p50_ms: f64,
    pub policy_p99_ms: f64,
    /// Device total of the graph the policy runs for this bucket.
    pub measured_peak_bytes: u64,
    /// Planned buckets: the paired replay (values, control, memory) passed.
    pub replay_passed: Option<bool>,
    pub replay_failures: Vec<String>,
}

/// One bucket of the report.
#[derive(Clone, Debug, Serialize)]
pub struct BucketRow {
    pub index: usize,
    pub key: String,
    pub above: Option<f64>,
    pub up_to: f64,
    pub steps: usize,
    pub share: f64,
    pub bindings: BTreeMap<String, u64>,
    pub model: String,
    /// Predicted device total at the bucket's largest shape, before any recompute.
    pub predicted_peak_bytes: u64,
    pub planned: bool,
    pub admitted: bool,
    /// `no recompute`, the plan's method, or `cannot be admitted: ...`.
    pub policy: String,
    pub predicted_peak_after_bytes: Option<u64>,
    pub added_flops: u64,
    pub step_flops: u64,
    /// The tail's plan at this bucket's shape (the blanket policy).
    pub blanket_added_flops: u64,
    pub output: Option<String>,
    pub receipt: Option<String>,
    pub plan_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<BucketMeasurement>,
}

/// The decision rule's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    pub accept: bool,
    /// The bucket that decides it (`None`: no bucket fails and none decides).
    pub deciding_bucket: Option<usize>,
    pub reasons: Vec<String>,
    pub rule: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct BucketsReport {
    pub trace: String,
    pub steps: usize,
    pub key: String,
    pub ceiling_bytes: u64,
    pub reserve_percent: f64,
    pub effective_ceiling_bytes: u64,
    pub profile: String,
    pub buckets: Vec<BucketRow>,
    pub weighted_added_flops: f64,
    pub blanket_added_flops: f64,
    /// The trace's mean step FLOPs before recompute (for the percentages).
    pub weighted_step_flops: f64,
    /// The bucket whose plan the blanket policy applies everywhere.
    pub tail_bucket: Option<usize>,
    /// The largest key value admitted (`None`: none is).
    pub max_supported: Option<f64>,
    pub cannot_be_admitted: Vec<usize>,
    pub validated: bool,
    pub decision: Decision,
}

/// The Markdown summary.
pub fn markdown(r: &BucketsReport) -> String {
    let mut s = format!(
        "# Buckets: {}\n\n{} steps, bucketed by `{}`; ceiling {} ({}% reserve: {}); profile: {}.\n{}\n\n",
        r.trace,
        r.steps,
        r.key,
        human(r.ceiling_bytes),
        r.reserve_percent,
        human(r.effective_ceiling_bytes),
        r.profile,
        if r.validated {
            "Measured on ONNX Runtime under the profile: each bucket's device total and p50/p99 step time at its largest shape; each planned bucket replayed against its original."
        } else {
            "Not measured: peaks are predicted and costs are FLOPs (run with --validate for the replay and step times)."
        }
    );
    s.push_str("| bucket | share | shape | peak before | policy | peak after | added FLOPs | % of step | blanket FLOPs |\n|---|---:|---|---:|---|---:|---:|---:|---:|\n");
    for b in &r.buckets {
        s.push_str(&format!(
            "| {} {} | {:.1}% | {} | {} | {} | {} | {} | {:.2}% | {} |\n",
            b.index,
            match b.above {
                Some(lo) => format!("({lo}, {}]", b.up_to),
                None => format!("≤ {}", b.up_to),
            },
            100.0 * b.share,
            crate::reports::frontier::bindings_text(&b.bindings),
            human(b.predicted_peak_bytes),
            b.policy,
            b.predicted_peak_after_bytes.map_or("-".into(), human),
            b.added_flops,
            100.0 * b.added_flops as f64 / b.step_flops.max(1) as f64,
            b.blanket_added_flops
        ));
    }
    let pct = |x: f64| 100.0 * x / r.weighted_step_flops.max(1.0);
    s.push_str(&format!(
        "\nWeighted added cost per step: {:.0} FLOPs ({:.3}% of the mean step); blanket (bucket {}'s plan on every bucket): {:.0} FLOPs ({:.3}%).\n",
        r.weighted_added_flops,
        pct(r.weighted_added_flops),
        r.tail_bucket.map_or("-".into(), |b| b.to_string()),
        r.blanket_added_flops,
        pct(r.blanket_added_flops)
    ));
    if !r.cannot_be_admitted.is_empty() {
        s.push_str(&format!(
            "\nCannot be admitted (input validation, not recompute): bucket(s) {}; enforce `{}` ≤ {} as the max supported shape.\n",
            r.cannot_be_admitted.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", "),
            r.key,
            r.max_supported.map_or("(none)".into(), |m| m.to_string())
        ));
    }
    if r.validated {
        s.push_str("\n| bucket | original p50 ms | policy p50 ms | policy p99 ms | measured peak | replay |\n|---|---:|---:|---:|---:|---|\n");
        for b in &r.buckets {
            if let Some(m) = &b.measured {
                s.push_str(&format!(
                    "| {} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
                    b.index,
                    m.original_p50_ms,
                    m.policy_p50_ms,
                    m.policy_p99_ms,
                    human(m.measured_peak_bytes),
                    match m.replay_passed {
                        Some(true) => "passed".to_string(),
                        Some(false) => format!("FAILED: {}", m.replay_failures.join("; ")),
                        None => "-".into(),
                    }
                ));
            }
        }
    }
    s.push_str(&format!(
        "\n## Decision: {}\n\nRule: {}.\n\n{}\n{}\nNot covered: shapes outside the trace, other deployment profiles, ORT optimization levels above `disable`.\n",
        if r.decision.accept { "ACCEPT" } else { "REJECT" },
        r.decision.rule,
        r.decision.reasons.iter().map(|x| format!("- {x}")).collect::<Vec<_>>().join("\n"),
        r.decision
            .deciding_bucket
            .map_or(String::new(), |b| format!("\nDeciding bucket: {b}.\n"))
    ));
    s
}

/// The manifest a deployment reads: per bucket, its shape range, share, model, plan hash,
/// predicted peak, added FLOPs, receipt, and the tail envelope (what admission matches on).
#[derive(Clone, Debug, Serialize)]
pub struct Manifest {
    pub trace: String,
    pub key: String,
    pub ceiling_bytes: u64,
    pub effective_ceiling_bytes: u64,
    pub profile: String,
    pub max_supported: Option<f64>,
    pub decision: Decision,
    pub buckets: Vec<ManifestBucket>,
}

/// One bucket of the manifest.
#[derive(Clone, Debug, Serialize)]
pub struct ManifestBucket {
    pub index: usize,
    pub range: KeyRange,
    pub bindings: BTreeMap<String, u64>,
    pub share: f64,
    pub admitted: bool,
    pub planned: bool,
    /// The model to run for it: the planned output, else the bucket's input model.
    pub model: String,
    pub plan_hash: Option<String>,
    pub predicted_peak_bytes: u64,
    pub predicted_peak_after_bytes: Option<u64>,
    pub added_flops: u64,
    pub receipt: Option<String>,
    pub envelope: Envelope,
}

/// A bucket's range of the key column: `(above, up_to]`.
#[derive(Clone, Debug, Serialize)]
pub struct KeyRange {
    pub key: String,
    pub above: Option<f64>,
    pub up_to: f64,
}

/// What admission matches a bucket on: its policy, peak and step times.
#[derive(Clone, Debug, Serialize)]
pub struct Envelope {
    pub policy: String,
    /// Measured with validation, else predicted.
    pub peak_bytes: Option<u64>,
    pub peak_measured: bool,
    pub reserve_bytes: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl Manifest {
    /// The manifest of a report.
    pub fn of(r: &BucketsReport) -> Manifest {
        let buckets = r
            .buckets
            .iter()
            .map(|b| ManifestBucket {
                index: b.index,
                range: KeyRange {
                    key: b.key.clone(),
                    above: b.above,
                    up_to: b.up_to,
                },
                bindings: b.bindings.clone(),
                share: b.share,
                admitted: b.admitted,
                planned: b.planned,
                model: b.output.clone().unwrap_or_else(|| b.model.clone()),
                plan_hash: b.plan_hash.clone(),
                predicted_peak_bytes: b.predicted_peak_bytes,
                predicted_peak_after_bytes: b.predicted_peak_after_bytes,
                added_flops: b.added_flops,
                receipt: b.receipt.clone(),
                envelope: Envelope {
                    policy: b.policy.clone(),
                    peak_bytes: b
                        .measured
                        .as_ref()
                        .map(|m| m.measured_peak_bytes)
                        .or(b.predicted_peak_after_bytes),
                    peak_measured: b.measured.is_some(),
                    reserve_bytes: r.ceiling_bytes - r.effective_ceiling_bytes,
                    p50_ms: b.measured.as_ref().map(|m| m.policy_p50_ms),
                    p99_ms: b.measured.as_ref().map(|m| m.policy_p99_ms),
                },
            })
            .collect();
        Manifest {
            trace: r.trace.clone(),
            key: r.key.clone(),
            ceiling_bytes: r.ceiling_bytes,
            effective_ceiling_bytes: r.effective_ceiling_bytes,
            profile: r.profile.clone(),
            max_supported: r.max_supported,
            decision: r.decision.clone(),
            buckets,
        }
    }
}
