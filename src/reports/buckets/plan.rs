//! Planning a trace's buckets ([`plan_buckets`]): each bucket analysed at its largest shape
//! and, over the ceiling less the reserve, given the cheapest known plan that fits; the
//! blanket policy (the tail's plan on every admitted bucket); each planned bucket's model and
//! receipt written; with validation, each admitted bucket measured and each planned one
//! replayed. The rules are [`super`]'s.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use super::decide::{decide, rule_text};
use super::trace::Range;
use super::{BucketMeasurement, BucketRow, BucketsReport, Decision};
use crate::pipeline::analyse;
use crate::receipt::sha256_hex;
use crate::receipt::{BeforeAfter, FileHash};
use crate::reports::frontier::{
    baselines, cheapest_fitting, evaluate_set, measure, measurement_inputs, plan_at, KnownPlan,
    Planned, NO_RECOMPUTE,
};
use crate::size::human;
use ckpt_planner::{step_flops, AnalyseOptions, Analysis};

/// The model one bucket is planned on: its graph, where it came from, and its analysis options
/// (bindings at the bucket's largest shape).
pub struct BucketModel {
    pub path: std::path::PathBuf,
    pub graph: ckpt_ir::Graph,
    pub options: AnalyseOptions,
}

/// What `plan_buckets` needs besides the models.
pub struct BucketsJob<'a> {
    pub trace: &'a str,
    pub key: &'a str,
    pub rows: usize,
    pub ceiling_bytes: u64,
    pub reserve_percent: f64,
    pub search: crate::reports::frontier::PlanSearch,
    pub out_dir: &'a Path,
    /// Validation: (seed, timed runs).
    pub validate: Option<(u64, usize)>,
    /// Largest accepted regressions of the trace's p50 and p99 step times, in %.
    pub max_p50_regression: f64,
    pub max_p99_regression: f64,
}

impl BucketsJob<'_> {
    /// The ceiling less the reserve, in bytes (rounded down).
    fn effective_ceiling(&self) -> u64 {
        (self.ceiling_bytes as f64 * (1.0 - self.reserve_percent / 100.0)).floor() as u64
    }
}

/// The receipt of one planned bucket (`bucket_<i>.receipt.json`).
#[derive(Clone, Debug, Serialize)]
pub struct BucketReceipt {
    pub bucket: usize,
    pub model: ExportedModel,
    pub output: FileHash,
    pub bindings: BTreeMap<String, u64>,
    pub ceiling_bytes: u64,
    pub reserve_percent: f64,
    pub effective_ceiling_bytes: u64,
    /// The deployment profile the output records: its metadata keys and values.
    pub profile: BTreeMap<String, String>,
    pub profile_description: String,
    pub predicted_peak_bytes: BeforeAfter<u64>,
    pub added_flops: u64,
    pub step_flops: u64,
    pub added_flops_percent: f64,
    pub method: String,
}

/// A bucket's input model, hashed as exported (the bytes a model built in memory would have).
#[derive(Clone, Debug, Serialize)]
pub struct ExportedModel {
    pub path: String,
    pub sha256_of_export: String,
}

/// The tail's recompute set carried to another graph: candidates whose first dropped value
/// has a clone (`<name>.recompute`) in `tail`.
pub fn set_by_names(
    tail: &ckpt_ir::Graph,
    before: &Analysis,
    cands: &ckpt_passes::recompute::Candidates,
) -> Vec<bool> {
    let cloned: std::collections::HashSet<&str> = tail
        .tensor_ids()
        .filter_map(|t| tail.tensor(t).name.strip_suffix(".recompute"))
        .collect();
    cands
        .list
        .iter()
        .map(|c| {
            c.saved
                .first()
                .is_some_and(|&t| cloned.contains(before.graph.tensor(t).name.as_str()))
        })
        .collect()
}

