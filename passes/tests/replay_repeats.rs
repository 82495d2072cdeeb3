//! `replay` skips a run that repeats the one before it (outputs released, the arena laid out
//! the same after the run's first request). On the fixtures, under every profile the flags
//! name and at caps around the need, it returns what playing every run returns.

use ckpt_ir::profile::Profile;
use ckpt_ir::Bindings;
use ckpt_passes::device::{device_need, replay, replay_in_full};
use ckpt_passes::memory::{schedule, simulate};

#[test]
fn skipping_repeated_runs_changes_nothing() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    for name in [
        "t5_d0_makefx",
        "resnet18_d0_aot",
        "gpt2_d0_aot",
        "hfgpt2_d01_makefx",
        "mlp_d01_aot",
        "vit_d0_aot",
    ] {
        let g = ckpt_ir::import_file(&root.join(format!("{name}.onnx"))).unwrap();
        let sim = simulate(&g, &schedule(&g).unwrap(), &Bindings::new()).unwrap();
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
