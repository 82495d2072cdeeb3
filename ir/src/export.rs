//! [`Graph`] → ModelProto → file. The imported model is the template: only the node list
//! (in the graph's file order, names from its tensors) and the value_info of tensors that
//! patches created are regenerated, so an unchanged import exports to the same message.
//!
//! Files are written atomically (a temporary file beside the target, created exclusively and
//! never through an existing name or link, then a rename); a [`Staging`] set publishes several
//! files together, under a lock on each target folder. A temporary file is registered while
//! it exists, so that [`remove_temp_files`] (called on
//! SIGINT/SIGTERM) leaves none behind. A model with external data is written by
//! [`write_model`]: its small constants are embedded ([`crate::embed_small_external`]: ONNX
//! Runtime cannot load a model whose shape constants are external); beside its original's
//! directory the output references the original data files; anywhere else the data it uses is
//! copied into one file beside the output, so the output is correct wherever it is written.
//! Each tensor is copied by its true byte range: dims × element size from its offset.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use prost::Message;

use crate::error::ExportError;
use crate::graph::Graph;
use crate::onnx;

/// The graph as a ModelProto.
pub fn export(graph: &Graph) -> onnx::ModelProto {
    let mut model = (*graph.model).clone();
    let g = model.graph.get_or_insert_with(Default::default);
    g.node = graph
        .order
        .iter()
        .map(|&id| {
            let node = graph.node(id);
            let mut p = (*node.proto).clone();
            // A copy (a recompute clone) shares its template's proto: its name is its own.
            if p.name.as_deref().unwrap_or("") != node.name {
                p.name = Some(node.name.clone());
            }
            p.input = node
                .inputs
                .iter()
                .map(|t| t.map_or_else(String::new, |t| graph.tensor(t).name.clone()))
                .collect();
            p.output = node
                .outputs
                .iter()
                .map(|t| t.map_or_else(String::new, |t| graph.tensor(t).name.clone()))
                .collect();
            p
        })
        .collect();
    g.value_info.extend(graph.added_value_info.iter().cloned());
    model
}

/// The graph serialized.
pub fn export_bytes(graph: &Graph) -> Vec<u8> {
    export(graph).encode_to_vec()
}

/// Whether `path` may be written by [`write_atomic`]: absent, or a regular file (a symlink,
/// FIFO, device or directory would be replaced by the rename, or never be written at all).
pub fn check_output_target(path: &Path) -> Result<(), ExportError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let t = meta.file_type();
    let kind = if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        return Ok(());
    };
    Err(ExportError::NotARegularFile {
        path: path.to_path_buf(),
        kind,
    })
}

/// Temporary files that exist now, for [`remove_temp_files`].
static TEMP_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn register_temp(p: &Path) {
    if let Ok(mut v) = TEMP_FILES.lock() {
        v.push(p.to_path_buf());
    }
}

fn unregister_temp(p: &Path) {
    if let Ok(mut v) = TEMP_FILES.lock() {
        v.retain(|x| x != p);
    }
}

