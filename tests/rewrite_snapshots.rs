//! Snapshots of rewritten graphs: each std fixture at two ceilings (95% and 90% of its
//! predicted total), printed in schedule order with phases; a refusal prints its diagnosis.
//! One case per test, one snapshot per case: `rewrite__<fixture>__ceiling_<pct>pct.snap`.

mod common;

use ckpt_ir::import_file;
use ckpt_opt::job::Job;
use ckpt_planner::Outcome;
use common::*;

/// The main job with `--fold off`: the snapshots pin the recompute's rewrite of the graph as
/// given (the folds have their own tests: `tests/fold.rs`, `passes/tests/fold*.rs`).
fn job(path: &std::path::Path, ceiling: u64) -> Job {
    Job {
        fold: false,
        ..plan_job(path, ceiling, 120)
    }
}

/// The std fixture `name` planned at `pct`% of its predicted total: a rewrite fits the
/// ceiling, and the outcome is snapshotted.
fn case(name: &str, pct: u64) {
    let f = std_fixtures()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no std fixture {name}"));
    let g = import_file(&f.path).unwrap();
    let total = ckpt_opt::pipeline::analyse(g.clone(), &ckpt_planner::AnalyseOptions::default())
        .unwrap()
        .ledger
        .total_bytes;
    let ceiling = total * pct / 100;
    let job = job(&f.path, ceiling);
    let outcome = job
        .plan(ckpt_opt::pipeline::analyse(g, &job.analysis).unwrap())
        .unwrap();
    if let Outcome::Rewritten(r) = &outcome.outcome {
        assert!(
            r.after.ledger.total_bytes <= ceiling,
            "{name} at {pct}%: rewritten to {} B, over the ceiling of {ceiling} B",
            r.after.ledger.total_bytes
        );
    }
    let text = outcome_text(&outcome, ceiling);
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(format!("rewrite__{name}__ceiling_{pct}pct"), text);
    });
}

macro_rules! cases {
    ($($fixture:ident),* $(,)?) => {
        /// The fixtures the cases cover.
        const FIXTURES: &[&str] = &[$(stringify!($fixture)),*];
        $(
            mod $fixture {
                #[test]
                fn ceiling_95pct() {
                    super::case(stringify!($fixture), 95);
                }
                #[test]
                fn ceiling_90pct() {
                    super::case(stringify!($fixture), 90);
                }
            }
        )*
    };
}

cases!(
    bert_d01_aot,
    gpt2_d0_onnxad,
    llama_d0_makefx,
    mlp_d0_onnxad,
    resnet18_d0_aot,
    t5_d0_makefx,
    vit_d0_aot,
    gpt2_d01_aot,
    gpt2_d01_makefx,
    gpt2_d0_aot,
    gpt2_d0_makefx,
    hfgpt2_d01_aot,
    hfgpt2_d01_makefx,
    hfgpt2_d0_aot,
    hfgpt2_d0_makefx,
    mlp_d01_aot,
    mlp_d01_makefx,
    mlp_d0_aot,
    mlp_d0_makefx,
    gpt2_4l_train,
);

/// Every std fixture of the manifest has its two cases.
#[test]
fn every_std_fixture_has_cases() {
    let mut names: Vec<String> = std_fixtures().into_iter().map(|f| f.name).collect();
    names.sort();
    let mut covered: Vec<String> = FIXTURES.iter().map(|s| s.to_string()).collect();
    covered.sort();
    assert_eq!(names, covered);
}