/// Plan every bucket (see the module doc) and write the planned buckets' models and receipts
/// into `job.out_dir`.
pub fn plan_buckets(
    job: &BucketsJob,
    ranges: &[Range],
    models: Vec<BucketModel>,
) -> Result<BucketsReport> {
    let effective = job.effective_ceiling();
    let mut rows = Vec::new();
    let mut chosen = Vec::new();
    let mut befores = Vec::new();
    for (i, (r, m)) in ranges.iter().zip(&models).enumerate() {
        let (row, plan, before) = plan_bucket(job, i, r, m, effective)?;
        rows.push(row);
        chosen.push(plan);
        befores.push(before);
    }
    let tail = apply_blanket(&mut rows, &mut chosen, &befores, &models, effective)?;
    for (i, p) in chosen.iter().enumerate() {
        if let Some(p) = p {
            write_planned(job, &mut rows[i], p, &befores[i], &models[i], effective)?;
        }
    }
    let mut report = report(job, rows, &models, effective, tail);
    if let Some((seed, runs)) = job.validate {
        for (i, b) in report.buckets.iter_mut().enumerate() {
            if b.admitted {
                b.measured = Some(measure_bucket(
                    &befores[i],
                    chosen[i].as_ref(),
                    &models[i].options,
                    (seed, runs),
                    effective,
                )?);
            }
        }
        report.validated = true;
    }
    report.decision = decide(&report, job);
    Ok(report)
}

/// Bucket `i`: its analysis at its largest shape and, over `effective`, the cheapest known
/// plan that fits (or why it cannot be admitted).
fn plan_bucket(
    job: &BucketsJob,
    i: usize,
    r: &Range,
    m: &BucketModel,
    effective: u64,
) -> Result<(BucketRow, Option<KnownPlan>, Analysis)> {
    let before = analyse(m.graph.clone(), &m.options)
        .with_context(|| format!("bucket {i}: analysing {}", m.path.display()))?;
    let step = step_flops(&before, &m.options.bindings).max(1);
    let peak = before.ledger.total_bytes;
    let mut row = BucketRow {
        index: i,
        key: job.key.into(),
        above: r.above,
        up_to: r.up_to,
        steps: r.rows.len(),
        share: r.rows.len() as f64 / job.rows.max(1) as f64,
        bindings: m
            .options
            .bindings
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        model: m.path.display().to_string(),
        predicted_peak_bytes: peak,
        planned: false,
        admitted: true,
        policy: NO_RECOMPUTE.into(),
        predicted_peak_after_bytes: Some(peak),
        added_flops: 0,
        step_flops: step,
        blanket_added_flops: 0,
        output: None,
        receipt: None,
        plan_hash: None,
        measured: None,
    };
    if peak <= effective {
        return Ok((row, None, before));
    }
    let mut pool = baselines(&before, &m.options)?;
    if let Planned::Plan(p) = plan_at(&m.graph, &m.options, effective, job.search)? {
        pool.push(*p);
    }
    let plan = match cheapest_fitting(&pool, effective) {
        Some(k) => {
            let p = pool.swap_remove(k);
            row.planned = true;
            row.policy = p.method.clone();
            row.predicted_peak_after_bytes = Some(p.total_bytes);
            row.added_flops = p.added_flops;
            Some(p)
        }
        None => {
            let lowest = pool.iter().map(|p| p.total_bytes).min().unwrap_or(peak);
            row.admitted = false;
            row.predicted_peak_after_bytes = None;
            row.policy = format!(
                "cannot be admitted: input validation, not recompute (lowest reachable {})",
                human(lowest)
            );
            None
        }
    };
    Ok((row, plan, before))
}

