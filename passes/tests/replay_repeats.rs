//! `replay` skips a run that repeats the one before it (outputs released, the arena laid out
//! the same after the run's first request). On the fixtures, under every profile the flags
//! name and at caps around the need, it returns what playing every run returns.

use ckpt_ir::profile::Profile;
use ckpt_ir::Bindings;
use ckpt_passes::device::{
    device_need, device_need_below, device_need_within, replay, replay_in_full,
};
use ckpt_passes::memory::{schedule, simulate};

/// The fixture `name`'s simulation (default bindings).
fn simulated(name: &str) -> ckpt_passes::memory::Simulation {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let g = ckpt_ir::import_file(&root.join(format!("{name}.onnx"))).unwrap();
    simulate(&g, &schedule(&g).unwrap(), &Bindings::new()).unwrap()
}

#[test]
fn skipping_repeated_runs_changes_nothing() {
    for name in [
        "t5_d0_makefx",
        "resnet18_d0_aot",
        "gpt2_d0_aot",
        "hfgpt2_d01_makefx",
        "mlp_d01_aot",
        "vit_d0_aot",
    ] {
        let sim = simulated(name);
        for p in Profile::every_flag_combination() {
            let need = device_need(&sim, &p);
            let n = need.arena_bytes;
            for cap in [
                None,
                Some(n),
                Some(n - 256),
                Some(need.uncapped.in_use_peak),
                Some(n / 2),
                Some(2 * n),
            ] {
                assert_eq!(
                    replay(&sim, &p, cap),
                    replay_in_full(&sim, &p, cap),
                    "{name} under {} capped at {cap:?}",
                    p.describe()
                );
            }
        }
    }
}

/// `device_need_below` answers exactly when the need is below its limit, with
/// `device_need`'s answer, and stops without one otherwise; `device_need_within` says whether
/// the need is at most its bound: on the fixtures under every profile the flags name, at
/// limits around the need and far off it.
#[test]
fn the_bounded_need_is_the_need_below_its_limit() {
    let mut training = Profile {
        ort_version: ckpt_ir::ort::TRAINING_ORT_VERSION,
        ..Profile::default()
    };
    training.steps = 3;
    for name in [
        "t5_d0_makefx",
        "resnet18_d0_aot",
        "gpt2_d0_aot",
        "mlp_d01_aot",
    ] {
        let sim = simulated(name);
        let mut profiles = Profile::every_flag_combination();
        profiles.push(training.clone());
        for p in profiles {
            let need = device_need(&sim, &p);
            let n = need.arena_bytes;
            for limit in [0, 256, n - 256, n, n + 1, n + 256, 2 * n, u64::MAX] {
                let bounded = device_need_below(&sim, &p, limit);
                let label = format!("{name} under {} below {limit}", p.describe());
                if n < limit {
                    assert_eq!(bounded.as_ref(), Some(&need), "{label}");
                } else {
                    assert_eq!(bounded, None, "{label}");
                }
                // The yes-or-no question stops at either end, with the need's answer.
                assert_eq!(
                    device_need_within(&sim, &p, limit),
                    n <= limit,
                    "{name} under {} within {limit}",
                    p.describe()
                );
            }
        }
    }
}
