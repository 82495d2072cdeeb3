//! The library on a real graph, with no CLI: `analyse`, then `plan` through the
//! [`Simulator`] oracle. A plan fits under the simulator and says truthfully how it was
//! found; refusals are typed.

use std::path::PathBuf;
use std::time::Duration;

use ckpt_planner::{
    analyse, plan, AnalyseOptions, DiagnosisKind, Oracle, Outcome, PlanOptions, Simulator,
};
use ckpt_solver::{Method, Status};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

fn options(ceiling: u64) -> PlanOptions {
    PlanOptions {
        time_limit: Duration::from_secs(120),
        threads: 1,
        ..PlanOptions::new(ceiling, AnalyseOptions::default())
    }
}

/// gpt2_d0_aot at 90% of its total: a rewrite whose analysis fits the ceiling, whose
/// recompute set the oracle also puts under it, and whose label matches its method.
#[test]
fn a_plan_fits_under_the_simulator_and_is_labelled_by_its_method() {
    let g = ckpt_ir::import_file(&fixture("gpt2_d0_aot.onnx")).unwrap();
    let before = analyse(g, &AnalyseOptions::default()).unwrap();
    let ceiling = before.ledger.total_bytes * 90 / 100;
    let o = options(ceiling);
    let Outcome::Rewritten(r) = plan(&before, &o).unwrap() else {
        panic!("no plan at 90%");
    };
    assert!(r.after.ledger.total_bytes <= ceiling);
    assert!(!r.time_limit_hit);
    // The steps run in the arena the written model records (a first region of the budget,
    // capped at it), not only in the smallest arena the bisection finds: the BFC arena is not
    // monotone in its cap, and without the check the planner returned a moves-only plan here
    // whose need was 1.90 MiB of a 1.92 MiB ceiling and which ORT (like the replay) could not
    // run under the cap.
    let budget = ceiling - before.ledger.fixed_bytes;
    assert!(
        ckpt_passes::device::fits(&r.after.sim, &o.analysis.profile, budget),
        "the plan does not run in an arena of {budget} B"
    );
    if r.planned_graph.is_none() {
        let prob = ckpt_passes::recompute::problem(&before.sim, &r.cands, 0);
        let oracle = Simulator {
            before: &before,
            cands: &r.cands,
            prob: &prob,
            options: &o,
        };
        assert_eq!(
            oracle.total(&r.plan.recompute).unwrap(),
            r.after.ledger.total_bytes
        );
    }
    let label = r.plan.info.label();
    match r.plan.info.method {
        Method::Search => assert!(label.contains("no optimality bound"), "{label}"),
        Method::Ilp => assert!(
            matches!(r.plan.info.status, Status::Optimal | Status::WithinGap) && r.ilp.used,
            "{:?}",
            r.plan.info
        ),
        m => panic!("a plan by {m:?}"),
    }
}

/// Below the fixed bytes: `FixedExceedsCeiling`, its lowest total the fixed bytes. Just above
/// them: `NoPlanFound`, its lowest total above the ceiling and no higher than no recompute,
/// with a line of the ledger named (the lowest plan's: `plan`'s unit tests).
#[test]
fn refusals_are_typed() {
    let g = ckpt_ir::import_file(&fixture("mlp_d0_onnxad.onnx")).unwrap();
    let before = analyse(g, &AnalyseOptions::default()).unwrap();
    let fixed = before.ledger.fixed_bytes;
    let Outcome::CannotFit(d) = plan(&before, &options(fixed / 2)).unwrap() else {
        panic!("a plan under half the fixed bytes");
    };
    assert_eq!(d.kind, DiagnosisKind::FixedExceedsCeiling);
    assert_eq!(d.lowest_reachable_total_bytes, fixed);
    let ceiling = fixed + 1;
    let Outcome::CannotFit(d) = plan(&before, &options(ceiling)).unwrap() else {
        panic!("a plan one byte above the fixed bytes");
    };
    assert_eq!(d.kind, DiagnosisKind::NoPlanFound);
    assert!(d.lowest_reachable_total_bytes > ceiling);
    assert!(d.lowest_reachable_total_bytes <= before.ledger.total_bytes);
    assert!(before
        .ledger
        .lines()
        .iter()
        .any(|(line, _)| *line == d.dominant_ledger_line));
}

