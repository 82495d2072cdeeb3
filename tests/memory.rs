//! The memory model against ONNX Runtime: emulated order == profiled order, and predicted
//! peak vs measured arena peak on every standard fixture.

mod common;

use ckpt_ir::{import_file, Bindings};
use ckpt_passes::memory::{schedule, simulate};
use ckpt_runtime::{measure_peak, profile_order, Arena, Model, OptLevel, SessionConfig};
use ckpt_validate::inputs::{make_inputs, InputOverrides};
use common::*;

fn inputs_for(g: &ckpt_ir::Graph) -> Vec<ckpt_runtime::HostTensor> {
    let o = InputOverrides::parse(&[], &["attention_mask=1:2".to_string()]).unwrap();
    make_inputs(g, &Bindings::new(), 7, &o, &[]).unwrap().0
}

#[test]
fn emulated_order_matches_ort_profile_on_every_std_fixture() {
    for f in std_fixtures() {
        let g = import_file(&f.path).unwrap();
        let s = schedule(&g).unwrap();
        let bytes = std::fs::read(&f.path).unwrap();
        let cfg = SessionConfig {
            opt_level: OptLevel::Disable,
            intra_threads: Some(1),
            ..Default::default()
        };
        let events = profile_order(Model::new(&f.name, &bytes), &inputs_for(&g), &cfg).unwrap();
        let profiled: Vec<String> = events.iter().map(|e| e.node_name.clone()).collect();
        let emulated: Vec<String> = s.order.iter().map(|&n| g.node(n).name.clone()).collect();
        assert_eq!(profiled.len(), emulated.len(), "{}: node count", f.name);
        assert_eq!(
            profiled, emulated,
            "{}: ORT's order differs from the emulation",
            f.name
        );
    }
}

/// One step's peak, predicted to the byte on every standard fixture: on the always-splitting
/// arena (live tensors rounded to 256 B) and on ORT's own session arena (the BFC replay).
#[test]
fn predicted_peak_equals_measured_on_every_std_fixture() {
    for f in std_fixtures() {
        let g = import_file(&f.path).unwrap();
        let sim = simulate(&g, &schedule(&g).unwrap(), &Bindings::new()).unwrap();
        let bytes = std::fs::read(&f.path).unwrap();
        let inputs = inputs_for(&g);
        for (arena, predicted) in [
            (Arena::Exact, sim.peak_live),
            (Arena::Session, sim.arena_peak()),
        ] {
            let cfg = SessionConfig {
                opt_level: OptLevel::Disable,
                arena,
                ..Default::default()
            };
            let measured = measure_peak(Model::new(&f.name, &bytes), &inputs, &cfg)
                .unwrap()
                .peak_bytes;
            let ratio = predicted as f64 / measured as f64;
            eprintln!(
                "{:<24} {arena:?}: predicted {predicted} measured {measured} ratio {ratio:.4}",
                f.name
            );
            assert_eq!(
                predicted, measured,
                "{} {arena:?}: predicted {predicted}, measured {measured}",
                f.name
            );
        }
    }
}

/// `Where` takes X and Y broadcast to the condition's shape from the arena before its output
/// (ORT's kernel scratch): with a scalar Y that is a condition-sized block, with a smaller X a
/// condition-sized copy of it. Predicted to the byte, and the scratch is what makes it so.
#[test]
fn where_scratch_is_predicted_to_the_byte() {
    use ckpt_ir::build::ModelBuilder;
    use ckpt_ir::DType;
    let bytes = ModelBuilder::new(17)
        .input("c", DType::Bool, "8,16,64")
        .input("x", DType::F32, "16,64")
        .init_f32("y", &[], &[-1.0])
        .node("Sigmoid", &["x"], &["xs"])
        .node("Where", &["c", "xs", "y"], &["w"])
        .node("Relu", &["w"], &["r"])
        .output("r", DType::F32, "8,16,64")
        .bytes();
    let g = ckpt_ir::import_bytes(
        bytes.clone().into(),
        std::path::Path::new("where.onnx"),
        None,
    )
    .unwrap();
    let (g, _) = ckpt_planner::with_inferred_types(g).unwrap();
    let sim = simulate(&g, &schedule(&g).unwrap(), &Bindings::new()).unwrap();
    let o = InputOverrides::parse(&[], &[]).unwrap();
    let inputs = make_inputs(&g, &Bindings::new(), 7, &o, &[]).unwrap().0;
    let cfg = SessionConfig {
        opt_level: OptLevel::Disable,
        arena: Arena::Exact,
        ..Default::default()
    };
    let measured = measure_peak(Model::new("where", &bytes), &inputs, &cfg)
        .unwrap()
        .peak_bytes;
    assert_eq!(sim.peak_live, measured);
    // Sigmoid's output (4 KiB) + Where's output (32 KiB) + two condition-sized copies (32 KiB
    // each) at the Where step.
    let k = 8 * 16 * 64 * 4;
    assert_eq!(sim.peak_live, 16 * 64 * 4 + k + 2 * k);
    // ORT agrees on where: its arena, limited to just under the peak, fails at the Where.
    let located = ckpt_runtime::locate_peak(Model::new("where", &bytes), &inputs, &cfg).unwrap();
    assert_eq!(
        (located.node.as_str(), located.op.as_str()),
        ("Where_w", "Where"),
        "{located:?}"
    );
    assert_eq!(g.node(sim.schedule.order[sim.peak_step]).name, located.node);
}
