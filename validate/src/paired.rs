//! Paired validation of an original and a rewritten training graph: the same seeded inputs,
//! the same seeds for random ops (set in memory, never in the user's files), every output
//! compared within dtype-aware tolerances, a deliberately broken control that must be
//! rejected, measured peaks and step times side by side. This module owns what every runtime
//! shares (the seeds of the pair, [`broken_control`], the verdict) and the run on ONNX Runtime;
//! [`crate::training`] runs the same pair on the training runtime.
//!
//! Values are compared under ORT's deterministic compute (`session.use_deterministic_compute`),
//! so kernels that sum across threads in any order (CPU `ScatterND` with `reduction="add"`, the
//! embedding gradient) cannot fail a comparison by chance; tolerances are never loosened for
//! them. Every session is told the model's directory, so external data never resolves against
//! the current directory.

use serde::Serialize;

use ckpt_ir::onnx::{self, attribute_proto::AttributeType};
use ckpt_ir::ops::{seed_attr, SeedAttr};
use ckpt_ir::Message;
use ckpt_runtime::{
    compare, locate_peak, measure_peak, run, time_steps, Arena, HostTensor, Model, SessionConfig,
    Tolerances,
};

use crate::error::ValidateError;
use crate::progress::{report, Stage};

type Result<T, E = ValidateError> = std::result::Result<T, E>;

/// The policy printed with every validation.
pub const RNG_POLICY: &str = "random ops (Dropout, RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial) get the same seed in both graphs, derived from the run seed and the node name, set in memory only; each graph is compared on the first run of a fresh session; random ops are never recomputed";

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Set the seed of every random op from `seed` and the node's name. Returns how many.
pub fn seed_random_ops(model: &mut onnx::ModelProto, seed: u64) -> usize {
    let Some(g) = model.graph.as_mut() else {
        return 0;
    };
    let mut count = 0;
    for n in &mut g.node {
        let domain = ckpt_ir::normalise_domain(n.domain.as_deref().unwrap_or(""));
        let Some(seed_attr) = seed_attr(&domain, n.op_type.as_deref().unwrap_or("")) else {
            continue;
        };
        let s = (fnv(n.name.as_deref().unwrap_or("")) ^ seed) % 1_000_000_007;
        n.attribute.retain(|a| a.name.as_deref() != Some("seed"));
        n.attribute.push(if seed_attr == SeedAttr::Int {
            onnx::AttributeProto {
                name: Some("seed".into()),
                r#type: Some(AttributeType::Int as i32),
                i: Some(s as i64),
                ..Default::default()
            }
        } else {
            onnx::AttributeProto {
                name: Some("seed".into()),
                r#type: Some(AttributeType::Float as i32),
                f: Some(s as f32),
                ..Default::default()
            }
        });
        count += 1;
    }
    count
}

/// The broken control's relative perturbations, tried in turn until the comparison rejects
/// one: a graph whose loss barely moves under a 1e-3 change of its input (tiny logits under
/// small random weights) still shows that the comparison tells a changed graph apart.
pub const CONTROL_SCALES: [f32; 4] = [1e-3, 1e-2, 1e-1, 1.0];

/// How a control's factor is printed: `1+1e-3`, `1+1e-2`, `1+1e-1`, `2`.
pub fn control_factor(scale: f32) -> String {
    if scale == 1.0 {
        "2".to_string()
    } else {
        format!("1+{scale:e}")
    }
}

/// A broken variant: the first floating-point input of the node that computes the first
/// graph output (the loss) is scaled by 1 + `scale`. Returns the model and the tensor's name.
/// `dir`: where the model's external data lives (its dtypes are inferred when the file
/// declares none, as a rewrite that dropped value_info does).
pub fn broken_control(
    model: &onnx::ModelProto,
    dir: Option<&std::path::Path>,
    scale: f32,
) -> Result<(onnx::ModelProto, String)> {
    let target = control_target(model, dir)?;
    let m = target.scaled(model, scale)?;
    Ok((m, target.tensor))
}

