//! Docs that cannot rot: every repository path and every Rust item path named in `README.md`,
//! `BENCHMARKS.md` and `docs/**/*.md` must exist, and the receipt's field table in
//! `docs/guide/receipt.md` is generated from `docs/receipt.schema.json`
//! (`UPDATE_DOCS=1 cargo test --test docs` rewrites it).
//!
//! - A repository path is a word whose first component is a top-level folder of the
//!   repository (`src/receipt/mod.rs`, `tests/fixtures/full/`, `docs/design/planner.md:12`), or a
//!   top-level `*.md` file; it must name a file or folder, relative to the root.
//! - An item path is `ckpt_ir::…`, `ckpt_passes::…`, `ckpt_solver::…`, `ckpt_planner::…`,
//!   `ckpt_runtime::…`, `ckpt_validate::…`, `ckpt_opt::…` or `ckpt_fuzz::…`, or `module::…` where
//!   `module` is a source file of a crate (`main_job::run`, `device::fits`). Each module segment
//!   must be a module of the crate and the last segment a definition (`fn`, `struct`, `enum`, `trait`, `const`,
//!   `static`, `type`, `mod`, `macro_rules!`) or a field or variant, found by text in the
//!   crate's sources.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crates: the name a doc uses, and the folder holding its sources.
const CRATES: &[(&str, &str)] = &[
    ("ckpt_ir", "ir/src"),
    ("ckpt_passes", "passes/src"),
    ("ckpt_solver", "solver/src"),
    ("ckpt_planner", "planner/src"),
    ("ckpt_runtime", "runtime/src"),
    ("ckpt_validate", "validate/src"),
    ("ckpt_opt", "src"),
    ("ckpt_fuzz", "fuzz/src"),
];

/// Top-level folders whose paths are checked (build outputs under `target/` are not).
const TOP: &[&str] = &[
    "src", "tests", "docs", "scripts", "ir", "passes", "solver", "planner", "runtime", "validate",
    "examples", "python", "benches", "fuzz",
];

fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Words of a doc: runs of characters that can make a path or an item path.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./:-*".contains(c)))
        .map(|w| w.trim_end_matches(['.', ',', ':', ';', '-']))
        .filter(|w| !w.is_empty())
}

/// The repository paths a text names.
fn paths_named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in words(text) {
        let w = w.trim_start_matches("./");
        if w.contains("::") || w.contains('*') || w.contains("..") {
            continue;
        }
        // `src/frontier.rs:148-197`: the file.
        let w = w.split(':').next().unwrap_or(w);
        let first = w.split('/').next().unwrap_or("");
        let top_md = !w.contains('/')
            && w.ends_with(".md")
            && w.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        if (w.contains('/') && TOP.contains(&first)) || top_md {
            out.insert(w.to_string());
        }
    }
    out
}

/// The item paths a text names: `crate::…` for the crates above, or `module::…` where the
/// module is a source file of one of them.
fn items_named(text: &str, root: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in words(text) {
        let w = w.trim_matches(['.', ':', '/']);
        if !w.contains("::") || w.contains('/') {
            continue;
        }
        let first = w.split("::").next().unwrap_or("");
        if CRATES.iter().any(|(c, _)| *c == first) || !module_files(root, first).is_empty() {
            out.insert(w.to_string());
        }
    }
    out
}

/// Source files that are module `name` of some crate (`name.rs`, `name/mod.rs`).
fn module_files(root: &Path, name: &str) -> Vec<PathBuf> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (_, src) in CRATES {
        for f in rust_files(&root.join(src)) {
            let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let parent = f
                .parent()
                .and_then(|p| p.file_name())
                .and_then(|s| s.to_str());
            if stem == name || (stem == "mod" && parent == Some(name)) {
                out.push(f);
            }
        }
    }
    out
}

