//! The resume seam both buses share: what a client that comes back with a
//! cursor is owed, and how it is queued on its new connection without a
//! gap or a duplicate at the seam with live delivery.

use std::sync::Arc;

use crate::protocol::Transport;
use crate::protocol::frame::Frame;
use crate::registry::Conn;

/// A `recover` frame and the messages missed after a cursor, in order.
///
/// Cursors and channels: the missed messages come from the channels the
/// client's cursor covered, so each carries the cursor suffix of those
/// channels; the `recover` frame and the last missed message carry the
/// position and the suffix of every channel the connection is in now (a
/// channel joined since starts live there: nothing of the covered
/// channels lies between the last missed message and the position).
#[derive(Debug)]
pub(crate) struct Resume {
    complete: bool,
    /// The position to go on from, written (one position per shard).
    position: String,
    missed: Vec<Frame>,
    missed_suffix: Arc<str>,
}

impl Resume {
    /// What a client is owed: `complete` if history still held everything
    /// after its cursor, `position` the cursor to go on from, `missed`
    /// the messages after the cursor.
    pub(crate) fn new(
        complete: bool,
        position: impl std::fmt::Display,
        missed: Vec<Frame>,
    ) -> Self {
        Self {
            complete,
            position: position.to_string(),
            missed,
            missed_suffix: Arc::from(""),
        }
    }

    /// The cursor suffix of the channels the client's cursor covered, for
    /// the missed messages.
    pub(crate) fn covering(mut self, suffix: Arc<str>) -> Self {
        self.missed_suffix = suffix;
        self
    }

    /// Whether the client missed something (a message, or a gap history
    /// no longer covers): a long-poll is then answered at once.
    pub(crate) fn is_news(&self) -> bool {
        !self.complete || !self.missed.is_empty()
    }

    /// The frames, `recover` first, every cursor ending in `suffix` (the
    /// connection's channels' coverage).
    pub(crate) fn into_frames(self, suffix: &Arc<str>) -> Vec<Frame> {
        let mut frames = Vec::with_capacity(self.missed.len() + 1);
        let cursor = format!("{}{suffix}", self.position);
        frames.push(Frame::recover(self.complete, &cursor));
        let last = self.missed.len().saturating_sub(1);
        for (i, frame) in self.missed.iter().enumerate() {
            let own = if i == last && **suffix != *self.missed_suffix {
                frame.with_cursor(&cursor)
            } else {
                None
            };
            frames.push(own.unwrap_or_else(|| frame.with_cursor_suffix(&self.missed_suffix)));
        }
        frames
    }

    /// Queues the resume on a newly attached connection, ahead of live
    /// frames, with its floor at `floor`: live copies of messages up to
    /// there (delivered by a fan-out still under way, or queued since the
    /// attach) are dropped, since the resume or the client's cursor covers
    /// them. A parked poll gets only the floor: it is answered with what
    /// comes after.
    pub(crate) fn seat(resume: Option<Self>, conn: &Conn, transport: Transport, floor: u64) {
        match resume {
            Some(resume) if transport != Transport::Poll => {
                let frames = resume.into_frames(&conn.cursor_suffix());
                conn.outbound.push_resume(frames, floor);
            }
            _ => conn.outbound.discard_through(floor),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Cursor;

    fn kinds(resume: Resume) -> Vec<String> {
        resume
            .into_frames(&Arc::from(""))
            .iter()
            .map(|f| String::from_utf8_lossy(f.json()).into_owned())
            .collect()
    }

    #[test]
    fn a_complete_resume_with_nothing_missed_is_no_news() {
        let resume = Resume::new(true, Cursor::new(7, 3), Vec::new());
        assert!(!resume.is_news());
        let frames = kinds(resume);
        assert_eq!(frames.len(), 1);
        assert!(
            frames[0].contains("\"recover\"") && frames[0].contains("true"),
            "{frames:?}"
        );
    }

    #[test]
    fn a_gap_is_news_even_with_nothing_to_send() {
        assert!(Resume::new(false, Cursor::new(7, 3), Vec::new()).is_news());
    }

    #[test]
    fn missed_messages_are_news_and_follow_the_recover_frame() {
        let data = serde_json::value::RawValue::from_string("1".into()).expect("json");
        let missed = Frame::message(
            4,
            "m4",
            "0000000000000007-4",
            crate::protocol::frame::Stream::Broadcast,
            &data,
        );
        let resume = Resume::new(true, Cursor::new(7, 4), vec![missed]);
        assert!(resume.is_news());
        let frames = kinds(resume);
        assert_eq!(frames.len(), 2);
        assert!(
            frames[0].contains("recover") && frames[1].contains("m4"),
            "{frames:?}"
        );
    }
}
