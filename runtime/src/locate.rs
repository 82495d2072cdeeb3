//! Finding the ONNX Runtime shared library and loading it once per process.
//!
//! Search order (first hit wins; an explicit path or `ORT_DYLIB_PATH` that does not exist is an error, not a
//! fall-through): the explicit path (`--ort-lib`), `ORT_DYLIB_PATH`, a project-local `.venv` in the current
//! directory or any ancestor, the same below the workspace this crate was compiled in, then the `onnxruntime`
//! package of `python3` on PATH.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::error::{Result, RuntimeError};

/// Where ONNX Runtime was loaded from, and what it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OrtInfo {
    pub library: PathBuf,
    /// e.g. `1.31.1`.
    pub version: String,
    /// Execution providers compiled into the loaded library, e.g. `["CPUExecutionProvider"]`.
    pub available_providers: Vec<String>,
}

/// The places to look for the library. [`OrtLibrarySearch::from_environment`] fills them from the process; tests build
/// one by hand.
#[derive(Debug, Clone, Default)]
pub struct OrtLibrarySearch {
    pub explicit: Option<PathBuf>,
    pub env_path: Option<PathBuf>,
    /// Directories whose ancestors may hold a `.venv` (the current dir, the compile-time workspace).
    pub roots: Vec<PathBuf>,
    /// Interpreter asked for `onnxruntime.__file__`; `None` skips this step.
    pub python: Option<String>,
}

impl OrtLibrarySearch {
    pub fn from_environment(explicit: Option<&Path>) -> OrtLibrarySearch {
        let mut roots = Vec::new();
        if let Ok(cwd) = std::env::current_dir() {
            roots.push(cwd);
        }
        roots.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        OrtLibrarySearch {
            explicit: explicit.map(Path::to_path_buf),
            env_path: std::env::var_os("ORT_DYLIB_PATH")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            roots,
            python: Some("python3".to_string()),
        }
    }

    /// The library path, or an error naming every place searched and the install command.
    pub fn find(&self) -> Result<PathBuf> {
        if let Some(path) = &self.explicit {
            return existing(path, "--ort-lib");
        }
        if let Some(path) = &self.env_path {
            return existing(path, "ORT_DYLIB_PATH");
        }
        let mut searched = Vec::new();
        for root in &self.roots {
            for dir in root.ancestors() {
                let venv_lib = dir.join(".venv").join("lib");
                if let Some(found) = find_in_venv(&venv_lib) {
                    return Ok(found);
                }
            }
            searched.push(format!("{}/**/.venv", root.display()));
        }
        if let Some(python) = &self.python {
            match python_package_dir(python) {
                Some(pkg) => {
                    if let Some(found) = find_library_in(&pkg.join("capi")) {
                        return Ok(found);
                    }
                    searched.push(format!(
                        "{} (onnxruntime of {python})",
                        pkg.join("capi").display()
                    ));
                }
                None => searched.push(format!("`import onnxruntime` in {python}")),
            }
        }
        Err(RuntimeError::OrtNotFound { searched })
    }
}

fn existing(path: &Path, origin: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        Err(RuntimeError::OrtPathMissing {
            path: path.to_path_buf(),
            origin: origin.to_string(),
        })
    }
}

/// `<venv>/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so*`
fn find_in_venv(venv_lib: &Path) -> Option<PathBuf> {
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(venv_lib)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path())
        .collect();
    pythons.sort();
    pythons
        .iter()
        .find_map(|p| find_library_in(&p.join("site-packages").join("onnxruntime").join("capi")))
}

/// The main ORT library in a `capi` directory; prefers the fully versioned name (`libonnxruntime.so.1.31.1`).
fn find_library_in(capi: &Path) -> Option<PathBuf> {
    let mut libs: Vec<PathBuf> = std::fs::read_dir(capi)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            name.starts_with("libonnxruntime.so")
                || (name.starts_with("libonnxruntime.") && name.ends_with(".dylib"))
                || name == "onnxruntime.dll"
        })
        .collect();
    // Longest name first: `libonnxruntime.so.1.31.1` over `libonnxruntime.so`.
    libs.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    libs.into_iter().next()
}

