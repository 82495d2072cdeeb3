//! The profile's rules on small cases: the first region's C int, the offered combinations,
//! the metadata read back, bad values named by key.

use super::*;

/// ORT's arena config holds the first region in a C int: a budget above it resolves to the
/// largest aligned value it takes, and a recorded value above it is refused by name.
#[test]
fn an_arena_budget_above_a_c_int_resolves_to_the_largest_first_region() {
    let p = Profile::default().resolved(69 << 30);
    assert_eq!(
        p.initial_chunk,
        InitialChunk::Bytes(crate::ort::MAX_INITIAL_CHUNK)
    );
    assert_eq!(crate::ort::MAX_INITIAL_CHUNK, 2_147_483_392);
    assert_eq!(
        Profile::default().initial_chunk_bytes(Some(69 << 30)),
        crate::ort::MAX_INITIAL_CHUNK
    );
    let mut q = Profile::default();
    let e = q
        .set("initial_chunk_size_bytes", "4294967296")
        .unwrap_err()
        .to_string();
    assert!(e.contains("initial_chunk_size_bytes"), "{e}");
}

/// Held outputs are offered in one region of the budget (and from ORT's 1 MiB with the
/// memory pattern on); a recorded first region counts as the budget when it holds the need.
#[test]
fn held_outputs_are_offered_in_one_region_only() {
    let held = Profile {
        caller_outputs: CallerOutputs::Held,
        ..Profile::default()
    };
    assert_eq!(held.offered(false), Ok(()));
    let recorded = held.resolved(4096);
    assert!(matches!(
        recorded.offered(false),
        Err(ProfileError::NotOffered { .. })
    ));
    assert_eq!(recorded.offered(true), Ok(()));
    assert_eq!(recorded.one_region(4096), Ok(()));
    let e = recorded.one_region(4352).unwrap_err().to_string();
    assert!(e.contains("below the arena need of 4352 B"), "{e}");
    let released = Profile::default().resolved(4096);
    assert_eq!(released.offered(false), Ok(()));
    // Bound or released outputs: no request-sized regions, with the memory pattern off or on.
    let request_sized = Profile {
        arena_extend_strategy: ExtendStrategy::SameAsRequested,
        ..Profile::default()
    };
    let e = request_sized.offered(false).unwrap_err().to_string();
    assert!(
        e.contains("`--mem-pattern off --arena-extend kSameAsRequested`")
            && e.contains("t5_d0_makefx")
            && e.contains("use `--arena-extend kNextPowerOfTwo`"),
        "{e}"
    );
    let with_pattern = Profile {
        enable_mem_pattern: true,
        ..request_sized.clone()
    };
    for recorded in [false, true] {
        let e = with_pattern
            .resolved(4096)
            .offered(recorded)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`--mem-pattern on --arena-extend kSameAsRequested`")
                && e.contains("gpt2_d0_onnxad")
                && e.contains("+2.4%"),
            "{e}"
        );
    }
    let pattern_in_one_region = Profile {
        enable_mem_pattern: true,
        ..Profile::default()
    };
    assert_eq!(pattern_in_one_region.offered(false), Ok(()));
    assert_eq!(released.one_region(1 << 30), Ok(()));
    let e = Profile::from_metadata([
        ("ckpt-opt.profile.arena_extend_strategy", "kSameAsRequested"),
        ("ckpt-opt.profile.caller_outputs", "held"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--arena-extend kSameAsRequested") && e.contains("--caller-outputs held"),
        "{e}"
    );
    // On onnxruntime-training: one region of the budget, memory pattern off, only.
    let training = Profile {
        ort_version: TRAINING_ORT_VERSION,
        ..Profile::default()
    };
    assert_eq!(training.offered(false), Ok(()));
    for p in [
        Profile {
            enable_mem_pattern: true,
            ..training.clone()
        },
        Profile {
            arena_extend_strategy: ExtendStrategy::SameAsRequested,
            ..training.clone()
        },
        Profile {
            initial_chunk: InitialChunk::OrtDefault,
            ..training.clone()
        },
    ] {
        let e = p.offered(true).unwrap_err().to_string();
        assert!(e.contains("on an ORT training artifact"), "{e}");
    }
    assert!(training.resolved(4096).one_region(8192).is_err());
    let cuda = Profile {
        execution_provider: ExecutionProvider::Cuda,
        ..held.clone()
    };
    assert!(cuda.offered(false).is_err());
    let e = Profile {
        enable_mem_pattern: true,
        ..held.clone()
    }
    .offered(false)
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("+2.51%") && e.contains("--mem-pattern on"),
        "{e}"
    );
}

