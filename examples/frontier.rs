//! The plan-only frontier of a model under the default deployment profile: for each ceiling
//! (percent of the predicted device total), what the planner delivers (predicted total, added
//! FLOPs, time) or the floor it reports.
//!
//!     cargo run --release --example frontier -- MODEL.onnx [PCT...]
//!
//! Without percentages: 95, 90, 85, 80, 75, 70, 65, 60, 55, 50.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ckpt_ir::import_file;
use ckpt_opt::job::Job;
use ckpt_opt::pipeline::analyse;
use ckpt_opt::size::human;
use ckpt_planner::{step_flops, AnalyseOptions, Outcome};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let model = args.next().context("usage: frontier MODEL.onnx [PCT...]")?;
    let mut pcts: Vec<u64> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
    if pcts.is_empty() {
        pcts = vec![95, 90, 85, 80, 75, 70, 65, 60, 55, 50];
    }
    let graph = import_file(std::path::Path::new(&model))?;
    let options = AnalyseOptions::default();
    let before = analyse(graph.clone(), &options)?;
    let total = before.ledger.total_bytes;
    let step = step_flops(&before, &options.bindings).max(1);
    println!(
        "{model}: {} nodes, predicted device total {} ({} fixed)",
        before.graph.node_count(),
        human(total),
        human(before.ledger.fixed_bytes)
    );
    for pct in pcts {
        let ceiling = total * pct / 100;
        let job = Job {
            model: model.clone().into(),
            ceiling,
            output: None,
            analysis: options.clone(),
            reserve_pct: 0.0,
            time_limit: Duration::from_secs(120),
            refusal_probes: 0,
            plan_again: false,
            search_steps: ckpt_planner::PASS_STEPS,
            fold: true,
            chunk_loss_head: false,
            fold_tied: false,
        };
        let t = Instant::now();
        let before = analyse(graph.clone(), &options)?;
        let planned = ckpt_opt::pipeline::plan(before, &job.plan_options(t, 1, None))?;
        let secs = t.elapsed().as_secs_f64();
        match planned.outcome {
            Outcome::AlreadyFits => println!("{pct:>3}%: already fits"),
            Outcome::Rewritten(r) => println!(
                "{pct:>3}%: fits at {} ({:.1}% of the total), +{:.2}% FLOPs, {} of {} recomputed, {secs:.2} s{}",
                human(r.after.ledger.total_bytes),
                100.0 * r.after.ledger.total_bytes as f64 / total as f64,
                100.0 * r.counts.added_flops as f64 / step as f64,
                r.plan.recompute.iter().filter(|&&x| x).count(),
                r.plan.recompute.len(),
                if r.time_limit_hit { " (time limit hit)" } else { "" }
            ),
            Outcome::CannotFit(diagnosis) => println!(
                "{pct:>3}%: no plan; lowest reachable {} ({:.1}%), {secs:.2} s{}",
                human(diagnosis.lowest_reachable_total_bytes),
                100.0 * diagnosis.lowest_reachable_total_bytes as f64 / total as f64,
                if diagnosis.timed_out { " (time limit hit)" } else { "" }
            ),
        }
    }
    Ok(())
}
