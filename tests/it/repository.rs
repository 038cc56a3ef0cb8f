//! The repository agrees with itself, so that its documents cannot drift from what they describe:
//!
//! * `one_version_everywhere`: the crate's version is openapi.yaml's `info.version`, the
//!   image's `org.opencontainers.image.version` label, and a release heading of CHANGELOG.md.
//! * `every_configuration_key_is_documented`: every key of config/default.toml (commented-out
//!   ones included) has its `DIRICHLET_<KEY>` row in README.md's "Configuration", and every row
//!   there names a key.
//! * `relative_links_resolve`: every relative link of every Markdown file names a file or folder
//!   that exists, and a `#fragment` names a heading of its target (GitHub's anchors).
//!
//! No server, no database: `cargo test --test it repository::`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path))
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

// ------------------------------------------------------------------------------ the version

#[test]
fn one_version_everywhere() {
    let version = env!("CARGO_PKG_VERSION");

    let api: serde_yaml::Value = serde_yaml::from_str(&read("openapi.yaml")).unwrap();
    assert_eq!(
        api["info"]["version"].as_str(),
        Some(version),
        "openapi.yaml's info.version is not Cargo.toml's version: refresh it with \
         `UPDATE_OPENAPI=1 cargo test --test it openapi::`"
    );

    let label = read("Dockerfile")
        .lines()
        .find_map(|line| {
            let (_, rest) = line.split_once("org.opencontainers.image.version=")?;
            Some(rest.trim_start_matches('"').split('"').next()?.to_string())
        })
        .expect("the Dockerfile has an org.opencontainers.image.version label");
    assert_eq!(
        label, version,
        "the Dockerfile's org.opencontainers.image.version is not Cargo.toml's version"
    );

    let heading = format!("## [{version}]");
    assert!(
        read("CHANGELOG.md")
            .lines()
            .any(|line| line.starts_with(&heading)),
        "CHANGELOG.md has no `{heading} - DATE` heading for Cargo.toml's version"
    );
}

// ------------------------------------------------------------------------------ configuration

/// The keys of config/default.toml: `key = value` lines, and `# key = value` lines (keys with no
/// default, such as secrets).
fn configuration_keys(toml: &str) -> BTreeSet<String> {
    toml.lines()
        .filter_map(|line| {
            let line = line.trim_start_matches('#').trim();
            let (key, _) = line.split_once('=')?;
            let key = key.trim();
            let is_key = !key.is_empty()
                && key.starts_with(|c: char| c.is_ascii_lowercase())
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            is_key.then(|| key.to_string())
        })
        .collect()
}

/// The section of `markdown` under the level-2 heading `title`.
fn section<'a>(markdown: &'a str, title: &str) -> &'a str {
    let heading = format!("\n## {title}\n");
    let start = markdown
        .find(&heading)
        .unwrap_or_else(|| panic!("no `## {title}` section"))
        + heading.len();
    let end = markdown[start..]
        .find("\n## ")
        .map_or(markdown.len(), |i| start + i);
    &markdown[start..end]
}

#[test]
fn every_configuration_key_is_documented() {
    let keys = configuration_keys(&read("config/default.toml"));
    assert!(
        keys.contains("listen") && keys.contains("admin_token") && keys.len() > 20,
        "config/default.toml's keys were not found: {keys:?}"
    );
    let readme = read("README.md");
    let configuration = section(&readme, "Configuration");
    // The first cell of each table row: the variables it documents.
    let documented: BTreeSet<String> = configuration
        .lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|row| row.split(" |").next())
        .flat_map(|cell| cell.split('`'))
        .filter_map(|name| name.strip_prefix("DIRICHLET_"))
        .map(str::to_lowercase)
        .collect();
    let missing: Vec<_> = keys.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "keys of config/default.toml without a `DIRICHLET_<KEY>` row in README.md's \
         Configuration table: {missing:?}"
    );
    let unknown: Vec<_> = documented.difference(&keys).collect();
    assert!(
        unknown.is_empty(),
        "README.md's Configuration table documents variables that are no key of \
         config/default.toml: {unknown:?}"
    );
}

