//! Reading an archive ([`super::format`]) in bounded memory, whatever it holds: a part's body is
//! hashed as it is read, decompressed as a stream and cut into records one line at a time, so
//! that a reader holds one record and one batch of records at most (docs/operations.md, "The
//! archive"). A part that decompresses past the `raw_bytes` its header names (format 3 on), a
//! record over [`MAX_RECORD`], and events out of order are damage, named like any other.

use std::io::{BufRead, BufReader, Read, Take};

use sha2::{Digest, Sha256};

use super::format::{
    check_event, check_row, hex, ArchiveError, ArchivedEvent, Header, Info, Part, Totals, MAGIC,
    OLDEST, VERSION,
};
use crate::store::{DirectoryRecord, EventHistory, ARCHIVE_PAGE_BYTES, ARCHIVE_PAGE_EVENTS};

/// The largest part (compressed) a reader accepts: a page of events is far below this.
const MAX_PART: u64 = 1 << 30;
/// The largest record a reader accepts, in bytes of its JSON line.
pub const MAX_RECORD: u64 = 64 << 20;
/// The most an `info` or `end` part decompresses to (one small record).
const MAX_SMALL_PART: u64 = 1 << 20;
/// The format from which part headers name `raw_bytes`.
const RAW_BYTES_FROM: u32 = 3;

/// A part's body as it is read: at most its header's `bytes`, hashed as it goes.
struct Body<R> {
    inner: Take<R>,
    hasher: Sha256,
    read: u64,
    /// The input ended before the body did.
    cut: bool,
}

impl<R: Read> Read for Body<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.inner.limit() > 0 && !buf.is_empty() {
            self.cut = true;
        }
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

/// Decompressed bytes, counted, refused past `limit` (the header's `raw_bytes`).
struct Capped<R> {
    inner: R,
    read: u64,
    limit: Option<u64>,
    over: bool,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Never ask for more than one byte past the limit: a bomb stops right there.
        let room = match self.limit {
            Some(l) => (l.saturating_sub(self.read) + 1).min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        let n = self.inner.read(&mut buf[..room])?;
        self.read += n as u64;
        if self.limit.is_some_and(|l| self.read > l) {
            self.over = true;
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "past raw_bytes",
            ));
        }
        Ok(n)
    }
}

type Decoder<R> = zstd::stream::read::Decoder<'static, BufReader<Body<BufReader<R>>>>;

/// The part being read.
struct Open<R> {
    header: Header,
    index: u64,
    lines: BufReader<Capped<Decoder<R>>>,
    records: u64,
    deliveries: u64,
}

/// Reads one line into `line` (with its line end, if it has one), up to [`MAX_RECORD`] + 1
/// bytes. A long line takes the room of the longest record at once, once it passes 1 MiB:
/// memory the line never fills is never touched, and growing never copies a large line.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<()> {
    const LIMIT: usize = MAX_RECORD as usize + 1;
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let take = take.min(LIMIT - line.len());
        if line.len() + take > line.capacity() {
            let want = match line.len() + take {
                n if n <= 1 << 20 => n.max(line.capacity() * 2),
                _ => LIMIT,
            };
            line.reserve_exact(want - line.len());
        }
        line.extend_from_slice(&buf[..take]);
        input.consume(take);
        if done || line.len() == LIMIT {
            return Ok(());
        }
    }
}

/// Reads an archive part by part, checking each; an `events` or `directory` part comes in
/// batches of at most [`ARCHIVE_PAGE_EVENTS`] records or about [`ARCHIVE_PAGE_BYTES`] (or what
/// [`Reader::with_batches`] sets; a larger record is a batch alone). A part's checksum and
/// counts are checked once its last batch is read: a batch handed over before may belong to a
/// part found damaged later (a restore is therefore all or nothing).
pub struct Reader<R> {
    /// `None` while a part is open (its body reads from it).
    input: Option<BufReader<R>>,
    open: Option<Open<R>>,
    version: u32,
    next: u64,
    totals: Totals,
    ended: bool,
    /// The last event id read: events come in strictly descending id order.
    last_event: Option<u128>,
    /// Where [`Reader::next_part`] ends a batch of events, in bytes of records (a payload and
    /// its attempts).
    batch_bytes: usize,
    /// The most events in a batch.
    batch_events: usize,
}

