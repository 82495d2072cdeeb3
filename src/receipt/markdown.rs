//! The receipt as a reviewer reads it (`--receipt-md`): one Markdown page rendered from the
//! [`Receipt`] value alone, so it says nothing the JSON does not.
//!
//! Its sections, always in this order: the job (model, shape, profile, ceiling), what was
//! predicted, what was measured on ONNX Runtime (or that nothing was), and what was not
//! covered: unbound dims and other shapes, other execution modes, a FLOP cost model,
//! activations the op policy keeps.

use std::fmt::Write;

use super::{ArenaBinding, Receipt, Status};
use crate::size::human;
use ckpt_validate::measured_cost::CostKind;

/// The Markdown summary of `r`.
pub fn render(r: &Receipt) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# ckpt-opt receipt: `{}`\n", r.model.path);
    let _ = writeln!(s, "- **Status:** {}", status(r.status));
    if let Some(reason) = &r.reason {
        let _ = writeln!(s, "- **Reason:** {reason}");
    }
    if let Some(d) = &r.diagnosis {
        let _ = writeln!(s, "- **Diagnosis:** {}", d.message);
    }
    let _ = writeln!(
        s,
        "- **Model:** `{}` (sha256 `{}`)",
        r.model.path, r.model.sha256
    );
    if let Some(o) = &r.output {
        let _ = writeln!(s, "- **Output:** `{}` (sha256 `{}`)", o.path, o.sha256);
    }
    let _ = writeln!(s, "- **Shape:** {}", shape(r));
    let _ = writeln!(s, "- **Deployment profile:** {}", r.profile_description);
    let _ = writeln!(
        s,
        "- **Ceiling:** {} ({} B), reserve {}%",
        r.ceiling, r.ceiling_bytes, r.reserve_percent
    );
    let _ = writeln!(s, "- **Cost model:** {}", cost_model(r.cost_model));

    let _ = writeln!(s, "\n## Predicted (simulated under the profile)\n");
    let _ = writeln!(s, "| quantity | before | after |\n|---|---:|---:|");
    let rows = [
        ("device total (fixed + arena)", &r.predicted_peak_bytes),
        ("arena need", &r.predicted_device_arena_bytes),
        ("in-use peak", &r.predicted_in_use_bytes),
    ];
    for (name, v) in rows {
        if let Some(v) = v {
            let _ = writeln!(s, "| {name} | {} | {} |", human(v.before), human(v.after));
        }
    }
    if let Some(b) = &r.arena_binding {
        let at = |b: &Option<ArenaBinding>| {
            b.as_ref().map_or("-".to_string(), |b| {
                format!(
                    "`{}`: {} asked, {} free, largest chunk {}{}",
                    b.node,
                    human(b.requested_bytes),
                    human(b.free_bytes),
                    human(b.largest_free_bytes),
                    if b.layout_bound { " (layout)" } else { "" }
                )
            })
        };
        let _ = writeln!(
            s,
            "| where the need is decided | {} | {} |",
            at(&b.before),
            at(&b.after)
        );
    }
    let _ = writeln!(
        s,
        "\n- Nodes cloned: {}, moved: {}; candidates: {}",
        r.nodes_cloned,
        r.nodes_moved,
        r.candidates
            .map_or("none searched".to_string(), |c| c.to_string())
    );
    let _ = writeln!(
        s,
        "- Added FLOPs: {}{}",
        r.added_flops,
        r.added_flops_percent
            .map_or(String::new(), |p| format!(" ({p:.2}% of a step)"))
    );
    if let Some(m) = &r.measured_cost {
        let _ = writeln!(
            s,
            "- Added kernel time (predicted from ORT's profile): {:.3} ms of a {:.3} ms step ({} timed runs, median per node, on {})",
            m.predicted_added_ms,
            m.step_kernel_ms,
            m.runs,
            m.providers.join(", ")
        );
    }
    if let Some(solver) = &r.solver {
        let _ = writeln!(
            s,
            "- Solver: {}{}{}",
            solver.label,
            solver
                .planned_again_from_bytes
                .map_or(String::new(), |b| format!(
                    " (the first plan's device total: {})",
                    human(b)
                )),
            if solver.time_limit_hit {
                "; the time limit stopped part of the search"
            } else {
                ""
            }
        );
    }

    if let Some(h) = &r.loss_head {
        let _ = writeln!(
            s,
            "- Loss head: `{}` and the {} nodes reading it row by row in {} chunks of {} rows{}; the loss and the head's weight gradient are summed in another order, so they are compared within tolerances, not bit for bit",
            h.logits,
            h.region_nodes,
            h.chunks,
            h.rows_per_chunk,
            if h.summed_in_place {
                ", its weight gradient summed in place (`com.microsoft.FusedConv`)"
            } else {
                ""
            }
        );
    }

    if let Some(t) = &r.tied_gradients {
        let names: Vec<String> = t.gradients.iter().map(|g| format!("`{g}`")).collect();
        let _ = writeln!(
            s,
            "- Shared weights' gradients: {} scattered into one another; a row two tokens hit is summed in another order, so they are compared within tolerances, not bit for bit",
            names.join(", ")
        );
    }

    let _ = writeln!(s, "\n## Measured on ONNX Runtime\n");
    measured(&mut s, r);

    let _ = writeln!(s, "\n## Not covered\n");
    for line in not_covered(r) {
        let _ = writeln!(s, "- {line}");
    }
    s
}

fn status(s: Status) -> &'static str {
    match s {
        Status::AlreadyFits => "already fits (nothing recomputed)",
        Status::Rewritten => "rewritten",
        Status::CeilingCannotBeMet => "the ceiling cannot be met",
        Status::ValidationFailed => "validation failed (nothing written)",
        Status::NotValidated => "validation could not run (nothing written)",
    }
}

