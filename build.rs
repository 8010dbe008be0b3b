//! Names the git commit the binary is built from, for `pushgate --version`:
//! `BUILD_GIT_COMMIT` is `git rev-parse --short HEAD`, or "unknown"
//! outside a git checkout (a source tarball, a crate) or without git.
//!
//! Not `PUSHGATE_*`: cargo also sets the variable in the environment of
//! `cargo test` and `cargo run`, which a pushgate started from there
//! inherits, and the configuration overlay refuses `PUSHGATE_` names that
//! are not keys.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BUILD_GIT_COMMIT={commit}");
    // Rebuild when HEAD moves: HEAD itself (a checkout), and the branch it
    // points at (a commit), loose or packed. A worktree keeps HEAD in its
    // own git dir and branches in the common one.
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let (git_dir, common) = (PathBuf::from(git_dir), PathBuf::from(common));
    let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(branch));
    }
    // A path that does not exist would make cargo rerun this every build.
    for path in watched.iter().filter(|p| Path::exists(p)) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The trimmed output of a successful `git <args>` run in the package root.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}