/// Where the broken control scales: input `slot` of node `producer` (the loss's node),
/// reading `tensor`.
struct ControlTarget {
    producer: usize,
    slot: usize,
    tensor: String,
}

/// The loss node's first floating-point input ([`broken_control`]).
fn control_target(
    model: &onnx::ModelProto,
    dir: Option<&std::path::Path>,
) -> Result<ControlTarget> {
    let g = model.graph.as_ref().ok_or(ValidateError::NoGraph)?;
    let mut float_names: std::collections::HashSet<String> = g
        .value_info
        .iter()
        .chain(g.output.iter())
        .chain(g.input.iter())
        .filter(|v| matches!(v.r#type.as_ref().and_then(|t| t.value.as_ref()), Some(onnx::type_proto::Value::TensorType(t)) if t.elem_type == Some(1)))
        .filter_map(|v| v.name.clone())
        .collect();
    // Graphs without value_info (hand-written, stripped): the dtypes shape inference gives.
    if let Ok(graph) = ckpt_ir::import_bytes(
        model.encode_to_vec().into(),
        std::path::Path::new("control.onnx"),
        dir,
    ) {
        if let Ok(types) = ckpt_ir::ops::infer(&graph) {
            float_names.extend(
                graph
                    .tensor_ids()
                    .filter(|&t| {
                        types
                            .get(t)
                            .is_some_and(|tt| tt.dtype == ckpt_ir::DType::F32)
                    })
                    .map(|t| graph.tensor(t).name.clone()),
            );
        }
    }
    let first_out = g
        .output
        .first()
        .and_then(|o| o.name.clone())
        .ok_or(ValidateError::NoOutputs)?;
    let producer = g
        .node
        .iter()
        .position(|n| n.output.contains(&first_out))
        .ok_or_else(|| ValidateError::ControlNoProducer {
            output: first_out.clone(),
        })?;
    let (slot, tensor) = g.node[producer]
        .input
        .iter()
        .enumerate()
        .find(|(_, t)| float_names.contains(*t))
        .map(|(s, t)| (s, t.clone()))
        .ok_or_else(|| ValidateError::ControlNoFloatInput {
            output: first_out.clone(),
        })?;
    Ok(ControlTarget {
        producer,
        slot,
        tensor,
    })
}

impl ControlTarget {
    /// `model` with the target scaled by 1 + `scale` through a `Mul` by a new initializer.
    fn scaled(&self, model: &onnx::ModelProto, scale: f32) -> Result<onnx::ModelProto> {
        let mut m = model.clone();
        let g = m.graph.as_mut().ok_or(ValidateError::NoGraph)?;
        let scaled = format!("{}.ckpt_opt_control", self.tensor);
        let factor = "ckpt_opt_control_scale".to_string();
        g.node[self.producer].input[self.slot] = scaled.clone();
        g.initializer.push(onnx::TensorProto {
            name: Some(factor.clone()),
            data_type: Some(1),
            raw_data: Some((1.0 + scale).to_le_bytes().to_vec().into()),
            ..Default::default()
        });
        let mul = onnx::NodeProto {
            input: vec![self.tensor.clone(), factor],
            output: vec![scaled],
            name: Some("ckpt_opt_control_mul".into()),
            op_type: Some("Mul".into()),
            domain: Some(String::new()),
            ..Default::default()
        };
        g.node.insert(self.producer, mul);
        Ok(m)
    }
}

/// The broken control as it ran: the tensor it scales, its scale and whether the comparison
/// told its outputs apart from the original's.
pub(crate) struct Control {
    pub tensor: String,
    pub scale: f32,
    pub rejected: bool,
}

/// Run the broken control of `rewritten` at each of [`CONTROL_SCALES`] in turn (`run` runs one
/// control model), stopping at the first whose outputs `tol` tells apart from `reference`
/// (the last one's when none is: the verdict then fails). The target is found once.
pub(crate) fn escalate_control(
    rewritten: &onnx::ModelProto,
    dir: Option<&std::path::Path>,
    reference: &[HostTensor],
    tol: &Tolerances,
    mut run: impl FnMut(&onnx::ModelProto) -> Result<Vec<HostTensor>>,
) -> Result<Control> {
    let target = control_target(rewritten, dir)?;
    let mut try_scale = |scale: f32| -> Result<Control> {
        let values = run(&target.scaled(rewritten, scale)?)?;
        let rejected = !compare(reference, &values, tol).passed;
        Ok(Control {
            tensor: target.tensor.clone(),
            scale,
            rejected,
        })
    };
    let [first, rest @ ..] = CONTROL_SCALES;
    let mut last = try_scale(first)?;
    for scale in rest {
        if last.rejected {
            break;
        }
        last = try_scale(scale)?;
    }
    Ok(last)
}

/// Measured numbers of one graph.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// Arena peak of one run (always-splitting arena: live tensors rounded to 256 B).
    pub peak_bytes: u64,
    /// Arena peak with ORT's default BFC arena.
    pub peak_bytes_default_arena: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    /// With `--locate-peak`: the node at which ORT's own run reaches its high-water mark.
    pub peak_node: Option<ckpt_runtime::PeakNode>,
}

/// The validation result (JSON keys are relied on by tests and receipts).
#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    pub passed: bool,
    pub outputs: Vec<ckpt_runtime::OutputComparison>,
    pub control_rejected: bool,
    pub control_tensor: String,
    /// The control's relative perturbation: the first of [`CONTROL_SCALES`] the comparison
    /// rejects (the last one tried when none is).
    pub control_scale: f32,
    pub rng_policy: &'static str,
    pub random_ops_seeded: usize,
    /// Values were computed under `session.use_deterministic_compute=1`.
    pub deterministic_compute: bool,
    pub original: Measured,
    pub rewritten: Measured,
    /// The rewritten graph's peak under ORT's default optimizer set (CSE on), exact arena.
    pub rewritten_peak_bytes_with_cse: u64,
    /// Set when CSE undoes the recompute (the peak with CSE on is above the peak without).
    pub cse_warning: Option<String>,
    pub ort: Ort,
    /// The session options the values ran under.
    pub session: SessionConfig,
    pub input_generation: Vec<String>,
}