/// The blanket policy: the tail's plan (the planned bucket with the largest key) at every
/// admitted bucket's shape, priced into `blanket_added_flops`; a planned bucket takes it
/// when it is cheaper than its own and fits. The tail's index, if a bucket is planned.
fn apply_blanket(
    rows: &mut [BucketRow],
    chosen: &mut [Option<KnownPlan>],
    befores: &[Analysis],
    models: &[BucketModel],
    effective: u64,
) -> Result<Option<usize>> {
    let tail = (0..rows.len()).rev().find(|&i| rows[i].planned);
    let Some(t) = tail else {
        return Ok(None);
    };
    let Some(tg) = chosen[t].as_ref().map(|p| p.analysis.graph.clone()) else {
        return Ok(tail);
    };
    for i in 0..rows.len() {
        if !rows[i].admitted {
            continue;
        }
        let m = &models[i];
        let before = &befores[i];
        let cands = ckpt_passes::recompute::candidates(
            &before.graph,
            &before.sim,
            &before.types,
            &m.options.bindings,
        );
        let set = set_by_names(&tg, before, &cands);
        let b = evaluate_set(before, &cands, set, &m.options, "the tail's plan")?;
        rows[i].blanket_added_flops = b.added_flops;
        if rows[i].planned && b.total_bytes <= effective && b.added_flops < rows[i].added_flops {
            rows[i].policy = format!("the tail's plan (bucket {t})");
            rows[i].added_flops = b.added_flops;
            rows[i].predicted_peak_after_bytes = Some(b.total_bytes);
            chosen[i] = Some(b);
        }
    }
    rows[t].blanket_added_flops = rows[t].added_flops;
    Ok(tail)
}

/// Write a planned bucket's model (its profile recorded) and receipt into `job.out_dir`, and
/// name them in its row.
fn write_planned(
    job: &BucketsJob,
    row: &mut BucketRow,
    p: &KnownPlan,
    before: &Analysis,
    m: &BucketModel,
    effective: u64,
) -> Result<()> {
    let i = row.index;
    let recorded = m
        .options
        .profile
        .resolved(job.ceiling_bytes.saturating_sub(before.ledger.fixed_bytes));
    let mut g = p.analysis.graph.clone();
    let patch = ckpt_ir::Patch {
        label: "record the deployment profile".into(),
        metadata: recorded.metadata(),
        ..Default::default()
    };
    patch
        .apply(&mut g)
        .context("recording the deployment profile in the model's metadata")?;
    let out = job.out_dir.join(format!("bucket_{i}.ckpt.onnx"));
    let bytes = ckpt_ir::export_bytes(&g);
    ckpt_ir::write_atomic(&out, &bytes, Some(&m.path))?;
    let hash = sha256_hex(&bytes);
    let receipt_path = job.out_dir.join(format!("bucket_{i}.receipt.json"));
    let receipt = BucketReceipt {
        bucket: i,
        model: ExportedModel {
            path: m.path.display().to_string(),
            sha256_of_export: sha256_hex(&ckpt_ir::export_bytes(&m.graph)),
        },
        output: FileHash {
            path: out.display().to_string(),
            sha256: hash.clone(),
        },
        bindings: row.bindings.clone(),
        ceiling_bytes: job.ceiling_bytes,
        reserve_percent: job.reserve_percent,
        effective_ceiling_bytes: effective,
        profile: recorded.metadata().into_iter().collect(),
        profile_description: m.options.profile.describe(),
        predicted_peak_bytes: BeforeAfter {
            before: row.predicted_peak_bytes,
            after: p.total_bytes,
        },
        added_flops: p.added_flops,
        step_flops: row.step_flops,
        added_flops_percent: 100.0 * p.added_flops as f64 / row.step_flops as f64,
        method: p.method.clone(),
    };
    ckpt_ir::write_atomic(
        &receipt_path,
        serde_json::to_string_pretty(&receipt)?.as_bytes(),
        Some(&m.path),
    )
    .with_context(|| format!("writing {}", receipt_path.display()))?;
    row.output = Some(out.display().to_string());
    row.receipt = Some(receipt_path.display().to_string());
    row.plan_hash = Some(hash);
    Ok(())
}