fn python_package_dir(python: &str) -> Option<PathBuf> {
    let out = Command::new(python)
        .args([
            "-c",
            "import os, onnxruntime; print(os.path.dirname(onnxruntime.__file__))",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?;
    let dir = dir.trim();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

struct Loaded {
    info: OrtInfo,
    environment: ort::environment::Environment,
}

static LOADED: OnceLock<Loaded> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

/// Loads ONNX Runtime once per process (searching as [`OrtLibrarySearch::from_environment`] does) and returns what was
/// loaded. Later calls return the same library; asking for a different explicit path is an error.
pub fn init(explicit: Option<&Path>) -> Result<&'static OrtInfo> {
    init_with(&OrtLibrarySearch::from_environment(explicit))
}

/// [`init`] with a hand-built search.
pub fn init_with(search: &OrtLibrarySearch) -> Result<&'static OrtInfo> {
    if let Some(loaded) = LOADED.get() {
        return check_same(loaded, search);
    }
    let _guard = LOADING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(loaded) = LOADED.get() {
        return check_same(loaded, search);
    }
    let path = search.find()?;
    let path = path.canonicalize().unwrap_or(path);
    let builder = ort::init_from(&path).map_err(|e| RuntimeError::OrtLoad {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let environment = builder
        .with_name("ckpt-opt")
        .build()
        .map_err(|e| RuntimeError::OrtLoad {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let info = OrtInfo {
        version: version_of(&path),
        available_providers: available_providers(),
        library: path,
    };
    Ok(&LOADED.get_or_init(|| Loaded { info, environment }).info)
}

fn check_same(loaded: &'static Loaded, search: &OrtLibrarySearch) -> Result<&'static OrtInfo> {
    if let Some(requested) = &search.explicit {
        let requested = requested
            .canonicalize()
            .unwrap_or_else(|_| requested.clone());
        if requested != loaded.info.library {
            return Err(RuntimeError::OrtAlreadyLoaded {
                loaded: loaded.info.library.clone(),
                requested,
            });
        }
    }
    Ok(&loaded.info)
}

/// The environment sessions are created in; loads ORT with the default search if nobody did yet.
pub(crate) fn environment() -> Result<&'static ort::environment::Environment> {
    if LOADED.get().is_none() {
        init(None)?;
    }
    match LOADED.get() {
        Some(loaded) => Ok(&loaded.environment),
        None => Err(RuntimeError::OrtNotFound {
            searched: vec!["(initialisation raced)".to_string()],
        }),
    }
}

/// The info of the loaded library, if [`init`] has run.
pub fn loaded() -> Option<&'static OrtInfo> {
    LOADED.get().map(|l| &l.info)
}

/// ORT's build string carries `git-branch=rel-1.31.1`; the file name `libonnxruntime.so.1.31.1` is the fallback.
fn version_of(path: &Path) -> String {
    let build = ort::info();
    if let Some(rest) = build.split("git-branch=rel-").nth(1) {
        let version: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        if !version.is_empty() {
            return version;
        }
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.split_once(".so.") {
        Some((_, v)) => v.to_string(),
        None => format!("unknown ({build})"),
    }
}

fn available_providers() -> Vec<String> {
    let api = ort::api();
    let mut names: *mut *mut std::os::raw::c_char = std::ptr::null_mut();
    let mut count: std::os::raw::c_int = 0;
    // SAFETY: the C API fills `names` with `count` NUL-terminated strings, released below with the same API.
    unsafe {
        let status = (api.GetAvailableProviders)(&mut names, &mut count);
        if ort::Error::result_from_status(status).is_err() || names.is_null() {
            return Vec::new();
        }
        let list = (0..count.max(0) as usize)
            .map(|i| {
                std::ffi::CStr::from_ptr(*names.add(i))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let _ = ort::Error::result_from_status((api.ReleaseAvailableProviders)(names, count));
        list
    }
}
