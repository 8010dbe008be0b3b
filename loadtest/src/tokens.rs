//! Client tokens for URL templates with `{token}`: read once per process
//! from the file `LOADTEST_TOKEN_FILE` names, one `<user id> <token>` per
//! line (the scripts mint them, see `loadtest/token-cost.sh`). Workers
//! inherit the variable from the coordinator, so every process reads the
//! same file.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The environment variable naming the token file.
pub(crate) const TOKEN_FILE_VAR: &str = "LOADTEST_TOKEN_FILE";

/// The token of `user`, or `""` when there is no file or no line for it
/// (the gateway then refuses the connection, and the run counts it as
/// failed).
pub(crate) fn token_of(user: &str) -> &'static str {
    static TOKENS: OnceLock<HashMap<String, String>> = OnceLock::new();
    TOKENS
        .get_or_init(|| match std::env::var(TOKEN_FILE_VAR) {
            Ok(path) => match std::fs::read_to_string(&path) {
                Ok(text) => parse(&text),
                Err(err) => {
                    eprintln!("{TOKEN_FILE_VAR}={path}: {err}");
                    HashMap::new()
                }
            },
            Err(_) => HashMap::new(),
        })
        .get(user)
        .map_or("", String::as_str)
}

/// `<user id> <token>` lines; blank lines and lines without a token are
/// skipped.
fn parse(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(user, token)| (user.trim().to_owned(), token.trim().to_owned()))
        .filter(|(user, token)| !user.is_empty() && !token.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_map_users_to_tokens() {
        let tokens = parse("u0 aaa.bbb.ccc\n\nu1  ddd.eee.fff \nbroken\n");
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens["u0"], "aaa.bbb.ccc");
        assert_eq!(tokens["u1"], "ddd.eee.fff");
    }
}
