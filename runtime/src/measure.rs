//! What a run costs: arena peak bytes, the order ORT executed the nodes in, and step time.
//!
//! Peak is `MaxInUse` after one run minus `InUse` after session creation, read from the session's arena allocator
//! for the configured provider (CPU arena, or the CUDA arena on device 0), on a fresh session with the memory
//! pattern off (the pattern planner pre-allocates one block on later runs, hiding the per-tensor peak). What the
//! arena counts depends on [`crate::Arena`]: ORT's own arena counts whole BFC chunks, the exact arena counts live
//! tensors rounded up to 256 bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::Session;

use crate::error::{Result, RuntimeError};
use crate::model::Model;
use crate::session::{run_session, with_session, Provider, SessionConfig};
use crate::tensor::HostTensor;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PeakStats {
    /// `max_in_use - in_use_after_load`: what one run added to the arena at its highest point.
    pub peak_bytes: u64,
    pub in_use_after_load: u64,
    pub max_in_use: u64,
    /// Every key ORT's `AllocatorGetStats` reported after the run (`Limit`, `InUse`, `TotalAllocated`, `MaxInUse`,
    /// `NumAllocs`, `NumReserves`, `NumArenaExtensions`, `NumArenaShrinkages`, `MaxAllocSize`…).
    pub arena_stats_raw: BTreeMap<String, String>,
}

/// Runs once on a fresh session with the memory pattern forced off and reads the arena's statistics.
pub fn measure_peak<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
) -> Result<PeakStats> {
    run_measured(model.into(), inputs, cfg).map(|(_, peak)| peak)
}

/// [`measure_peak`] that also returns the run's outputs.
pub(crate) fn run_measured(
    model: Model<'_>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
) -> Result<(Vec<HostTensor>, PeakStats)> {
    let cfg = SessionConfig {
        memory_pattern: false,
        ..cfg.clone()
    };
    let (before, outputs, after) = with_session(model, &cfg, |session| {
        let arena = arena_allocator(model, session, cfg.provider)?;
        let before = allocator_stats(model, &arena)?;
        let outputs = run_session(model, session, inputs)?;
        Ok((before, outputs, allocator_stats(model, &arena)?))
    })?;
    let in_use_after_load = stat(model, &before, "InUse")?;
    let max_in_use = stat(model, &after, "MaxInUse")?;
    let peak = PeakStats {
        peak_bytes: max_in_use.saturating_sub(in_use_after_load),
        in_use_after_load,
        max_in_use,
        arena_stats_raw: after,
    };
    Ok((outputs, peak))
}

/// Where ORT's own run needs its arena's largest extent: the node whose allocation fails when
/// the arena is limited to just under that extent. With no fragmentation that is the in-use
/// high-water mark; freed chunks that cannot be reused make the extent larger than `MaxInUse`,
/// and the node can then be a later one.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PeakNode {
    /// The node's name, as ORT reports it.
    pub node: String,
    /// Its op type.
    pub op: String,
    /// The smallest `max_mem` (bytes, initializers included) the run fits in.
    pub fits_in_bytes: u64,
    /// Runs it took.
    pub runs: usize,
}

/// Locate ORT's peak on the exact CPU arena (`cfg.arena` must be [`crate::Arena::Exact`]):
/// find the smallest arena limit the run fits in (to 256 bytes), then name the node whose
/// allocation fails just below it — ORT's error says which. About `log2(peak / 256)` runs. A
/// debugging tool for the memory model: a mismatch becomes a node name.
pub fn locate_peak<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
) -> Result<PeakNode> {
    let model = model.into();
    if cfg.arena != crate::Arena::Exact || cfg.provider != Provider::Cpu {
        return Err(RuntimeError::SessionCreate {
            model: model.label.to_string(),
            message: "locating the peak needs the exact CPU arena".into(),
        });
    }
    let stats = measure_peak(model, inputs, cfg)?;
    let mut runs = 1;
    let attempt = |limit: u64, runs: &mut usize| -> Result<Option<(String, String)>> {
        *runs += 1;
        let c = SessionConfig {
            arena_limit: Some(limit),
            ..cfg.clone()
        };
        match measure_peak(model, inputs, &c) {
            Ok(_) => Ok(None),
            Err(RuntimeError::Run { message, .. })
                if message.contains("Failed to allocate")
                    || message.contains("Available memory") =>
            {
                Ok(Some(failing_node(&message)))
            }
            Err(e) => Err(e),
        }
    };
    // The arena may need more than MaxInUse (chunks freed but not coalesced): widen until it fits.
    let mut hi = stats.max_in_use;
    let mut lo = 0u64;
    let mut failed: Option<(String, String)> = None;
    let mut slack = crate::ALIGN_BYTES;
    loop {
        match attempt(hi, &mut runs)? {
            None => break,
            Some(node) => {
                lo = hi;
                failed = Some(node);
                hi = stats.max_in_use + slack;
                slack *= 2;
            }
        }
    }
    if failed.is_none() {
        lo = hi.saturating_sub(crate::ALIGN_BYTES);
        failed = attempt(lo, &mut runs)?;
    }
    while hi - lo > crate::ALIGN_BYTES {
        let mid = lo + (hi - lo) / 2;
        match attempt(mid, &mut runs)? {
            None => hi = mid,
            Some(node) => {
                lo = mid;
                failed = Some(node);
            }
        }
    }
    let (node, op) = failed.unwrap_or_default();
    Ok(PeakNode {
        node,
        op,
        fits_in_bytes: hi,
        runs,
    })
}

