//! The decision rule of a buckets report ([`decide`]), its statement ([`rule_text`]) and the
//! trace-level step-time quantiles it reads ([`trace_quantile`]). The rule is [`super`]'s.

use super::plan::BucketsJob;
use super::{BucketMeasurement, BucketRow, BucketsReport, Decision};

/// The stated rule, with its thresholds.
pub fn rule_text(reserve: f64, p50: f64, p99: f64) -> String {
    format!("accept only if every admitted bucket stays under the ceiling less {reserve}% reserve, every planned bucket's validation replay passes, the trace's p50 step time regresses by at most {p50}% and its p99 by at most {p99}%")
}

/// Trace-level step-time quantile: each row takes its bucket's time.
pub fn trace_quantile(buckets: &[(usize, f64)], q: f64) -> (f64, usize) {
    // (rows, time) per bucket index, expanded by count.
    let mut v: Vec<(f64, usize)> = Vec::new();
    for (i, &(n, t)) in buckets.iter().enumerate() {
        v.extend(std::iter::repeat_n((t, i), n));
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    if v.is_empty() {
        return (0.0, 0);
    }
    v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Apply the decision rule (see the module doc).
pub fn decide(r: &BucketsReport, job: &BucketsJob) -> Decision {
    let mut reasons = Vec::new();
    let mut deciding = None;
    let mut accept = true;
    let fail =
        |reasons: &mut Vec<String>, why: String, b: Option<usize>, deciding: &mut Option<usize>| {
            if deciding.is_none() {
                *deciding = b;
            }
            reasons.push(why);
        };
    for b in &r.buckets {
        let peak = b
            .measured
            .as_ref()
            .map(|m| m.measured_peak_bytes)
            .or(b.predicted_peak_after_bytes);
        if b.admitted && peak.is_some_and(|p| p > r.effective_ceiling_bytes) {
            accept = false;
            fail(
                &mut reasons,
                format!(
                    "bucket {}: {} B is above the ceiling less the reserve",
                    b.index,
                    peak.unwrap_or(0)
                ),
                Some(b.index),
                &mut deciding,
            );
        }
        if let Some(m) = &b.measured {
            if m.replay_passed == Some(false) {
                accept = false;
                fail(
                    &mut reasons,
                    format!(
                        "bucket {}: replay failed: {}",
                        b.index,
                        m.replay_failures.join("; ")
                    ),
                    Some(b.index),
                    &mut deciding,
                );
            }
        }
    }
    if !r.cannot_be_admitted.is_empty() {
        reasons.push(format!(
            "bucket(s) {:?} cannot be admitted: enforce {} ≤ {} by input validation (not counted against the policy)",
            r.cannot_be_admitted,
            r.key,
            r.max_supported.map_or("(none)".into(), |m| m.to_string())
        ));
    }
    if !r.validated {
        accept = false;
        fail(
            &mut reasons,
            "not validated: the replay and the step-time checks need --validate".into(),
            None,
            &mut deciding,
        );
    } else {
        let admitted: Vec<&BucketRow> = r.buckets.iter().filter(|b| b.admitted).collect();
        let times = |f: &dyn Fn(&BucketMeasurement) -> f64| -> Vec<(usize, f64)> {
            admitted
                .iter()
                .map(|b| (b.steps, b.measured.as_ref().map_or(0.0, f)))
                .collect()
        };
        let before = times(&|m| m.original_p50_ms);
        let after = times(&|m| m.policy_p50_ms);
        for (q, limit, name) in [
            (0.5, job.max_p50_regression, "p50"),
            (0.99, job.max_p99_regression, "p99"),
        ] {
            let (b0, _) = trace_quantile(&before, q);
            let (a, at) = trace_quantile(&after, q);
            let reg = 100.0 * (a / b0.max(1e-9) - 1.0);
            let bucket = admitted.get(at).map(|b| b.index);
            if reg > limit {
                accept = false;
                fail(&mut reasons, format!("the trace's {name} step time regresses {reg:+.2}% ({b0:.2} -> {a:.2} ms), above {limit}% (bucket {})", bucket.unwrap_or(0)), bucket, &mut deciding);
            } else {
                reasons.push(format!("the trace's {name} step time: {b0:.2} -> {a:.2} ms ({reg:+.2}%, limit {limit}%), set by bucket {}", bucket.unwrap_or(0)));
                if accept && name == "p99" && deciding.is_none() {
                    deciding = bucket;
                }
            }
        }
    }
    Decision {
        accept,
        deciding_bucket: deciding,
        reasons,
        rule: rule_text(
            job.reserve_percent,
            job.max_p50_regression,
            job.max_p99_regression,
        ),
    }
}
