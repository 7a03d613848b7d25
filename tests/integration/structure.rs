//! Imports only run downwards: every `crate::` path in `src/` (use lines and paths in code)
//! names a module on a lower layer than its own, for top-level modules and for the files of each
//! folder, in the layer order docs/architecture.md draws ("Layers"). And every file of `src/`
//! that writes through the API is named in its table "Where each API write happens". Test code
//! (`mod tests`, `tests.rs`, the test fixtures) is not held to either.
//!
//! The docs that point into the code are held to it too: every `path::name` reference of
//! docs/requirements.md names an item its file defines, every requirement ID has one row, no row
//! is over 600 characters, and BENCHMARKS.md stays under 600 lines.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::repo_file;

/// The layer table: scope (`src/`, `src/controller/`) → module → layer (0 = top).
type Layers = BTreeMap<String, BTreeMap<String, usize>>;

/// Reads the fenced block of docs/architecture.md's "Layers" section: a line starting at the
/// left opens a scope (`src/controller/  mod`) with its top layer; the indented lines below are
/// its lower layers, top to bottom; names on one line are peers (neither imports the other).
fn layers(doc: &str) -> Layers {
    let section = doc
        .split("\n## Layers")
        .nth(1)
        .expect("docs/architecture.md has a Layers section");
    let block = section
        .split("```")
        .nth(1)
        .expect("the Layers section has a fenced block");
    let mut out = Layers::new();
    let mut scope = String::new();
    let mut layer = 0;
    for line in block.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let mut words = line.split_whitespace();
        if !line.starts_with(' ') {
            scope = words.next().unwrap().to_string();
            layer = 0;
        } else {
            layer += 1;
        }
        for name in words {
            out.entry(scope.clone())
                .or_default()
                .insert(name.to_string(), layer);
        }
    }
    out
}

