//! The profile's `metadata_props` form: the entries a written model records (under
//! [`PROFILE_KEY_PREFIX`] and [`SESSION_CONFIG_KEY_PREFIX`]), one setting set by its short
//! key, and the profile read back from a model.

use std::collections::BTreeMap;

use super::{
    InitialChunk, OptLevel, Profile, ProfileError, ORT_VERSION, PROFILE_KEY_PREFIX,
    SESSION_CONFIG_KEY_PREFIX, TRAINING_ORT_VERSION,
};

/// The short keys [`Profile::set`] knows.
const KEYS: &[&str] = &[
    "graph_optimization_level",
    "offline_optimization_level",
    "enable_mem_pattern",
    "arena_extend_strategy",
    "initial_chunk_size_bytes",
    "execution_provider",
    "caller_outputs",
    "intra_op_num_threads",
    "steps",
    "ort_version",
];

impl Profile {
    /// The `metadata_props` entries that record the profile, sorted by key.
    pub fn metadata(&self) -> Vec<(String, String)> {
        let mut out = vec![
            (
                "graph_optimization_level",
                self.graph_optimization_level.to_string(),
            ),
            ("enable_mem_pattern", self.enable_mem_pattern.to_string()),
            (
                "arena_extend_strategy",
                self.arena_extend_strategy.to_string(),
            ),
            ("execution_provider", self.execution_provider.to_string()),
            ("caller_outputs", self.caller_outputs.to_string()),
            (
                "intra_op_num_threads",
                self.intra_op_num_threads.to_string(),
            ),
            ("steps", self.steps.to_string()),
            ("ort_version", self.ort_version.to_string()),
        ];
        if let Some(l) = self.offline_optimization_level {
            out.push(("offline_optimization_level", l.to_string()));
        }
        match self.initial_chunk {
            InitialChunk::OrtDefault => {}
            InitialChunk::Bytes(c) => out.push(("initial_chunk_size_bytes", c.to_string())),
            InitialChunk::ArenaBudget => {
                out.push(("initial_chunk_size_bytes", "arena_budget".to_string()))
            }
        }
        let mut out: Vec<(String, String)> = out
            .into_iter()
            .map(|(k, v)| (format!("{PROFILE_KEY_PREFIX}{k}"), v))
            .collect();
        out.extend(
            self.session_config
                .iter()
                .map(|(k, v)| (format!("{SESSION_CONFIG_KEY_PREFIX}{k}"), v.clone())),
        );
        out.sort();
        out
    }

    /// Set one setting by its short key (`enable_mem_pattern`, …), as flags and metadata name them.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ProfileError> {
        let bad = |expected: &'static str| ProfileError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        let named = |e: ProfileError| match e {
            ProfileError::BadValue {
                value, expected, ..
            } => ProfileError::BadValue {
                key: key.to_string(),
                value,
                expected,
            },
            other => other,
        };
        match key {
            "graph_optimization_level" => {
                self.graph_optimization_level = value.parse().map_err(named)?
            }
            "offline_optimization_level" => {
                self.offline_optimization_level = match value.parse().map_err(named)? {
                    OptLevel::Disable => None,
                    l => Some(l),
                }
            }
            "enable_mem_pattern" => {
                self.enable_mem_pattern = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("`true` or `false`")),
                }
            }
            "arena_extend_strategy" => self.arena_extend_strategy = value.parse().map_err(named)?,
            "initial_chunk_size_bytes" => {
                self.initial_chunk = match value {
                    "arena_budget" => InitialChunk::ArenaBudget,
                    "default" => InitialChunk::OrtDefault,
                    _ => match value.parse::<u64>() {
                        Ok(v) if v > 0 && v <= crate::ort::MAX_INITIAL_CHUNK => {
                            InitialChunk::Bytes(v)
                        }
                        _ => {
                            return Err(bad(
                                "a positive number of bytes up to 2147483392 (ORT's arena config holds a C int), `arena_budget` or `default`",
                            ))
                        }
                    },
                }
            }
            "execution_provider" => self.execution_provider = value.parse().map_err(named)?,
            "caller_outputs" => self.caller_outputs = value.parse().map_err(named)?,
            "intra_op_num_threads" => {
                self.intra_op_num_threads = match value.parse::<u32>() {
                    Ok(v) if (1..=1024).contains(&v) => v,
                    _ => return Err(bad("a whole number of threads from 1 to 1024")),
                }
            }
            "steps" => {
                let v: u32 = value
                    .parse()
                    .map_err(|_| bad("a whole number of steps from 1 to 100"))?;
                if !(1..=100).contains(&v) {
                    return Err(bad("a whole number of steps from 1 to 100"));
                }
                self.steps = v;
            }
            "ort_version" => {
                self.ort_version = [ORT_VERSION, TRAINING_ORT_VERSION]
                    .into_iter()
                    .find(|v| *v == value)
                    .ok_or_else(|| bad("`1.31.1` or `1.19.2` (training artifacts)"))?
            }
            _ => {
                return Err(ProfileError::UnknownKey {
                    key: key.to_string(),
                    known: KEYS.join(", "),
                })
            }
        }
        Ok(())
    }

    /// [`Profile::from_metadata`] of `model`'s `metadata_props` (entries without a key or a
    /// value are not profile entries).
    pub fn from_model(model: &crate::onnx::ModelProto) -> Result<Option<Profile>, ProfileError> {
        Profile::from_metadata(
            model
                .metadata_props
                .iter()
                .filter_map(|p| Some((p.key.as_deref()?, p.value.as_deref()?))),
        )
    }

    /// The profile a model's `metadata_props` record, if any key of it is present; settings
    /// not recorded keep their defaults. A recorded profile the tool does not offer
    /// ([`Profile::offered`]) is refused.
    pub fn from_metadata<'a>(
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Option<Profile>, ProfileError> {
        let mut p = Profile {
            session_config: BTreeMap::new(),
            ..Profile::default()
        };
        let mut any = false;
        for (k, v) in props {
            if let Some(short) = k.strip_prefix(PROFILE_KEY_PREFIX) {
                p.set(short, v)?;
                any = true;
            } else if let Some(entry) = k.strip_prefix(SESSION_CONFIG_KEY_PREFIX) {
                p.session_config.insert(entry.to_string(), v.to_string());
                any = true;
            }
        }
        if any {
            p.offered(true)?;
        }
        Ok(any.then_some(p))
    }
}
