//! A small incremental Server-Sent Events parser (the `text/event-stream` format of the HTML
//! standard), fed with the body chunks of a streaming HTTP response.
//!
//! Chunks may split the stream anywhere: inside a line, between the `\r` and `\n` of a CRLF,
//! inside a UTF-8 sequence. Bytes are buffered until a whole line is in, and only whole lines
//! are decoded. Lines end with `\n`, `\r\n` or `\r`; a line starting with `:` is a comment;
//! `data:` lines of one event are joined with `\n`; an empty line dispatches the event.

use std::collections::VecDeque;

use futures::{Stream, StreamExt};

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty when the event had none (the standard's `message`).
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The last `id:` field seen, if any.
    pub id: Option<String>,
}

/// The incremental parser: [`push`](Self::push) chunks, then take the complete events with
/// [`next_event`](Self::next_event).
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line being received.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    /// Whether the stream's first line has started (a leading BOM is dropped).
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
    ready: VecDeque<SseEvent>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            let line = std::mem::take(&mut self.line);
            self.process_line(&line);
            self.line = line;
            self.line.clear();
            if rest[pos] == b'\r' {
                match rest.get(pos + 1) {
                    Some(b'\n') => rest = &rest[pos + 2..],
                    Some(_) => rest = &rest[pos + 1..],
                    None => {
                        self.after_cr = true;
                        rest = &[];
                    }
                }
            } else {
                rest = &rest[pos + 1..];
            }
        }
        self.line.extend_from_slice(rest);
    }

    /// The end of the stream: an event whose lines all arrived but whose closing empty line did
    /// not is still dispatched; a partial last line is dropped.
    pub fn finish(&mut self) {
        self.line.clear();
        self.after_cr = false;
        self.dispatch();
    }

    /// The next complete event, if any.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    fn process_line(&mut self, mut line: &[u8]) {
        if !self.started {
            self.started = true;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"event" => self.event = value.into_owned(),
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        if std::mem::take(&mut self.has_data) {
            self.ready.push_back(SseEvent {
                event,
                data,
                id: self.last_id.clone(),
            });
        }
    }
}

/// Events read from a byte stream (e.g. `reqwest::Response::bytes_stream`), counting bytes.
pub struct EventStream<S> {
    inner: S,
    parser: SseParser,
    bytes: u64,
    ended: bool,
}

impl<S, B, E> EventStream<S>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
{
    /// Events of `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            parser: SseParser::new(),
            bytes: 0,
            ended: false,
        }
    }

    /// The next event; `Ok(None)` at the end of the stream; the stream's error if reading
    /// failed.
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, E> {
        loop {
            if let Some(event) = self.parser.next_event() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            match self.inner.next().await {
                Some(Ok(chunk)) => {
                    let chunk = chunk.as_ref();
                    self.bytes += chunk.len() as u64;
                    self.parser.push(chunk);
                }
                Some(Err(e)) => return Err(e),
                None => {
                    self.ended = true;
                    self.parser.finish();
                }
            }
        }
    }

    /// Bytes received so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: None,
        }
    }

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.push(c);
            while let Some(e) = p.next_event() {
                out.push(e);
            }
        }
        p.finish();
        while let Some(e) = p.next_event() {
            out.push(e);
        }
        out
    }

    /// Every split of `input` into chunks of `size` bytes.
    fn parse_in_pieces(input: &[u8], size: usize) -> Vec<SseEvent> {
        let chunks: Vec<&[u8]> = input.chunks(size).collect();
        parse_chunks(&chunks)
    }

    const TRANSCRIPT: &str = "\u{feff}: a comment\r\n\
        event: message_start\r\n\
        data: {\"a\":1}\r\n\
        \r\n\
        :keep-alive\n\
        data: first line\n\
        data:second line\n\
        data:  two spaces\n\
        \n\
        event: delta\r\
        data: héllo wörld ✓ 🦀\r\
        \r\
        id: 7\n\
        data\n\
        \n\
        event: only-event-no-data\n\
        \n\
        data: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("message_start", "{\"a\":1}"),
            ev("", "first line\nsecond line\n two spaces"),
            ev("delta", "héllo wörld ✓ 🦀"),
            SseEvent {
                event: String::new(),
                data: String::new(),
                id: Some("7".into()),
            },
            SseEvent {
                event: String::new(),
                data: "[DONE]".into(),
                id: Some("7".into()),
            },
        ]
    }

    #[test]
    fn parses_a_whole_transcript() {
        assert_eq!(parse_chunks(&[TRANSCRIPT.as_bytes()]), expected());
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        // Sizes 1..=7 split CRLFs and multi-byte characters (é, ✓, 🦀) at every offset.
        for size in 1..=7 {
            assert_eq!(
                parse_in_pieces(TRANSCRIPT.as_bytes(), size),
                expected(),
                "size {size}"
            );
        }
    }

    #[test]
    fn cr_at_the_end_of_a_chunk_then_lf() {
        let events = parse_chunks(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(events, vec![ev("", "a\nb")]);
    }

    #[test]
    fn end_of_stream_keeps_complete_lines_and_drops_a_partial_one() {
        // Complete lines without the closing blank line: dispatched at the end.
        assert_eq!(parse_chunks(&[b"data: [DONE]\n"]), vec![ev("", "[DONE]")]);
        // A partial line (cut mid-JSON): dropped, and so is its event.
        assert_eq!(
            parse_chunks(&[b"data: {\"a\":1}\n\ndata: {\"b\""]),
            vec![ev("", "{\"a\":1}")]
        );
    }

    #[tokio::test]
    async fn event_stream_counts_bytes_and_surfaces_errors() {
        let chunks: Vec<Result<&[u8], &str>> =
            vec![Ok(b"data: 1\n\nda"), Ok(b"ta: 2\n\n"), Err("reset")];
        let mut s = EventStream::new(futures::stream::iter(chunks));
        assert_eq!(s.next_event().await, Ok(Some(ev("", "1"))));
        assert_eq!(s.next_event().await, Ok(Some(ev("", "2"))));
        assert_eq!(s.bytes_read(), 18);
        assert_eq!(s.next_event().await, Err("reset"));

        let chunks: Vec<Result<&[u8], &str>> = vec![Ok(b"data: x\n")];
        let mut s = EventStream::new(futures::stream::iter(chunks));
        assert_eq!(s.next_event().await, Ok(Some(ev("", "x"))));
        assert_eq!(s.next_event().await, Ok(None));
        assert_eq!(s.next_event().await, Ok(None));
    }
}