/// A ledger from a trial's run (`Simulator::ledger_of`, what a refusal names its lowest
/// plan's dominant line from) is the verified rewrite's, analysed in full
/// (`Oracle::realise`), for recompute sets drawn at random on a fixture.
#[test]
fn a_trials_ledger_is_the_realised_rewrites() {
    let g = ckpt_ir::import_file(&fixture("llama_d0_makefx.onnx")).unwrap();
    let a = analyse(g, &AnalyseOptions::default()).unwrap();
    let o = options(a.ledger.total_bytes * 2);
    let cands =
        ckpt_passes::recompute::candidates(&a.graph, &a.sim, &a.types, &o.analysis.bindings);
    let prob = ckpt_passes::recompute::problem(&a.sim, &cands, 1);
    let oracle = Simulator {
        before: &a,
        cands: &cands,
        prob: &prob,
        options: &o,
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for trial in 0..4 {
        let set: Vec<bool> = (0..cands.list.len())
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                trial == 3 || seed.is_multiple_of(3)
            })
            .collect();
        let plan = ckpt_planner::plan_from_set(&prob, set);
        let (_, (after, _, _)) = oracle.realise(&plan).unwrap();
        assert_eq!(
            oracle.ledger_of(&plan).unwrap(),
            after.ledger,
            "set {trial}"
        );
    }
}

/// Refusal probes: below the floor, the lowest reachable total reported with probes is no
/// higher than without, and no higher than the total of a plan the planner finds at a ceiling
/// above the floor (the search alone is not monotone in the ceiling: its best at a low ceiling
/// can sit above a plan it finds at a higher one).
#[test]
fn probed_refusals_report_no_more_than_a_plan_found_above() {
    // Outputs released: the case was picked under that profile.
    let released = AnalyseOptions {
        profile: ckpt_ir::Profile {
            caller_outputs: ckpt_ir::profile::CallerOutputs::Released,
            ..ckpt_ir::Profile::default()
        },
        ..AnalyseOptions::default()
    };
    let g = ckpt_ir::import_file(&fixture("gpt2_d0_aot.onnx")).unwrap();
    let before = analyse(g, &released).unwrap();
    let total = before.ledger.total_bytes;
    let lowest = |pct: u64, probes: usize| {
        let o = PlanOptions {
            refusal_probes: probes,
            analysis: released.clone(),
            ..options(total * pct / 100)
        };
        match plan(&before, &o).unwrap() {
            Outcome::CannotFit(d) => {
                assert!(d.ceilings_probed <= probes, "{} probes", d.ceilings_probed);
                assert!(
                    probes == 0 || d.ceilings_probed > 0,
                    "none of {probes} probes ran"
                );
                Err(d.lowest_reachable_total_bytes)
            }
            Outcome::Rewritten(r) => Ok(r.after.ledger.total_bytes),
            Outcome::AlreadyFits => panic!("fits at {pct}%"),
        }
    };
    let without = lowest(66, 0).unwrap_err();
    let probed = lowest(66, 2).unwrap_err();
    let above = lowest(78, 0).expect("a plan at 78%");
    assert!(
        without > above,
        "the unprobed refusal ({without} B) is no longer above the plan at 78% ({above} B): \
         pick a case where the search is not monotone"
    );
    assert!(
        probed <= above && probed < without,
        "probed {probed} B, unprobed {without} B, plan at 78% {above} B"
    );
}

/// Once the time limit has passed, a refusal starts no probe: its searches would stop before
/// their first trial (on GPT-2 at 132 layers each probe still took 12 s after the limit).
/// The refusal says the limit stopped it.
#[test]
fn no_refusal_probe_starts_after_the_time_limit() {
    let g = ckpt_ir::import_file(&fixture("gpt2_d0_aot.onnx")).unwrap();
    let before = analyse(g, &AnalyseOptions::default()).unwrap();
    let o = PlanOptions {
        refusal_probes: 3,
        time_limit: Duration::ZERO,
        ..options(before.ledger.total_bytes * 40 / 100)
    };
    let Outcome::CannotFit(d) = plan(&before, &o).unwrap() else {
        panic!("a plan at 40% with no time");
    };
    assert_eq!(d.ceilings_probed, 0, "probes ran after the time limit");
    assert!(
        d.timed_out,
        "the refusal does not say the time limit stopped it"
    );
}

/// With no time at all, a refusal never names a lowest total that fits the ceiling: where a
/// block plan fits, it is the plan, uncut and saying the time limit was hit.
#[test]
fn a_block_plan_that_fits_is_a_plan_past_the_time_limit() {
    let g = ckpt_ir::import_file(&fixture("gpt2_d0_aot.onnx")).unwrap();
    let before = analyse(g, &AnalyseOptions::default()).unwrap();
    let ceiling = before.ledger.total_bytes * 75 / 100;
    let o = PlanOptions {
        time_limit: Duration::ZERO,
        ..options(ceiling)
    };
    match plan(&before, &o).unwrap() {
        Outcome::Rewritten(r) => {
            assert!(r.after.ledger.total_bytes <= ceiling);
            assert!(
                r.time_limit_hit,
                "the plan does not say the limit stopped it"
            );
            assert_eq!(r.plan.info.method, Method::BlockCut);
        }
        Outcome::CannotFit(d) => panic!(
            "refused at {ceiling} B with a lowest total of {} B",
            d.lowest_reachable_total_bytes
        ),
        Outcome::AlreadyFits => panic!("the graph fits at 75%"),
    }
}

