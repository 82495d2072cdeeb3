//! The decision reports: `frontier` (the sweep is [`crate::reports::frontier`]'s), [`capacity`] and
//! [`buckets`], with the frontier's [`plot`]; and their commands at the CLI edge
//! ([`run_frontier`], [`run_capacity`], [`run_buckets`]): flags in, files out (JSON beside a
//! Markdown summary; the frontier's SVG), exit codes.

pub mod buckets;
pub mod capacity;
pub mod frontier;
pub mod plot;

use std::path::Path;

use anyhow::{anyhow, Context};

use buckets::plan::{plan_buckets, BucketModel, BucketsJob};
use buckets::trace::{self, Bucketing};
use buckets::Manifest;
use capacity::CapacityQuery;

use crate::cli::{BucketsArgs, CapacityArgs, FrontierArgs, ReportArgs};
use crate::exit::Failure;
use crate::job::Ceiling;
use crate::model_io::{self, analyse_options, bindings, load};
use crate::size::human;
use frontier::Ceilings;

fn write(dir: &Path, name: &str, text: &str) -> Result<(), Failure> {
    let p = dir.join(name);
    ckpt_ir::write_atomic(&p, text.as_bytes(), None)
        .with_context(|| format!("writing {}", p.display()))
        .map_err(Failure::input)
}

fn out_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", dir.display()))
        .map_err(Failure::input)
}

/// The model's analysis options from the report flags (every `--dim` must be NAME=VALUE
/// unless `bare_ok`), and the bare names.
fn options(
    r: &ReportArgs,
    graph: &ckpt_ir::Graph,
    bare_ok: bool,
) -> Result<(ckpt_planner::AnalyseOptions, Vec<String>), Failure> {
    let (m, bare) = r.model_args().map_err(|e| Failure::input(anyhow!(e)))?;
    if !bare_ok {
        if let Some(b) = bare.first() {
            return Err(Failure::input(anyhow!(
                "--dim {b}: expected NAME=VALUE, e.g. --dim {b}=32"
            )));
        }
    }
    let b = bindings(&m.dims, graph)?;
    let mut o = analyse_options(&m, &b)?;
    // Planned under the runtime the model runs on, as the main job plans it.
    model_io::on_runtime_of(&mut o.profile, graph)?;
    model_io::warn_thread_race(&o.profile, graph);
    Ok((o, bare))
}

/// Refuse a profile the planner cannot plan for (as the main job does).
fn plannable(o: &ckpt_planner::AnalyseOptions) -> Result<(), Failure> {
    if o.profile.graph_optimization_level != ckpt_ir::profile::OptLevel::Disable {
        return Err(Failure::input(anyhow!(
            "--ort-opt-level {}: plans are made for the graph ORT runs at level disable",
            o.profile.graph_optimization_level
        )));
    }
    Ok(())
}

pub fn run_frontier(a: &FrontierArgs) -> Result<(), Failure> {
    let graph = load(&a.model)?;
    let (o, _) = options(&a.report, &graph, false)?;
    let (graph, _) = model_io::as_ort_runs(graph, &o.profile, 1)?;
    plannable(&o)?;
    let ceilings = if a.ceilings.is_empty() {
        Ceilings::Points(a.points.unwrap_or(6) as usize)
    } else {
        Ceilings::List(a.ceilings.clone())
    };
    out_dir(&a.out)?;
    let name = a.model.display().to_string();
    let costs = match a.cost.as_str() {
        "profile" => {
            let before = crate::pipeline::analyse(graph.clone(), &o).map_err(Failure::planning)?;
            ckpt_validate::measured_cost::profilable(&before).map_err(Failure::input)?;
            Some(
                ckpt_validate::measured_cost::measure(
                    &before,
                    &o.bindings,
                    a.report.seed,
                    &Default::default(),
                    a.report.runs,
                    &o.profile,
                )
                .map_err(Failure::could_not_validate)?,
            )
        }
        _ => None,
    };
    let mut s = frontier::sweep(
        &name,
        &graph,
        &o,
        &ceilings,
        a.report.search(),
        costs.as_ref(),
    )
    .map_err(Failure::planning)?;
    if a.validate {
        frontier::validate_sweep(&mut s, &o, a.report.seed, a.report.runs)
            .map_err(Failure::could_not_validate)?;
    }
    let f = &s.frontier;
    write(
        &a.out,
        "frontier.json",
        &serde_json::to_string_pretty(f).map_err(Failure::internal)?,
    )?;
    let svg =
        plot::frontier_svg(f).map_err(|e| Failure::internal(anyhow!("drawing the plot: {e}")))?;
    write(&a.out, "frontier.svg", &svg)?;
    let md = frontier::markdown(f);
    write(&a.out, "frontier.md", &md)?;
    print!("{md}");
    println!(
        "\nwrote {}/frontier.json, frontier.svg, frontier.md",
        a.out.display()
    );
    Ok(())
}