/// Source without comments and without its test module (`#[cfg(test)] mod tests` at the end).
fn code(text: &str) -> String {
    let text = match text
        .find("#[cfg(test)]\nmod tests")
        .or_else(|| text.find("#[cfg(test)]\npub(crate) mod tests"))
    {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `use crate::…` statement or an inline `crate::…` / `super::…` path names, as
/// segments (`use crate::{a, b::{c, d}}` gives `a`, `b::c`, `b::d`).
fn paths(code: &str) -> Vec<Vec<String>> {
    fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(prefix, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(prefix, &inner[start..], out);
            return;
        }
        match tree.split_once("::") {
            Some((head, rest)) => {
                let mut p = prefix.to_vec();
                p.push(head.trim().to_string());
                expand(&p, rest, out);
            }
            None => {
                let name = tree.split_whitespace().next().unwrap_or_default();
                if !name.is_empty() && name != "self" && name != "*" {
                    let mut p = prefix.to_vec();
                    p.push(name.to_string());
                    out.push(p);
                } else if !prefix.is_empty() {
                    out.push(prefix.to_vec());
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut rest = code;
    // Use statements (with brace groups), then inline paths.
    // The earlier of the two kinds of use statement, so that neither is skipped.
    while let Some(i) = [rest.find("use crate::"), rest.find("use super::")]
        .into_iter()
        .flatten()
        .min()
    {
        let stmt = &rest[i + 4..];
        let end = stmt.find(';').unwrap_or(stmt.len());
        let (root, tree) = stmt[..end].split_once("::").unwrap();
        expand(&[root.to_string()], tree, &mut out);
        rest = &stmt[end..];
    }
    for root in ["crate::", "super::"] {
        for (i, _) in code.match_indices(root) {
            // `use` statements are read above; `pub(in crate::…)` is a visibility, not a path.
            if code[..i].ends_with("use ")
                || code[..i].ends_with("in ")
                || code[..i].ends_with(char::is_alphanumeric)
            {
                continue;
            }
            let tail: String = code[i + root.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut p = vec![root.trim_end_matches("::").to_string()];
            p.extend(
                tail.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            out.push(p);
        }
    }
    out
}

/// A source file as the check sees it: its top-level module and, inside a folder, its file (a
/// folder inside the folder counts as one file: its files' imports of each other are its own).
#[derive(Clone, Debug, PartialEq)]
struct Place {
    top: String,
    /// The folder's file (`mod` for mod.rs), None for a top-level file module.
    file: Option<String>,
    /// The file's module path below the crate (`admission::review::reader`), for `super`.
    module: Vec<String>,
}

/// What a path names: the module of `src/` it is in and, in a folder, the file.
fn resolve(
    src: &Path,
    from: &Place,
    path: &[String],
    reexports: &BTreeMap<String, String>,
) -> Option<Place> {
    let mut segs: Vec<String> = path.to_vec();
    match segs.first().map(String::as_str) {
        Some("crate") => {
            segs.remove(0);
        }
        Some("super") => {
            // `super::super::…`: that many modules up from the file's module (the crate above a
            // top-level module).
            let ups = segs.iter().take_while(|s| *s == "super").count();
            segs.drain(..ups);
            let kept = from.module.len().saturating_sub(ups);
            segs.splice(0..0, from.module[..kept].iter().cloned());
        }
        _ => return None,
    }
    let top = segs.first()?.clone();
    let top = match reexports.get(&top) {
        Some(module) => module.clone(),
        None => top,
    };
    let folder = src.join(&top);
    if folder.is_dir() {
        let file = segs
            .get(1)
            .filter(|f| folder.join(format!("{f}.rs")).is_file() || folder.join(f).is_dir())
            .cloned()
            .unwrap_or_else(|| "mod".to_string());
        Some(Place {
            top,
            file: Some(file),
            module: Vec::new(),
        })
    } else if src.join(format!("{top}.rs")).is_file() {
        Some(Place {
            top,
            file: None,
            module: Vec::new(),
        })
    } else {
        None
    }
}

/// The imports against the layer order: one line per import that runs upwards or sideways, or
/// names a module the table does not place.
fn violations(
    src: &Path,
    files: &BTreeMap<String, String>,
    layers: &Layers,
    root: &str,
) -> Vec<String> {
    let lib = files.get("lib.rs").map(String::as_str).unwrap_or_default();
    // `pub use error::{Error, Result}` in lib.rs: `crate::Error` is the error module's.
    let mut reexports = BTreeMap::new();
    for line in lib.lines().filter(|l| l.starts_with("pub use ")) {
        if let Some((module, names)) = line["pub use ".len()..].split_once("::") {
            for name in names.trim_matches(|c| "{};".contains(c)).split(',') {
                reexports.insert(name.trim().to_string(), module.to_string());
            }
        }
    }
    let test_only = ["fixtures", "testing"];
    let mut out = Vec::new();
    for (rel, text) in files {
        let parts: Vec<&str> = rel.split('/').collect();
        if rel == "lib.rs"
            || parts.iter().any(|p| *p == "tests" || *p == "tests.rs")
            || test_only.contains(&parts[0].trim_end_matches(".rs"))
        {
            continue;
        }
        let module: Vec<String> = parts
            .iter()
            .map(|p| p.trim_end_matches(".rs").to_string())
            .filter(|p| p != "mod")
            .collect();
        let from = match parts.as_slice() {
            // A module with a folder of its own (`crd.rs` beside `crd/`) is that folder's `mod`.
            [file] if src.join(file.trim_end_matches(".rs")).is_dir() => Place {
                top: file.trim_end_matches(".rs").to_string(),
                file: Some("mod".to_string()),
                module,
            },
            [file] => Place {
                top: file.trim_end_matches(".rs").to_string(),
                file: None,
                module,
            },
            [top, file, ..] => Place {
                top: top.to_string(),
                file: Some(file.trim_end_matches(".rs").to_string()),
                module,
            },
            [] => continue,
        };
        let top_layers = &layers[root];
        let Some(&own) = top_layers.get(&from.top) else {
            out.push(format!(
                "{rel}: module {} is not in the layer table",
                from.top
            ));
            continue;
        };
        for path in paths(&code(text)) {
            let Some(to) = resolve(src, &from, &path, &reexports) else {
                continue;
            };
            if test_only.contains(&to.top.as_str()) {
                continue;
            }
            let shown = path.join("::");
            if to.top != from.top {
                match top_layers.get(&to.top) {
                    None => out.push(format!(
                        "{rel}: {shown}: module {} is not in the layer table",
                        to.top
                    )),
                    Some(&theirs) if theirs <= own => out.push(format!(
                        "{rel}: {shown}: {} imports {}, which is not below it",
                        from.top, to.top
                    )),
                    Some(_) => {}
                }
                continue;
            }
            let (Some(mine), Some(target)) = (&from.file, &to.file) else {
                continue;
            };
            if mine == target {
                continue;
            }
            let scope = format!("{root}{}/", from.top);
            let Some(files_layers) = layers.get(&scope) else {
                out.push(format!("{rel}: folder {scope} is not in the layer table"));
                continue;
            };
            match (files_layers.get(mine), files_layers.get(target)) {
                (Some(&a), Some(&b)) if b > a => {}
                (Some(_), Some(_)) => out.push(format!(
                    "{rel}: {shown}: {scope}{mine} imports {scope}{target}, which is not below it"
                )),
                (None, _) => out.push(format!("{rel}: {scope}{mine} is not in the layer table")),
                (_, None) => out.push(format!(
                    "{rel}: {shown}: {scope}{target} is not in the layer table"
                )),
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every `.rs` file of `src/`, by its path relative to it.
fn sources(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().display().to_string();
                out.insert(rel, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

fn table() -> Layers {
    layers(&std::fs::read_to_string(repo_file("docs/architecture.md")).unwrap())
}

fn emulator_table() -> Layers {
    layers(&std::fs::read_to_string(repo_file("docs/emulator.md")).unwrap())
}

#[test]
fn imports_only_run_downwards() {
    let src = repo_file("src");
    let found = violations(&src, &sources(&src), &table(), "src/");
    assert!(
        found.is_empty(),
        "imports against the layer order of docs/architecture.md:\n{}",
        found.join("\n")
    );
}

/// The same for the Kubernetes API emulator, against the layer order of docs/emulator.md.
#[test]
fn the_emulators_imports_only_run_downwards() {
    let src = repo_file("tests/emulator/src");
    let found = violations(
        &src,
        &sources(&src),
        &emulator_table(),
        "tests/emulator/src/",
    );
    assert!(
        found.is_empty(),
        "imports against the layer order of docs/emulator.md:\n{}",
        found.join("\n")
    );
}

/// The files of `src/` (relative to it) that the last column of docs/architecture.md's "Where
/// each API write happens" table names.
fn writers_in_the_table(doc: &str) -> std::collections::BTreeSet<String> {
    let section = doc
        .split("\n## Where each API write happens")
        .nth(1)
        .expect("docs/architecture.md has a section \"Where each API write happens\"");
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|row| row.trim_end_matches('|').rsplit('|').next())
        .flat_map(|cell| cell.split('`').filter(|s| s.starts_with("src/")))
        .map(|path| path.trim_start_matches("src/").to_string())
        .collect()
}

/// Kube's `Api` methods that create, change or delete, subresources included, and the
/// client's raw requests (which can write anything): a call of one of them is an API write.
/// `Api::create` takes `&PostParams` first (a `DirBuilder` or `OpenOptions` takes a path or a
/// flag).
const WRITING_CALLS: [&str; 14] = [
    ".create(&",
    ".patch(",
    ".patch_status(",
    ".patch_metadata(",
    ".patch_scale(",
    ".delete(",
    ".delete_collection(",
    ".replace_status(",
    ".replace_scale(",
    "_subresource(",
    ".request::<",
    ".request_text(",
    ".request_status(",
    ".request_events(",
];

/// Whether the code calls a writing API method: one of [`WRITING_CALLS`], `replace` with
/// `PostParams` (kube's `Api::replace`; a string's or a set's `replace` takes nothing of the
/// kind), or `request` with an argument (kube's `Client::request`; an admission review's
/// `request()` takes none).
fn writes(code: &str) -> bool {
    WRITING_CALLS.iter().any(|call| code.contains(call))
        || code.match_indices(".replace(").any(|(i, _)| {
            let args: String = code[i..].chars().take(120).collect();
            args.contains("PostParams")
        })
        || code
            .match_indices(".request(")
            .any(|(i, call)| !code[i + call.len()..].starts_with(')'))
}

/// Whether the code writes through the product's writer (`write::Writer`).
fn uses_the_writer(code: &str) -> bool {
    code.match_indices("Writer").any(|(i, w)| {
        let before = code[..i].chars().next_back();
        let after = &code[i + w.len()..];
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && (after.starts_with("::") || after.starts_with('<'))
    })
}

/// Only `src/write.rs` calls kube's writing methods: every write carries the operator's field
/// manager, a precondition and an error naming it. Every file of `src/` that writes through it
/// is named in docs/architecture.md's table of writes, and every file named there writes: a
/// newcomer asking where a write happens finds it there, and a new writer cannot hide.
#[test]
fn the_table_of_writes_names_every_file_that_writes() {
    let src = repo_file("src");
    let doc = std::fs::read_to_string(repo_file("docs/architecture.md")).unwrap();
    let named = writers_in_the_table(&doc);
    let sources: BTreeMap<String, String> = sources(&src)
        .into_iter()
        .filter(|(rel, _)| {
            let parts: Vec<&str> = rel.split('/').collect();
            !parts
                .iter()
                .any(|p| ["tests", "tests.rs", "fixtures.rs", "testing.rs"].contains(p))
        })
        .map(|(rel, text)| (rel, code(&text)))
        .collect();
    let calling: Vec<&String> = sources
        .iter()
        .filter(|(_, code)| writes(code))
        .map(|(rel, _)| rel)
        .collect();
    assert_eq!(
        calling,
        ["write.rs"],
        "only src/write.rs calls kube's writing methods; the others write through its Writer"
    );
    let writing: std::collections::BTreeSet<String> = sources
        .iter()
        .filter(|(rel, code)| *rel != "write.rs" && uses_the_writer(code))
        .map(|(rel, _)| rel.clone())
        .collect();
    assert!(
        named.contains("controller/apply.rs"),
        "the table names the reconciler's writes: {named:?}"
    );
    let unnamed: Vec<_> = writing.difference(&named).collect();
    let idle: Vec<_> = named.difference(&writing).collect();
    assert!(
        unnamed.is_empty() && idle.is_empty(),
        "files of src/ that write but are not in docs/architecture.md's table of writes: \
         {unnamed:?}; named there but writing nothing: {idle:?}"
    );
    assert!(uses_the_writer("let w = Writer::new(api);"));
    assert!(uses_the_writer("    writer: Writer<Lease>,"));
    assert!(!uses_the_writer(
        "struct MyWriter<T>; fn f(w: &mut dyn std::io::Write) {}"
    ));
    // The check sees a write: a planted call in a file that does not write.
    assert!(writes("api.patch(&name, &params, &Patch::Merge(&body))"));
    assert!(writes(
        "self.api.replace(&self.name, &PostParams::default(), &lease)"
    ));
    assert!(!writes(
        "seen.replace(Entry(obj)); path.replace('~', \"~0\")"
    ));
    assert!(writes(
        "api.create_subresource(\"token\", &name, &pp, body)"
    ));
    assert!(writes("client.request::<Status>(req).await"));
    assert!(writes("client.request(req).await"));
    assert!(!writes("let (types, r) = review.request()?;"));
}

/// The check finds what it is for: an upward import planted in a low module and in a low file
/// of a folder, a sideways one between peers, and a module the table does not place.
#[test]
fn a_planted_upward_import_is_found() {
    let src = repo_file("src");
    let layers = table();
    let plant = |file: &str, line: &str| {
        let mut files = sources(&src);
        let text = files.get_mut(file).unwrap();
        text.insert_str(0, &format!("{line}\n"));
        violations(&src, &files, &layers, "src/")
    };
    let found = plant("labels.rs", "use crate::app::run;");
    assert!(
        found.iter().any(|v| v.contains("labels imports app")),
        "{found:?}"
    );
    let found = plant(
        "controller/queue.rs",
        "use crate::controller::reconcile::reconcile;",
    );
    assert!(
        found
            .iter()
            .any(|v| v.contains("src/controller/queue imports src/controller/reconcile")),
        "{found:?}"
    );
    // A `use super::` before a `use crate::` is read too.
    let found = plant(
        "controller/queue.rs",
        "use super::reconcile::reconcile;\nuse crate::labels::labels;",
    );
    assert!(
        found
            .iter()
            .any(|v| v.contains("src/controller/queue imports src/controller/reconcile")),
        "{found:?}"
    );
    let found = plant(
        "admission/review/reader.rs",
        "use super::super::server::Limits;",
    );
    assert!(
        found
            .iter()
            .any(|v| v.contains("src/admission/review imports src/admission/server")),
        "{found:?}"
    );
    let found = plant(
        "render/mod.rs",
        "fn f() { let _ = crate::rules::validate; }",
    );
    assert!(
        found.iter().any(|v| v.contains("render imports rules")),
        "{found:?}"
    );
    // The emulator's table is held the same way.
    let emulator = repo_file("tests/emulator/src");
    let mut files = sources(&emulator);
    files
        .get_mut("registry.rs")
        .unwrap()
        .insert_str(0, "use crate::server::handle;\n");
    let found = violations(&emulator, &files, &emulator_table(), "tests/emulator/src/");
    assert!(
        found.iter().any(|v| v.contains("registry imports server")),
        "{found:?}"
    );
    let mut files = sources(&src);
    files.insert("newcomer.rs".into(), String::new());
    let found = violations(&src, &files, &layers, "src/");
    assert!(
        found
            .iter()
            .any(|v| v.contains("newcomer is not in the layer table")),
        "{found:?}"
    );
}

/// The `Type::name` pairs a module's documentation names (`//!` lines), each with whether
/// `src/` defines `Type` in a file that also defines `fn name`.
fn named_in_docs(doc_file: &str) -> Vec<(String, bool)> {
    let src = repo_file("src");
    let sources = sources(&src);
    let text = std::fs::read_to_string(repo_file(doc_file)).unwrap();
    let doc: String = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut pairs = std::collections::BTreeSet::new();
    for (i, _) in doc.match_indices("::") {
        let before = &doc[..i];
        let ty: String = before
            .chars()
            .rev()
            .take_while(|c| word(*c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let name: String = doc[i + 2..].chars().take_while(|c| word(*c)).collect();
        // `Type::name` only: a path through modules (`kept::Facts`) names a type, which rustdoc
        // checks where it is a link.
        if ty.starts_with(|c: char| c.is_ascii_uppercase())
            && name.starts_with(|c: char| c.is_ascii_lowercase())
        {
            pairs.insert((ty, name));
        }
    }
    pairs
        .into_iter()
        .map(|(ty, name)| {
            // `struct Type`, `trait Type`, ... followed by anything but a word character.
            let defines_type = |code: &str| {
                ["struct", "enum", "trait", "type"].iter().any(|k| {
                    let at = format!("{k} {ty}");
                    code.match_indices(&at)
                        .any(|(i, _)| !code[i + at.len()..].starts_with(|c: char| word(c)))
                })
            };
            let found = sources.values().any(|code| {
                defines_type(code)
                    && (code.contains(&format!("fn {name}("))
                        || code.contains(&format!("fn {name}<")))
            });
            (format!("{ty}::{name}"), found)
        })
        .collect()
}

/// The words the caches' glossary uses for methods (`Table::apply`, `Index::observe`, ...) name
/// methods that exist: a rename that leaves the glossary behind fails here.
#[test]
fn the_glossarys_names_exist() {
    let named = named_in_docs("src/controller/cache/mod.rs");
    assert!(
        named.len() >= 5,
        "the glossary names methods as Type::name: {named:?}"
    );
    let missing: Vec<&String> = named.iter().filter(|(_, ok)| !ok).map(|(n, _)| n).collect();
    assert!(
        missing.is_empty(),
        "src/controller/cache/mod.rs names what src/ does not define: {missing:?}"
    );
}

/// A line of docs/requirements.md that names a requirement and its code.
struct Named {
    /// Its line number.
    line: usize,
    /// A table row (else a list item).
    row: bool,
    /// A row's cells, without the outer pipes; a list item `- ID: ...`: its ID, then the item.
    cells: Vec<String>,
}

/// The table rows and the list items `- ID: ...` of docs/requirements.md.
fn requirement_lines(doc: &str) -> Vec<Named> {
    doc.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            if line.starts_with('|') {
                let cells = cells(line);
                let header = cells
                    .first()
                    .is_none_or(|c| c == "ID" || c.starts_with("---"));
                (!header).then_some(Named {
                    line: i + 1,
                    row: true,
                    cells,
                })
            } else {
                let item = line.strip_prefix("- ")?;
                let (id, _) = item.split_once(':')?;
                is_requirement_id(id).then(|| Named {
                    line: i + 1,
                    row: false,
                    cells: vec![id.to_string(), item.to_string()],
                })
            }
        })
        .collect()
}

/// The cells of a table row: split at each `|` outside code spans and not escaped (`\|`).
fn cells(row: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut code = false;
    let mut chars = row.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cell.push(c);
                cell.extend(chars.next());
            }
            '`' => {
                code = !code;
                cell.push(c);
            }
            '|' if !code => out.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    out.push(cell);
    // Nothing before the first pipe nor after the last.
    out.pop();
    out.into_iter()
        .skip(1)
        .map(|c| c.trim().to_string())
        .collect()
}

/// A requirement ID: two to five capital letters, a dash and two digits (`LIFE-01`, `SEC-06`).
fn is_requirement_id(word: &str) -> bool {
    match word.split_once('-') {
        Some((area, number)) => {
            (2..=5).contains(&area.len())
                && area.chars().all(|c| c.is_ascii_uppercase())
                && number.len() == 2
                && number.chars().all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Every requirement ID the text mentions (`OWN-01`, `SEC-02's`), in order.
fn requirement_ids(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .map(|w| w.trim_matches('-'))
        .filter(|w| is_requirement_id(w))
        .map(str::to_string)
        .collect()
}

/// Whether a line of Rust defines an item of that name: `fn`, `struct`, `enum`, `trait`,
/// `const`, `type`, `mod`, `static`, `union` or `macro_rules!`, after any visibility and
/// qualifiers (`pub(crate) async fn name`, `const fn name`).
fn defines(line: &str, name: &str) -> bool {
    const KEYWORDS: [&str; 10] = [
        "fn",
        "struct",
        "enum",
        "trait",
        "const",
        "type",
        "mod",
        "static",
        "union",
        "macro_rules!",
    ];
    const QUALIFIERS: [&str; 4] = ["async ", "const ", "unsafe ", "extern \"C\" "];
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        let after = match after.strip_prefix('(') {
            Some(scope) => scope.split_once(')').map_or("", |(_, r)| r),
            None => after,
        };
        if after.starts_with(' ') {
            rest = after.trim_start();
        }
    }
    loop {
        let named = KEYWORDS.iter().any(|k| {
            rest.strip_prefix(k)
                .and_then(|r| r.strip_prefix(' '))
                .and_then(|r| r.trim_start().strip_prefix(name))
                .is_some_and(|r| !r.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
        });
        if named {
            return true;
        }
        match QUALIFIERS.iter().find_map(|q| rest.strip_prefix(q)) {
            Some(r) => rest = r,
            None => return false,
        }
    }
}

/// The references of docs/requirements.md that do not resolve, one line each. A code span
/// `path.rs::…::name` names an item `name` defined in the file `path.rs`; `::…::name`
/// continues the last `.rs` path of its cell; a code span whose first segment is a folder of
/// the repository (`manifests/base/`, `tests/integration/ownership.rs`) names something that
/// exists.
fn unresolved_references(root: &Path, doc: &str) -> Vec<String> {
    let folders: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    let mut out = Vec::new();
    for Named { line, cells, .. } in requirement_lines(doc) {
        let id = &cells[0];
        for cell in &cells[1..] {
            let mut last: Option<&str> = None;
            for span in cell.split('`').skip(1).step_by(2) {
                let at = format!("docs/requirements.md:{line} ({id}): `{span}`");
                let Some((path, items)) = span.split_once("::") else {
                    let first = span.split('/').next().unwrap_or_default();
                    if span.contains('/')
                        && !span.contains(' ')
                        && folders.iter().any(|f| f == first)
                    {
                        if !root.join(span).exists() {
                            out.push(format!("{at}: no such file or folder"));
                        }
                        if span.ends_with(".rs") {
                            last = Some(span);
                        }
                    }
                    continue;
                };
                let path = match path {
                    "" => match last {
                        Some(path) => path,
                        None => {
                            out.push(format!("{at}: continues no path of its cell"));
                            continue;
                        }
                    },
                    p if p.ends_with(".rs") && p.contains('/') => {
                        last = Some(p);
                        p
                    }
                    // Not a path of the tree: a type's item (`Error::is_transient`).
                    _ => continue,
                };
                let name = items.rsplit("::").next().unwrap_or_default();
                match std::fs::read_to_string(root.join(path)) {
                    Err(_) => out.push(format!("{at}: no file {path}")),
                    Ok(text) if !text.lines().any(|l| defines(l, name)) => {
                        out.push(format!("{at}: {path} defines no `{name}`"))
                    }
                    Ok(_) => {}
                }
            }
        }
    }
    out
}

/// The longest a row of the requirements table may be, in characters: a requirement in a
/// sentence, where it is implemented and its main tests; details belong in the module docs.
const MAX_ROW_CHARS: usize = 600;

/// The rows of docs/requirements.md longer than [`MAX_ROW_CHARS`].
fn long_rows(doc: &str) -> Vec<String> {
    doc.lines()
        .enumerate()
        .filter(|(_, l)| l.chars().count() > MAX_ROW_CHARS)
        .map(|(i, l)| {
            let id = match l.strip_prefix("- ") {
                Some(item) => item.split(':').next().unwrap_or_default().to_string(),
                None => cells(l).into_iter().next().unwrap_or_default(),
            };
            format!(
                "docs/requirements.md:{} ({id}): {} characters",
                i + 1,
                l.chars().count()
            )
        })
        .collect()
}

/// The problems with the requirement IDs of docs/requirements.md: an ID with more than one row,
/// and an ID the document mentions (in a row, a list item or the text) that has no row.
fn id_problems(doc: &str) -> Vec<String> {
    let mut rows: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for named in requirement_lines(doc).into_iter().filter(|n| n.row) {
        rows.entry(named.cells[0].clone())
            .or_default()
            .push(named.line);
    }
    let mut out: Vec<String> = rows
        .iter()
        .filter(|(_, lines)| lines.len() > 1)
        .map(|(id, lines)| format!("{id} has {} rows, at lines {lines:?}", lines.len()))
        .collect();
    for (i, line) in doc.lines().enumerate() {
        for id in requirement_ids(line) {
            if !rows.contains_key(&id) {
                out.push(format!(
                    "docs/requirements.md:{}: {id} has no row in the table",
                    i + 1
                ));
            }
        }
    }
    out
}

fn requirements() -> String {
    std::fs::read_to_string(repo_file("docs/requirements.md")).unwrap()
}

/// Every reference of docs/requirements.md resolves: `path::name` names an item the file
/// defines, a path names something that exists. A renamed test or a moved function fails here
/// until the table follows it.
#[test]
fn every_reference_of_the_requirements_table_resolves() {
    let found = unresolved_references(&repo_file(""), &requirements());
    assert!(
        found.is_empty(),
        "references of docs/requirements.md that do not resolve:\n{}",
        found.join("\n")
    );
}

/// No row of docs/requirements.md is longer than 600 characters.
#[test]
fn requirement_rows_are_short() {
    let found = long_rows(&requirements());
    assert!(
        found.is_empty(),
        "rows of docs/requirements.md over {MAX_ROW_CHARS} characters (keep the requirement \
         in a sentence, the main functions and tests; move details to the module docs):\n{}",
        found.join("\n")
    );
}

/// Every requirement ID docs/requirements.md mentions has exactly one row.
#[test]
fn every_requirement_id_has_one_row() {
    let found = id_problems(&requirements());
    assert!(
        found.is_empty(),
        "requirement IDs of docs/requirements.md:\n{}",
        found.join("\n")
    );
}

/// The longest BENCHMARKS.md may be, in lines: a reference of current figures, not a diary.
const MAX_BENCHMARK_LINES: usize = 600;

/// BENCHMARKS.md stays a reference: under 600 lines (what changed the figures is in the commit
/// history).
#[test]
fn benchmarks_md_stays_under_600_lines() {
    let lines = std::fs::read_to_string(repo_file("BENCHMARKS.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines < MAX_BENCHMARK_LINES,
        "BENCHMARKS.md has {lines} lines, at most {} allowed: fold superseded measurements \
         and history into a short summary",
        MAX_BENCHMARK_LINES - 1
    );
}

/// The checks of docs/requirements.md find what they are for: a reference to a test that does
/// not exist, to a file that does not exist, a `::name` without a path before it, a long row,
/// a second row of one ID and an ID without a row, each planted in the real document.
#[test]
fn a_planted_bad_reference_long_row_and_repeated_id_are_found() {
    let root = repo_file("");
    let doc = requirements();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| LIFE-11 "))
        .expect("docs/requirements.md has a row LIFE-11");
    let plant = |new: &str| doc.replacen(row, new, 1);

    let renamed = plant(&row.replace(
        "reconcile.rs::hand_edits_are_repaired",
        "reconcile.rs::hand_edits_are_repaired_twice",
    ));
    let found = unresolved_references(&root, &renamed);
    assert!(
        found
            .iter()
            .any(|f| f.contains("(LIFE-11)")
                && f.contains("defines no `hand_edits_are_repaired_twice`")),
        "{found:?}"
    );
    let moved = plant(&row.replace("src/controller/watches.rs", "src/controller/watch.rs"));
    let found = unresolved_references(&root, &moved);
    assert!(
        found
            .iter()
            .any(|f| f.contains("no file src/controller/watch.rs")),
        "{found:?}"
    );
    let gone = plant(&row.replace(
        "| `src/controller/reconcile.rs::apply_in_order`",
        "| `src/gone/`",
    ));
    let found = unresolved_references(&root, &gone);
    assert!(
        found
            .iter()
            .any(|f| f.contains("`src/gone/`: no such file")),
        "{found:?}"
    );
    let orphan = plant(&row.replace(
        "| `src/controller/reconcile.rs::apply_in_order`, ",
        "| `::apply_in_order`, ",
    ));
    let found = unresolved_references(&root, &orphan);
    assert!(
        found.iter().any(|f| f.contains("continues no path")),
        "{found:?}"
    );

    let long = plant(&row.replace(
        "is recreated instead of failing.",
        &format!("is recreated instead of failing{}.", " at once".repeat(60)),
    ));
    let found = long_rows(&long);
    assert!(found.iter().any(|f| f.contains("(LIFE-11)")), "{found:?}");

    let twice = plant(&format!("{row}\n{row}"));
    let found = id_problems(&twice);
    assert!(
        found.iter().any(|f| f.starts_with("LIFE-11 has 2 rows")),
        "{found:?}"
    );
    let unknown = plant(&row.replace("instead of failing", "instead of failing (XYZ-99)"));
    let found = id_problems(&unknown);
    assert!(
        found
            .iter()
            .any(|f| f.contains("XYZ-99 has no row in the table")),
        "{found:?}"
    );
    // The real definitions are found, and a name is not a prefix of another.
    assert!(defines(
        "pub(crate) async fn apply_in_order(",
        "apply_in_order"
    ));
    assert!(defines("    pub const fn new() -> Self {", "new"));
    assert!(defines(
        "const ROUTE_CONFLICT_RETRY: Duration",
        "ROUTE_CONFLICT_RETRY"
    ));
    assert!(!defines("fn apply_in_order_twice()", "apply_in_order"));
    assert!(!defines("    apply_in_order(&ctx).await", "apply_in_order"));
}
