//! The plan at a ceiling adds no more than a plan the planner finds at a tighter one: a plan
//! that fits the tighter ceiling fits this one too, and the ladder of tighter ceilings below
//! the first pass carries it up (`ckpt_planner::plan`). Without the ladder the search alone is
//! not monotone in the ceiling, which the cases here show first.

use std::path::PathBuf;
use std::time::Duration;

use ckpt_planner::{analyse, plan, AnalyseOptions, Analysis, Event, Outcome, PlanOptions, Trace};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

fn analysed(name: &str) -> Analysis {
    let g = ckpt_ir::import_file(&fixture(name)).unwrap();
    analyse(g, &AnalyseOptions::default()).unwrap()
}

/// The options at `pct`% of `before`'s total, with room to finish (the time limit never
/// stops anything here), on `rungs` rungs of the ladder.
fn options(before: &Analysis, pct: u64, rungs: usize) -> PlanOptions {
    PlanOptions {
        time_limit: Duration::from_secs(600),
        threads: 2,
        ladder_rungs: rungs,
        ..PlanOptions::new(
            before.ledger.total_bytes * pct / 100,
            AnalyseOptions::default(),
        )
    }
}

/// The added FLOPs of the plan at `o`, and the plan.
fn added(before: &Analysis, o: &PlanOptions) -> (u64, Box<ckpt_planner::Rewritten>) {
    match plan(before, o).unwrap() {
        Outcome::Rewritten(r) => (r.counts.added_flops, r),
        Outcome::CannotFit(d) => panic!("no plan at {} B: {}", o.ceiling, d.message),
        Outcome::AlreadyFits => panic!("fits at {} B", o.ceiling),
    }
}

/// gpt2_d01_aot: the first pass at 82% finds +49,152 FLOPs, at 80% +45,056 (a plan with a
/// lower total). With the ladder the plan at 82% is found at a rung below it, adds no more
/// than the plan at 80%, runs in the arena the 82% ceiling records, and records that ceiling.
#[test]
fn a_plan_adds_no_more_than_one_found_at_a_tighter_ceiling() {
    let before = analysed("gpt2_d01_aot.onnx");
    let (alone, _) = added(&before, &options(&before, 82, 0));
    let (tighter, _) = added(&before, &options(&before, 80, 0));
    assert!(
        alone > tighter,
        "the first pass at 82% (+{alone}) no longer costs more than at 80% (+{tighter}): \
         pick a case where the search is not monotone"
    );
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Event>::new()));
    let sink = std::sync::Arc::clone(&events);
    let o = PlanOptions {
        trace: Some(Trace::new(move |e| sink.lock().unwrap().push(e.clone()))),
        ..options(&before, 82, ckpt_planner::LADDER_RUNGS)
    };
    let (laddered, r) = added(&before, &o);
    let (tighter_laddered, _) = added(&before, &options(&before, 80, ckpt_planner::LADDER_RUNGS));
    assert!(
        laddered <= tighter && laddered <= tighter_laddered,
        "+{laddered} at 82% against +{tighter} (+{tighter_laddered} laddered) at 80%"
    );
    assert!(laddered < alone);
    assert!(r.rungs_planned >= 1);
    assert!(
        r.found_at_ceiling_bytes < o.ceiling,
        "found at {} B",
        r.found_at_ceiling_bytes
    );
    assert!(r.after.ledger.total_bytes <= o.ceiling);
    let budget = o.ceiling - before.ledger.fixed_bytes;
    assert!(
        ckpt_passes::device::fits(&r.after.sim, &o.analysis.profile, budget),
        "the plan found at a rung does not run in the arena the ceiling records ({budget} B)"
    );
    // The model it writes is for the ceiling, not the rung: its deployment, its label.
    let recorded: Vec<(&str, &str)> = r
        .after
        .graph
        .model()
        .metadata_props
        .iter()
        .map(|p| {
            (
                p.key.as_deref().unwrap_or(""),
                p.value.as_deref().unwrap_or(""),
            )
        })
        .collect();
    let ceiling = o.ceiling.to_string();
    assert!(
        recorded.contains(&("ckpt-opt.ceiling_bytes", ceiling.as_str())),
        "{recorded:?}"
    );
    assert!(r
        .patch_text
        .contains(&format!("recompute for ceiling {}", o.ceiling)));
    // The rungs are whole percents of the total, the highest first, and the plan kept is
    // one of theirs.
    let rungs: Vec<(u64, bool)> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::RungPlanned { ceiling, kept, .. } => Some((*ceiling, *kept)),
            _ => None,
        })
        .collect();
    assert_eq!(rungs.len(), r.rungs_planned);
    let total = before.ledger.total_bytes;
    for (k, (ceiling, _)) in rungs.iter().enumerate() {
        assert_eq!(*ceiling, total * (81 - k as u64) / 100, "{rungs:?}");
    }
    assert!(rungs
        .iter()
        .any(|&(c, kept)| kept && c == r.found_at_ceiling_bytes));
}

/// A plan that adds nothing is not planned again, and neither is one with no rungs asked for.
#[test]
fn a_plan_that_adds_nothing_climbs_no_ladder() {
    let before = analysed("gpt2_d0_aot.onnx");
    let (flops, r) = added(&before, &options(&before, 90, ckpt_planner::LADDER_RUNGS));
    assert_eq!(flops, 0);
    assert_eq!(r.rungs_planned, 0);
    assert_eq!(
        r.found_at_ceiling_bytes,
        before.ledger.total_bytes * 90 / 100
    );
    let (_, r) = added(&before, &options(&before, 84, 0));
    assert_eq!(r.rungs_planned, 0);
}