/// The simulator's yes-or-no answer (`Oracle::fits`, which stops its bisection as soon as
/// either end settles the question) is its total within the ceiling, for recompute sets drawn
/// at random on a fixture, at ceilings just under, at and over each set's total.
#[test]
fn the_simulator_fits_exactly_when_its_total_is_within_the_ceiling() {
    let g = ckpt_ir::import_file(&fixture("llama_d0_makefx.onnx")).unwrap();
    let a = analyse(g, &AnalyseOptions::default()).unwrap();
    // A ceiling over every total, so that ceilings around each total are within it.
    let o = options(a.ledger.total_bytes * 2);
    let cands =
        ckpt_passes::recompute::candidates(&a.graph, &a.sim, &a.types, &o.analysis.bindings);
    let prob = ckpt_passes::recompute::problem(&a.sim, &cands, 1);
    let oracle = Simulator {
        before: &a,
        cands: &cands,
        prob: &prob,
        options: &o,
    };
    let effective = o.effective_ceiling();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut checked = 0;
    for trial in 0..10 {
        let set: Vec<bool> = (0..cands.list.len())
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed.is_multiple_of(2 + trial)
            })
            .collect();
        let total = oracle.total(&set).unwrap();
        for ceiling in [total - 256, total, total + 256, effective] {
            if ceiling > effective {
                continue;
            }
            assert_eq!(
                oracle.fits(&set, ceiling).unwrap(),
                total <= ceiling,
                "trial {trial}: total {total}, ceiling {ceiling}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 40, "{checked} answers checked");
}

/// The steps a pass's searches may simulate ([`PlanOptions::pass_steps`]) end a refusal by a
/// count: with none, the climbs do not run and the refusal says the budget stopped them; with
/// a hundred trials' worth, the refusal is the same on one thread and two, and when repeated;
/// with the default budget, this refusal is not the budget's.
#[test]
fn the_search_budget_ends_a_refusal_by_a_count_and_says_so() {
    let g = ckpt_ir::import_file(&fixture("gpt2_d0_aot.onnx")).unwrap();
    let before = analyse(g, &AnalyseOptions::default()).unwrap();
    let ceiling = before.ledger.total_bytes * 40 / 100;
    let refused = |pass_steps: usize, threads: usize| {
        let o = PlanOptions {
            pass_steps,
            threads,
            ..options(ceiling)
        };
        match plan(&before, &o).unwrap() {
            Outcome::CannotFit(d) => d,
            _ => panic!("a plan at 40% with a budget of {pass_steps} steps"),
        }
    };
    let full = refused(ckpt_planner::PASS_STEPS, 1);
    assert_eq!(full.kind, DiagnosisKind::NoPlanFound);
    assert!(!full.steps_spent, "the default budget stopped this refusal");
    assert!(!full.timed_out);
    let none = refused(0, 1);
    assert_eq!(none.kind, DiagnosisKind::NoPlanFound);
    assert!(
        none.steps_spent,
        "a budget of no steps was not reported spent"
    );
    let hundred = before.sim.schedule.len() * 100;
    let one = refused(hundred, 1);
    assert!(one.steps_spent, "a hundred trials' worth was not spent");
    assert_eq!(one, refused(hundred, 2), "1 and 2 threads differ");
    assert_eq!(one, refused(hundred, 2), "a repeated run differs");
    // More steps reach no higher total than fewer on the same climbs.
    assert!(full.lowest_reachable_total_bytes <= one.lowest_reachable_total_bytes);
}

/// Every plan, including one that recomputes nothing (a variant that fits as it is: the
/// leaves' order searched, guards), runs in the arena the written model records: a first
/// region of the budget, capped at it. The need the bisection finds is not enough (the BFC
/// arena splits a chunk only at twice the request, so it is not monotone in its cap); on the
/// graphs where the leaves' order is searched, at two ceilings.
#[test]
fn every_plan_runs_in_the_recorded_arena() {
    for f in [
        "gpt2_d0_onnxad.onnx",
        "mlp_d0_onnxad.onnx",
        "resnet18_d0_aot.onnx",
        "vit_d0_aot.onnx",
    ] {
        let g = ckpt_ir::import_file(&fixture(f)).unwrap();
        let before = analyse(g, &AnalyseOptions::default()).unwrap();
        for pct in [90, 75] {
            let ceiling = before.ledger.total_bytes * pct / 100;
            let o = options(ceiling);
            if let Outcome::Rewritten(r) = plan(&before, &o).unwrap() {
                let budget = ceiling - before.ledger.fixed_bytes;
                assert!(r.after.ledger.total_bytes <= ceiling, "{f} at {pct}%");
                assert!(
                    ckpt_passes::device::fits(&r.after.sim, &o.analysis.profile, budget),
                    "{f} at {pct}%: the plan does not run in an arena of {budget} B"
                );
            }
        }
    }
}