fn cost_model(k: CostKind) -> &'static str {
    match k {
        CostKind::Flops => "FLOPs (the op registry's count)",
        CostKind::Profile => "measured kernel time (ORT's profiler, `--cost profile`)",
    }
}

fn shape(r: &Receipt) -> String {
    let inputs: Vec<String> = r
        .input_shapes
        .iter()
        .map(|(name, dims)| {
            let d: Vec<String> = dims
                .iter()
                .map(|d| d.map_or("?".to_string(), |v| v.to_string()))
                .collect();
            format!("`{name}` [{}]", d.join(", "))
        })
        .collect();
    let bound: Vec<String> = r.bindings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "{}{}",
        if bound.is_empty() {
            "no dims bound".to_string()
        } else {
            format!("dims {}", bound.join(", "))
        },
        if inputs.is_empty() {
            String::new()
        } else {
            format!("; inputs {}", inputs.join(", "))
        }
    )
}

fn measured(s: &mut String, r: &Receipt) {
    let Some(v) = &r.validation else {
        let _ = writeln!(
            s,
            "Nothing was run for validation (no `--validate`): every number above is a prediction."
        );
        if let Some(m) = &r.measured_cost {
            let _ = writeln!(
                s,
                "\nOnly the per-node kernel times of the original graph were measured (`--cost profile`, {} nodes).",
                m.measured_nodes
            );
        }
        return;
    };
    let _ = writeln!(
        s,
        "- Values: {} (the broken control, `{}` scaled by {}, was {})",
        if v.passed {
            "the rewritten graph's outputs match the original's"
        } else {
            "the outputs do NOT match"
        },
        v.control_tensor,
        ckpt_validate::paired::control_factor(v.control_scale),
        if v.control_rejected {
            "rejected"
        } else {
            "NOT rejected"
        }
    );
    // A time that is not a finite number is `null` in the JSON: no line, or `NaN`.
    let finite = |x: f64| if x.is_finite() { x } else { f64::NAN };
    let (a, b) = (v.original.p50_ms, v.rewritten.p50_ms);
    if a.is_finite() && b.is_finite() {
        let _ = writeln!(
            s,
            "- Step time p50: {a:.3} ms original, {b:.3} ms rewritten ({:+.3} ms); p95: {:.3} / {:.3} ms",
            b - a,
            finite(v.original.p95_ms),
            finite(v.rewritten.p95_ms)
        );
    }
    if let Some(m) = &r.measured_cost {
        if let Some(measured) = m.measured_added_ms {
            let _ = writeln!(
                s,
                "- Added step time: predicted {:.3} ms, measured {measured:.3} ms (p50 difference)",
                m.predicted_added_ms
            );
        }
    }
    if let Some(w) = &v.cse_warning {
        let _ = writeln!(s, "- Warning: {w}");
    }
    if let Some(m) = &r.memory {
        let _ = writeln!(
            s,
            "- Device memory under {} ({} step(s)): {}",
            m.profile,
            m.steps,
            if m.passed {
                "as predicted"
            } else {
                "NOT as predicted"
            }
        );
        let _ = writeln!(
            s,
            "\n| graph | predicted total | measured total | arena error | runs under the ceiling |\n|---|---:|---:|---:|---|"
        );
        for (name, d) in [("original", &m.original), ("rewritten", &m.rewritten)] {
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {:+.2}% | {} |",
                human(d.predicted_total_bytes),
                human(d.measured_total_bytes),
                100.0 * d.relative_error,
                d.runs_under_ceiling
                    .map_or("not run (no ceiling)", |ok| if ok { "yes" } else { "no" })
            );
        }
        for f in &m.failures {
            let _ = writeln!(s, "- Failure: {f}");
        }
    }
}

fn not_covered(r: &Receipt) -> Vec<String> {
    let mut out = Vec::new();
    let unbound: Vec<&str> = r
        .input_shapes
        .iter()
        .filter(|(_, dims)| dims.iter().any(Option::is_none))
        .map(|(n, _)| n.as_str())
        .collect();
    if !unbound.is_empty() {
        out.push(format!(
            "Inputs with unbound dims (their size was not known to the plan): {}",
            unbound.join(", ")
        ));
    }
    out.push(format!(
        "Shapes: the plan holds for the shape above only; {}",
        if r.bindings.is_empty() {
            "the graph's dims are static".to_string()
        } else {
            "other values of the bound dims were neither planned nor measured".to_string()
        }
    ));
    out.push(
        "Execution modes: only the deployment profile above was simulated; other execution providers, optimization levels, arena settings and step counts were not"
            .to_string(),
    );
    if r.validation.is_none() {
        out.push("ONNX Runtime runs: none for validation (pass `--validate`)".to_string());
    }
    if r.cost_model == CostKind::Flops {
        out.push(
            "Time: the recompute cost is a FLOP count, not a measured time (`--cost profile` measures it)"
                .to_string(),
        );
    }
    if let Some(m) = &r.measured_cost {
        if !m.unmeasured_nodes.is_empty() {
            out.push(format!(
                "{} node(s) ORT did not run at the profile's level were costed 0 ms",
                m.unmeasured_nodes.len()
            ));
        }
    }
    if !r.excluded.is_empty() {
        out.push(format!(
            "{} activation(s) the op policy keeps (random, stateful or unknown ops) were never candidates",
            r.excluded.len()
        ));
    }
    if !r.random_ops_shifted.is_empty() {
        out.push(format!(
            "Random ops whose ORT-derived seed changed: {}",
            r.random_ops_shifted.join(", ")
        ));
    }
    out
}
