//! Configuration: `Config::from_toml_str`, the environment overlay,
//! `validate` and the masked printout never panic on any input.
//!
//! Input: TOML text, optionally followed by a NUL byte and `NAME=VALUE`
//! lines for the overlay.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pushgate::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (toml, env) = text.split_once('\0').unwrap_or((text, ""));
    let Ok(config) = Config::from_toml_str(toml) else {
        return;
    };
    let _ = config.validate();
    let masked = config.to_masked_toml();
    assert!(Config::from_toml_str(&masked).is_ok(), "{masked}");
    let pairs: Vec<(String, String)> = env
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    if let Ok(overlaid) = config.apply_env(pairs) {
        let _ = overlaid.validate();
        let _ = overlaid.to_masked_toml();
    }
});
