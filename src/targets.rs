//! The files a run will write, checked before any work: each must be a regular file or
//! absent (never a link, folder, FIFO or device), in an existing folder the run can create
//! files in, and distinct from every other target, from the input model and from every data
//! file the input reads. The output's data file (`<out>.data`) is a target too.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

/// One file a run writes: the flag that names it and its path.
#[derive(Clone, Debug)]
pub struct Target<'a> {
    pub flag: &'static str,
    pub path: &'a Path,
}

/// The path `p` resolves to: its folder canonicalized (it must exist), its file name kept.
fn resolved(p: &Path) -> Result<PathBuf> {
    let name = p
        .file_name()
        .ok_or_else(|| anyhow!("`{}` names no file", p.display()))?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| anyhow!("folder `{}`: {e}", dir.display()))?;
    Ok(dir.join(name))
}

/// Whether a file can be created in `dir`: one is created exclusively and removed.
fn creatable_in(dir: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(format!(".ckpt-opt-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&probe)
        .map_err(|e| anyhow!("cannot create files in folder `{}`: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Check every target against the rules in the module doc. `input` is the model read and
/// `reads` the data files it references.
pub fn check(input: &Path, reads: &[PathBuf], targets: &[Target<'_>]) -> Result<()> {
    let mut inputs = vec![(String::from("the input model"), resolved(input)?)];
    for r in reads {
        inputs.push((
            format!("the input's data file `{}`", r.display()),
            resolved(r)?,
        ));
    }
    let mut seen: Vec<(String, PathBuf)> = Vec::new();
    for t in targets {
        ckpt_ir::check_output_target(t.path).map_err(|e| anyhow!("{}: {e}", t.flag))?;
        let path =
            resolved(t.path).map_err(|e| anyhow!("{} `{}`: {e}", t.flag, t.path.display()))?;
        if let Some((what, _)) = inputs.iter().find(|(_, p)| *p == path) {
            bail!(
                "{} `{}` is {what}: the run would overwrite what it reads; name another file",
                t.flag,
                t.path.display()
            );
        }
        if let Some((other, _)) = seen.iter().find(|(_, p)| *p == path) {
            bail!(
                "{} `{}` is also {other}: every file a run writes must be distinct",
                t.flag,
                t.path.display()
            );
        }
        if let Some(dir) = path.parent() {
            creatable_in(dir).map_err(|e| anyhow!("{} `{}`: {e}", t.flag, t.path.display()))?;
        }
        seen.push((format!("{} `{}`", t.flag, t.path.display()), path));
    }
    Ok(())
}

/// The data file a model written to `out` may get (`<out file name>.data`).
pub fn data_file_of(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".data");
    out.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t<'a>(flag: &'static str, path: &'a Path) -> Target<'a> {
        Target { flag, path }
    }

    #[test]
    fn targets_must_differ_from_inputs_and_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.onnx");
        let data = dir.path().join("w.data");
        std::fs::write(&model, b"x").unwrap();
        std::fs::write(&data, b"x").unwrap();
        let out = dir.path().join("o.onnx");
        let receipt = dir.path().join("r.json");
        assert!(check(
            &model,
            std::slice::from_ref(&data),
            &[t("-o", &out), t("--receipt", &receipt)]
        )
        .is_ok());
        let e = check(
            &model,
            std::slice::from_ref(&data),
            &[t("--receipt", &data)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("the input's data file"), "{e}");
        let e = check(&model, &[], &[t("-o", &model)]).unwrap_err();
        assert!(e.to_string().contains("is the input model"), "{e}");
        let e = check(&model, &[], &[t("-o", &out), t("--receipt", &out)]).unwrap_err();
        assert!(e.to_string().contains("--receipt"), "{e}");
        assert!(e.to_string().contains("also -o"), "{e}");
        // The same file through another spelling of its folder.
        let other = dir.path().join(".").join("r.json");
        let e = check(
            &model,
            &[],
            &[t("--receipt", &receipt), t("--receipt-md", &other)],
        )
        .unwrap_err();
        assert!(e.to_string().contains("distinct"), "{e}");
    }

    #[test]
    fn a_missing_folder_is_refused_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.onnx");
        std::fs::write(&model, b"x").unwrap();
        let out = dir.path().join("no-such-folder").join("o.onnx");
        let e = check(&model, &[], &[t("-o", &out)]).unwrap_err();
        assert!(e.to_string().contains("no-such-folder"), "{e}");
    }

    #[test]
    fn the_data_file_is_named_after_the_output() {
        assert_eq!(
            data_file_of(Path::new("a/b.onnx")),
            PathBuf::from("a/b.onnx.data")
        );
    }
}