/// The ONNX Runtime that validated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Ort {
    /// The library's path (the training runtime: the Python it runs in).
    pub library: String,
    pub version: String,
}

/// Options of a validation.
#[derive(Clone, Debug)]
pub struct ValidateOptions {
    pub cfg: SessionConfig,
    pub tol: Tolerances,
    pub seed: u64,
    pub warmup: usize,
    pub runs: usize,
    /// Name the node at which ORT peaks (exact CPU arena; ~log2(peak/256) extra runs per graph).
    pub locate_peak: bool,
    /// The directory the original's external data resolves against.
    pub original_dir: Option<std::path::PathBuf>,
    /// The directory the rewritten graph's external data resolves against.
    pub rewritten_dir: Option<std::path::PathBuf>,
    /// The original's session where it differs from `cfg`: a rewrite of a graph optimized
    /// offline is compared with its original run online at the level ORT optimized it at.
    pub original_cfg: Option<SessionConfig>,
}

fn measure(
    label: &str,
    bytes: &[u8],
    dir: Option<&std::path::Path>,
    inputs: &[HostTensor],
    o: &ValidateOptions,
    cfg: &SessionConfig,
) -> Result<Measured> {
    let o = &ValidateOptions {
        cfg: cfg.clone(),
        ..o.clone()
    };
    let exact_cfg = SessionConfig {
        arena: Arena::Exact,
        ..o.cfg.clone()
    };
    report(Stage::PeakAndTimes(label));
    let m = Model::new(label, bytes).in_dir(dir);
    let exact = if o.cfg.provider == ckpt_runtime::Provider::Cpu {
        measure_peak(m, inputs, &exact_cfg)?.peak_bytes
    } else {
        0
    };
    let default_arena = measure_peak(m, inputs, &o.cfg)?.peak_bytes;
    let t = time_steps(m, inputs, &o.cfg, o.warmup, o.runs)?;
    let peak_node = if o.locate_peak && o.cfg.provider == ckpt_runtime::Provider::Cpu {
        Some(locate_peak(m, inputs, &exact_cfg)?)
    } else {
        None
    };
    Ok(Measured {
        peak_bytes: exact,
        peak_bytes_default_arena: default_arena,
        p50_ms: t.p50_ms,
        p95_ms: t.p95_ms,
        peak_node,
    })
}