/// Remove every temporary file a write in progress holds (for a signal handler: the process
/// is about to exit, and no published file is touched).
pub fn remove_temp_files() {
    if let Ok(mut v) = TEMP_FILES.lock() {
        for p in v.drain(..) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Remove `.NAME.tmp-PID[-K]` files in `dir` left by a writer of `NAME` that no longer runs (a
/// `kill -9` between write and rename, which no handler can catch). Only where `/proc` tells
/// which processes run; a live writer's file is never touched.
fn remove_stale_temps(dir: &Path, file_name: &str) {
    let proc_root = Path::new("/proc");
    if !proc_root.join("self").exists() {
        return;
    }
    let prefix = format!(".{file_name}.tmp-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix.as_str())) else {
            continue;
        };
        // `PID` or `PID-K`.
        let pid = rest.split_once('-').map_or(rest, |(pid, _)| pid);
        let is_pid = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_pid && is_file && !proc_root.join(pid).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A temporary file beside `path`, registered until it is renamed into place or removed.
struct Staged {
    tmp: PathBuf,
    path: PathBuf,
}

/// How many names [`Staged::create`] tries before giving up (each taken name is a file
/// another writer or anyone else put there).
const TEMP_NAME_TRIES: u32 = 64;

impl Staged {
    /// Create `.NAME.tmp-PID` (or `.NAME.tmp-PID-K` when that name is taken) beside `path`,
    /// exclusively: `O_CREAT|O_EXCL|O_NOFOLLOW`, so an existing file or a symbolic link
    /// planted at the name is never opened, followed or removed.
    fn create(path: &Path) -> Result<(Staged, std::fs::File), ExportError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        let dir = parent_dir(path);
        remove_stale_temps(&dir, &file_name);
        let pid = std::process::id();
        let io = |source| ExportError::Io {
            path: path.to_path_buf(),
            source,
        };
        for k in 0..TEMP_NAME_TRIES {
            let tmp = match k {
                0 => dir.join(format!(".{file_name}.tmp-{pid}")),
                k => dir.join(format!(".{file_name}.tmp-{pid}-{k}")),
            };
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o666)
                .open(&tmp);
            match opened {
                Ok(f) => {
                    register_temp(&tmp);
                    let staged = Staged {
                        tmp,
                        path: path.to_path_buf(),
                    };
                    return Ok((staged, f));
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(e)),
            }
        }
        Err(io(std::io::Error::new(
            ErrorKind::AlreadyExists,
            format!("{TEMP_NAME_TRIES} temporary names beside it are taken"),
        )))
    }

    fn io(&self, source: std::io::Error) -> ExportError {
        ExportError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn publish(self) -> Result<(), ExportError> {
        let r = std::fs::rename(&self.tmp, &self.path).map_err(|source| self.io(source));
        if r.is_ok() {
            unregister_temp(&self.tmp);
        }
        r
    }
}

impl Drop for Staged {
    /// An unpublished temporary file (this run created it) is removed.
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.tmp).is_ok() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        unregister_temp(&self.tmp);
    }
}

fn stage_bytes(path: &Path, bytes: &[u8]) -> Result<Staged, ExportError> {
    let (staged, mut f) = Staged::create(path)?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|source| staged.io(source))?;
    Ok(staged)
}

/// Write `bytes` to `path` atomically (temporary file in the same directory, then rename).
/// Refuses to overwrite `input` (the model the bytes were derived from) and targets that are
/// not regular files.
pub fn write_atomic(path: &Path, bytes: &[u8], input: Option<&Path>) -> Result<(), ExportError> {
    let mut staging = Staging::default();
    staging.stage(path, bytes, input)?;
    staging.publish()
}

/// Files written under temporary names and published together: every file is written in
/// full before any is renamed into place, so a failure while writing (a full disk, a folder
/// that refuses a file) publishes none, and dropping the set removes its temporary files.
/// [`Staging::publish`] renames under an exclusive `flock` on each target folder, taken in
/// one order: two runs publishing to one folder publish one set after the other, never a
/// model of one with the data file of the other.
#[derive(Default)]
pub struct Staging {
    files: Vec<Staged>,
}

impl Staging {
    /// Stage `bytes` for `path`. Refuses to overwrite `input` (the model the bytes were
    /// derived from) and targets that are not regular files.
    pub fn stage(
        &mut self,
        path: &Path,
        bytes: &[u8],
        input: Option<&Path>,
    ) -> Result<(), ExportError> {
        check_output_target(path)?;
        if input.is_some_and(|input| same_file(path, input)) {
            return Err(ExportError::WouldOverwriteInput {
                path: path.to_path_buf(),
            });
        }
        self.files.push(stage_bytes(path, bytes)?);
        Ok(())
    }

