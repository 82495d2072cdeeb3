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

/// `binding` names the request the steps fail at in the largest arena below their need that
/// they fail in: on the fixtures under every profile the flags name, the replay capped there
/// fails at that
/// step, with a request no free chunk holds, while the need itself runs.
#[test]
fn the_binding_request_is_where_the_largest_arena_below_the_need_fails() {
    use ckpt_passes::device::binding;
    let (mut by_layout, mut by_use) = (0, 0);
    for name in [
        "t5_d0_makefx",
        "resnet18_d0_aot",
        "gpt2_d0_aot",
        "mlp_d01_aot",
    ] {
        let sim = simulated(name);
        let mut layout_bound = 0;
        for p in Profile::every_flag_combination() {
            let label = format!("{name} under {}", p.describe());
            let n = device_need(&sim, &p).arena_bytes;
            assert!(replay(&sim, &p, Some(n)).failed.is_none(), "{label}");
            let Some(b) = binding(&sim, &p, n) else {
                // Loading's chunks fail first, or every arena it tries runs.
                for k in 1..=ckpt_passes::device::BINDING_UNITS {
                    let r = replay(&sim, &p, Some(n - 256 * k));
                    assert!(r.failed_event.is_none(), "{label}");
                }
                continue;
            };
            // The largest failing arena below the need: every arena between it and the need runs.
            assert!(
                b.arena_bytes < n && (n - b.arena_bytes) % 256 == 0,
                "{label}: {b:?}"
            );
            for cap in (b.arena_bytes + 256..n).step_by(256) {
                assert!(
                    replay(&sim, &p, Some(cap)).failed.is_none(),
                    "{label}: {cap}"
                );
            }
            let r = replay(&sim, &p, Some(b.arena_bytes));
            let e = &sim.arena_events[r.failed_event.unwrap()];
            assert_eq!((e.step, r.failed.unwrap().0), (b.step, b.run), "{label}");
            assert!(e.alloc && b.requested >= e.bytes, "{label}: {b:?}");
            assert!(b.largest_free < b.requested, "{label}: {b:?}");
            assert!(b.largest_free <= b.free, "{label}: {b:?}");
            assert!(b.run < p.steps.max(1) as usize, "{label}: {b:?}");
            layout_bound += usize::from(b.free >= b.requested);
            by_use += usize::from(b.free < b.requested);
        }
        eprintln!("{name}: {layout_bound} profiles bound by the layout");
        by_layout += layout_bound;
    }
    // Both happen: a request failing with its bytes free in pieces, and one failing short.
    assert!(by_layout > 0 && by_use > 0, "{by_layout} {by_use}");
}
