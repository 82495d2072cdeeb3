//! Synthetic transformer-like problems at 12 and 48 layers: model size, ILP
//! solve time, status, gap, and how the baselines compare.
//!
//! `[FRACTIONS=0.7,0.5] [DEPTH=n] [CBC=key=value,...] cargo bench -p ckpt-solver --bench scale [-- LAYERS...]`
//!
//! Columns: activation budget as a fraction of the unrecomputed activation
//! peak; candidates; steps; segments; kept memory rows; binaries and
//! continuous variables of the last round; refinement rounds; greedy and
//! ILP wall seconds (the ILP's includes its own greedy warm start); ILP
//! status (`fb:` = fell back to the greedy plan) and gap; costs in MFLOP of
//! the ILP, greedy and per-block plans; greedy cost / ILP cost.

use std::time::Instant;

use ckpt_solver::*;

/// Deterministic xorshift, so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `layers` blocks of `per_layer` activations. Forward: one step per
/// activation; each is read by the next op (and every 8th by the block's
/// residual add at the block's end). Backward: three steps per activation in
/// reverse; activation j of layer l is needed at the backward op of j.
/// Recomputing j reads j-1 (the previous block's last for j = 0) and, for
/// every 8th, the block's first. Sizes: hidden-sized, with 4x MLP and
/// attention-score activations; costs: matmuls dominate.
fn transformer(layers: usize, per_layer: usize, budget_fraction: f64, seed: u64) -> Problem {
    let mut rng = Rng(seed);
    let hidden: u64 = 8 << 20; // 8 MiB per hidden-sized activation
    let fwd_steps = layers * per_layer;
    let bw = 3;
    let loss = fwd_steps + 2;
    let t_len = loss + layers * per_layer * bw + 4;
    let mut candidates = Vec::new();
    for l in 0..layers {
        for j in 0..per_layer {
            let produced = l * per_layer + j;
            let (bytes, cost, transient) = match j % 10 {
                3 => (hidden * 4, 40, hidden),            // attention scores
                6 | 7 => (hidden * 4, 8, 0),              // MLP hidden
                2 | 5 => (hidden, 64 + rng.below(16), 0), // matmul outputs
                _ => (hidden, 2 + rng.below(3), 0),       // elementwise / norms
            };
            let last_fwd_use = if j % 8 == 0 {
                (l + 1) * per_layer - 1
            } else {
                produced + 1
            };
            let needed_at = loss + 1 + ((layers - 1 - l) * per_layer + (per_layer - 1 - j)) * bw;
            let mut deps = Vec::new();
            let idx = candidates.len();
            if idx > 0 {
                deps.push(idx - 1);
            }
            if j > 0 && j % 8 == 0 {
                deps.push(l * per_layer);
            }
            candidates.push(Candidate {
                label: format!("l{l}.a{j}"),
                bytes,
                cost: cost * 1_000_000,
                free_from: (last_fwd_use + 1).min(needed_at),
                needed_at,
                deps,
                transient,
                block: Some(l as u32),
            });
        }
    }
    // Base: weights/optimizer background + every activation from production
    // to its backward use + a gradient working set in backward.
    let background: u64 = 500 << 20;
    let mut base_live = vec![background; t_len];
    let mut delta = vec![0i128; t_len + 1];
    for (i, c) in candidates.iter().enumerate() {
        let produced = i;
        delta[produced] += c.bytes as i128;
        delta[(c.needed_at + bw).min(t_len)] -= c.bytes as i128;
    }
    let mut acc = 0i128;
    for (t, b) in base_live.iter_mut().enumerate() {
        acc += delta[t];
        *b += acc as u64;
        if t > loss {
            *b += hidden * 2 + rng.below(hidden);
        }
    }
    let peak = *base_live.iter().max().unwrap();
    let activations = peak - background;
    let ceiling = background + (activations as f64 * budget_fraction) as u64;
    Problem {
        base_live,
        candidates,
        ceiling,
    }
}

fn cost_of(r: &Result<Plan, SolveError>) -> String {
    match r {
        Ok(p) => format!("{}", p.cost / 1_000_000),
        Err(SolveError::DoesNotFit { .. }) => "no fit".into(),
        Err(e) => format!("{e:?}").chars().take(20).collect(),
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let layer_counts = if args.is_empty() { vec![12, 48] } else { args };
    // FRACTIONS=0.7,0.5 picks the activation budgets (fraction of the unrecomputed activation peak).
    let fractions: Vec<f64> = std::env::var("FRACTIONS")
        .ok()
        .map(|f| f.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![0.7, 0.5, 0.3]);
    // CBC=key=value,key=value passes extra CBC parameters (for experiments).
    let mut options = IlpOptions::default();
    // DEPTH=n sets the first round's rematerialisation depth.
    if let Some(d) = std::env::var("DEPTH").ok().and_then(|d| d.parse().ok()) {
        options.initial_depth = d;
    }
    if let Ok(extra) = std::env::var("CBC") {
        for kv in extra.split(',').filter(|kv| !kv.is_empty()) {
            if let Some((k, v)) = kv.split_once('=') {
                options.cbc_parameters.push((k.into(), v.into()));
            }
        }
    }
    println!(
        "{:>6} {:>5} {:>5} {:>5} {:>5} {:>6} {:>7} {:>7} {:>6} {:>8} {:>8} {:>10} {:>6} {:>9} {:>9} {:>9} {:>7}",
        "layers", "frac", "cands", "steps", "segs", "rows", "bins", "conts", "rounds", "greedy_s", "ilp_s", "status", "gap",
        "ilp_cost", "greedy", "per_blk", "g/ilp"
    );
    for &layers in &layer_counts {
        for frac in fractions.iter().copied() {
            let p = transformer(layers, 40, frac, 0x9E37_79B9_7F4A_7C15 ^ layers as u64);
            let t0 = Instant::now();
            let greedy = solve_greedy(&p);
            let greedy_s = t0.elapsed().as_secs_f64();
            let per_block = solve_per_block(&p);
            let t1 = Instant::now();
            let ilp = solve_ilp_with(&p, &options);
            let ilp_s = t1.elapsed().as_secs_f64();
            let (size, status, gap, ilp_cost) = match &ilp {
                Ok(plan) => {
                    assert!(plan.check(&p), "ILP plan does not re-evaluate");
                    let status: String = match (&plan.info.fallback, plan.info.status) {
                        (Some(f), _) => format!("fb:{f:?}").chars().take(10).collect(),
                        (None, s) => format!("{s:?}").chars().take(10).collect(),
                    };
                    (plan.info.model, status, plan.info.gap, plan.cost)
                }
                Err(e) => {
                    println!("{layers} layers, fraction {frac}: {e}");
                    continue;
                }
            };
            let ratio = match &greedy {
                Ok(g) if ilp_cost > 0 => format!("{:.3}", g.cost as f64 / ilp_cost as f64),
                _ => "-".into(),
            };
            println!(
                "{:>6} {:>5} {:>5} {:>5} {:>5} {:>6} {:>7} {:>7} {:>6} {:>8.3} {:>8.3} {:>10} {:>6.4} {:>9} {:>9} {:>9} {:>7}",
                layers,
                frac,
                p.candidates.len(),
                p.steps(),
                size.segments,
                size.memory_rows,
                size.binaries,
                size.continuous,
                size.rounds,
                greedy_s,
                ilp_s,
                status,
                gap,
                ilp_cost / 1_000_000,
                cost_of(&greedy),
                cost_of(&per_block),
                ratio
            );
        }
    }
}
