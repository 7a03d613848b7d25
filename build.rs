//! Records the commit the binary is built from for `sites_operator_build_info{commit}`:
//! `SITES_OPERATOR_COMMIT` when set (image builds without `.git`), else `git rev-parse --short
//! HEAD`, else "unknown". Cheap: cargo reruns it only when HEAD (or the branch it names) moves.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SITES_OPERATOR_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    for path in head_files(Path::new(".git")) {
        // Only existing files: cargo treats a missing one as always changed.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let commit = std::env::var("SITES_OPERATOR_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SITES_OPERATOR_COMMIT={}", commit.trim());
}

fn git_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    let commit = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !commit.trim().is_empty()).then_some(commit)
}

/// `.git/HEAD` and the branch ref it points to, also when `.git` is a worktree's link file.
fn head_files(dot_git: &Path) -> Vec<PathBuf> {
    let git_dir = if dot_git.is_file() {
        match std::fs::read_to_string(dot_git) {
            Ok(text) => match text.trim().strip_prefix("gitdir:") {
                Some(dir) => PathBuf::from(dir.trim()),
                None => return vec![],
            },
            Err(_) => return vec![],
        }
    } else {
        dot_git.to_path_buf()
    };
    let head = git_dir.join("HEAD");
    let mut files = vec![head.clone()];
    let common = std::fs::read_to_string(git_dir.join("commondir"))
        .map(|c| git_dir.join(c.trim()))
        .unwrap_or_else(|_| git_dir.clone());
    if let Ok(text) = std::fs::read_to_string(&head)
        && let Some(branch) = text.trim().strip_prefix("ref:")
    {
        files.push(common.join(branch.trim()));
        files.push(common.join("packed-refs"));
    }
    files
}
