//! `POST /push` bodies: `PushRequest::parse` never panics, and what it
//! accepts keeps every documented rule.

#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use pushgate::api::push::parse::{MAX_DATA_DEPTH, MAX_PUSH_ID_CHARS, PushRequest, PushTarget};

const CODES: &[&str] = &[
    "bad_json",
    "missing_field",
    "bad_user_id",
    "too_many_users",
    "bad_channel",
    "too_many_channels",
];

/// The key serde_json's `Value` takes for a raw value (serde_json's
/// `raw_value` feature).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

fuzz_target!(|body: &[u8]| {
    for max_users in [0, 2, 1000] {
        let max_channels = max_users / 2;
        match PushRequest::parse(body, max_users, max_channels) {
            Ok(req) => {
                if let PushTarget::Users(users) = &req.target {
                    assert!(!users.is_empty() && users.len() <= max_users);
                    let distinct: HashSet<_> = users.iter().collect();
                    assert_eq!(distinct.len(), users.len(), "repeats are dropped");
                }
                if let PushTarget::Channels(channels) = &req.target {
                    assert!(!channels.is_empty() && channels.len() <= max_channels);
                    let distinct: HashSet<_> = channels.iter().collect();
                    assert_eq!(distinct.len(), channels.len(), "repeats are dropped");
                }
                if let Some(id) = &req.id {
                    let chars = id.chars().count();
                    assert!((1..=MAX_PUSH_ID_CHARS).contains(&chars));
                }
                // `data` is kept verbatim and every strict parser reads it.
                let text = req.data.get();
                serde_json::from_str::<Box<serde_json::value::RawValue>>(text)
                    .expect("accepted data parses");
                // serde_json's `Value` (with `raw_value`, which the gateway
                // enables) reads an object keyed by its private raw-value
                // token as a raw value, and refuses one whose value is not a
                // string: a quirk of that type, which the gateway never reads
                // `data` into. Any other object's depth is checked through it.
                if !text.contains(RAW_VALUE_TOKEN) {
                    let data: serde_json::Value =
                        serde_json::from_str(text).expect("accepted data parses");
                    assert!(depth(&data) <= MAX_DATA_DEPTH);
                }
            }
            Err(err) => {
                assert!(CODES.contains(&err.code()), "{err:?}");
                assert!(!err.to_string().is_empty());
            }
        }
    }
});

fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}
