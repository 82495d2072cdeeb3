//! CI's slice of the fuzzer (`examples/fuzz.rs`, `docs/fuzzing.md`): 2000 seeded executions
//! over every fixture and example through import → analyse → candidates, no panics; and every
//! minimized crash the fuzzer ever found, kept in `tests/fuzz_regressions/`, comes out as
//! `Ok` or an error through the whole main job.

mod common;

use std::time::Duration;

use ckpt_opt::mutate::{corpus, fuzz, panics, Depth, FuzzOptions};
use common::root;

#[test]
fn a_seeded_slice_of_the_fuzzer_finds_no_panic() {
    let seeds = corpus(&[&root().join("tests/fixtures"), &root().join("examples")]).unwrap();
    assert!(seeds.len() >= 16, "{} seed models", seeds.len());
    let opts = FuzzOptions {
        seed: 20261129,
        execs: 2000,
        depth: Depth::Candidates,
        ..FuzzOptions::default()
    };
    let r = fuzz(&seeds, &opts);
    eprintln!(
        "{} execs in {:.1} s: {} refused at import, {} at analysis, {} through",
        r.execs,
        r.elapsed.as_secs_f64(),
        r.refused_at_import,
        r.refused_at_analysis,
        r.through
    );
    assert_eq!(r.execs, 2000);
    // The slice reaches every stage: the mutations are not all rejected at the door.
    assert!(r.through > 100, "only {} inputs got through", r.through);
    assert!(r.refused_at_import > 0 && r.refused_at_analysis > 0);
    let found: Vec<_> = r
        .crashes
        .iter()
        .map(|c| format!("exec {}: {}", c.exec, c.message))
        .collect();
    assert!(found.is_empty(), "panics: {found:?}");
}

#[test]
fn fuzz_regressions_do_not_panic() {
    let dir = root().join("tests/fuzz_regressions");
    let cases = corpus(&[&dir]).unwrap();
    for (name, bytes) in &cases {
        let p = panics(bytes, Depth::Plan, Duration::from_secs(2));
        assert!(p.is_none(), "{name}: {p:?}");
    }
}