/// The report of the planned rows, before validation and the decision.
fn report(
    job: &BucketsJob,
    rows: Vec<BucketRow>,
    models: &[BucketModel],
    effective: u64,
    tail: Option<usize>,
) -> BucketsReport {
    let weighted: f64 = rows.iter().map(|r| r.share * r.added_flops as f64).sum();
    let blanket: f64 = rows
        .iter()
        .filter(|r| r.admitted)
        .map(|r| r.share * r.blanket_added_flops as f64)
        .sum();
    let weighted_step: f64 = rows.iter().map(|r| r.share * r.step_flops as f64).sum();
    let cannot: Vec<usize> = rows
        .iter()
        .filter(|r| !r.admitted)
        .map(|r| r.index)
        .collect();
    let max_supported = rows
        .iter()
        .filter(|r| r.admitted)
        .map(|r| r.up_to)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    BucketsReport {
        trace: job.trace.into(),
        steps: job.rows,
        key: job.key.into(),
        ceiling_bytes: job.ceiling_bytes,
        reserve_percent: job.reserve_percent,
        effective_ceiling_bytes: effective,
        profile: models
            .first()
            .map_or(String::new(), |m| m.options.profile.describe()),
        buckets: rows,
        weighted_added_flops: weighted,
        blanket_added_flops: blanket,
        weighted_step_flops: weighted_step,
        tail_bucket: tail,
        max_supported,
        cannot_be_admitted: cannot,
        validated: false,
        decision: Decision {
            accept: false,
            deciding_bucket: None,
            reasons: Vec::new(),
            rule: rule_text(
                job.reserve_percent,
                job.max_p50_regression,
                job.max_p99_regression,
            ),
        },
    }
}

/// Measure one admitted bucket (`(seed, runs)`): the original's and the policy's step time,
/// the policy's device total, and for a planned bucket the paired replay.
fn measure_bucket(
    before: &Analysis,
    plan: Option<&KnownPlan>,
    options: &AnalyseOptions,
    (seed, runs): (u64, usize),
    effective: u64,
) -> Result<BucketMeasurement> {
    let inputs = measurement_inputs(before, options, seed)?;
    let original = KnownPlan {
        method: "original".into(),
        found_at_ceiling_bytes: None,
        total_bytes: before.ledger.total_bytes,
        added_flops: 0,
        added_cost: None,
        analysis: analyse(before.graph.clone(), options)?,
    };
    let o = measure(&original, options, &inputs, runs)?;
    let Some(p) = plan else {
        return Ok(BucketMeasurement {
            original_p50_ms: o.p50_ms,
            policy_p50_ms: o.p50_ms,
            policy_p99_ms: o.p99_ms,
            measured_peak_bytes: o.device_total_bytes,
            replay_passed: None,
            replay_failures: Vec::new(),
        });
    };
    let r = measure(p, options, &inputs, runs)?;
    let opts = ckpt_validate::paired::ValidateOptions {
        cfg: ckpt_validate::memory::session_config(&options.profile),
        tol: ckpt_runtime::Tolerances::default(),
        seed,
        warmup: 1,
        runs: 1,
        locate_peak: false,
        original_cfg: None,
        original_dir: before.graph.dir().map(Path::to_path_buf),
        rewritten_dir: p.analysis.graph.dir().map(Path::to_path_buf),
    };
    let v = ckpt_validate::check(
        &ckpt_ir::export(&before.graph),
        &ckpt_ir::export(&p.analysis.graph),
        &inputs,
        Vec::new(),
        &opts,
    )?;
    let mut failures = Vec::new();
    if !v.control_rejected {
        failures.push("the broken control was not rejected".to_string());
    } else if !v.passed {
        failures.push("outputs differ from the original's".to_string());
    }
    if r.device_total_bytes > effective {
        failures.push(format!(
            "measured device total {} B is above the ceiling less the reserve ({effective} B)",
            r.device_total_bytes
        ));
    }
    Ok(BucketMeasurement {
        original_p50_ms: o.p50_ms,
        policy_p50_ms: r.p50_ms,
        policy_p99_ms: r.p99_ms,
        measured_peak_bytes: r.device_total_bytes,
        replay_passed: Some(failures.is_empty()),
        replay_failures: failures,
    })
}