#[test]
fn configuration_keys_are_read_from_both_line_forms() {
    let keys = configuration_keys(
        "# prose, not = a key\nlisten = \"x\"\n# admin_token = \"...\"\n\n# max_a_1 = 2\n",
    );
    assert_eq!(
        keys.into_iter().collect::<Vec<_>>(),
        ["admin_token", "listen", "max_a_1"]
    );
}

// ------------------------------------------------------------------------------ links

/// The repository's Markdown files, outside build output and installed dependencies.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if entry.file_type().unwrap().is_dir() {
            let skipped = name.starts_with('.') && name != ".ci"
                || matches!(
                    &*name,
                    "target" | "node_modules" | "venv" | "corpus" | "artifacts"
                );
            if !skipped {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The lines of `markdown` outside fenced code blocks.
fn prose(markdown: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    markdown.lines().enumerate().filter(move |(_, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// `line` without its inline code spans.
fn without_code(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The destinations of the inline links and images of `line`: `[text](destination "title")`.
fn link_destinations(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut found = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let destination = after[..end].trim();
        let destination = match destination.strip_prefix('<') {
            Some(bracketed) => bracketed.split('>').next().unwrap_or_default(),
            None => destination.split(' ').next().unwrap_or_default(),
        };
        found.push(destination.to_string());
        rest = &after[end..];
    }
    found
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a Markdown document: its headings' (repeats numbered as GitHub numbers them)
/// and explicit `<a id=…>`/`<a name=…>` ones.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(markdown) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = anchor(&line[hashes..]);
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        for attribute in ["id=\"", "name=\""] {
            for (i, _) in line.match_indices(&format!("<a {attribute}")) {
                let value = &line[i + 3 + attribute.len()..];
                if let Some(end) = value.find('"') {
                    out.insert(value[..end].to_string());
                }
            }
        }
    }
    out
}

#[test]
fn relative_links_resolve() {
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    markdown_files(root, &mut files);
    assert!(files.len() > 10, "Markdown files not found: {files:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(root).unwrap().display();
        for (number, line) in prose(&text) {
            for destination in link_destinations(line) {
                let external = destination.contains("://")
                    || destination.starts_with("mailto:")
                    || destination.is_empty();
                if external {
                    continue;
                }
                checked += 1;
                let (path, fragment) = destination
                    .split_once('#')
                    .map_or((destination.as_str(), None), |(p, f)| (p, Some(f)));
                let target = if path.is_empty() {
                    file.clone()
                } else if let Some(from_root) = path.strip_prefix('/') {
                    root.join(from_root)
                } else {
                    file.parent().unwrap().join(path)
                };
                if !target.exists() {
                    broken.push(format!(
                        "{shown}:{}: {destination} (no such file)",
                        number + 1
                    ));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                let is_markdown = target.extension().is_some_and(|e| e == "md");
                if is_markdown
                    && !anchors(&std::fs::read_to_string(&target).unwrap()).contains(fragment)
                {
                    broken.push(format!(
                        "{shown}:{}: {destination} (no such heading)",
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links found");
    assert!(
        broken.is_empty(),
        "{} broken relative links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_link_checker_sees_what_it_checks() {
    assert_eq!(
        link_destinations("see [a](x.md), ![b](img.png \"t\") and `[c](code.md)` [d](<y z.md>)"),
        ["x.md", "img.png", "y z.md"]
    );
    let doc = "# Title\n## The image, `scripts/ci/x.sh`\n```\n# not a heading\n```\n## Title\n\
               <a id=\"here\"></a>\n## Rényi × DP: λ₀ = 2\n";
    let found = anchors(doc);
    for expected in [
        "title",
        "title-1",
        "the-image-scriptscixsh",
        "here",
        "rényi--dp-λ₀--2",
    ] {
        assert!(found.contains(expected), "{expected} not in {found:?}");
    }
    assert!(!found.contains("not-a-heading"));
}
