//! The validate stage: the original and the rewrite run on ONNX Runtime under the profile,
//! their values paired against a broken control, and both graphs' device memory measured
//! against their analyses ([`measure_pair`]); the main job's result goes into the receipt
//! ([`validate`]). Also `--cost profile`'s node times ([`profile_costs`]).

use std::borrow::Cow;
use std::path::PathBuf;

use anyhow::Context;

use ckpt_planner::{AnalyseOptions, Analysis, Outcome};
use ckpt_runtime::{Tol, Tolerances};
use ckpt_validate::inputs::{make_inputs, InputOverrides};
use ckpt_validate::measured_cost::NodeCosts;
use ckpt_validate::memory::{check_memory, session_config, MemoryCheck, MemoryExpectation};
use ckpt_validate::paired::{ValidateOptions, Validation};

use super::import::{Imported, Reference};
use super::write::Staged;
use super::{validation_verdict, Checked, PlannedJob};
use crate::cli::{OptimizeArgs, RunArgs};
use crate::exit::{error_text, Failure};
use crate::receipt::{Receipt, Status};

/// The two graphs a validation compares: the original's analysis, the rewrite's, and the
/// rewrite as written (its model and the folder its data resolves against; `None`: the
/// rewrite's graph is exported as analysed).
pub struct Sides<'a> {
    pub before: &'a Analysis,
    pub after: &'a Analysis,
    pub written: Option<(&'a ckpt_ir::onnx::ModelProto, PathBuf)>,
}

/// With `--validate`: the job's original against what it wrote (an unchanged graph against
/// itself), into the receipt; `None` without `--validate` or when nothing fits. A validation
/// that fails sets the receipt's status to `validation_failed`, one that cannot run to
/// `not_validated`, each with its reason.
pub fn validate(
    args: &OptimizeArgs,
    input: &Imported,
    planned: &PlannedJob,
    staged: Option<&Staged>,
    ceiling: u64,
    receipt: &mut Receipt,
) -> Result<Option<Checked>, Failure> {
    if !args.validate {
        return Ok(None);
    }
    let sides = match &planned.outcome {
        Outcome::CannotFit(_) => return Ok(None),
        // Nothing was rewritten: what is validated is that the unchanged graph holds under
        // the ceiling on ONNX Runtime (the values are compared with themselves).
        Outcome::AlreadyFits => Sides {
            before: &planned.before,
            after: &planned.before,
            written: None,
        },
        Outcome::Rewritten(r) => Sides {
            before: &planned.before,
            after: &r.after,
            written: staged.map(|s| (&s.proto, s.dir())),
        },
    };
    let result = measure_pair(
        sides,
        &input.options.bindings,
        &args.run,
        &input.options.profile,
        Some(ceiling),
        input.reference.as_ref(),
    );
    crate::progress::finish();
    Ok(Some(match result {
        Ok((validation, memory)) => {
            receipt.record_validation(&validation, memory.clone());
            if let Err(f) = validation_verdict(&validation, &memory) {
                receipt.status = Status::ValidationFailed;
                receipt.reason = Some(format!("{:#}", f.error));
            }
            Checked::Ran { validation, memory }
        }
        Err(f) => {
            receipt.status = Status::NotValidated;
            receipt.reason = Some(format!("{:#}", f.error));
            Checked::CouldNot {
                code: f.code,
                reason: error_text(&f.error),
            }
        }
    }))
}

