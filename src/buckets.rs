//! Tail-aware shape buckets over a trace: group the trace's steps into shape buckets, plan only
//! the buckets over the ceiling, and price the policy against blanket recompute.
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

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

/// One trace row: column → value.
pub type Row = BTreeMap<String, f64>;

/// Read a CSV or JSONL trace (by content: a first line starting with `{` is JSONL).
pub fn read_trace(path: &Path) -> Result<Vec<Row>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading trace {}", path.display()))?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let Some(&(_, first)) = lines.first() else {
        bail!("trace {} has no rows", path.display());
    };
    let mut rows = Vec::new();
    if first.starts_with('{') {
        for (n, l) in lines {
            let v: serde_json::Value = serde_json::from_str(l)
                .with_context(|| format!("{}:{n}: not a JSON object", path.display()))?;
            let obj = v
                .as_object()
                .ok_or_else(|| anyhow!("{}:{n}: not a JSON object", path.display()))?;
            let mut row = Row::new();
            for (k, v) in obj {
                let x = match v {
                    serde_json::Value::Number(x) => x.as_f64(),
                    serde_json::Value::Bool(b) => Some(f64::from(u8::from(*b))),
                    _ => None,
                };
                if let Some(x) = x {
                    row.insert(k.clone(), x);
                }
            }
            rows.push(row);
        }
    } else {
        let header: Vec<String> = first.split(',').map(|h| h.trim().to_string()).collect();
        for &(n, l) in &lines[1..] {
            let cells: Vec<&str> = l.split(',').map(str::trim).collect();
            if cells.len() != header.len() {
                bail!(
                    "{}:{n}: {} cells, the header has {}",
                    path.display(),
                    cells.len(),
                    header.len()
                );
            }
            let mut row = Row::new();
            for (h, c) in header.iter().zip(cells) {
                if c.is_empty() {
                    continue;
                }
                let x = match c {
                    "true" | "True" => 1.0,
                    "false" | "False" => 0.0,
                    _ => c.parse::<f64>().map_err(|_| {
                        anyhow!(
                            "{}:{n}: column `{h}`: `{c}` is not a number",
                            path.display()
                        )
                    })?,
                };
                row.insert(h.clone(), x);
            }
            rows.push(row);
        }
    }
    if rows.is_empty() {
        bail!("trace {} has no rows", path.display());
    }
    Ok(rows)
}

/// How to cut the key column.
#[derive(Clone, Debug)]
pub enum Bucketing {
    /// Inclusive upper bounds, ascending; a last bucket runs to the maximum.
    Boundaries(Vec<f64>),
    /// Quantiles in (0, 1] (1 is the maximum), ascending.
    Quantiles(Vec<f64>),
}

/// `p50,p90,p99,max` as quantiles.
pub fn parse_quantiles(s: &str) -> Result<Vec<f64>, String> {
    let mut out = Vec::new();
    for q in s.split(',').map(str::trim) {
        let v = if q == "max" {
            1.0
        } else {
            let n = q
                .strip_prefix('p')
                .ok_or_else(|| format!("`{q}`: a quantile is pNN or max"))?;
            let v: f64 = n
                .parse()
                .map_err(|_| format!("`{q}`: a quantile is pNN or max"))?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(format!("`{q}`: a quantile is in (0, 100]"));
            }
            v / 100.0
        };
        out.push(v);
    }
    if out.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("`{s}`: quantiles must ascend"));
    }
    Ok(out)
}

/// `2048,4096` as boundaries.
pub fn parse_boundaries(s: &str) -> Result<Vec<f64>, String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<f64>()
                .map_err(|_| format!("`{x}` is not a number"))
        })
        .collect::<Result<_, _>>()?;
    if v.is_empty() || v.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("`{s}`: boundaries must ascend"));
    }
    Ok(v)
}

