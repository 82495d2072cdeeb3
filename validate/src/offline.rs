//! Optimization levels: at levels basic, extended and all the job plans the graph ORT will
//! really run, not the graph it was given.
//!
//! ORT's offline mode (`optimized_model_filepath`) saves the graph ORT runs after its
//! optimizers for the profile's provider: fusions (`FusedMatMul`, `FusedGemm`, …), constant
//! folding, eliminations, the NCHWc layout at level all. That graph is imported and planned
//! like any other, and the result is written for loading at level `disable`, so that no
//! optimizer (CSE, a later fusion) runs on the rewrite and undoes a recompute. The profile
//! planned and recorded is the user's with `graph_optimization_level = disable` and
//! `offline_optimization_level` = the level asked for.
//!
//! Rules:
//! - the optimization runs under the user's profile (its level and session config entries),
//!   so the saved graph is the one a user's session at that level runs;
//! - every node of the saved graph must be in the op registry: an op ORT emitted that the
//!   registry does not model is an error naming the node and op, never a guess;
//! - values are validated against the original run online at the level asked for (as a user
//!   would run it); memory is predicted and measured on the saved graph at level `disable`.

use std::path::Path;

use ckpt_ir::profile::OptLevel;
use ckpt_ir::{Graph, Profile, ONNX_DOMAIN};
use ckpt_runtime::Model;

use crate::error::ValidateError;
use crate::memory::session_config;

type Result<T, E = ValidateError> = std::result::Result<T, E>;

/// The graph ORT runs under a profile at level basic, extended or all, ready to plan.
pub struct Optimized {
    /// The graph as ORT saved it.
    pub graph: Graph,
    /// The profile to plan and record: level `disable`, optimized offline at `level`.
    pub profile: Profile,
    /// The level ORT optimized the graph at.
    pub level: OptLevel,
}

/// The profile a model optimized offline under `online` is loaded at.
pub fn loaded_profile(online: &Profile) -> Profile {
    Profile {
        graph_optimization_level: OptLevel::Disable,
        offline_optimization_level: match online.graph_optimization_level {
            OptLevel::Disable => online.offline_optimization_level,
            l => Some(l),
        },
        ..online.clone()
    }
}

/// The profile the original of a model optimized offline runs at online (its level back).
pub fn online_profile(loaded: &Profile) -> Profile {
    match loaded.offline_optimization_level {
        Some(l) => Profile {
            graph_optimization_level: l,
            offline_optimization_level: None,
            ..loaded.clone()
        },
        None => loaded.clone(),
    }
}

/// Let ORT optimize `bytes` (the model at `path`) at the profile's level for its provider and
/// import what it saves; `None` at level `disable` (the graph is planned as given).
pub fn optimize_for_level(
    bytes: &[u8],
    path: &Path,
    online: &Profile,
) -> Result<Option<Optimized>> {
    let level = online.graph_optimization_level;
    if level == OptLevel::Disable {
        return Ok(None);
    }
    let label = path.display().to_string();
    let saved = ckpt_runtime::optimize_offline(Model::new(&label, bytes), &session_config(online))
        .map_err(|source| ValidateError::OptimizeOffline {
            path: path.to_path_buf(),
            level,
            source,
        })?;
    let saved_path = path.with_extension(format!("{level}.onnx"));
    let graph = ckpt_ir::import_bytes(saved.into(), &saved_path, None).map_err(|source| {
        ValidateError::ImportOptimized {
            path: path.to_path_buf(),
            level,
            source: Box::new(source),
        }
    })?;
    check_modelled(&graph, level)?;
    Ok(Some(Optimized {
        graph,
        profile: loaded_profile(online),
        level,
    }))
}

/// The domain of ORT's NCHWc layout ops (`NchwcTransformer`, level all).
pub const NCHWC_DOMAIN: &str = "com.microsoft.nchwc";

/// Every node outside the ONNX domain that ORT wrote must be in the op registry: its shapes,
/// aliasing, in-place sharing and scratch decide the prediction. The error names the first
/// such node and every unmodelled op type; for ORT's NCHWc layout it says what makes ORT emit
/// it and which level does not.
pub fn check_modelled(graph: &Graph, level: OptLevel) -> Result<()> {
    let mut first = None;
    let mut ops: Vec<String> = Vec::new();
    for &n in graph.nodes() {
        let node = graph.node(n);
        if node.domain != ONNX_DOMAIN && ckpt_ir::ops::op_def(graph, n).is_none() {
            first.get_or_insert(n);
            let op = format!("{}::{}", node.domain, node.op_type);
            if !ops.contains(&op) {
                ops.push(op);
            }
        }
    }
    let Some(n) = first else {
        return Ok(());
    };
    let node = graph.node(n);
    let nchwc = ops
        .iter()
        .any(|o| o.starts_with(&format!("{NCHWC_DOMAIN}::")));
    let hint = if nchwc {
        "; these are ORT's NCHWc layout ops, which its NchwcTransformer writes at level all for Convs with constant weights on a CPU with NCHWc kernels (AVX2 or AVX-512: the channel block size is the CPU's); plan at --ort-opt-level extended, where ORT keeps the NCHW layout"
    } else {
        "; plan at a lower --ort-opt-level, or at `disable`"
    };
    Err(ValidateError::Unmodelled {
        level,
        node: node.display_name(n),
        domain: node.domain.clone(),
        op: node.op_type.clone(),
        ops,
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_and_online_profiles_swap_the_level() {
        let online = Profile {
            graph_optimization_level: OptLevel::All,
            enable_mem_pattern: true,
            ..Profile::default()
        };
        let loaded = loaded_profile(&online);
        assert_eq!(loaded.graph_optimization_level, OptLevel::Disable);
        assert_eq!(loaded.offline_optimization_level, Some(OptLevel::All));
        assert!(loaded.enable_mem_pattern);
        assert_eq!(online_profile(&loaded), online);
        assert_eq!(online_profile(&Profile::default()), Profile::default());
    }

    #[test]
    fn an_unmodelled_contrib_op_names_the_node() {
        let m = ckpt_ir::build::ModelBuilder::new(17)
            .opset("com.microsoft.nchwc", 1)
            .input("x", ckpt_ir::DType::F32, "1,8,4,4")
            .node_in(
                "com.microsoft.nchwc",
                "ReorderInput",
                &["x"],
                &["y"],
                vec![],
            )
            .output("y", ckpt_ir::DType::F32, "1,8,4,4")
            .build();
        let g = ckpt_ir::import_model(m, Path::new("nchwc.onnx"), None).unwrap();
        let e = check_modelled(&g, OptLevel::All).unwrap_err().to_string();
        assert!(
            e.contains("com.microsoft.nchwc::ReorderInput")
                && e.contains("level all")
                && e.contains("NCHWc layout")
                && e.contains("--ort-opt-level extended"),
            "{e}"
        );
    }
}