#[test]
fn metadata_reads_back() {
    let mut p = Profile::default();
    p.set("enable_mem_pattern", "true").unwrap();
    p.set("arena_extend_strategy", "kNextPowerOfTwo").unwrap();
    p.set("initial_chunk_size_bytes", "4096").unwrap();
    assert_eq!(p.initial_chunk, InitialChunk::Bytes(4096));
    let mut h = Profile::default();
    h.set("caller_outputs", "held").unwrap();
    h.set("initial_chunk_size_bytes", "8192").unwrap();
    let md = h.metadata();
    let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .unwrap()
        .unwrap();
    assert_eq!(back.caller_outputs, CallerOutputs::Held);
    let mut t = Profile::default();
    t.set("ort_version", "1.19.2").unwrap();
    assert_eq!(t.ort_version, TRAINING_ORT_VERSION);
    let md = t.metadata();
    assert!(md.contains(&("ckpt-opt.profile.ort_version".into(), "1.19.2".into())));
    let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .unwrap()
        .unwrap();
    assert_eq!(back, t);
    let md = p.metadata();
    assert!(md.contains(&(
        "ckpt-opt.profile.arena_extend_strategy".into(),
        "kNextPowerOfTwo".into()
    )));
    assert!(md.contains(&(
        "ckpt-opt.session_config.optimization.disable_specified_optimizers".into(),
        "CommonSubexpressionElimination".into()
    )));
    let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .unwrap()
        .unwrap();
    assert_eq!(back, p);
}

#[test]
fn offline_level_reads_back_and_is_described() {
    let mut p = Profile::default();
    assert!(!p
        .metadata()
        .iter()
        .any(|(k, _)| k.ends_with("offline_optimization_level")));
    p.set("offline_optimization_level", "extended").unwrap();
    assert_eq!(p.offline_optimization_level, Some(OptLevel::Extended));
    let md = p.metadata();
    assert!(md.contains(&(
        "ckpt-opt.profile.offline_optimization_level".into(),
        "extended".into()
    )));
    assert!(md.contains(&(
        "ckpt-opt.profile.graph_optimization_level".into(),
        "disable".into()
    )));
    let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .unwrap()
        .unwrap();
    assert_eq!(back, p);
    assert!(
        p.describe()
            .starts_with("cpu, level disable (optimized offline at extended), memory pattern off"),
        "{}",
        p.describe()
    );
    p.set("offline_optimization_level", "disable").unwrap();
    assert_eq!(p.offline_optimization_level, None);
    let e = p.set("offline_optimization_level", "max").unwrap_err();
    assert_eq!(
        e.to_string(),
        "profile setting `offline_optimization_level` = `max`: expected one of `disable`, `basic`, `extended` or `all`"
    );
}

#[test]
fn bad_values_name_the_key() {
    let mut p = Profile::default();
    let e = p.set("arena_extend_strategy", "kDouble").unwrap_err();
    assert_eq!(
        e.to_string(),
        "profile setting `arena_extend_strategy` = `kDouble`: expected one of `kNextPowerOfTwo` or `kSameAsRequested`"
    );
    assert!(p.set("steps", "0").is_err());
    assert!(p.set("ort_version", "1.20.0").is_err());
    assert!(p.set("initial_chunk_size_bytes", "0").is_err());
    assert!(matches!(
        p.set("arena", "x"),
        Err(ProfileError::UnknownKey { .. })
    ));
    assert_eq!(Profile::from_metadata([("other", "x")]).unwrap(), None);
}
