//! The byte counts a written model records beside its deployment profile, for the runner
//! (`ckpt_opt.Session`, `ckpt-runtime`) to cap the arena with and to state what the device
//! holds. Keys (`metadata_props`):
//! - `ckpt-opt.version`: the tool that wrote the model;
//! - `ckpt-opt.ceiling_bytes`: the ceiling the model was planned and checked against;
//! - `ckpt-opt.arena_cap_bytes`: the arena's `max_mem` (CUDA: `gpu_mem_limit`), the ceiling
//!   less what is held outside the arena; the profile's steps run under it, and it includes
//!   what loading takes from the arena's allocator;
//! - `ckpt-opt.caller_bytes`: what the caller feeds and holds outside the arena (parameters,
//!   data inputs, declared optimizer state, the outputs it gets back);
//! - `ckpt-opt.initializer_bytes`: constants the session holds outside the arena.
//!
//! `caller_bytes + initializer_bytes + arena_cap_bytes` is the ceiling.

/// Prefix of the deployment's keys.
pub const DEPLOYMENT_KEY_PREFIX: &str = "ckpt-opt.";

/// What a written model records for its runner, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deployment {
    pub ceiling_bytes: u64,
    pub arena_cap_bytes: u64,
    pub caller_bytes: u64,
    pub initializer_bytes: u64,
}

/// Why recorded deployment keys could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeploymentError {
    #[error("the model records no `{0}` (write it with ckpt-opt)")]
    Missing(String),
    #[error("`{key}` = `{value}` is not a byte count")]
    BadValue { key: String, value: String },
    #[error("`ckpt-opt.ceiling_bytes` = {ceiling} is not `caller_bytes` + `initializer_bytes` + `arena_cap_bytes` = {sum}")]
    Inconsistent { ceiling: u64, sum: u64 },
}

impl Deployment {
    /// The deployment of a plan under `ceiling_bytes`, with `outside` held beside the arena:
    /// (the caller's bytes, constants outside the arena).
    pub fn under(ceiling_bytes: u64, caller_bytes: u64, initializer_bytes: u64) -> Deployment {
        Deployment {
            ceiling_bytes,
            arena_cap_bytes: ceiling_bytes.saturating_sub(caller_bytes + initializer_bytes),
            caller_bytes,
            initializer_bytes,
        }
    }

    /// The `metadata_props` entries, sorted by key.
    pub fn metadata(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = [
            ("arena_cap_bytes", self.arena_cap_bytes.to_string()),
            ("caller_bytes", self.caller_bytes.to_string()),
            ("ceiling_bytes", self.ceiling_bytes.to_string()),
            ("initializer_bytes", self.initializer_bytes.to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{DEPLOYMENT_KEY_PREFIX}{k}"), v))
        .collect();
        out.sort();
        out
    }

    /// The deployment `entries` record (`None` when they record none of its keys).
    pub fn from_metadata<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    ) -> Result<Option<Deployment>, DeploymentError> {
        let get = |name: &str| {
            let key = format!("{DEPLOYMENT_KEY_PREFIX}{name}");
            entries
                .clone()
                .into_iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| {
                    v.parse::<u64>().map_err(|_| DeploymentError::BadValue {
                        key: key.clone(),
                        value: v.to_string(),
                    })
                })
                .transpose()
                .map(|v| (key, v))
        };
        let names = [
            "ceiling_bytes",
            "arena_cap_bytes",
            "caller_bytes",
            "initializer_bytes",
        ];
        let mut values = Vec::new();
        for name in names {
            values.push(get(name)?);
        }
        if values.iter().all(|(_, v)| v.is_none()) {
            return Ok(None);
        }
        let mut bytes = [0u64; 4];
        for (i, (key, v)) in values.into_iter().enumerate() {
            bytes[i] = v.ok_or(DeploymentError::Missing(key))?;
        }
        let d = Deployment {
            ceiling_bytes: bytes[0],
            arena_cap_bytes: bytes[1],
            caller_bytes: bytes[2],
            initializer_bytes: bytes[3],
        };
        let sum = d.caller_bytes + d.initializer_bytes + d.arena_cap_bytes;
        if sum != d.ceiling_bytes {
            return Err(DeploymentError::Inconsistent {
                ceiling: d.ceiling_bytes,
                sum,
            });
        }
        Ok(Some(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_reads_back_and_sums_to_the_ceiling() {
        let d = Deployment::under(1_000_000, 40_000, 2_000);
        assert_eq!(d.arena_cap_bytes, 958_000);
        let md = d.metadata();
        assert!(md.iter().any(|(k, _)| k == "ckpt-opt.version"));
        let back =
            Deployment::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap();
        assert_eq!(back, Some(d));
    }

    #[test]
    fn a_partial_or_inconsistent_record_is_refused_naming_the_key() {
        let none: Vec<(&str, &str)> = vec![("ckpt-opt.profile.steps", "3")];
        assert_eq!(Deployment::from_metadata(none).unwrap(), None);
        let partial = vec![("ckpt-opt.ceiling_bytes", "10")];
        let e = Deployment::from_metadata(partial).unwrap_err();
        assert!(e.to_string().contains("ckpt-opt.arena_cap_bytes"), "{e}");
        let bad = vec![
            ("ckpt-opt.ceiling_bytes", "10"),
            ("ckpt-opt.arena_cap_bytes", "5"),
            ("ckpt-opt.caller_bytes", "1"),
            ("ckpt-opt.initializer_bytes", "1"),
        ];
        assert!(matches!(
            Deployment::from_metadata(bad),
            Err(DeploymentError::Inconsistent {
                ceiling: 10,
                sum: 7
            })
        ));
        let nan = vec![("ckpt-opt.caller_bytes", "lots")];
        assert!(Deployment::from_metadata(nan)
            .unwrap_err()
            .to_string()
            .contains("`ckpt-opt.caller_bytes` = `lots`"));
    }
}
