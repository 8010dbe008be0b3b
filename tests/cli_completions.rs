//! What the binary says about itself: `--version` names the commit it was
//! built from, `completions <shell>` prints a script the shell accepts,
//! and `man` prints (or writes) man pages, all from the same clap
//! definitions, so every subcommand appears in each.

use std::process::{Command, Output, Stdio};

const SUBCOMMANDS: [&str; 5] = ["serve", "token", "check-config", "completions", "man"];

fn pushgate(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_pushgate"))
        .args(args)
        .env_remove("PUSHGATE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("pushgate runs");
    assert!(
        out.status.success(),
        "pushgate {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(pushgate(args).stdout).expect("UTF-8")
}

/// Whether `program` can be started.
fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Runs `shell` on `script` without executing it (`-n`); its stderr if it
/// refuses.
fn syntax_check(shell: &str, flag: &str, script: &str) {
    let dir = std::env::temp_dir().join(format!("pushgate-completions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!("pushgate.{shell}"));
    std::fs::write(&file, script).expect("script written");
    let out = Command::new(shell)
        .arg(flag)
        .arg(&file)
        .output()
        .expect("shell runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{shell} refuses the script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn version_names_the_package_version_and_the_commit() {
    let version = stdout(&["--version"]);
    let expected_commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(
        version.trim(),
        format!(
            "pushgate {} (commit {expected_commit})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn completions_cover_every_subcommand_and_parse_in_their_shell() {
    for (shell, check) in [
        ("bash", Some("-n")),
        ("zsh", Some("-n")),
        ("fish", Some("--no-execute")),
    ] {
        let script = stdout(&["completions", shell]);
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completions lack {sub}");
        }
        assert!(
            script.contains("--config") || script.contains("-l config"),
            "{shell} completions lack --config"
        );
        match check {
            Some(flag) if have(shell) => syntax_check(shell, flag, &script),
            _ => eprintln!("{shell} is not installed: its completions were not parsed"),
        }
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_pushgate"))
        .args(["completions", "tcsh"])
        .output()
        .expect("runs");
    assert!(!refused.status.success(), "an unknown shell is refused");
}

#[test]
fn man_page_is_roff_with_every_subcommand() {
    let page = stdout(&["man"]);
    assert!(page.contains(".TH pushgate 1"), "{page}");
    assert!(
        page.contains(".SH SYNOPSIS") && page.contains(".SH SUBCOMMANDS"),
        "{page}"
    );
    assert!(page.contains("\\-\\-config"), "documents --config:\n{page}");
    assert!(
        page.contains(env!("CARGO_PKG_VERSION")),
        "names the version"
    );
    for sub in SUBCOMMANDS {
        assert!(
            page.contains(&format!("pushgate\\-{}(1)", sub.replace('-', "\\-"))),
            "no {sub} in:\n{page}"
        );
    }
    // --dir writes the page and one per subcommand, which man can render.
    let dir = std::env::temp_dir().join(format!("pushgate-man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    pushgate(&["man", "--dir", dir.to_str().expect("UTF-8 path")]);
    for name in std::iter::once("pushgate".to_owned())
        .chain(SUBCOMMANDS.iter().map(|s| format!("pushgate-{s}")))
    {
        let file = dir.join(format!("{name}.1"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}.1: {e}"));
        assert!(text.contains(".TH"), "{name}.1 is roff");
    }
    if have("man") {
        let rendered = Command::new("man")
            .arg("-l")
            .arg(dir.join("pushgate-token.1"))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80")
            .output()
            .expect("man runs");
        let text = String::from_utf8_lossy(&rendered.stdout);
        assert!(
            text.contains("--ttl"),
            "man renders the token page:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
