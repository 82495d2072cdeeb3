//! Snapshots of rewritten graphs: each std fixture at two ceilings (95% and 90% of its
//! predicted total), printed in schedule order with phases; a refusal prints its diagnosis.

mod common;

use ckpt_ir::{import_file, Bindings};
use ckpt_opt::optimize::{plan, Job};
use ckpt_passes::ledger::Optimizer;
use common::*;

fn job(path: &std::path::Path, ceiling: u64) -> Job {
    plan_job(path, ceiling, 120)
}

#[test]
fn rewritten_graphs_of_every_std_fixture_at_two_ceilings() {
    for f in std_fixtures() {
        let g = import_file(&f.path).unwrap();
        let total =
            ckpt_opt::optimize::analyse(g.clone(), &Bindings::new(), None, Optimizer::None, 32)
                .unwrap()
                .ledger
                .total_bytes;
        for pct in [95u64, 90] {
            let ceiling = total * pct / 100;
            let text = outcome_text(&plan(&job(&f.path, ceiling), g.clone()).unwrap(), ceiling);
            insta::assert_snapshot!(format!("rewrite_{}_{pct}", f.name), text);
        }
    }
}