impl<R: Read> Reader<R> {
    /// Reads the first line: the format and its version.
    pub fn new(input: R) -> Result<Reader<R>, ArchiveError> {
        let mut input = BufReader::with_capacity(1 << 16, input);
        let mut line = Vec::new();
        input.by_ref().take(64).read_until(b'\n', &mut line)?;
        let text = std::str::from_utf8(&line).map_err(|_| ArchiveError::NotAnArchive)?;
        let version = text
            .strip_suffix('\n')
            .and_then(|t| t.strip_prefix(MAGIC))
            .and_then(|t| t.strip_prefix(' '))
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or(ArchiveError::NotAnArchive)?;
        if !(OLDEST..=VERSION).contains(&version) {
            return Err(ArchiveError::Version(version));
        }
        Ok(Reader {
            input: Some(input),
            open: None,
            version,
            next: 0,
            totals: Totals::default(),
            ended: false,
            batch_bytes: ARCHIVE_PAGE_BYTES,
            batch_events: ARCHIVE_PAGE_EVENTS,
            last_event: None,
        })
    }

    /// The first line's version is not in any part's checksum: the `info` part (checksummed)
    /// names the format too, and the two agree in an archive that is whole.
    fn same_format(&self, info: &Info) -> Result<(), ArchiveError> {
        if info.format == self.version {
            return Ok(());
        }
        Err(Self::damaged(
            0,
            "info",
            format!(
                "it names format {}, the first line {}",
                info.format, self.version
            ),
        ))
    }