/// `model` as ONNX Runtime can load it from bytes: its small external constants embedded
/// (read from `dir`; see [`ckpt_ir::embed_small_external`]), its weights left where they are.
pub fn ort_ready(model: &onnx::ModelProto, dir: Option<&std::path::Path>) -> onnx::ModelProto {
    let mut m = model.clone();
    if let Some(dir) = dir {
        ckpt_ir::embed_small_external(&mut m, dir);
    }
    m
}

/// The session config values are compared under: `cfg` with deterministic compute on.
pub fn deterministic(cfg: &SessionConfig) -> SessionConfig {
    let mut c = cfg.clone();
    c.config_entries
        .retain(|(k, _)| k != ckpt_runtime::DETERMINISTIC_COMPUTE_KEY);
    c.config_entries
        .push((ckpt_runtime::DETERMINISTIC_COMPUTE_KEY.into(), "1".into()));
    c
}

/// Seed every random op of both graphs alike from `seed` ([`seed_random_ops`]). Returns how
/// many ops each graph has seeded.
pub(crate) fn seed_pair(a: &mut onnx::ModelProto, b: &mut onnx::ModelProto, seed: u64) -> usize {
    let seeded = seed_random_ops(a, seed);
    seed_random_ops(b, seed);
    seeded
}

/// What one runtime's runs of a pair give: both graphs' values, the broken control's verdict,
/// both graphs' measured
/// numbers and the runtime and session they ran on. [`Runs::judge`] turns it into the verdict.
pub(crate) struct Runs {
    /// The original graph's outputs.
    pub reference: Vec<HostTensor>,
    /// The rewritten graph's outputs.
    pub candidate: Vec<HostTensor>,
    /// The broken control as it ran ([`escalate_control`]).
    pub control: Control,
    pub random_ops_seeded: usize,
    pub original: Measured,
    pub rewritten: Measured,
    pub rewritten_peak_bytes_with_cse: u64,
    pub cse_warning: Option<String>,
    pub ort: Ort,
    pub session: SessionConfig,
}

impl Runs {
    /// The verdict: every output of the rewritten graph within `tol` of the original's, and the
    /// control's outputs not.
    pub(crate) fn judge(self, input_generation: Vec<String>, tol: &Tolerances) -> Validation {
        let cmp = compare(&self.reference, &self.candidate, tol);
        Validation {
            passed: cmp.passed && self.control.rejected,
            outputs: cmp.outputs,
            control_rejected: self.control.rejected,
            control_tensor: self.control.tensor,
            control_scale: self.control.scale,
            rng_policy: RNG_POLICY,
            random_ops_seeded: self.random_ops_seeded,
            deterministic_compute: true,
            original: self.original,
            rewritten: self.rewritten,
            rewritten_peak_bytes_with_cse: self.rewritten_peak_bytes_with_cse,
            cse_warning: self.cse_warning,
            ort: self.ort,
            session: self.session,
            input_generation,
        }
    }
}

