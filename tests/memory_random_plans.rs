//! The simulator against ONNX Runtime on rewrites the search did not choose: random recompute
//! sets on the example and five fixtures (dropout or not, both export routes), each rewritten, simulated and measured (exact arena).
//! Every one must match to the byte.

mod common;

use ckpt_ir::{export_bytes, import_file, Bindings};
use ckpt_opt::pipeline::analyse;
use ckpt_passes::memory::{schedule, simulate};
use ckpt_passes::recompute::{candidates, problem, rewrite};
use ckpt_runtime::{measure_peak, Arena, Model, OptLevel, SessionConfig};
use ckpt_validate::inputs::{make_inputs, InputOverrides};
use common::*;

fn plan_of(prob: &ckpt_solver::Problem, set: Vec<bool>) -> ckpt_solver::Plan {
    ckpt_solver::Plan::for_set(prob, set, ckpt_solver::Method::Greedy)
}

#[test]
fn random_plans_predicted_vs_measured() {
    let b = Bindings::new();
    let cfg = SessionConfig {
        opt_level: OptLevel::Disable,
        arena: Arena::Exact,
        ..Default::default()
    };
    let o = InputOverrides::parse(&[], &["attention_mask=1:2".to_string()]).unwrap();
    let (mut exact, mut total, mut worst) = (0usize, 0usize, 0f64);
    for model in [
        "examples/gpt2_4l_train.onnx",
        "tests/fixtures/gpt2_d0_aot.onnx",
        "tests/fixtures/hfgpt2_d0_aot.onnx",
        "tests/fixtures/hfgpt2_d01_makefx.onnx",
        "tests/fixtures/gpt2_d01_makefx.onnx",
        "tests/fixtures/mlp_d01_aot.onnx",
    ] {
        let a = analyse(
            import_file(&root().join(model)).unwrap(),
            &ckpt_planner::AnalyseOptions::with_bindings(b.clone()),
        )
        .unwrap();
        let cands = candidates(&a.graph, &a.sim, &a.types, &b);
        let prob = problem(&a.sim, &cands, 0);
        let n = cands.list.len();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..30 {
            let mut set = vec![false; n];
            for _ in 0..2 + next() % 40 {
                set[(next() % n as u64) as usize] = true;
            }
            let patch = rewrite(&a.graph, &cands, &plan_of(&prob, set.clone()), "random");
            let mut g2 = a.graph.clone();
            patch.apply(&mut g2).unwrap();
            let predicted = simulate(&g2, &schedule(&g2).unwrap(), &b)
                .unwrap()
                .peak_live;
            let inputs = make_inputs(&g2, &b, 7, &o, &[]).unwrap().0;
            let measured = measure_peak(Model::new("random", &export_bytes(&g2)), &inputs, &cfg)
                .unwrap()
                .peak_bytes;
            let err = (predicted as f64 - measured as f64).abs() / measured as f64;
            let chosen: Vec<usize> = (0..n).filter(|&i| set[i]).collect();
            if predicted != measured {
                // Name where ORT's arena peaks and where the simulation does, for the fix.
                let sim = simulate(&g2, &schedule(&g2).unwrap(), &b).unwrap();
                let located = ckpt_runtime::locate_peak(
                    Model::new("random", &export_bytes(&g2)),
                    &inputs,
                    &cfg,
                );
                panic!(
                    "{model} {chosen:?}: predicted {predicted}, measured {measured} ({:.3}%); simulated peak at `{}`, ORT's at {located:?}",
                    err * 100.0,
                    g2.node(sim.schedule.order[sim.peak_step]).name
                );
            }
            total += 1;
            exact += usize::from(predicted == measured);
            worst = worst.max(err);
        }
    }
    eprintln!(
        "random plans: {exact} of {total} exact, worst {:.2}%",
        worst * 100.0
    );
    assert_eq!(exact, total);
}
