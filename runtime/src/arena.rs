//! CPU arenas registered on the ORT environment (`CreateAndRegisterAllocator` + `session.use_env_allocators`), the
//! only way the C API configures the CPU arena: the exact arena (always splits chunks, so its `InUse` is the sum of
//! live allocations, each rounded up to 256 bytes) and a BFC arena with a deployment profile's extend strategy and
//! initial chunk; either optionally capped with `max_mem`. Registered fresh for each session so its statistics
//! start at zero, and unregistered after; one at a time per process.

use std::ffi::CString;
use std::sync::Mutex;

use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::AsPointer;

use crate::error::{Result, RuntimeError};
use crate::locate::environment;
use crate::model::Model;

static EXACT_ARENA: Mutex<()> = Mutex::new(());

/// BFC arena settings: grow by exactly what is requested and split any chunk that would leave >= 256 bytes idle.
const EXACT_ARENA_CFG: [(&str, usize); 3] = [
    ("arena_extend_strategy", 1),
    ("max_dead_bytes_per_chunk", 256),
    ("initial_chunk_size_bytes", 256),
];

/// The `OrtArenaCfg` entries of `arena` (keys not given keep ORT's defaults).
fn arena_settings(arena: crate::Arena) -> Vec<(&'static str, usize)> {
    match arena {
        crate::Arena::Session | crate::Arena::Exact => EXACT_ARENA_CFG.to_vec(),
        crate::Arena::Bfc {
            power_of_two,
            initial_chunk,
            ..
        } => {
            let mut v = vec![("arena_extend_strategy", usize::from(!power_of_two))];
            if let Some(c) = initial_chunk {
                v.push((
                    "initial_chunk_size_bytes",
                    usize::try_from(c).unwrap_or(usize::MAX),
                ));
            }
            v
        }
    }
}

pub(crate) fn with_env_cpu_arena<T>(
    model: Model<'_>,
    arena: crate::Arena,
    limit: Option<u64>,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let _guard = EXACT_ARENA
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let fail = |message: String| RuntimeError::SessionCreate {
        model: model.label.to_string(),
        message: format!("registering the CPU arena ({arena:?}): {message}"),
    };
    let env = environment()?;
    let info = MemoryInfo::new(
        AllocationDevice::CPU,
        0,
        AllocatorType::Arena,
        MemoryType::Default,
    )
    .map_err(|e| fail(e.to_string()))?;
    let api = ort::api();
    let env_ptr = env.ptr().cast_mut();
    let mut settings = arena_settings(arena);
    if let Some(limit) = limit {
        settings.push(("max_mem", usize::try_from(limit).unwrap_or(usize::MAX)));
    }
    let keys: Vec<CString> = settings
        .iter()
        .map(|(k, _)| CString::new(*k).expect("no NUL"))
        .collect();
    let key_ptrs: Vec<*const std::os::raw::c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    let values: Vec<usize> = settings.iter().map(|(_, v)| *v).collect();
    // SAFETY: plain C API calls on live objects; the arena config is released right after registration copies it.
    unsafe {
        // A previous registration can only survive a panic inside `f`; drop it so statistics start at zero.
        let _ = ort::Error::result_from_status((api.UnregisterAllocator)(env_ptr, info.ptr()));
        let mut cfg: *mut ort::sys::OrtArenaCfg = std::ptr::null_mut();
        ort::Error::result_from_status((api.CreateArenaCfgV2)(
            key_ptrs.as_ptr(),
            values.as_ptr(),
            keys.len(),
            &mut cfg,
        ))
        .map_err(|e| fail(e.to_string()))?;
        let registered = ort::Error::result_from_status((api.CreateAndRegisterAllocator)(
            env_ptr,
            info.ptr(),
            cfg,
        ));
        (api.ReleaseArenaCfg)(cfg);
        registered.map_err(|e| fail(e.to_string()))?;
    }
    let result = f();
    // SAFETY: as above; every session that used the allocator has been dropped inside `f`.
    unsafe {
        let _ = ort::Error::result_from_status((api.UnregisterAllocator)(env_ptr, info.ptr()));
    }
    result
}