/// Run `original`, `rewritten` and the broken control for their values on ONNX Runtime, then
/// measure both graphs' peaks and step times and the rewritten graph's peak with CSE on.
pub(crate) fn run_pair(
    original: &onnx::ModelProto,
    rewritten: &onnx::ModelProto,
    inputs: &[HostTensor],
    o: &ValidateOptions,
) -> Result<Runs> {
    let (a_dir, b_dir) = (o.original_dir.as_deref(), o.rewritten_dir.as_deref());
    let mut a = ort_ready(original, a_dir);
    let mut b = ort_ready(rewritten, b_dir);
    let seeded = seed_pair(&mut a, &mut b, o.seed);
    let (a_bytes, b_bytes) = (a.encode_to_vec(), b.encode_to_vec());
    let info = ckpt_runtime::init(None)
        .map_err(ValidateError::FindOrt)?
        .clone();
    let values_cfg = deterministic(&o.cfg);
    let original_values_cfg = deterministic(o.original_cfg.as_ref().unwrap_or(&o.cfg));
    report(Stage::Values("original graph"));
    let reference = run(
        Model::new("original", &a_bytes).in_dir(a_dir),
        inputs,
        &original_values_cfg,
    )
    .map_err(|source| ValidateError::Run {
        graph: "original graph",
        source,
    })?;
    report(Stage::Values("rewritten graph"));
    let candidate = run(
        Model::new("rewritten", &b_bytes).in_dir(b_dir),
        inputs,
        &values_cfg,
    )
    .map_err(|source| ValidateError::Run {
        graph: "rewritten graph",
        source,
    })?;
    let control = escalate_control(&b, b_dir, &reference, &o.tol, |control| {
        report(Stage::Values("broken control"));
        run(
            Model::new("control", &control.encode_to_vec()).in_dir(b_dir),
            inputs,
            &values_cfg,
        )
        .map_err(|source| ValidateError::Run {
            graph: "control",
            source,
        })
    })?;
    let original_cfg = o.original_cfg.as_ref().unwrap_or(&o.cfg);
    let original_m = measure("original", &a_bytes, a_dir, inputs, o, original_cfg)?;
    let rewritten_m = measure("rewritten", &b_bytes, b_dir, inputs, o, &o.cfg)?;
    let (with_cse, cse_warning) = cse_check(&b_bytes, b_dir, inputs, &o.cfg)?;
    Ok(Runs {
        reference,
        candidate,
        control,
        random_ops_seeded: seeded,
        original: original_m,
        rewritten: rewritten_m,
        rewritten_peak_bytes_with_cse: with_cse,
        cse_warning,
        ort: Ort {
            library: info.library.display().to_string(),
            version: info.version.to_string(),
        },
        session: values_cfg,
    })
}