/// `(name, op)` from ORT's "… running <Op> node. Name:'<name>' …".
fn failing_node(message: &str) -> (String, String) {
    let name = message
        .split("Name:'")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .unwrap_or("")
        .to_string();
    let op = message
        .split("running ")
        .nth(1)
        .and_then(|rest| rest.split(" node").next())
        .unwrap_or("")
        .to_string();
    (name, op)
}

pub(crate) fn arena_allocator(
    model: Model<'_>,
    session: &Session,
    provider: Provider,
) -> Result<Allocator> {
    let (device, device_name) = match provider {
        Provider::Cpu => (AllocationDevice::CPU, "CPU"),
        Provider::Cuda => (AllocationDevice::CUDA, "CUDA"),
    };
    let fail = |e: ort::Error| RuntimeError::AllocatorStats {
        model: model.label.to_string(),
        message: format!("no {device_name} arena allocator on the session: {e}"),
    };
    let info =
        MemoryInfo::new(device, 0, AllocatorType::Arena, MemoryType::Default).map_err(fail)?;
    Allocator::new(session, info).map_err(fail)
}

pub(crate) fn allocator_stats(
    model: Model<'_>,
    allocator: &Allocator,
) -> Result<BTreeMap<String, String>> {
    use ort::AsPointer;
    let api = ort::api();
    let mut kvps: *mut ort::sys::OrtKeyValuePairs = std::ptr::null_mut();
    // SAFETY: `allocator` is alive for the call; the returned pairs are read and then released with the same API.
    unsafe {
        let status = (api.AllocatorGetStats)(allocator.ptr(), &mut kvps);
        ort::Error::result_from_status(status).map_err(|e| RuntimeError::AllocatorStats {
            model: model.label.to_string(),
            message: format!("AllocatorGetStats failed (is the arena disabled?): {e}"),
        })?;
        if kvps.is_null() {
            return Ok(BTreeMap::new());
        }
        let mut keys: *const *const std::os::raw::c_char = std::ptr::null();
        let mut values: *const *const std::os::raw::c_char = std::ptr::null();
        let mut n = 0usize;
        (api.GetKeyValuePairs)(kvps, &mut keys, &mut values, &mut n);
        let mut out = BTreeMap::new();
        for i in 0..n {
            let k = std::ffi::CStr::from_ptr(*keys.add(i))
                .to_string_lossy()
                .into_owned();
            let v = std::ffi::CStr::from_ptr(*values.add(i))
                .to_string_lossy()
                .into_owned();
            out.insert(k, v);
        }
        (api.ReleaseKeyValuePairs)(kvps);
        Ok(out)
    }
}

pub(crate) fn stat(model: Model<'_>, stats: &BTreeMap<String, String>, key: &str) -> Result<u64> {
    let fail = |message: String| RuntimeError::AllocatorStats {
        model: model.label.to_string(),
        message,
    };
    let v = stats
        .get(key)
        .ok_or_else(|| fail(format!("no `{key}` in {stats:?}")))?;
    v.trim()
        .parse()
        .map_err(|_| fail(format!("`{key}` = `{v}` is not a byte count")))
}

/// One node execution from ORT's profile.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeEvent {
    pub node_name: String,
    pub op_type: String,
    /// ORT's node index: the node's position in the model's node list for nodes ORT did not create.
    pub node_index: Option<usize>,
    /// The execution provider that ran it (`CPUExecutionProvider`, `CUDAExecutionProvider`): with CUDA, nodes
    /// without a CUDA kernel still run on the CPU.
    pub provider: String,
    /// Microseconds since the profile started.
    pub start_us: u64,
    pub dur_us: u64,
}

static PROFILE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Runs once with profiling on and returns the kernel executions in the order they started. Writes the profile
/// under `cfg.profiling` when set (and keeps it), else in the temp dir (and removes it).
pub fn profile_order<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
) -> Result<Vec<NodeEvent>> {
    profile_runs(model, inputs, cfg, 1)
}

