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
                let data: serde_json::Value =
                    serde_json::from_str(req.data.get()).expect("accepted data parses");
                assert!(depth(&data) <= MAX_DATA_DEPTH);
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
