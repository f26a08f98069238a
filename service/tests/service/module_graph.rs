//! The service's modules import each other without a cycle (ARCHITECTURE's layered table):
//! read from the sources, so a new `use crate::…` that closes a loop fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Identifiers after `crate::` in `text` (paths and `use crate::{a, b::c}` groups).
fn crate_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find("};").unwrap_or(group.len());
            // Top-level names of the group: each item's first path segment.
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group[..end].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_ascii_alphanumeric() || c == '_') => {
                        out.insert(ident(&group[j..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

/// The production code of a module file: unit tests and comment lines left out (unit tests
/// may reach anywhere; the production code is what is layered).
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let code = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or("")
        .to_string();
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `.rs` files under a module directory (`knowledge/`: its `mod.rs` and submodules).
fn module_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(module_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The module each name belongs to: a module itself, or one `lib.rs` re-exports from.
fn owner(
    name: &str,
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> Option<String> {
    if modules.contains(name) {
        return Some(name.to_string());
    }
    reexports.get(name).cloned()
}

#[test]
fn service_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeSet::new();
    let mut texts = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        // A module is a file (`forget.rs`) or a directory (`knowledge/`, its files together:
        // its submodules' imports are the module's).
        if path.is_dir() {
            let code: Vec<String> = module_files(&path)
                .iter()
                .map(|f| production_code(f.as_path()))
                .collect();
            modules.insert(stem.to_string());
            texts.insert(stem.to_string(), code.join("\n"));
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "lib" {
            modules.insert(stem.to_string());
            texts.insert(stem.to_string(), production_code(&path));
        }
    }
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut reexports = BTreeMap::new();
    for line in lib.lines().filter(|l| l.starts_with("pub use ")) {
        let path = line.trim_start_matches("pub use ").trim_end_matches(';');
        let Some((module, names)) = path.split_once("::") else {
            continue;
        };
        for n in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let n = n.trim();
            if !n.is_empty() {
                reexports.insert(n.to_string(), module.to_string());
            }
        }
    }
    let graph: BTreeMap<String, BTreeSet<String>> = texts
        .iter()
        .map(|(m, code)| {
            let deps = crate_names(code)
                .iter()
                .filter_map(|n| owner(n, &modules, &reexports))
                .filter(|d| d != m)
                .collect();
            (m.clone(), deps)
        })
        .collect();
    // Depth-first search for a back edge, reporting the cycle it closes.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("service modules import in a cycle: {}", cycle.join(" -> "));
        }
    }
    // The layering the table documents: the bottom layer uses no domain module.
    for base in ["access", "records", "auth", "engine"] {
        let above: Vec<_> = graph[base]
            .iter()
            .filter(|d| !["error", "auth", "engine", "schema"].contains(&d.as_str()))
            .collect();
        assert!(above.is_empty(), "{base} imports {above:?}");
    }
    // The parser found the imports, also of a module that is a directory.
    assert!(
        graph["knowledge"].len() > 5,
        "the parser found knowledge's imports: {:?}",
        graph["knowledge"]
    );
    assert!(
        graph["forget"].contains("knowledge") && graph["forget"].contains("candidates"),
        "the parser found forget's imports: {:?}",
        graph["forget"]
    );
}