/// Nearest-rank quantile of sorted values.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// One shape bucket of a trace.
#[derive(Clone, Debug, Serialize)]
pub struct Range {
    /// Exclusive lower bound of the key (`None`: from the smallest).
    pub above: Option<f64>,
    /// Inclusive upper bound.
    pub up_to: f64,
    /// Rows in it.
    pub rows: Vec<usize>,
    /// Each named column's maximum over the rows: the shape it is planned at.
    pub largest: BTreeMap<String, u64>,
}

/// Cut `rows` into buckets of `key`; `columns` are the ones whose maxima make the shape.
pub fn bucket(rows: &[Row], key: &str, columns: &[String], how: &Bucketing) -> Result<Vec<Range>> {
    for (i, r) in rows.iter().enumerate() {
        for c in columns.iter().chain([&key.to_string()]) {
            if !r.contains_key(c) {
                bail!(
                    "trace row {}: no `{c}` column (the bucketing needs it)",
                    i + 1
                );
            }
        }
    }
    let mut keys: Vec<f64> = rows.iter().map(|r| r[key]).collect();
    keys.sort_by(f64::total_cmp);
    let max = *keys.last().unwrap_or(&0.0);
    let mut bounds: Vec<f64> = match how {
        Bucketing::Boundaries(b) => b
            .iter()
            .copied()
            .filter(|&x| x < max)
            .chain([max])
            .collect(),
        Bucketing::Quantiles(q) => q
            .iter()
            .map(|&q| nearest_rank(&keys, q))
            .chain([max])
            .collect(),
    };
    bounds.dedup();
    let mut out = Vec::new();
    let mut lo: Option<f64> = None;
    for &hi in &bounds {
        let members: Vec<usize> = (0..rows.len())
            .filter(|&i| rows[i][key] <= hi && lo.is_none_or(|l| rows[i][key] > l))
            .collect();
        if !members.is_empty() {
            let largest = columns
                .iter()
                .map(|c| {
                    let m = members.iter().map(|&i| rows[i][c]).fold(0.0f64, f64::max);
                    (c.clone(), m.ceil() as u64)
                })
                .collect();
            out.push(Range {
                above: lo,
                up_to: hi,
                rows: members,
                largest,
            });
        }
        lo = Some(hi);
    }
    Ok(out)
}

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

/// The stated rule, with its thresholds.
pub fn rule_text(reserve: f64, p50: f64, p99: f64) -> String {
    format!("accept only if every admitted bucket stays under the ceiling less {reserve}% reserve, every planned bucket's validation replay passes, the trace's p50 step time regresses by at most {p50}% and its p99 by at most {p99}%")
}

/// The Markdown summary.
pub fn markdown(r: &BucketsReport) -> String {
    use crate::size::human;
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
            crate::frontier::bindings_text(&b.bindings),
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

/// The model one bucket is planned on: its graph, where it came from, and its analysis options
/// (bindings at the bucket's largest shape).
pub struct BucketModel {
    pub path: std::path::PathBuf,
    pub graph: ckpt_ir::Graph,
    pub options: crate::optimize::AnalyseOptions,
}

/// What `plan_buckets` needs besides the models.
pub struct BucketsJob<'a> {
    pub trace: &'a str,
    pub key: &'a str,
    pub rows: usize,
    pub ceiling_bytes: u64,
    pub reserve_percent: f64,
    pub time_limit: std::time::Duration,
    pub out_dir: &'a Path,
    /// Validation: (seed, timed runs, max p50 and p99 regression in %).
    pub validate: Option<(u64, usize)>,
    pub max_p50_regression: f64,
    pub max_p99_regression: f64,
}

