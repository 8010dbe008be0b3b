//! An incremental `text/event-stream` parser: events out of decoded body
//! bytes, however the bytes were split.

/// One event: its `id` (pushgate puts the cursor there) and its data
/// (lines joined with `\n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `id:` field, if any.
    pub id: Option<String>,
    /// The `data:` lines, joined.
    pub data: Vec<u8>,
}

/// Accumulates lines until a blank line dispatches an event.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    pending: Vec<u8>,
    data: Vec<u8>,
    id: Option<String>,
    has_data: bool,
}

impl Parser {
    /// Feeds decoded body bytes; pushes each complete event onto `out`.
    pub(crate) fn feed(&mut self, bytes: &[u8], out: &mut Vec<Event>) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(nl) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + nl;
            let line = self.pending[start..end]
                .strip_suffix(b"\r")
                .unwrap_or(&self.pending[start..end]);
            let line = line.to_vec();
            start = end + 1;
            self.line(&line, out);
        }
        self.pending.drain(..start);
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<Event>) {
        if line.is_empty() {
            if self.has_data {
                out.push(Event {
                    id: self.id.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.id = None;
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
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
            b"id" => self.id = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_survive_any_split_and_comments_are_skipped() {
        let wire = b"retry: 1000\n\n: ping\n\nevent: message\nid: c1\ndata: {\"a\":\ndata: 1}\n\r\nid: c2\ndata: x\n\n";
        for split in 0..wire.len() {
            let mut parser = Parser::default();
            let mut events = Vec::new();
            parser.feed(&wire[..split], &mut events);
            parser.feed(&wire[split..], &mut events);
            assert_eq!(
                events,
                vec![
                    Event {
                        id: Some("c1".into()),
                        data: b"{\"a\":\n1}".to_vec()
                    },
                    Event {
                        id: Some("c2".into()),
                        data: b"x".to_vec()
                    }
                ],
                "split {split}"
            );
        }
    }
}