    /// Where the file staged for `path` is written until it is published (`None`: nothing
    /// staged for it).
    pub fn staged_path(&self, path: &Path) -> Option<&Path> {
        self.files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.tmp.as_path())
    }

    /// The model staged for `out`, decoded from its temporary file, with each external-data
    /// location that names a file of this set pointed at that file's temporary name (beside
    /// it): the bytes that will be published, readable before they are.
    pub fn read_back(&self, out: &Path) -> Result<onnx::ModelProto, ExportError> {
        let unreadable = |what: String| ExportError::ReadBack {
            path: out.to_path_buf(),
            what,
        };
        let tmp = self
            .staged_path(out)
            .ok_or_else(|| unreadable("nothing is staged for it".into()))?;
        let bytes = std::fs::read(tmp).map_err(|e| unreadable(e.to_string()))?;
        let mut model = onnx::ModelProto::decode(bytes.as_slice())
            .map_err(|e| unreadable(format!("it does not decode: {e}")))?;
        let dir = parent_dir(out);
        for t in model
            .graph
            .iter_mut()
            .flat_map(|g| g.initializer.iter_mut())
        {
            for e in t.external_data.iter_mut() {
                if e.key.as_deref() != Some("location") {
                    continue;
                }
                let named = dir.join(e.value.as_deref().unwrap_or(""));
                if let Some(staged) = self.staged_path(&named).and_then(Path::file_name) {
                    e.value = Some(staged.to_string_lossy().into_owned());
                }
            }
        }
        Ok(model)
    }

    /// Rename every staged file into place, in staging order (a model's data file before
    /// the model), holding each target folder's lock.
    pub fn publish(mut self) -> Result<(), ExportError> {
        let mut dirs: Vec<PathBuf> = self
            .files
            .iter()
            .map(|f| {
                let d = parent_dir(&f.path);
                d.canonicalize().unwrap_or(d)
            })
            .collect();
        dirs.sort();
        dirs.dedup();
        let _locks = dirs
            .iter()
            .map(|d| lock_dir(d))
            .collect::<Result<Vec<_>, _>>()?;
        for f in self.files.drain(..) {
            f.publish()?;
        }
        Ok(())
    }
}

/// An exclusive `flock` on `dir`, held until the returned file is closed.
fn lock_dir(dir: &Path) -> Result<std::fs::File, ExportError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| ExportError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .map_err(io)?;
    loop {
        // SAFETY: `f` is an open descriptor for the call's duration.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(f);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(io(e));
        }
    }
}

/// Where a written model's external data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPlacement {
    /// The model has no external data.
    None,
    /// The output is in its original's directory and references the original data files.
    Referenced,
    /// The data the output uses was copied into one file beside it.
    Copied,
}

/// What [`write_model`] wrote.
#[derive(Clone, Debug)]
pub struct Written {
    /// The model file's bytes.
    pub bytes: Vec<u8>,
    pub placement: DataPlacement,
    /// The data files the output reads (absent unless it has external data).
    pub data_files: Vec<PathBuf>,
}

/// The external data files a model's initializers name, in first-use order, under `dir`.
pub fn external_data_files(model: &onnx::ModelProto, dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    for t in model.graph.iter().flat_map(|g| &g.initializer) {
        if let Some(loc) = external_entry(t, "location") {
            let p = dir.join(loc);
            if !files.contains(&p) {
                files.push(p);
            }
        }
    }
    files
}

fn external_entry<'a>(t: &'a onnx::TensorProto, key: &str) -> Option<&'a str> {
    if t.data_location != Some(onnx::tensor_proto::DataLocation::External as i32) {
        return None;
    }
    t.external_data
        .iter()
        .find(|e| e.key.as_deref() == Some(key))
        .and_then(|e| e.value.as_deref())
}

/// Offsets of copied tensors are aligned to this (ONNX's and ORT's page alignment, so that
/// ORT may map them).
const DATA_ALIGN: u64 = 4096;

/// Write `model` (exported from a graph read from `src_dir`) to `out` atomically with its
/// external data (see the module doc): the data file (`<out file name>.data`, when copied) is
/// renamed into place just before the model, and neither temporary file survives a failure.
/// Refuses to overwrite `input` or any data file the model reads.
pub fn write_model(
    model: onnx::ModelProto,
    src_dir: Option<&Path>,
    out: &Path,
    input: Option<&Path>,
) -> Result<Written, ExportError> {
    let mut staging = Staging::default();
    let written = staging.stage_model(model, src_dir, out, input)?;
    staging.publish()?;
    Ok(written)
}