/// The tail's recompute set carried to another graph: candidates whose first dropped value
/// has a clone (`<name>.recompute`) in `tail`.
pub fn set_by_names(
    tail: &ckpt_ir::Graph,
    before: &crate::optimize::Analysis,
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
    use crate::frontier::{baselines, cheapest_fitting, evaluate_set, plan_at, KnownPlan, Planned};
    use crate::optimize::{analyse, sha256_hex, step_flops};
    let effective = (job.ceiling_bytes as f64 * (1.0 - job.reserve_percent / 100.0)).floor() as u64;
    let mut rows: Vec<BucketRow> = Vec::new();
    let mut chosen: Vec<Option<KnownPlan>> = Vec::new();
    let mut befores = Vec::new();
    for (i, (r, m)) in ranges.iter().zip(&models).enumerate() {
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
            policy: crate::frontier::NO_RECOMPUTE.into(),
            predicted_peak_after_bytes: Some(peak),
            added_flops: 0,
            step_flops: step,
            blanket_added_flops: 0,
            output: None,
            receipt: None,
            plan_hash: None,
            measured: None,
        };
        let mut plan = None;
        if peak > effective {
            let mut pool = baselines(&before, &m.options)?;
            if let Planned::Plan(p) = plan_at(&m.graph, &m.options, effective, job.time_limit)? {
                pool.push(*p);
            }
            match cheapest_fitting(&pool, effective) {
                Some(k) => {
                    let p = pool.swap_remove(k);
                    row.planned = true;
                    row.policy = p.method.clone();
                    row.predicted_peak_after_bytes = Some(p.total_bytes);
                    row.added_flops = p.added_flops;
                    plan = Some(p);
                }
                None => {
                    let lowest = pool.iter().map(|p| p.total_bytes).min().unwrap_or(peak);
                    row.admitted = false;
                    row.predicted_peak_after_bytes = None;
                    row.policy = format!(
                        "cannot be admitted: input validation, not recompute (lowest reachable {})",
                        crate::size::human(lowest)
                    );
                }
            }
        }
        rows.push(row);
        chosen.push(plan);
        befores.push(before);
    }
    // The blanket policy: the tail's plan at every admitted bucket's shape. A planned bucket
    // takes it when it is cheaper than its own and fits.
    let tail = (0..rows.len()).rev().find(|&i| rows[i].planned);
    if let Some(t) = tail {
        let tail_graph = chosen[t].as_ref().map(|p| p.analysis.graph.clone());
        if let Some(tg) = tail_graph {
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
                if rows[i].planned
                    && b.total_bytes <= effective
                    && b.added_flops < rows[i].added_flops
                {
                    rows[i].policy = format!("the tail's plan (bucket {t})");
                    rows[i].added_flops = b.added_flops;
                    rows[i].predicted_peak_after_bytes = Some(b.total_bytes);
                    chosen[i] = Some(b);
                }
            }
            rows[t].blanket_added_flops = rows[t].added_flops;
        }
    }
    // Write each planned bucket's model and receipt.
    for (i, p) in chosen.iter().enumerate() {
        let Some(p) = p else { continue };
        let m = &models[i];
        let mut g = p.analysis.graph.clone();
        let fixed = befores[i].ledger.fixed_bytes;
        let patch = ckpt_ir::Patch {
            label: "record the deployment profile".into(),
            metadata: m
                .options
                .profile
                .resolved(job.ceiling_bytes.saturating_sub(fixed))
                .metadata(),
            ..Default::default()
        };
        patch
            .apply(&mut g)
            .context("recording the deployment profile in the model's metadata")?;
        let out = job.out_dir.join(format!("bucket_{i}.ckpt.onnx"));
        let bytes = crate::optimize::write(&g, &out, &m.path)?;
        let hash = sha256_hex(&bytes);
        let receipt_path = job.out_dir.join(format!("bucket_{i}.receipt.json"));
        let input_hash = sha256_hex(&ckpt_ir::export_bytes(&m.graph));
        let receipt = serde_json::json!({
            "bucket": i,
            "model": {"path": m.path.display().to_string(), "sha256_of_export": input_hash},
            "output": {"path": out.display().to_string(), "sha256": hash},
            "bindings": rows[i].bindings,
            "ceiling_bytes": job.ceiling_bytes,
            "reserve_percent": job.reserve_percent,
            "effective_ceiling_bytes": effective,
            "profile": ckpt_validate::memory::profile_json(&m.options.profile.resolved(job.ceiling_bytes.saturating_sub(fixed))),
            "profile_description": m.options.profile.describe(),
            "predicted_peak_bytes": {"before": rows[i].predicted_peak_bytes, "after": p.total_bytes},
            "added_flops": p.added_flops,
            "step_flops": rows[i].step_flops,
            "added_flops_percent": 100.0 * p.added_flops as f64 / rows[i].step_flops as f64,
            "method": p.method,
        });
        ckpt_ir::write_atomic(
            &receipt_path,
            serde_json::to_string_pretty(&receipt)?.as_bytes(),
            Some(&m.path),
        )
        .with_context(|| format!("writing {}", receipt_path.display()))?;
        rows[i].output = Some(out.display().to_string());
        rows[i].receipt = Some(receipt_path.display().to_string());
        rows[i].plan_hash = Some(hash);
    }
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
    let mut report = BucketsReport {
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
    };
    if let Some((seed, runs)) = job.validate {
        for i in 0..report.buckets.len() {
            if !report.buckets[i].admitted {
                continue;
            }
            report.buckets[i].measured = Some(measure_bucket(
                &befores[i],
                chosen[i].as_ref(),
                &models[i].options,
                seed,
                runs,
                effective,
            )?);
        }
        report.validated = true;
    }
    report.decision = decide(&report, job);
    Ok(report)
}