pub fn run_capacity(a: &CapacityArgs) -> Result<(), Failure> {
    let graph = load(&a.model)?;
    let (o, bare) = options(&a.report, &graph, true)?;
    let (graph, _) = model_io::as_ort_runs(graph, &o.profile, 1)?;
    plannable(&o)?;
    let dim = match bare.as_slice() {
        [d] => d.clone(),
        [] => {
            return Err(Failure::input(anyhow!(
            "capacity needs the dim to search as a bare name: --dim batch (dims of the model: {})",
            model_io::required_dims(&graph).join(", ")
        )))
        }
        more => {
            return Err(Failure::input(anyhow!(
                "capacity searches one dim; got {} bare --dim names ({})",
                more.len(),
                more.join(", ")
            )))
        }
    };
    if !graph.symbols().contains(&dim) {
        return Err(Failure::input(anyhow!(
            "--dim {dim}: `{dim}` is not a symbolic dim of the model ({})",
            model_io::required_dims(&graph).join(", ")
        )));
    }
    if o.bindings.contains_key(&dim) {
        return Err(Failure::input(anyhow!(
            "--dim {dim}: searched and bound at once; drop --dim {dim}=..."
        )));
    }
    // A percentage is of the footprint at the smallest value (1).
    let at_one = capacity::options_at(&graph, &o, &dim, 1);
    let ceiling = match a.ceiling {
        Ceiling::Bytes(b) => b,
        spec => {
            let oo = at_one.clone();
            spec.resolve(
                crate::pipeline::analyse(graph.clone(), &oo)
                    .map_err(Failure::planning)?
                    .ledger
                    .total_bytes,
            )
        }
    };
    // The remaining symbolic dims must be bound or follow from `dim` (the search binds it).
    let unbound: Vec<String> = model_io::required_dims(&graph)
        .into_iter()
        .filter(|d| !at_one.bindings.contains_key(d))
        .collect();
    if !unbound.is_empty() {
        return Err(Failure::input(anyhow!(
            "bind the other dims too: --dim {}=VALUE",
            unbound.join("=VALUE --dim ")
        )));
    }
    let q = CapacityQuery {
        dim,
        ceiling_bytes: ceiling,
        max_value: a.max,
        search: a.report.search(),
    };
    let c = capacity::capacity(&a.model.display().to_string(), &graph, &o, &q)
        .map_err(Failure::planning)?;
    let json = serde_json::to_string_pretty(&c).map_err(Failure::internal)?;
    let md = capacity::markdown(&c);
    if let Some(dir) = &a.out {
        out_dir(dir)?;
        write(dir, "capacity.json", &format!("{json}\n"))?;
        write(dir, "capacity.md", &md)?;
    }
    if a.json {
        println!("{json}");
    } else {
        print!("{md}");
    }
    if let Some(dir) = &a.out {
        eprintln!("wrote {}/capacity.json, capacity.md", dir.display());
    }
    Ok(())
}

