//! The house's size rules, checked on the source itself: no source file over 800 lines and no
//! function over 150 lines, outside tests (`tests/`, `benches/`, `examples/`, `#[cfg(test)]`
//! modules) and the data tables listed in [`TABLES`] with their reason.
//!
//! Functions are found by parsing each file with `syn`: free functions, methods in `impl`
//! blocks and trait default methods, nested modules included; a function's length is the span
//! from its signature to its closing brace.

use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

const MAX_FILE_LINES: usize = 800;
const MAX_FN_LINES: usize = 150;

/// Functions that are data tables rather than logic: one row per op or per fact, no branching
/// worth splitting. `(file, function, reason)`.
const TABLES: &[(&str, &str, &str)] = &[(
    "ir/src/ops/training.rs",
    "ops",
    "the registry table of ORT's training ops",
)];

/// The crates' source folders the rules cover.
const SOURCE_DIRS: &[&str] = &[
    "src",
    "ir/src",
    "passes/src",
    "solver/src",
    "planner/src",
    "runtime/src",
    "validate/src",
    "fuzz/src",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// Every function's name and line span, outside `#[cfg(test)]` items.
struct Functions {
    found: Vec<(String, usize, usize)>,
}

impl Functions {
    fn note(&mut self, name: &syn::Ident, span: proc_macro2::Span) {
        self.found
            .push((name.to_string(), span.start().line, span.end().line));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_cfg_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_cfg_test(&f.attrs) {
            self.note(&f.sig.ident, f.span());
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            self.note(&f.sig.ident, f.span());
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if f.default.is_some() && !is_cfg_test(&f.attrs) {
            self.note(&f.sig.ident, f.span());
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for d in SOURCE_DIRS {
        rust_files(&root.join(d), &mut files);
    }
    files.sort();
    assert!(files.len() > 50, "found only {} source files", files.len());
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            (rel, text)
        })
        .collect()
}

#[test]
fn no_source_file_is_over_800_lines() {
    let over: Vec<String> = sources()
        .iter()
        .filter(|(_, text)| text.lines().count() > MAX_FILE_LINES)
        .map(|(p, text)| format!("{p}: {} lines", text.lines().count()))
        .collect();
    assert!(
        over.is_empty(),
        "files over {MAX_FILE_LINES} lines:\n{}",
        over.join("\n")
    );
}

#[test]
fn no_function_is_over_150_lines_outside_tests_and_tables() {
    let mut over = Vec::new();
    let mut counted = 0;
    for (path, text) in sources() {
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut fns = Functions { found: Vec::new() };
        fns.visit_file(&file);
        counted += fns.found.len();
        for (name, start, end) in fns.found {
            let lines = end - start + 1;
            let table = TABLES.iter().any(|(f, n, _)| *f == path && *n == name);
            if lines > MAX_FN_LINES && !table {
                over.push(format!("{path}:{start} {name}: {lines} lines"));
            }
        }
    }
    assert!(counted > 500, "parsed only {counted} functions");
    assert!(
        over.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n{}",
        over.join("\n")
    );
}

#[test]
fn the_function_measure_counts_signature_to_closing_brace() {
    let src = "fn a() {\n    let x = 1;\n    x;\n}\n#[cfg(test)]\nmod tests { fn b() {} }\nimpl S { fn c(&self) {\n} }\n";
    let mut fns = Functions { found: Vec::new() };
    fns.visit_file(&syn::parse_file(src).unwrap());
    assert_eq!(
        fns.found,
        vec![("a".to_string(), 1, 4), ("c".to_string(), 7, 8)]
    );
}