impl Staging {
    /// Stage `model` for `out` as [`write_model`] writes it; nothing is published until
    /// [`Staging::publish`].
    pub fn stage_model(
        &mut self,
        mut model: onnx::ModelProto,
        src_dir: Option<&Path>,
        out: &Path,
        input: Option<&Path>,
    ) -> Result<Written, ExportError> {
        if let Some(dir) = src_dir {
            crate::embed_small_external(&mut model, dir);
        }
        let has_external = model
            .graph
            .iter()
            .flat_map(|g| &g.initializer)
            .any(|t| external_entry(t, "location").is_some());
        if !has_external {
            let bytes = model.encode_to_vec();
            self.stage(out, &bytes, input)?;
            return Ok(Written {
                bytes,
                placement: DataPlacement::None,
                data_files: Vec::new(),
            });
        }
        let src_dir = src_dir.ok_or_else(|| ExportError::NoExternalDataDir {
            path: out.to_path_buf(),
        })?;
        let sources = external_data_files(&model, src_dir);
        if same_file(&parent_dir(out), src_dir) {
            let bytes = model.encode_to_vec();
            if sources.iter().any(|s| same_file(out, s)) {
                return Err(ExportError::WouldOverwriteInput {
                    path: out.to_path_buf(),
                });
            }
            self.stage(out, &bytes, input)?;
            return Ok(Written {
                bytes,
                placement: DataPlacement::Referenced,
                data_files: sources,
            });
        }
        check_output_target(out)?;
        if input.is_some_and(|input| same_file(out, input)) {
            return Err(ExportError::WouldOverwriteInput {
                path: out.to_path_buf(),
            });
        }
        let data_name = format!(
            "{}.data",
            out.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "out".into())
        );
        let data_path = parent_dir(out).join(&data_name);
        check_output_target(&data_path)?;
        if sources.iter().any(|s| same_file(&data_path, s)) {
            return Err(ExportError::WouldOverwriteInput { path: data_path });
        }
        let (staged_data, mut f) = Staged::create(&data_path)?;
        let mut end = 0u64;
        for t in model
            .graph
            .iter_mut()
            .flat_map(|g| g.initializer.iter_mut())
        {
            let Some(loc) = external_entry(t, "location").map(str::to_string) else {
                continue;
            };
            let offset: u64 = external_entry(t, "offset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let declared: Option<u64> = external_entry(t, "length").and_then(|v| v.parse().ok());
            let name = t.name.clone().unwrap_or_default();
            let from = src_dir.join(&loc);
            let copy_err = |source| ExportError::ExternalCopy {
                tensor: name.clone(),
                from: from.clone(),
                to: data_path.clone(),
                source,
            };
            let invalid =
                |what: String| copy_err(std::io::Error::new(ErrorKind::InvalidData, what));
            // The tensor's true byte range: its dims × element size, which a declared length
            // must equal (import refuses one that does not).
            let length = crate::import::proto_byte_len(t)
                .ok_or_else(|| invalid("its element type or dims give no fixed size".into()))?;
            if declared.is_some_and(|l| l != length) {
                return Err(invalid(format!(
                    "declared length {} is not its {length} bytes",
                    declared.unwrap_or_default()
                )));
            }
            let start = end.div_ceil(DATA_ALIGN) * DATA_ALIGN;
            let copied = (|| -> std::io::Result<u64> {
                use std::io::{Read, Seek, SeekFrom};
                f.seek(SeekFrom::Start(start))?;
                let mut src = std::fs::File::open(&from)?;
                src.seek(SeekFrom::Start(offset))?;
                let n = std::io::copy(&mut (&mut src).take(length), &mut f)?;
                if n != length {
                    return Err(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        format!("{n} of {length} bytes at offset {offset}"),
                    ));
                }
                Ok(n)
            })()
            .map_err(copy_err)?;
            end = start + copied;
            t.external_data = vec![
                entry("location", &data_name),
                entry("offset", &start.to_string()),
                entry("length", &copied.to_string()),
            ];
        }
        f.sync_all().map_err(|source| staged_data.io(source))?;
        drop(f);
        let bytes = model.encode_to_vec();
        let staged_model = stage_bytes(out, &bytes)?;
        self.files.push(staged_data);
        self.files.push(staged_model);
        Ok(Written {
            bytes,
            placement: DataPlacement::Copied,
            data_files: vec![data_path],
        })
    }
}

