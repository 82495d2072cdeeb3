//! The memory simulator's rules, each pinned on a hand-built graph of a few nodes written in
//! the text form, with the bytes worked out by hand. `f32[64]` is 256 bytes: one arena unit.

use ckpt_ir::{parse_graph, Graph, TensorId};
use ckpt_passes::memory::{schedule, simulate, Simulation};

fn run(text: &str) -> (Graph, Simulation) {
    let g = parse_graph(text).unwrap();
    let s = simulate(&g, &schedule(&g).unwrap(), &Default::default()).unwrap();
    (g, s)
}

fn t(g: &Graph, name: &str) -> TensorId {
    g.tensor_id(name).unwrap()
}

/// A buffer is released after the last reader of the last value placed in it: `c` takes the
/// buffer `a` freed in the planner, so the buffer lives from `a` (step 0) to `c`'s reader
/// `d` (step 3). Live: 256 (A) | 512 (A, B) | 512 (c in A) | 768 (A, B, D).
#[test]
fn a_buffer_is_released_after_the_last_reader_of_its_last_value() {
    let (g, s) = run(r#"
input %0 "x": f32[64]
%1 "a": f32[64] = Exp(%0)
%2 "b": f32[64] = Exp(%1)
%3 "c": f32[64] = Add(%2, %0)
%4 "d": f32[64] = Add(%3, %2)
output %4 "d"
"#);
    let a = s.buffer_of[t(&g, "a").index()].unwrap();
    assert_eq!(s.buffer_of[t(&g, "c").index()], Some(a));
    assert_eq!(s.buffers[a].values, vec![t(&g, "a"), t(&g, "c")]);
    assert_eq!(
        (s.buffers[a].alloc_step, s.buffers[a].free_after),
        (0, Some(3))
    );
    assert_eq!(s.live, vec![256, 512, 512, 768]);
    assert_eq!((s.peak_live, s.peak_step, s.arena_peak()), (768, 3, 768));
}

/// A graph output gets its own buffer held to the end: `y` is an output read only at step 1,
/// yet its buffer is never released and never reused. Live: 256 | 512 | 768.
#[test]
fn a_graph_output_gets_its_own_buffer_held_to_the_end() {
    let (g, s) = run(r#"
input %0 "x": f32[64]
%1 "y": f32[64] = Exp(%0)
%2 "z": f32[64] = Exp(%1)
%3 "w": f32[64] = Exp(%2)
output %1 "y"
output %3 "w"
"#);
    let b = |n| s.buffer_of[t(&g, n).index()].unwrap();
    assert_eq!(s.buffers.len(), 3);
    assert_eq!(s.buffers[b("y")].free_after, None);
    assert_eq!(s.buffers[b("w")].free_after, None);
    assert_eq!(s.buffers[b("z")].free_after, Some(2));
    assert_eq!(s.live, vec![256, 512, 768]);
    assert_eq!(s.arena_peak(), 768);
}

/// An in-place op takes its input's buffer only when it is the input's last reader and the
/// sizes match: `t = Tanh(a)` is `a`'s last reader (takes A); `u = Tanh(t)` is not `t`'s
/// (new U). Live: 256 (A) | 256 (t in A) | 512 (A, U) | 768 (A, U, V).
#[test]
fn an_in_place_op_takes_its_input_buffer_only_as_last_reader() {
    let (g, s) = run(r#"
input %0 "x": f32[64]
%1 "a": f32[64] = Exp(%0)
%2 "t": f32[64] = Tanh(%1)
%3 "u": f32[64] = Tanh(%2)
%4 "v": f32[64] = Add(%2, %3)
output %4 "v"
"#);
    let b = |n| s.buffer_of[t(&g, n).index()];
    assert_eq!(b("t"), b("a"));
    assert_ne!(b("u"), b("t"));
    assert_eq!(s.live, vec![256, 256, 512, 768]);
}

/// An in-place op whose output size differs does not take its input's buffer: `Cast` to f16
/// (128 bytes, one 256-byte unit) from f32 (256) gets a new buffer even as the last reader.
/// Live: 256 (A) | 512 (A, H) | 512 (H, O).
#[test]
fn an_in_place_op_needs_matching_sizes() {
    let (g, s) = run(r#"
input %0 "x": f32[64]
%1 "a": f32[64] = Exp(%0)
%2 "h": f16[64] = Cast(%1) {to=10}
%3 "o": f16[64] = Exp(%2)
output %3 "o"
"#);
    let b = |n| s.buffer_of[t(&g, n).index()];
    assert_ne!(b("h"), b("a"));
    assert_eq!(s.tensor_bytes[t(&g, "h").index()], 128);
    assert_eq!(s.live, vec![256, 512, 512]);
}

/// Freed-buffer reuse needs exactly the same shape, not just the same bytes: `c: f32[64]`
/// does not take the freed buffer of `a: f32[8,8]` (also 256 bytes). Five buffers; live
/// 256 | 512 | 512 | 512 | 512 (the rank-0 `s` rounds up to 256).
#[test]
fn freed_buffer_reuse_needs_the_same_shape() {
    let (g, s) = run(r#"
input %0 "x": f32[8,8]
input %1 "y": f32[64]
%2 "a": f32[8,8] = Exp(%0)
%3 "b": f32[8,8] = Exp(%2)
%4 "s": f32[] = ReduceSum(%3) {keepdims=0}
%5 "c": f32[64] = Mul(%1, %4)
%6 "e": f32[64] = Exp(%5)
output %6 "e"
"#);
    let b = |n| s.buffer_of[t(&g, n).index()].unwrap();
    assert_eq!(s.buffers.len(), 5);
    assert_ne!(b("c"), b("a"));
    assert_eq!(s.buffers[b("a")].free_after, Some(1));
    assert_eq!(s.live, vec![256, 512, 512, 512, 512]);
}

/// Freed-buffer reuse takes the most recently freed buffer of the same shape: the contrast of
/// the test above, `c: f32[8,8]` takes `b`'s buffer (freed after step 2), not `a`'s (freed
/// after step 1). Four buffers; live 256 | 512 | 512 | 512 | 512.
#[test]
fn freed_buffer_reuse_takes_the_most_recently_freed_of_the_shape() {
    let (g, s) = run(r#"
input %0 "x": f32[8,8]
input %1 "y": f32[8,8]
%2 "a": f32[8,8] = Exp(%0)
%3 "b": f32[8,8] = Exp(%2)
%4 "s": f32[] = ReduceSum(%3) {keepdims=0}
%5 "c": f32[8,8] = Mul(%1, %4)
%6 "e": f32[8,8] = Exp(%5)
output %6 "e"
"#);
    let b = |n| s.buffer_of[t(&g, n).index()].unwrap();
    assert_eq!(s.buffers.len(), 4);
    assert_eq!(b("c"), b("b"));
    assert_eq!(s.live, vec![256, 512, 512, 512, 512]);
}

/// A never-read value never takes a freed buffer, and its buffer stays to the end: the dead
/// `n` runs last (order a, b, o, n: the higher-index leaf `o` first), when `a`'s buffer is
/// free and of its shape; it gets a new one. Step 0: A; step 1: A + B, then A is freed;
/// step 2: B + O; step 3: B + O + N, then B is freed. Live: 256 | 512 | 512 | 768.
#[test]
fn a_never_read_value_never_takes_a_freed_buffer() {
    let (g, s) = run(r#"
input %0 "x": f32[64]
%1 "a": f32[64] = Exp(%0)
%2 "b": f32[64] = Exp(%1)
%3 "n": f32[64] = Exp(%2)
%4 "o": f32[64] = Exp(%2)
output %4 "o"
"#);
    let names: Vec<&str> = s
        .schedule
        .order
        .iter()
        .map(|&n| {
            g.node(n).outputs[0]
                .map(|t| g.tensor(t).name.as_str())
                .unwrap()
        })
        .collect();
    assert_eq!(names, ["a", "b", "o", "n"]);
    let b = |n| s.buffer_of[t(&g, n).index()].unwrap();
    assert_ne!(b("n"), b("a"));
    assert_eq!(s.buffers[b("n")].free_after, None);
    assert_eq!(s.live, vec![256, 512, 512, 768]);
}

/// Where copies X and Y broadcast to the condition's shape into two scratch buffers, live in
/// its step beside its output: cond `bool[64]`, X `f32[64]`, Y `f32[1]` → two 256-byte
/// scratch buffers and a 256-byte output: 768 live, 768 arena. (Before or after the output
/// is not visible in these numbers: the scratch has the output's size, so either order
/// gives the BFC arena the same chunks.)
#[test]
fn where_scratch_is_live_with_its_output() {
    let (_, s) = run(r#"
input %0 "cond": bool[64]
input %1 "x": f32[64]
input %2 "y": f32[1]
%3 "w": f32[64] = Where(%0, %1, %2)
output %3 "w"
"#);
    assert_eq!(s.live, vec![768]);
    assert_eq!(s.arena_peak(), 768);
}

/// With the graph outputs bound outside the arena, the arena's in-use peak is where the
/// buffers that hold no graph output peak ([`ckpt_passes::ledger::arena_peak_step`]), not the
/// run's peak counting the outputs (`Simulation::peak_step`), which pile up at the end. In
/// units of 256 B: t (3) | t, u (6) | u, o1 (3 + 3 out) | o1, o3 (6 out) | o1, o3, o2 (9 out):
/// the run peaks at step 4, the arena at step 1 (the earliest of its 6).
#[test]
fn the_arenas_peak_leaves_out_the_bound_outputs() {
    let (g, s) = run(r#"
input %0 "x": f32[192]
%1 "t": f32[192] = Exp(%0)
%2 "u": f32[192] = Neg(%1)
%3 "o1": f32[192] = Exp(%2)
%4 "o2": f32[192] = Neg(%3)
%5 "o3": f32[192] = Abs(%3)
output %3 "o1"
output %4 "o2"
output %5 "o3"
"#);
    assert_eq!(s.live, [768, 1536, 1536, 1536, 2304]);
    assert_eq!(s.peak_step, 4);
    assert_eq!(ckpt_passes::ledger::arena_peak_step(&g, &s), 1);
}
