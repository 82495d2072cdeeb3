//! Shared helpers of the integration tests: the fixture corpus and the binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One entry of `tests/fixtures/manifest.json`.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub path: PathBuf,
    pub kind: String,
    pub name: String,
    pub dropout: f64,
    pub manifest: serde_json::Value,
}

pub fn fixtures() -> Vec<Fixture> {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/manifest.json")).expect("manifest");
    let v: serde_json::Value = serde_json::from_str(&text).expect("manifest json");
    v["fixtures"]
        .as_array()
        .expect("fixtures array")
        .iter()
        .map(|f| {
            let file = f["file"].as_str().expect("file");
            let path = root().join(file);
            Fixture {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                path,
                kind: f["kind"].as_str().unwrap_or("").to_string(),
                dropout: f["dropout"].as_f64().unwrap_or(0.0),
                manifest: f.clone(),
            }
        })
        .collect()
}

pub fn std_fixtures() -> Vec<Fixture> {
    fixtures().into_iter().filter(|f| f.kind == "std").collect()
}

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ckpt-opt"))
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run ckpt-opt")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