/// Runs `runs` times on one session with profiling on and returns every run's kernel executions in the order they
/// started (a node run `runs` times appears `runs` times, the first run's first). The profile is written as by
/// [`profile_order`].
pub fn profile_runs<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    runs: usize,
) -> Result<Vec<NodeEvent>> {
    let model = model.into();
    let (prefix, keep) = match &cfg.profiling {
        Some(p) => (p.clone(), true),
        None => {
            let n = PROFILE_COUNTER.fetch_add(1, Ordering::Relaxed);
            (
                std::env::temp_dir()
                    .join(format!("ckpt-runtime-profile-{}-{n}", std::process::id())),
                false,
            )
        }
    };
    let cfg = SessionConfig {
        profiling: Some(prefix),
        ..cfg.clone()
    };
    let file = with_session(model, &cfg, |session| {
        for _ in 0..runs.max(1) {
            run_session(model, session, inputs)?;
        }
        session.end_profiling().map_err(|e| RuntimeError::Run {
            model: model.label.to_string(),
            message: format!("ending the profile: {e}"),
        })
    })?;
    let path = PathBuf::from(file);
    let text = std::fs::read_to_string(&path).map_err(|source| RuntimeError::Io {
        path: path.clone(),
        source,
    });
    if !keep {
        let _ = std::fs::remove_file(&path);
    }
    parse_profile(&path, &text?)
}

/// Kernel events (`cat: "Node"`, name ending `_kernel_time`) of an ORT JSON profile, sorted by start time.
pub fn parse_profile(path: &Path, text: &str) -> Result<Vec<NodeEvent>> {
    let fail = |message: String| RuntimeError::Profile {
        path: path.to_path_buf(),
        message,
    };
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| fail(format!("not JSON: {e}")))?;
    let events = json
        .as_array()
        .ok_or_else(|| fail("expected a JSON array of events".to_string()))?;
    let mut out = Vec::new();
    for ev in events {
        if ev.get("cat").and_then(|c| c.as_str()) != Some("Node") {
            continue;
        }
        let Some(name) = ev.get("name").and_then(|n| n.as_str()) else {
            continue;
        };
        let Some(node_name) = name.strip_suffix("_kernel_time") else {
            continue;
        };
        let args = ev.get("args");
        let arg = |k: &str| args.and_then(|a| a.get(k));
        let as_u64 = |v: Option<&serde_json::Value>| {
            v.and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
        };
        out.push(NodeEvent {
            node_name: node_name.to_string(),
            op_type: arg("op_name")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            node_index: as_u64(arg("node_index")).map(|v| v as usize),
            provider: arg("provider")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
            start_us: as_u64(ev.get("ts"))
                .ok_or_else(|| fail(format!("event `{name}` has no `ts`")))?,
            dur_us: as_u64(ev.get("dur")).unwrap_or(0),
        });
    }
    // Stable sort: events that start in the same microsecond keep the order ORT wrote them in.
    out.sort_by_key(|e| e.start_us);
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepTimes {
    pub p50_ms: f64,
    pub p95_ms: f64,
    /// Every timed run, in milliseconds, in run order.
    pub runs: Vec<f64>,
}

/// Times `runs` runs of one warm session after `warmup` untimed runs. Percentiles are nearest-rank.
pub fn time_steps<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    warmup: usize,
    runs: usize,
) -> Result<StepTimes> {
    let model = model.into();
    if runs == 0 {
        return Err(RuntimeError::Run {
            model: model.label.to_string(),
            message: "time_steps needs runs >= 1".into(),
        });
    }
    let times = with_session(model, cfg, |session| {
        let feeds = crate::session::feeds(model, session, inputs)?;
        let run_err = |e: ort::Error| RuntimeError::Run {
            model: model.label.to_string(),
            message: e.to_string(),
        };
        let mut times = Vec::with_capacity(runs);
        for i in 0..warmup + runs {
            let inputs: Vec<(&str, ort::session::SessionInputValue<'_>)> =
                feeds.iter().map(|(n, v)| (n.as_str(), v.into())).collect();
            let start = Instant::now();
            let outputs = session.run(inputs).map_err(run_err)?;
            let elapsed = start.elapsed().as_secs_f64() * 1e3;
            drop(outputs);
            if i >= warmup {
                times.push(elapsed);
            }
        }
        Ok(times)
    })?;
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let rank =
        |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    Ok(StepTimes {
        p50_ms: rank(0.50),
        p95_ms: rank(0.95),
        runs: times,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_events_in_start_order() {
        let text = r#"[
          {"cat":"Session","name":"model_loading_array","ts":1,"dur":5},
          {"cat":"Node","name":"b_kernel_time","ts":30,"dur":2,"args":{"op_name":"Relu","node_index":"1"}},
          {"cat":"Node","name":"a_fence_before","ts":9,"dur":0,"args":{"op_name":"Exp"}},
          {"cat":"Node","name":"a_kernel_time","ts":10,"dur":4,"args":{"op_name":"Exp","node_index":0}}
        ]"#;
        let events = parse_profile(Path::new("p.json"), text).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(
            (
                events[0].node_name.as_str(),
                events[0].op_type.as_str(),
                events[0].node_index
            ),
            ("a", "Exp", Some(0))
        );
        assert_eq!(
            (
                events[1].node_name.as_str(),
                events[1].node_index,
                events[1].dur_us
            ),
            ("b", Some(1), 2)
        );
    }
}