fn entry(key: &str, value: &str) -> onnx::StringStringEntryProto {
    onnx::StringStringEntryProto {
        key: Some(key.into()),
        value: Some(value.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The temporary-file registry is process-wide: a test that drains it must not run beside
    /// one that writes (it removed the other test's files under load).
    static REGISTRY: Mutex<()> = Mutex::new(());

    /// What a signal handler calls removes a write's temporary file, and a published file is
    /// no longer registered.
    #[test]
    fn temp_files_are_removed_on_request_and_published_ones_kept() {
        let _serial = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("ckpt-ir-staged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("m.onnx");
        let staged = stage_bytes(&target, b"bytes").unwrap();
        let tmp = staged.tmp.clone();
        assert!(tmp.exists());
        remove_temp_files();
        assert!(!tmp.exists(), "the temporary file survived");
        std::mem::forget(staged);
        let staged = stage_bytes(&target, b"bytes").unwrap();
        staged.publish().unwrap();
        remove_temp_files();
        assert_eq!(std::fs::read(&target).unwrap(), b"bytes");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A temporary file a killed writer left (`kill -9`: no handler runs) is removed by the next
    /// write of the same file; a running writer's (pid 1 always runs) and other files are kept.
    #[test]
    fn a_killed_writers_temp_file_is_removed_by_the_next_write() {
        let _serial = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        if !Path::new("/proc/self").exists() {
            eprintln!("skipped: no /proc to tell which writers run");
            return;
        }
        let dir = std::env::temp_dir().join(format!("ckpt-ir-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("m.onnx");
        // Above Linux's pid_max (2^22): no process has this pid.
        let dead = dir.join(".m.onnx.tmp-999999999");
        let live = dir.join(".m.onnx.tmp-1");
        let other = dir.join(".n.onnx.tmp-999999999");
        for p in [&dead, &live, &other] {
            std::fs::write(p, b"partial").unwrap();
        }
        write_atomic(&target, b"model", None).unwrap();
        assert!(!dead.exists(), "the killed writer's temp file survived");
        assert!(live.exists(), "a running writer's temp file was removed");
        assert!(other.exists(), "another file's temp file was removed");
        assert_eq!(std::fs::read(&target).unwrap(), b"model");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Symbolic links planted at the temporary names a write would use (to a file outside
    /// the folder) are never followed or removed: the write takes the next free name, the
    /// victim keeps its bytes, and the published output is a regular file.
    #[test]
    fn a_symlink_planted_at_a_temporary_name_is_never_followed() {
        let _serial = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("ckpt-ir-plant-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"victim").unwrap();
        let pid = std::process::id();
        let planted = [
            dir.join(format!(".m.onnx.tmp-{pid}")),
            dir.join(format!(".m.onnx.tmp-{pid}-1")),
        ];
        for p in &planted {
            std::os::unix::fs::symlink(&victim, p).unwrap();
        }
        let target = dir.join("m.onnx");
        write_atomic(&target, b"model", None).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"victim");
        let meta = std::fs::symlink_metadata(&target).unwrap();
        assert!(
            meta.file_type().is_file(),
            "the output is not a regular file"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"model");
        for p in &planted {
            let t = std::fs::symlink_metadata(p).unwrap().file_type();
            assert!(t.is_symlink(), "{} was replaced", p.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A model and its data file staged by two runs for one output: run B publishes while run
    /// A holds the folder's lock between renaming its data file and its model (the
    /// interleaving that paired A's model with B's data). B waits for A's set, then publishes
    /// its own whole: the folder ends with B's model and B's data.
    #[test]
    fn concurrent_publishes_to_one_output_never_pair_two_runs_files() {
        let _serial = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("ckpt-ir-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (model, data) = (dir.join("x.onnx"), dir.join("x.onnx.data"));
        let stage = |run: &str| {
            let mut set = Staging::default();
            set.stage(&data, format!("{run} data").as_bytes(), None)
                .unwrap();
            set.stage(&model, format!("{run} model").as_bytes(), None)
                .unwrap();
            set
        };
        let mut a = stage("A");
        let b = stage("B");
        let lock = lock_dir(&dir.canonicalize().unwrap()).unwrap();
        a.files.remove(0).publish().unwrap(); // A's data is in place, its model not yet
        let publisher = std::thread::spawn(move || b.publish());
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(
            std::fs::read(&data).unwrap(),
            b"A data",
            "B published into A's set"
        );
        assert!(!model.exists(), "B published into A's set");
        a.files.remove(0).publish().unwrap();
        drop(lock);
        publisher.join().unwrap().unwrap();
        assert_eq!(std::fs::read(&model).unwrap(), b"B model");
        assert_eq!(std::fs::read(&data).unwrap(), b"B data");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A set whose last file cannot be staged (its folder is missing) publishes nothing and
    /// leaves no temporary file.
    #[test]
    fn a_set_that_fails_to_stage_publishes_nothing() {
        let _serial = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("ckpt-ir-set-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("x.onnx");
        let mut set = Staging::default();
        set.stage(&model, b"model", None).unwrap();
        let receipt = dir.join("missing").join("r.json");
        assert!(set.stage(&receipt, b"{}", None).is_err());
        drop(set);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A model with copied external data reads back from its temporary files (its location
    /// pointed at the staged data file) and imports; once the staged data file is cut short,
    /// the read-back import refuses it, so what is judged is the bytes on disk.
    #[test]
    fn a_staged_model_reads_back_from_its_temporary_files() {
        use crate::build::ModelBuilder;
        use crate::DType;
        let _serial = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let root = std::env::temp_dir().join(format!("ckpt-ir-back-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (src, out_dir) = (root.join("src"), root.join("out"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&out_dir).unwrap();
        std::fs::write(src.join("w.data"), [7u8; 4096]).unwrap();
        let entry = |k: &str, v: &str| onnx::StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v.into()),
        };
        let model = ModelBuilder::new(20)
            .input("x", DType::F32, "1024")
            .initializer(onnx::TensorProto {
                name: Some("w".into()),
                dims: vec![1024],
                data_type: Some(DType::F32.code()),
                data_location: Some(onnx::tensor_proto::DataLocation::External as i32),
                external_data: vec![entry("location", "w.data")],
                ..Default::default()
            })
            .node("Add", &["x", "w"], &["y"])
            .output("y", DType::F32, "1024")
            .build();
        let out = out_dir.join("x.onnx");
        let mut set = Staging::default();
        set.stage_model(model, Some(&src), &out, None).unwrap();
        let back = set.read_back(&out).unwrap();
        let data_tmp = set
            .staged_path(&out_dir.join("x.onnx.data"))
            .unwrap()
            .to_path_buf();
        let location = external_entry(&back.graph.as_ref().unwrap().initializer[0], "location");
        assert_eq!(location, data_tmp.file_name().and_then(|n| n.to_str()));
        crate::import_model(back.clone(), &out, Some(&out_dir)).unwrap();
        std::fs::write(&data_tmp, [7u8; 100]).unwrap();
        let e = crate::import_model(back, &out, Some(&out_dir)).unwrap_err();
        assert!(e.to_string().contains("`w`"), "{e}");
        drop(set);
        assert!(std::fs::read_dir(&out_dir).unwrap().next().is_none());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