/// The rewritten graph's exact-arena peak under ORT's default optimizer set (CSE on, level
/// basic), and a warning when it is above the peak with CSE off: CSE merges recompute clones
/// back. Both 0 and no warning off the CPU provider.
fn cse_check(
    bytes: &[u8],
    dir: Option<&std::path::Path>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
) -> Result<(u64, Option<String>)> {
    let cse_cfg = SessionConfig {
        disable_cse: false,
        opt_level: ckpt_runtime::OptLevel::Basic,
        arena: Arena::Exact,
        ..cfg.clone()
    };
    let no_cse_cfg = SessionConfig {
        disable_cse: true,
        ..cse_cfg.clone()
    };
    let (with_cse, without_cse) = if cfg.provider == ckpt_runtime::Provider::Cpu {
        (
            measure_peak(Model::new("rewritten", bytes).in_dir(dir), inputs, &cse_cfg)?.peak_bytes,
            measure_peak(
                Model::new("rewritten", bytes).in_dir(dir),
                inputs,
                &no_cse_cfg,
            )?
            .peak_bytes,
        )
    } else {
        (0, 0)
    };
    let cse_warning = (with_cse > without_cse).then(|| {
        format!(
            "with ONNX Runtime's default optimizers (CommonSubexpressionElimination on, level basic) the rewritten graph peaks at {with_cse} B instead of {without_cse} B: CSE merges recompute clones back; set optimization.disable_specified_optimizers=CommonSubexpressionElimination"
        )
    });
    Ok((with_cse, cse_warning))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckpt_ir::build::ModelBuilder;
    use ckpt_ir::DType;

    #[test]
    fn the_control_scales_the_first_float_input_of_the_loss_node() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, "4")
            .input("y", DType::F32, "4")
            .node("Sub", &["x", "y"], &["d"])
            .node("ReduceSumSquare", &["d"], &["loss"])
            .output("loss", DType::F32, "")
            .build();
        let (control, tensor) = broken_control(&m, None, 1e-3).unwrap();
        assert_eq!(tensor, "d");
        let g = control.graph.unwrap();
        let loss = g.node.iter().find(|n| n.output == ["loss"]).unwrap();
        assert_eq!(loss.input[0], "d.ckpt_opt_control");
        assert!(g
            .node
            .iter()
            .any(|n| n.op_type.as_deref() == Some("Mul") && n.output == ["d.ckpt_opt_control"]));
    }

    /// The control is raised until the comparison tells it apart, and stops there; when none
    /// is told apart, every scale is tried and the last is reported.
    #[test]
    fn the_control_is_raised_until_it_is_told_apart() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, "1")
            .node("Neg", &["x"], &["loss"])
            .output("loss", DType::F32, "1")
            .build();
        let value = |v: f32| vec![HostTensor::from_values("loss", vec![1], &[v]).unwrap()];
        let reference = value(1.0);
        let tol = Tolerances::default();
        // The fake run reads the control's factor from its initializer.
        let factor = |c: &onnx::ModelProto| -> f32 {
            let t = &c.graph.as_ref().unwrap().initializer[0];
            let b = t.raw_data.as_ref().unwrap();
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        };
        let mut tried = Vec::new();
        let control = escalate_control(&m, None, &reference, &tol, |c| {
            let f = factor(c);
            tried.push(f);
            // Only a change of 10% or more moves the loss.
            Ok(value(if f >= 1.09 { f } else { 1.0 }))
        })
        .unwrap();
        assert_eq!((control.tensor.as_str(), control.scale), ("x", 1e-1));
        assert_eq!(tried, [1.001, 1.01, 1.1]);
        assert!(control.rejected);
        tried.clear();
        let control = escalate_control(&m, None, &reference, &tol, |c| {
            tried.push(factor(c));
            Ok(value(1.0))
        })
        .unwrap();
        assert_eq!(control.scale, 1.0);
        assert!(!control.rejected);
        assert_eq!(tried, [1.001, 1.01, 1.1, 2.0]);
        assert_eq!(control_factor(1e-3), "1+1e-3");
        assert_eq!(control_factor(1.0), "2");
    }

    #[test]
    fn a_loss_without_float_inputs_is_named() {
        let m = ModelBuilder::new(17)
            .input("i", DType::I64, "4")
            .node("Shape", &["i"], &["loss"])
            .output("loss", DType::I64, "1")
            .build();
        let e = broken_control(&m, None, 1e-3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the node computing `loss` has no float input to perturb for the control"
        );
    }

    #[test]
    fn both_graphs_get_the_same_seeds() {
        let m = ModelBuilder::new(17)
            .input("x", DType::F32, "4")
            .node("Dropout", &["x"], &["y"])
            .output("y", DType::F32, "4")
            .build();
        let (mut a, mut b) = (m.clone(), m);
        assert_eq!(seed_pair(&mut a, &mut b, 7), 1);
        assert_eq!(a, b);
        let seed = |m: &onnx::ModelProto| m.graph.as_ref().unwrap().node[0].attribute[0].i;
        assert!(seed(&a).is_some());
    }
}