/// Run `sides` on ONNX Runtime under `profile`: the paired values and the control, then
/// both graphs' device memory against their analyses (with `ceiling`, also the capped run).
/// With a `reference` (the original optimized offline), the values are compared against the
/// reference run online at its level instead. Each graph is exported once.
pub fn measure_pair(
    sides: Sides,
    bindings: &ckpt_ir::Bindings,
    r: &RunArgs,
    profile: &ckpt_ir::Profile,
    ceiling: Option<u64>,
    reference: Option<&Reference>,
) -> Result<(Validation, MemoryCheck), Failure> {
    let Sides {
        before,
        after,
        written,
    } = sides;
    init_runtime(r)?;
    let params: Vec<_> = before
        .class
        .of_kind(ckpt_passes::TensorKind::Parameter)
        .collect();
    let overrides = InputOverrides::parse(&r.inputs, &r.int_ranges).map_err(Failure::input)?;
    let (inputs, how) = make_inputs(&before.graph, bindings, r.seed, &overrides, &params)
        .map_err(Failure::input)?;
    let original = ckpt_ir::export(&before.graph);
    let (rewritten, rewritten_dir) = match written {
        Some((proto, dir)) => (Cow::Borrowed(proto), Some(dir)),
        None if std::ptr::eq(before, after) => (Cow::Borrowed(&original), dir_of(&after.graph)),
        None => (
            Cow::Owned(ckpt_ir::export(&after.graph)),
            dir_of(&after.graph),
        ),
    };
    let opts = ValidateOptions {
        cfg: session_config(profile),
        tol: tolerances(r),
        seed: r.seed,
        warmup: 2,
        runs: r.runs.max(1),
        locate_peak: r.locate_peak,
        original_dir: dir_of(&before.graph),
        rewritten_dir: rewritten_dir.clone(),
        original_cfg: reference.map(|x| session_config(&x.profile)),
    };
    let reference_proto = reference.map(|x| ckpt_ir::export(&x.graph));
    let v = ckpt_validate::check(
        reference_proto.as_ref().unwrap_or(&original),
        &rewritten,
        &inputs,
        how,
        &opts,
    )
    .map_err(Failure::could_not_validate)?;
    let dirs = (dir_of(&before.graph), rewritten_dir);
    let e = MemoryExpectation::of(profile, (before, after), ceiling, dirs);
    let m = check_memory(&original, &rewritten, &inputs, &e).map_err(Failure::input)?;
    Ok((v, m))
}

/// `--cost profile`: each node's median kernel time on ONNX Runtime under the profile, on
/// inputs made as validation makes them (exit 4 without a usable ONNX Runtime); `None` for
/// `--cost flops`.
pub fn profile_costs(
    args: &OptimizeArgs,
    before: &Analysis,
    options: &AnalyseOptions,
) -> Result<Option<NodeCosts>, Failure> {
    if args.cost != "profile" {
        return Ok(None);
    }
    let r = &args.run;
    ckpt_validate::measured_cost::profilable(before).map_err(Failure::input)?;
    init_runtime(r)?;
    let overrides = InputOverrides::parse(&r.inputs, &r.int_ranges).map_err(Failure::input)?;
    ckpt_validate::measured_cost::measure(
        before,
        &options.bindings,
        r.seed,
        &overrides,
        r.runs,
        &options.profile,
    )
    .map(Some)
    .map_err(Failure::could_not_validate)
}

/// `--ort-lib`: load that ONNX Runtime library (exit 4 when it is not one).
fn init_runtime(r: &RunArgs) -> Result<(), Failure> {
    if let Some(lib) = &r.ort_lib {
        ckpt_runtime::init(Some(lib))
            .context("loading ONNX Runtime")
            .map_err(Failure::could_not_validate)?;
    }
    Ok(())
}

fn dir_of(g: &ckpt_ir::Graph) -> Option<PathBuf> {
    g.dir().map(std::path::Path::to_path_buf)
}

/// The tolerances of the value comparison: the defaults per dtype, or `--rtol`/`--atol`
/// for every floating-point dtype.
fn tolerances(r: &RunArgs) -> Tolerances {
    let mut t = Tolerances::default();
    if r.rtol.is_some() || r.atol.is_some() {
        let f = Tol {
            rtol: r.rtol.unwrap_or(t.f32.rtol),
            atol: r.atol.unwrap_or(t.f32.atol),
        };
        t.f32 = f;
        t.f64 = f;
        t.f16 = f;
        t.bf16 = f;
    }
    t
}
