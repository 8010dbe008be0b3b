//! An incremental `text/event-stream` parser: events out of decoded body
//! bytes, however the bytes were split. Each event is lent to the caller
//! as it completes, so once its buffers have grown the parser allocates
//! nothing per line or per event: what the load client spends on an event
//! is what its bytes cost.

use std::ops::ControlFlow;

/// One event, lent by [`Parser::feed`]: its `id` (pushgate puts the
/// cursor there) and its data (lines joined with `\n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event<'a> {
    /// The `id:` field, if any.
    pub id: Option<&'a [u8]>,
    /// The `data:` lines, joined.
    pub data: &'a [u8],
}

/// Keeps what follows the last complete line, and the event being read.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    pending: Vec<u8>,
    event: Building,
}

/// The fields of the event being read.
#[derive(Debug, Default)]
struct Building {
    data: Vec<u8>,
    id: Vec<u8>,
    has_id: bool,
    has_data: bool,
}

impl Parser {
    /// Feeds decoded body bytes and hands each complete event to `each`,
    /// until `each` breaks (what was fed after that event is dropped: the
    /// caller is done with the stream).
    pub(crate) fn feed<B>(
        &mut self,
        bytes: &[u8],
        mut each: impl FnMut(Event<'_>) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if self.pending.is_empty() {
            let rest = self.event.lines(bytes, &mut each)?;
            self.pending.extend_from_slice(rest);
        } else {
            self.pending.extend_from_slice(bytes);
            let rest = self.event.lines(&self.pending, &mut each)?.len();
            let read = self.pending.len() - rest;
            self.pending.drain(..read);
        }
        ControlFlow::Continue(())
    }
}

impl Building {
    /// Reads every complete line of `bytes`; returns what follows the last.
    fn lines<'b, B>(
        &mut self,
        mut bytes: &'b [u8],
        each: &mut impl FnMut(Event<'_>) -> ControlFlow<B>,
    ) -> ControlFlow<B, &'b [u8]> {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            let line = &bytes[..nl];
            bytes = &bytes[nl + 1..];
            self.line(line.strip_suffix(b"\r").unwrap_or(line), each)?;
        }
        ControlFlow::Continue(bytes)
    }

    fn line<B>(
        &mut self,
        line: &[u8],
        each: &mut impl FnMut(Event<'_>) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        if line.is_empty() {
            let flow = if self.has_data {
                each(Event {
                    id: self.has_id.then_some(&self.id[..]),
                    data: &self.data,
                })
            } else {
                ControlFlow::Continue(())
            };
            self.data.clear();
            self.id.clear();
            self.has_id = false;
            self.has_data = false;
            return flow;
        }
        if line[0] == b':' {
            return ControlFlow::Continue(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"id" => {
                self.id.clear();
                self.id.extend_from_slice(value);
                self.has_id = true;
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event `feed` hands out for `parts` fed in turn, as owned
    /// (id, data) pairs.
    fn events(parts: &[&[u8]]) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
        let mut parser = Parser::default();
        let mut out = Vec::new();
        for part in parts {
            let flow = parser.feed(part, |event| {
                out.push((event.id.map(<[u8]>::to_vec), event.data.to_vec()));
                ControlFlow::<()>::Continue(())
            });
            assert_eq!(flow, ControlFlow::Continue(()));
        }
        out
    }

    #[test]
    fn events_survive_any_split_and_comments_are_skipped() {
        let wire = b"retry: 1000\n\n: ping\n\nevent: message\nid: c1\ndata: {\"a\":\ndata: 1}\n\r\nid: c2\ndata: x\n\n";
        let want = vec![
            (Some(b"c1".to_vec()), b"{\"a\":\n1}".to_vec()),
            (Some(b"c2".to_vec()), b"x".to_vec()),
        ];
        for split in 0..wire.len() {
            assert_eq!(
                events(&[&wire[..split], &wire[split..]]),
                want,
                "split {split}"
            );
        }
        // Byte by byte: every line completes in the kept bytes.
        let bytes: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(events(&bytes), want);
    }

    #[test]
    fn an_event_without_an_id_has_none_and_ids_do_not_carry_over() {
        let wire = b"id: c1\ndata: a\n\ndata: b\n\n";
        assert_eq!(
            events(&[wire]),
            vec![(Some(b"c1".to_vec()), b"a".to_vec()), (None, b"b".to_vec())]
        );
    }

    #[test]
    fn a_break_stops_at_its_event() {
        let mut parser = Parser::default();
        let mut seen = Vec::new();
        let flow = parser.feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\n", |event| {
            seen.push(event.data.to_vec());
            if event.data == b"2" {
                ControlFlow::Break("two")
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!(flow, ControlFlow::Break("two"));
        assert_eq!(seen, vec![b"1".to_vec(), b"2".to_vec()]);
    }
}