    /// The counts read so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    fn damaged(index: u64, kind: &str, why: impl Into<String>) -> ArchiveError {
        ArchiveError::Damaged {
            index,
            kind: kind.to_string(),
            why: why.into(),
        }
    }

    /// The next part's header, checked: it reads, names this place, and its sizes are in
    /// bounds.
    fn header(&mut self) -> Result<Header, ArchiveError> {
        let index = self.next;
        let input = self.input.as_mut().ok_or(ArchiveError::NotAnArchive)?;
        let mut line = Vec::new();
        input.by_ref().take(4096).read_until(b'\n', &mut line)?;
        if line.is_empty() {
            return Err(Self::damaged(
                index,
                "end",
                "the archive ends here without its end part (it is truncated)",
            ));
        }
        let header: Header = serde_json::from_slice(&line).map_err(|e| {
            Self::damaged(index, "unknown", format!("its header cannot be read ({e})"))
        })?;
        let kind = header.part.clone();
        if header.index != index {
            return Err(Self::damaged(
                index,
                &kind,
                format!("its header says part {}", header.index),
            ));
        }
        if header.bytes > MAX_PART {
            return Err(Self::damaged(
                index,
                &kind,
                format!("its size {} is too large", header.bytes),
            ));
        }
        if self.version >= RAW_BYTES_FROM && header.raw_bytes.is_none() {
            return Err(Self::damaged(index, &kind, "its header lacks raw_bytes"));
        }
        if self.version < RAW_BYTES_FROM && header.raw_bytes.is_some() {
            return Err(Self::damaged(
                index,
                &kind,
                format!(
                    "its header names raw_bytes, which format {} has not",
                    self.version
                ),
            ));
        }
        Ok(header)
    }

    fn body(&mut self, header: &Header) -> Result<Body<BufReader<R>>, ArchiveError> {
        let input = self.input.take().ok_or(ArchiveError::NotAnArchive)?;
        Ok(Body {
            inner: input.take(header.bytes),
            hasher: Sha256::new(),
            read: 0,
            cut: false,
        })
    }

    /// Reads the rest of a body, checks its length and checksum, and takes the input back.
    fn end_body(
        &mut self,
        mut body: Body<BufReader<R>>,
        header: &Header,
        index: u64,
    ) -> Result<(), ArchiveError> {
        std::io::copy(&mut body, &mut std::io::sink())?;
        if body.read < header.bytes {
            return Err(Self::damaged(
                index,
                &header.part,
                format!("truncated: {} of its {} bytes", body.read, header.bytes),
            ));
        }
        if hex(&body.hasher.finalize_reset()) != header.sha256 {
            return Err(Self::damaged(
                index,
                &header.part,
                "its checksum does not match",
            ));
        }
        self.input = Some(body.inner.into_inner());
        Ok(())
    }

    /// Opens the next part: its header read, its body ready to decompress.
    fn open(&mut self) -> Result<(), ArchiveError> {
        let index = self.next;
        let header = self.header()?;
        let kind = header.part.as_str();
        match (kind, index) {
            ("info", 0) => {}
            ("info", _) => return Err(Self::damaged(index, kind, "a second info part")),
            (_, 0) => {
                return Err(Self::damaged(
                    index,
                    kind,
                    "the archive must begin with its info part",
                ))
            }
            ("directory" | "events" | "end", _) => {}
            (other, _) => {
                return Err(Self::damaged(
                    index,
                    other,
                    format!("{other:?} is not a kind of part"),
                ))
            }
        }
        self.start(header)
    }

    /// Starts reading the body of the part whose header was just read.
    fn start(&mut self, header: Header) -> Result<(), ArchiveError> {
        let index = self.next;
        let limit = match (header.part.as_str(), header.raw_bytes) {
            ("info" | "end", raw) => Some(raw.unwrap_or(MAX_SMALL_PART).min(MAX_SMALL_PART)),
            (_, raw) => raw,
        };
        let body = self.body(&header)?;
        let decoder = zstd::stream::read::Decoder::with_buffer(BufReader::new(body))
            .map_err(|e| Self::damaged(index, &header.part, format!("cannot be read ({e})")))?;
        self.open = Some(Open {
            header,
            index,
            lines: BufReader::with_capacity(
                1 << 16,
                Capped {
                    inner: decoder,
                    read: 0,
                    limit,
                    over: false,
                },
            ),
            records: 0,
            deliveries: 0,
        });
        Ok(())
    }

    /// The open part's next record (its JSON line without the line end); `None` at the end of
    /// the part.
    fn record(&mut self) -> Result<Option<Vec<u8>>, ArchiveError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(None);
        };
        let (index, kind) = (open.index, open.header.part.clone());
        let mut line = Vec::new();
        if let Err(e) = read_line(&mut open.lines, &mut line) {
            let capped = open.lines.get_ref();
            let body = capped.inner.get_ref().get_ref();
            let why = if capped.over {
                format!(
                    "it decompresses past the {} bytes its header names",
                    capped.limit.unwrap_or_default()
                )
            } else if body.cut {
                format!(
                    "truncated: {} of its {} bytes",
                    body.read, open.header.bytes
                )
            } else {
                format!("cannot be decompressed ({e})")
            };
            return Err(Self::damaged(index, &kind, why));
        }
        match line.last() {
            None => return Ok(None),
            Some(b'\n') => {
                line.pop();
            }
            Some(_) if line.len() as u64 > MAX_RECORD => {
                return Err(Self::damaged(
                    index,
                    &kind,
                    format!("a record is over {} MiB", MAX_RECORD >> 20),
                ))
            }
            Some(_) => return Err(Self::damaged(index, &kind, "its last record is cut")),
        }
        if line.is_empty() {
            return Err(Self::damaged(index, &kind, "it holds an empty line"));
        }
        open.records += 1;
        Ok(Some(line))
    }

    /// Ends the open part: the whole body read, its decompressed size, checksum and counts
    /// checked.
    fn close(&mut self) -> Result<(), ArchiveError> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let (index, header) = (open.index, open.header);
        let capped = open.lines.into_inner();
        if self.version >= RAW_BYTES_FROM && header.raw_bytes != Some(capped.read) {
            return Err(Self::damaged(
                index,
                &header.part,
                format!(
                    "it decompresses to {} bytes, its header says {}",
                    capped.read,
                    header.raw_bytes.unwrap_or_default()
                ),
            ));
        }
        let body = capped.inner.finish().into_inner();
        self.end_body(body, &header, index)?;
        if open.records != header.records {
            return Err(Self::damaged(
                index,
                &header.part,
                format!(
                    "it holds {} records, its header says {}",
                    open.records, header.records
                ),
            ));
        }
        if open.deliveries != header.deliveries {
            return Err(Self::damaged(
                index,
                &header.part,
                format!(
                    "it holds {} deliveries, its header says {}",
                    open.deliveries, header.deliveries
                ),
            ));
        }
        self.next += 1;
        Ok(())
    }

    /// The open part's one record (`info`, `end`), decoded; the part closed.
    fn only<T: serde::de::DeserializeOwned>(&mut self, what: &str) -> Result<T, ArchiveError> {
        let index = self.next;
        let line = self.record()?.ok_or_else(|| {
            Self::damaged(index, what, format!("an {what} part holds one record"))
        })?;
        if self.record()?.is_some() {
            return Err(Self::damaged(
                index,
                what,
                format!("an {what} part holds one record"),
            ));
        }
        let value = serde_json::from_slice(&line)
            .map_err(|e| Self::damaged(index, what, format!("a record cannot be read ({e})")))?;
        self.close()?;
        Ok(value)
    }

    /// The `end` part's checks once it is read: its counts match what came before (`seen`),
    /// and nothing follows it.
    fn end_checked(
        &mut self,
        index: u64,
        totals: &Totals,
        seen: &Totals,
    ) -> Result<(), ArchiveError> {
        if totals != seen {
            return Err(Self::damaged(
                index,
                "end",
                format!("its counts {totals:?} differ from the archive's {seen:?}"),
            ));
        }
        let mut rest = [0u8; 1];
        let input = self.input.as_mut().ok_or(ArchiveError::NotAnArchive)?;
        if input.read(&mut rest)? != 0 {
            return Err(Self::damaged(index, "end", "bytes follow the end part"));
        }
        self.ended = true;
        Ok(())
    }

    /// Checks the archive's frame without decoding its records: every part's header, place and
    /// checksum, the end's counts against the headers', and that nothing follows. What a
    /// download checks before the archive takes its name; [`Reader::next_part`] (`restore
    /// --check`) decodes every record too.
    pub fn skim(mut self) -> Result<Totals, ArchiveError> {
        let mut seen = Totals::default();
        loop {
            let index = self.next;
            let open = self.open.as_ref().map(|o| o.header.part.clone());
            match open.as_deref() {
                None => {
                    let header = self.header()?;
                    let one = header.records == 1 && header.deliveries == 0;
                    let kind = header.part.clone();
                    match (kind.as_str(), index) {
                        ("info", 0) | ("end", 1..) if one => {
                            // Read through `only`, on the next turn.
                            self.start(header)?;
                        }
                        ("events", 1..) | ("directory", 1..) => {
                            if kind == "directory" && header.deliveries != 0 {
                                return Err(Self::damaged(
                                    index,
                                    &kind,
                                    "\"directory\" is out of place here",
                                ));
                            }
                            if kind == "events" {
                                seen.events += header.records;
                                seen.deliveries += header.deliveries;
                            } else {
                                seen.directory += header.records;
                            }
                            // Decompressed and cut into lines, not decoded: the sizes and the
                            // count of records checked with the checksum.
                            let deliveries = header.deliveries;
                            self.start(header)?;
                            while self.record()?.is_some() {}
                            if let Some(o) = self.open.as_mut() {
                                o.deliveries = deliveries;
                            }
                            self.close()?;
                        }
                        (other, _) => {
                            return Err(Self::damaged(
                                index,
                                other,
                                format!("{other:?} is out of place here"),
                            ))
                        }
                    }
                }
                Some("info") => {
                    let info = self.only::<Info>("info")?;
                    self.same_format(&info)?;
                }
                Some(_) => {
                    let totals: Totals = self.only("end")?;
                    seen.parts = index;
                    seen.attempts = totals.attempts;
                    self.end_checked(index, &totals, &seen)?;
                    return Ok(totals);
                }
            }
        }
    }

    /// Ends [`Reader::next_part`]'s batches of events after `bytes` of records or `events`
    /// events (a page's [`ARCHIVE_PAGE_BYTES`] and [`ARCHIVE_PAGE_EVENTS`] by default; an
    /// event larger is a batch alone).
    pub fn with_batches(mut self, bytes: usize, events: usize) -> Self {
        self.batch_bytes = bytes;
        self.batch_events = events.max(1);
        self
    }

    /// The next part, or the next batch of the part being read, checked: its header, its place
    /// (`info` first, `end` last), its records (every id as the API would take it, events in
    /// strictly descending id order); at a part's end its checksum and counts; after `end`,
    /// that the counts match and nothing follows. `None` after the `end` part.
    pub fn next_part(&mut self) -> Result<Option<Part>, ArchiveError> {
        if self.ended {
            return Ok(None);
        }
        if self.open.is_none() {
            self.open()?;
        }
        let index = self.next;
        let kind = match &self.open {
            Some(o) => o.header.part.clone(),
            None => return Ok(None),
        };
        match kind.as_str() {
            "info" => {
                let info = self.only::<Info>("info")?;
                self.same_format(&info)?;
                Ok(Some(Part::Info(info)))
            }
            "end" => {
                let totals: Totals = self.only("end")?;
                let mut seen = self.totals.clone();
                seen.parts = index;
                self.end_checked(index, &totals, &seen)?;
                Ok(Some(Part::End(totals)))
            }
            "directory" => self.directory_part(index, &kind),
            _ => self.events_part(index, &kind),
        }
    }

    /// The next rows of a `directory` part, at most a page of them (the next part's when this
    /// one has ended).
    fn directory_part(&mut self, index: u64, kind: &str) -> Result<Option<Part>, ArchiveError> {
        let mut rows: Vec<DirectoryRecord> = Vec::new();
        let mut bytes = 0;
        while rows.len() < ARCHIVE_PAGE_EVENTS && bytes < ARCHIVE_PAGE_BYTES {
            let Some(line) = self.record()? else {
                self.close()?;
                break;
            };
            bytes += line.len();
            let row: DirectoryRecord = serde_json::from_slice(&line).map_err(|e| {
                Self::damaged(index, kind, format!("a record cannot be read ({e})"))
            })?;
            check_row(&row).map_err(|why| Self::damaged(index, kind, why))?;
            self.totals.directory += 1;
            rows.push(row);
        }
        if rows.is_empty() && self.open.is_none() {
            return self.next_part();
        }
        Ok(Some(Part::Directory(rows)))
    }

    /// The next batch of an `events` part, each event checked and counted (the next part's when
    /// this one has ended).
    fn events_part(&mut self, index: u64, kind: &str) -> Result<Option<Part>, ArchiveError> {
        let mut events: Vec<EventHistory> = Vec::new();
        let mut bytes = 0;
        while events.len() < self.batch_events && bytes < self.batch_bytes {
            let Some(line) = self.record()? else {
                self.close()?;
                break;
            };
            let archived: ArchivedEvent = serde_json::from_slice(&line).map_err(|e| {
                Self::damaged(index, kind, format!("a record cannot be read ({e})"))
            })?;
            // A batch is bounded by the records' sizes: a payload and its attempts.
            bytes += line.len();
            drop(line);
            let event = archived
                .into_history()
                .map_err(|why| Self::damaged(index, kind, why))?;
            let id = check_event(&event).map_err(|why| Self::damaged(index, kind, why))?;
            if self.last_event.is_some_and(|last| id >= last) {
                return Err(Self::damaged(
                    index,
                    kind,
                    format!(
                        "event {} is out of order (events come in strictly \
                         descending id order, each once)",
                        event.meta.id
                    ),
                ));
            }
            self.last_event = Some(id);
            let deliveries = event.deliveries.len() as u64;
            if let Some(o) = self.open.as_mut() {
                o.deliveries += deliveries;
            }
            self.totals.events += 1;
            self.totals.deliveries += deliveries;
            self.totals.attempts += event
                .deliveries
                .iter()
                .map(|(_, a)| a.len() as u64)
                .sum::<u64>();
            events.push(event);
        }
        if events.is_empty() && self.open.is_none() {
            return self.next_part();
        }
        Ok(Some(Part::Events(events)))
    }
}