/// `seq=max_seq_len,batch=microbatch_size` as (dim, column) pairs.
fn dim_map(s: &str) -> Result<Vec<(String, String)>, Failure> {
    s.split(',')
        .map(|p| {
            let (d, c) = p.split_once('=').ok_or_else(|| {
                Failure::input(anyhow!(
                    "--dim-map `{p}`: expected DIM=COLUMN, e.g. seq=max_seq_len"
                ))
            })?;
            Ok((d.trim().to_string(), c.trim().to_string()))
        })
        .collect()
}

pub fn run_buckets(a: &BucketsArgs) -> Result<(), Failure> {
    let rows = trace::read_trace(&a.trace).map_err(Failure::input)?;
    let how = match (&a.boundaries, &a.quantiles) {
        (Some(b), _) => Bucketing::Boundaries(
            trace::parse_boundaries(b).map_err(|e| Failure::input(anyhow!("--boundaries {e}")))?,
        ),
        (None, q) => Bucketing::Quantiles(
            trace::parse_quantiles(q.as_deref().unwrap_or("p50,p90,p99,max"))
                .map_err(|e| Failure::input(anyhow!("--quantiles {e}")))?,
        ),
    };
    out_dir(&a.out)?;
    let (ranges, models, key) = if let Some(manifest) = &a.manifest {
        manifest_models(manifest, &rows, &a.report)?
    } else {
        let model = a.model.as_ref().ok_or_else(|| {
            Failure::input(anyhow!(
                "give MODEL --dim-map DIM=COLUMN,... or --manifest MODELS.json"
            ))
        })?;
        let map = dim_map(a.dim_map.as_deref().ok_or_else(|| {
            Failure::input(anyhow!(
                "MODEL needs --dim-map, e.g. --dim-map seq=max_seq_len,batch=microbatch_size"
            ))
        })?)?;
        let graph = load(model)?;
        let (o, _) = options(&a.report, &graph, false)?;
        let (graph, _) = model_io::as_ort_runs(graph, &o.profile, 1)?;
        plannable(&o)?;
        for (d, _) in &map {
            if !graph.symbols().contains(d) {
                return Err(Failure::input(anyhow!(
                    "--dim-map {d}: `{d}` is not a symbolic dim of {}",
                    model.display()
                )));
            }
        }
        let columns: Vec<String> = map.iter().map(|m| m.1.clone()).collect();
        let key = a.by.clone().unwrap_or_else(|| columns[0].clone());
        let ranges = trace::bucket(&rows, &key, &columns, &how).map_err(Failure::input)?;
        let models = ranges
            .iter()
            .map(|r| {
                let mut oo = o.clone();
                for (d, c) in &map {
                    oo.bindings.insert(d.clone(), r.largest[c].max(1));
                }
                BucketModel {
                    path: model.clone(),
                    graph: graph.clone(),
                    options: oo,
                }
            })
            .collect();
        (ranges, models, key)
    };
    let ceiling = a.ceiling.bytes().ok_or_else(|| {
        Failure::input(anyhow!(
            "--ceiling: buckets takes a size (a percentage of which bucket's footprint?)"
        ))
    })?;
    let trace = a.trace.display().to_string();
    let job = BucketsJob {
        trace: &trace,
        key: &key,
        rows: rows.len(),
        ceiling_bytes: ceiling,
        reserve_percent: a.reserve,
        search: a.report.search(),
        out_dir: &a.out,
        validate: a.validate.then_some((a.report.seed, a.report.runs)),
        max_p50_regression: a.max_p50_regression,
        max_p99_regression: a.max_p99_regression,
    };
    let report = plan_buckets(&job, &ranges, models).map_err(|e| {
        if a.validate {
            Failure::could_not_validate(e)
        } else {
            Failure::planning(e)
        }
    })?;
    write(
        &a.out,
        "buckets.json",
        &serde_json::to_string_pretty(&report).map_err(Failure::internal)?,
    )?;
    write(
        &a.out,
        "manifest.json",
        &serde_json::to_string_pretty(&Manifest::of(&report)).map_err(Failure::internal)?,
    )?;
    let md = buckets::markdown(&report);
    write(&a.out, "buckets.md", &md)?;
    print!("{md}");
    println!(
        "\nwrote {}/manifest.json, buckets.json, buckets.md ({} planned bucket(s), ceiling {})",
        a.out.display(),
        report.buckets.iter().filter(|b| b.planned).count(),
        human(ceiling)
    );
    Ok(())
}

