//! A trace and its shape buckets: a CSV or JSONL trace read into rows ([`read_trace`]), the
//! key column cut into buckets at declared boundaries or quantiles ([`bucket`]). The rules
//! are [`super`]'s.

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
