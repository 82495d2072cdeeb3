//! Size alone never crashes: every graph walk is iterative, so a chain far deeper than any
//! thread's stack is imported and analysed (the bench times it: `cargo bench --bench scale
//! chain_200k`).

use std::path::Path;

use ckpt_planner::{analyse, AnalyseOptions};

/// A 200,000-node chain (a recursive DFS overflowed the stack from about 75,000): imported,
/// checked for cycles and analysed, on a test thread's default 2 MiB stack.
#[test]
fn a_200k_node_chain_is_imported_and_analysed() {
    const LINKS: usize = 200_000;
    let bytes = ckpt_ir::build::chain(LINKS).bytes();
    let g = ckpt_ir::import_bytes(bytes.into(), Path::new("chain.onnx"), None).unwrap();
    assert_eq!(g.node_count(), LINKS + 1);
    let a = analyse(g, &AnalyseOptions::default()).unwrap();
    assert_eq!(a.graph.node_count(), LINKS + 1);
    assert!(a.ledger.total_bytes > 0);
}