/// `--manifest`: one static model per bucket, `{"key": COLUMN, "models": [{"up_to": N,
/// "model": PATH, "dims": {NAME: VALUE}}, ...]}` (paths relative to the manifest; `dims`, for
/// a model with symbolic dims, binds them for that bucket), the buckets cut at the `up_to`s.
fn manifest_models(
    path: &Path,
    rows: &[trace::Row],
    r: &ReportArgs,
) -> Result<(Vec<trace::Range>, Vec<BucketModel>, String), Failure> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))
        .map_err(Failure::input)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not JSON", path.display()))
        .map_err(Failure::input)?;
    let key = v["key"]
        .as_str()
        .ok_or_else(|| {
            Failure::input(anyhow!("{}: no \"key\" (the trace column)", path.display()))
        })?
        .to_string();
    let entries = v["models"]
        .as_array()
        .ok_or_else(|| Failure::input(anyhow!("{}: no \"models\" list", path.display())))?;
    let mut bounds = Vec::new();
    let mut files = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let up_to = e["up_to"].as_f64().ok_or_else(|| {
            Failure::input(anyhow!(
                "{}: models[{i}] has no numeric \"up_to\"",
                path.display()
            ))
        })?;
        let m = e["model"].as_str().ok_or_else(|| {
            Failure::input(anyhow!(
                "{}: models[{i}] has no \"model\" path",
                path.display()
            ))
        })?;
        bounds.push(up_to);
        files.push(path.parent().unwrap_or(Path::new(".")).join(m));
    }
    if bounds.is_empty() || bounds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Failure::input(anyhow!(
            "{}: \"up_to\" must ascend",
            path.display()
        )));
    }
    let max = rows
        .iter()
        .filter_map(|r| r.get(&key))
        .fold(f64::MIN, |a, &b| a.max(b));
    if max > *bounds.last().unwrap_or(&0.0) {
        return Err(Failure::input(anyhow!(
            "the trace's `{key}` reaches {max}, above the manifest's largest bucket ({}): no model serves it",
            bounds.last().unwrap_or(&0.0)
        )));
    }
    let all = trace::bucket(
        rows,
        &key,
        std::slice::from_ref(&key),
        &Bucketing::Boundaries(bounds.clone()),
    )
    .map_err(Failure::input)?;
    let mut ranges = Vec::new();
    let mut models = Vec::new();
    for rg in all {
        let Some(k) = bounds.iter().position(|&b| rg.up_to <= b) else {
            continue;
        };
        let graph = load(&files[k])?;
        let (mut o, _) = options(r, &graph, false)?;
        plannable(&o)?;
        let (graph, _) = model_io::as_ort_runs(graph, &o.profile, 1)?;
        if let Some(dims) = entries[k]["dims"].as_object() {
            for (d, v) in dims {
                let v = v.as_u64().filter(|&v| v > 0).ok_or_else(|| {
                    Failure::input(anyhow!(
                        "{}: models[{k}].dims.{d} is not a positive integer",
                        path.display()
                    ))
                })?;
                if !graph.symbols().contains(d) {
                    return Err(Failure::input(anyhow!(
                        "{}: models[{k}].dims.{d}: `{d}` is not a symbolic dim of {}",
                        path.display(),
                        files[k].display()
                    )));
                }
                o.bindings.insert(d.clone(), v);
            }
        }
        ranges.push(rg);
        models.push(BucketModel {
            path: files[k].clone(),
            graph,
            options: o,
        });
    }
    Ok((ranges, models, key))
}
