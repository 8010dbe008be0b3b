//! Cursors: parsing any string never panics, and every cursor accepted
//! (a position, or a connection's cursor with positions and channel
//! coverage) prints back to a string that parses to the same cursor.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pushgate::history::{ConnCursor, Cursor};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cursor) = text.parse::<Cursor>() {
        let printed = cursor.to_string();
        assert_eq!(
            printed.parse::<Cursor>(),
            Ok(cursor),
            "{text:?} -> {printed:?}"
        );
        assert!(text.len() <= 37, "{text:?}");
    }
    if let Ok(cursor) = text.parse::<ConnCursor>() {
        let printed = cursor.to_string();
        assert_eq!(
            printed.parse::<ConnCursor>(),
            Ok(cursor.clone()),
            "{text:?} -> {printed:?}"
        );
        // Only one spelling of each cursor is accepted.
        assert_eq!(printed, text, "{text:?}");
    }
});
