//! Output-path mutations for the fuzzer: sets of `-o`, `--receipt` and `--receipt-md` drawn
//! from names that collide with each other, with the input model, with its data file (also
//! through `x/../` and a symbolic link), with `-o`'s own data file, with a folder or a missing
//! folder, checked by [`ckpt_opt::targets::check`]. A set it accepts must be distinct files,
//! none of them read by the run, none a folder or a link; checking writes nothing.

use std::path::{Path, PathBuf};

use crate::mutate::Rng;
use ckpt_opt::targets::{check, data_file_of, Target};

/// The names a target is drawn from, relative to the campaign's folder.
const NAMES: &[&str] = &[
    "out.onnx",
    "out.onnx.data",
    "r.json",
    "r.md",
    "m.onnx",
    "./m.onnx",
    "sub/../m.onnx",
    "w.data",
    "sub/../w.data",
    "link",
    "sub",
    "missing/r.json",
];

/// The path `p` names: its folder canonicalized, its file name kept (`None`: no such folder).
fn resolved(p: &Path) -> Option<PathBuf> {
    let dir = p.parent()?.canonicalize().ok()?;
    Some(dir.join(p.file_name()?))
}

/// The folder's entries, sorted, with their sizes.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let len = e.metadata().map_or(0, |m| m.len());
                    (e.file_name().to_string_lossy().into_owned(), len)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What is wrong with an accepted set, if anything.
fn clobbers(input: &Path, data: &Path, targets: &[Target<'_>]) -> Option<String> {
    let read = [resolved(input)?, resolved(data)?];
    let mut seen: Vec<PathBuf> = Vec::new();
    for t in targets {
        let Some(p) = resolved(t.path) else {
            return Some(format!("{} `{}` has no folder", t.flag, t.path.display()));
        };
        if read.contains(&p) {
            return Some(format!(
                "{} `{}` is read by the run",
                t.flag,
                t.path.display()
            ));
        }
        if seen.contains(&p) {
            return Some(format!(
                "{} `{}` is written twice",
                t.flag,
                t.path.display()
            ));
        }
        let meta = std::fs::symlink_metadata(&p);
        if meta.is_ok_and(|m| !m.file_type().is_file()) {
            return Some(format!("{} `{}` is not a file", t.flag, t.path.display()));
        }
        seen.push(p);
    }
    None
}

/// Run `cases` seeded output-path sets through the target check in a fresh folder under
/// `root`; the findings (an accepted set that would clobber, or a check that changed the
/// folder), each naming its case.
pub fn fuzz_output_paths(root: &Path, seed: u64, cases: usize) -> std::io::Result<Vec<String>> {
    let dir = root.join(format!("ckpt-opt-paths-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub"))?;
    let (input, data) = (dir.join("m.onnx"), dir.join("w.data"));
    std::fs::write(&input, b"model")?;
    std::fs::write(&data, b"weights")?;
    std::os::unix::fs::symlink(&input, dir.join("link"))?;
    let before = listing(&dir);
    let mut rng = Rng::new(seed);
    let mut findings = Vec::new();
    for case in 0..cases {
        let pick = |rng: &mut Rng| dir.join(NAMES[rng.below(NAMES.len())]);
        let out = pick(&mut rng);
        let out_data = data_file_of(&out);
        let receipt = (rng.below(2) == 0).then(|| pick(&mut rng));
        let receipt_md = (rng.below(2) == 0).then(|| pick(&mut rng));
        let mut targets = vec![
            Target {
                flag: "-o",
                path: &out,
            },
            Target {
                flag: "-o's data file",
                path: &out_data,
            },
        ];
        if let Some(p) = &receipt {
            targets.push(Target {
                flag: "--receipt",
                path: p,
            });
        }
        if let Some(p) = &receipt_md {
            targets.push(Target {
                flag: "--receipt-md",
                path: p,
            });
        }
        if check(&input, std::slice::from_ref(&data), &targets).is_ok() {
            if let Some(why) = clobbers(&input, &data, &targets) {
                findings.push(format!("case {case}: accepted, but {why}"));
            }
        }
        if listing(&dir) != before {
            findings.push(format!("case {case}: the check changed the folder"));
            break;
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(findings)
}