/// Whether `text` defines `name`: a definition, or a field or variant.
fn defines(text: &str, name: &str) -> bool {
    const KINDS: &[&str] = &[
        "fn",
        "struct",
        "enum",
        "trait",
        "const",
        "static",
        "type",
        "mod",
        "macro_rules!",
    ];
    text.lines().any(|line| {
        let l = line.trim_start();
        let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
        let l = l.strip_prefix("pub(super) ").unwrap_or(l);
        let l = l.strip_prefix("pub ").unwrap_or(l);
        let l = l.strip_prefix("async ").unwrap_or(l);
        let l = l.strip_prefix("unsafe ").unwrap_or(l);
        let definition = KINDS.iter().any(|k| {
            l.strip_prefix(k)
                .and_then(|r| r.strip_prefix(' '))
                .and_then(|r| r.strip_prefix(name))
                .is_some_and(|r| !r.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        });
        // A field (`name: T,`) or a variant (`Name,`, `Name(…)`, `Name {`).
        let member = l.strip_prefix(name).is_some_and(|r| {
            let r = r.trim_start();
            r.starts_with(':') && !r.starts_with("::")
                || r.starts_with(',')
                || r.starts_with('(')
                || r.starts_with('{')
                || r.is_empty()
        }) && line.starts_with(' ');
        definition || member
    })
}

/// Whether an item path exists: its module segments are modules, its last segment is
/// defined. A segment after a type (`Patch::apply`, `Outcome::CannotFit`) is looked up in
/// every file of the crate.
fn item_exists(root: &Path, path: &str) -> bool {
    let segs: Vec<&str> = path.split("::").collect();
    let Some((last, mods)) = segs.split_last() else {
        return false;
    };
    let (crates, mods): (Vec<&str>, &[&str]) = match CRATES.iter().find(|(c, _)| *c == segs[0]) {
        Some((_, src)) => (vec![*src], &mods[1..]),
        None => (CRATES.iter().map(|(_, s)| *s).collect(), mods),
    };
    let is_module = |s: &&str| {
        s.chars()
            .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
    };
    crates.iter().any(|src| {
        let files = rust_files(&root.join(src));
        // The module path: each lowercase segment, up to the first type, must be a module.
        let module_path: Vec<&str> = mods.iter().copied().take_while(is_module).collect();
        let mut scope: Vec<PathBuf> = files.clone();
        for m in &module_path {
            let inner: Vec<PathBuf> = scope
                .iter()
                .filter(|f| {
                    let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                    let parent = f
                        .parent()
                        .and_then(|p| p.file_name())
                        .and_then(|s| s.to_str());
                    stem == *m || parent == Some(m)
                })
                .cloned()
                .collect();
            // A module declared inline (`mod name {`) keeps the enclosing files.
            if inner.is_empty() {
                let inline = scope
                    .iter()
                    .any(|f| defines(&std::fs::read_to_string(f).unwrap_or_default(), m));
                if !inline {
                    return false;
                }
            } else {
                scope = inner;
            }
        }
        // A segment after a type: the type must exist somewhere in the crate, the member too.
        let types = &mods[module_path.len()..];
        let all = |name: &str| {
            files
                .iter()
                .any(|f| defines(&std::fs::read_to_string(f).unwrap_or_default(), name))
        };
        if !types.iter().all(|t| all(t)) {
            return false;
        }
        if types.is_empty() {
            scope.iter().any(|f| defines(&std::fs::read_to_string(f).unwrap_or_default(), last))
                // Re-exported at the crate root (`ckpt_ir::export`): defined anywhere in it.
                || (module_path.is_empty() && all(last))
        } else {
            all(last)
        }
    })
}

/// What a doc names that does not exist.
fn missing(root: &Path, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for p in paths_named(text) {
        if !root.join(&p).exists() {
            out.push(format!("path `{p}`"));
        }
    }
    for i in items_named(text, root) {
        if !item_exists(root, &i) {
            out.push(format!("item `{i}`"));
        }
    }
    out
}

#[test]
fn every_path_and_item_the_docs_name_exists() {
    let root = root();
    let mut failures = Vec::new();
    for file in doc_files(&root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for m in missing(&root, &text) {
            failures.push(format!(
                "{}: {m}",
                file.strip_prefix(&root).unwrap().display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the docs name what does not exist:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_checks_reject_made_up_names() {
    let root = root();
    let text = "See `ckpt_passes::recompute::no_such_pass`, `ckpt_ir::NoSuchType`, \
                `ckpt_passes::no_such_module::candidates`, `main_job::no_such_fn`, \
                `src/no_such_file.rs` and `docs/guide/no-such-page.md:12`; also `NOPE.md`.";
    let m = missing(&root, text);
    assert_eq!(m.len(), 7, "{m:#?}");
    // And accept what exists.
    let text = "`ckpt_passes::recompute::candidates`, `ckpt_ir::Graph`, `ckpt_ir::export`, \
                `ckpt_passes::device::DeviceNeed::arena_bytes`, `main_job::run`, \
                `src/receipt/mod.rs:2`, `tests/fixtures/`, `./python`, `README.md`, \
                `target/example/receipt.json`, p50/p95, `site-packages/nvidia/*/lib`.";
    assert_eq!(missing(&root, text), Vec::<String>::new());
}

// --- The receipt's field table, generated from the schema ---

const TABLE_START: &str =
    "<!-- fields: generated from docs/receipt.schema.json by tests/docs.rs (UPDATE_DOCS=1) -->";
const TABLE_END: &str = "<!-- end of generated fields -->";

fn type_of(v: &serde_json::Value) -> String {
    if let Some(r) = v.get("$ref").and_then(|r| r.as_str()) {
        return format!("`{}`", r.rsplit('/').next().unwrap_or(r));
    }
    if let Some(any) = v.get("anyOf").and_then(|a| a.as_array()) {
        return any.iter().map(type_of).collect::<Vec<_>>().join(" or ");
    }
    match v.get("type") {
        Some(serde_json::Value::String(t)) if t == "array" => match v.get("items") {
            Some(items) if items.is_object() => format!("array of {}", type_of(items)),
            _ => "array".to_string(),
        },
        Some(serde_json::Value::String(t)) => t.clone(),
        Some(serde_json::Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_string(),
    }
}

fn field_table(schema: &serde_json::Value) -> String {
    let required: BTreeSet<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(|s| s.as_str()).collect())
        .unwrap_or_default();
    let mut out =
        String::from("| field | type | always present | what it holds |\n|---|---|---|---|\n");
    for (name, v) in schema["properties"].as_object().unwrap() {
        let description = v["description"]
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|")
            .replace("[`", "`")
            .replace("`]", "`");
        let description = if description.is_empty() {
            "—".to_string()
        } else {
            description
        };
        out.push_str(&format!(
            "| `{name}` | {} | {} | {description} |\n",
            type_of(v),
            if required.contains(name.as_str()) {
                "yes"
            } else {
                "no"
            }
        ));
    }
    out
}

#[test]
fn the_receipt_guide_lists_every_field_of_the_schema() {
    let root = root();
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/receipt.schema.json")).unwrap(),
    )
    .unwrap();
    let table = field_table(&schema);
    let path = root.join("docs/guide/receipt.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = doc
        .split_once(TABLE_START)
        .expect("docs/guide/receipt.md holds the generated field table");
    let (current, tail) = rest.split_once(TABLE_END).expect("the table's end marker");
    let current = current.trim_start_matches('\n');
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(
            &path,
            format!("{head}{TABLE_START}\n{table}{TABLE_END}{tail}"),
        )
        .unwrap();
        return;
    }
    assert_eq!(
        current, table,
        "docs/guide/receipt.md's field table is stale: run UPDATE_DOCS=1 cargo test --test docs"
    );
}
