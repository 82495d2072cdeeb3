//! The stages of a check that take more than a second, as typed events for a progress line.
//!
//! Nothing is reported until the caller installs a sink ([`report_to`], once per process), and
//! a sink never changes a result: it only hears which stage runs now.

use std::fmt;
use std::sync::OnceLock;

/// A stage now running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage<'a> {
    /// Running a graph for its values: `original graph`, `rewritten graph` or `broken control`.
    Values(&'a str),
    /// Measuring a graph's peak and step times (`original` or `rewritten`).
    PeakAndTimes(&'a str),
    /// Measuring a graph's device need under the profile.
    DeviceNeed(&'a str),
    /// Profiling every node's kernel time (`--cost profile`).
    NodeCosts,
}

impl fmt::Display for Stage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stage::Values(what) => write!(f, "validation: running the {what}"),
            Stage::PeakAndTimes(label) => write!(
                f,
                "validation: measuring the {label} graph's peak and step times"
            ),
            Stage::DeviceNeed(label) => write!(
                f,
                "validation: measuring the {label} graph's device need under the profile"
            ),
            Stage::NodeCosts => {
                f.write_str("profiling the graph's nodes on ONNX Runtime (--cost profile)")
            }
        }
    }
}

static SINK: OnceLock<fn(Stage<'_>)> = OnceLock::new();

/// Report every stage to `sink` from now on. Returns false (and keeps the first) when a sink
/// was installed already.
pub fn report_to(sink: fn(Stage<'_>)) -> bool {
    SINK.set(sink).is_ok()
}

/// Tell the sink, if any, that `stage` runs now.
pub(crate) fn report(stage: Stage<'_>) {
    if let Some(sink) = SINK.get() {
        sink(stage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_read_as_the_progress_line_shows_them() {
        assert_eq!(
            Stage::Values("broken control").to_string(),
            "validation: running the broken control"
        );
        assert_eq!(
            Stage::DeviceNeed("rewritten").to_string(),
            "validation: measuring the rewritten graph's device need under the profile"
        );
    }
}