/// Measure one admitted bucket: the original's and the policy's step time, the policy's
/// device total, and for a planned bucket the paired replay.
fn measure_bucket(
    before: &crate::optimize::Analysis,
    plan: Option<&crate::frontier::KnownPlan>,
    options: &crate::optimize::AnalyseOptions,
    seed: u64,
    runs: usize,
    effective: u64,
) -> Result<BucketMeasurement> {
    use crate::frontier::{measure, measurement_inputs, KnownPlan};
    let inputs = measurement_inputs(before, options, seed)?;
    let original = KnownPlan {
        method: "original".into(),
        found_at_ceiling_bytes: None,
        total_bytes: before.ledger.total_bytes,
        added_flops: 0,
        added_cost: None,
        analysis: crate::optimize::analyse(before.graph.clone(), options)?,
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
        original_dir: before.graph.dir().map(std::path::Path::to_path_buf),
        rewritten_dir: p.analysis.graph.dir().map(std::path::Path::to_path_buf),
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

/// The manifest a deployment reads: per bucket, its shape range, share, model, plan hash,
/// predicted peak, added FLOPs, receipt, and the tail envelope (what admission matches on).
pub fn manifest_json(r: &BucketsReport) -> serde_json::Value {
    let buckets: Vec<serde_json::Value> = r
        .buckets
        .iter()
        .map(|b| {
            serde_json::json!({
                "index": b.index,
                "range": {"key": b.key, "above": b.above, "up_to": b.up_to},
                "bindings": b.bindings,
                "share": b.share,
                "admitted": b.admitted,
                "planned": b.planned,
                "model": b.output.clone().unwrap_or_else(|| b.model.clone()),
                "plan_hash": b.plan_hash,
                "predicted_peak_bytes": b.predicted_peak_bytes,
                "predicted_peak_after_bytes": b.predicted_peak_after_bytes,
                "added_flops": b.added_flops,
                "receipt": b.receipt,
                "envelope": {
                    "policy": b.policy,
                    "peak_bytes": b.measured.as_ref().map(|m| m.measured_peak_bytes).or(b.predicted_peak_after_bytes),
                    "peak_measured": b.measured.is_some(),
                    "reserve_bytes": r.ceiling_bytes - r.effective_ceiling_bytes,
                    "p50_ms": b.measured.as_ref().map(|m| m.policy_p50_ms),
                    "p99_ms": b.measured.as_ref().map(|m| m.policy_p99_ms),
                },
            })
        })
        .collect();
    serde_json::json!({
        "trace": r.trace,
        "key": r.key,
        "ceiling_bytes": r.ceiling_bytes,
        "effective_ceiling_bytes": r.effective_ceiling_bytes,
        "profile": r.profile,
        "max_supported": r.max_supported,
        "decision": r.decision,
        "buckets": buckets,
    })
}
