//! Validating and walking the records a READ brought back, applying the control block after a
//! lap, reassembling fragments and delivering messages.

use super::*;

impl RingReader {
    /// Walks the records in `bytes` (a READ of the ring from absolute `position`), delivering
    /// each complete message to `deliver(seq, payload)` in order. Unfragmented payloads are
    /// sub-slices of `bytes`; reassembled ones borrow the reader's buffer.
    pub fn parse<F>(&mut self, bytes: &[u8], position: u64, deliver: F) -> Result<Parsed, RingError>
    where
        F: FnMut(u64, &[u8]),
    {
        self.parse_as(bytes, position, Validation::Checksum, deliver)
    }

    /// [`parse`](Self::parse), validating as `validation` says.
    pub(super) fn parse_as<F>(
        &mut self,
        bytes: &[u8],
        position: u64,
        validation: Validation,
        mut deliver: F,
    ) -> Result<Parsed, RingError>
    where
        F: FnMut(u64, &[u8]),
    {
        let committed = validation == Validation::Committed;
        let mut out = Parsed::default();
        if position != self.position {
            out.stop = Stop::Stale;
            return Ok(out);
        }
        self.data_waits = false;
        self.streaming = false;
        let records_before = self.stats.records;
        let avail = bytes.len().min(layout::room_to_end(position, self.capacity) as usize);
        let mut off = 0;
        while off < avail {
            let rest = &bytes[off..avail];
            let Some(h) = RecordHeader::decode(rest) else {
                self.need = HEADER_LEN;
                break;
            };
            if h.position != self.position && committed {
                return Err(self.corrupt(&h, "a record below the tail carries another position"));
            }
            if h.position != self.position {
                // Either bytes of an older lap (or of no record at all: the producer has not
                // reached this position), or a record of a later lap (the reader was lapped).
                // Only a checksum-valid later record proves the lap.
                out.stop = if self.is_later_record(&h, rest) { Stop::NeedControl } else { Stop::NotYetWritten };
                break;
            }
            if h.is_padding() {
                let room = layout::room_to_end(self.position, self.capacity);
                if committed && h.len as u64 + HEADER_LEN as u64 != room {
                    return Err(self.corrupt(&h, "padding that does not end at the end of the data area"));
                }
                if !committed
                    && (h.len as u64 + HEADER_LEN as u64 != room || h.compute_crc(self.checksum, &[]) != h.crc)
                {
                    self.stats.torn += 1;
                    out.stop = Stop::Torn;
                    break;
                }
                if h.flags != layout::FLAG_PADDING || h.reserved != 0 {
                    return Err(self.corrupt(&h, "padding with other flags"));
                }
                match self.expect_seq(&h)? {
                    RecordVerdict::Stop(s) => {
                        out.stop = s;
                        break;
                    }
                    RecordVerdict::Consume => {}
                }
                // The lap ends here.
                self.advance(room);
                out.consumed = avail;
                self.last_fill = self.fill_hint(out.consumed, records_before);
                return Ok(out);
            }
            if h.len as usize > self.max_record_payload {
                // A header torn between two writes: its length is not trustworthy. The same
                // claim at the same position twice is no race (the producer writes the position
                // last) but a record larger than the ring allows.
                let claim = (self.position, h.len);
                if committed || self.oversized == Some(claim) {
                    let (position, len, max) = (self.position, h.len.into(), self.max_record_payload as u64);
                    return Err(RingError::RecordTooLarge { position, len, max });
                }
                self.oversized = Some(claim);
                self.stats.torn += 1;
                out.stop = Stop::Torn;
                break;
            }
            let size = h.size() as usize;
            if rest.len() < size {
                self.need = size;
                break;
            }
            let payload = &rest[HEADER_LEN..HEADER_LEN + h.len as usize];
            // A record without a checksum is for readers in place only: READ, it may be torn.
            let unchecked = h.flags & layout::FLAG_NO_CHECKSUM != 0;
            if !committed && (unchecked || h.compute_crc(self.checksum, payload) != h.crc) {
                self.stats.torn += 1;
                out.stop = Stop::Torn;
                break;
            }
            if let RecordVerdict::Stop(s) = self.accept(&h, payload, &mut out, &mut deliver)? {
                out.stop = s;
                break;
            }
            self.advance(size as u64);
            self.last_record = size;
            off += size;
            out.consumed = off;
        }
        self.last_fill = self.fill_hint(out.consumed, records_before);
        self.streaming = out.consumed > 0 && out.stop == Stop::End;
        Ok(out)
    }

    /// Learns the control block (after [`Stop::NeedControl`], or after [`Stop::NotYetWritten`]
    /// / [`Stop::Torn`] when the reader may have been lapped). If the producer has overwritten
    /// (or is overwriting) the reader's position, continues from `head`; the loss is counted
    /// when the record there confirms `head_seq`.
    pub fn apply_control(&mut self, snap: &ControlSnapshot) -> Result<ControlOutcome, RingError> {
        self.streaming = false;
        if snap.capacity != self.capacity as u64 || snap.epoch != self.epoch {
            return Err(RingError::BadControl(format!(
                "capacity {} epoch {} (expected {} and {})",
                snap.capacity, snap.epoch, self.capacity, self.epoch
            )));
        }
        if snap.head % layout::RECORD_ALIGN != 0 || snap.head_seq == 0 {
            return Err(RingError::BadControl(format!("head {} head_seq {}", snap.head, snap.head_seq)));
        }
        let lapped = snap.floor > self.position;
        if !lapped && !self.anchor_invalid {
            return Ok(if snap.tail > self.position {
                self.data_waits = true;
                ControlOutcome::Behind { available: snap.tail - self.position }
            } else {
                ControlOutcome::CaughtUp
            });
        }
        // Fields from different moments (the READ raced the producer): read them again.
        if snap.head < snap.floor || snap.head < self.position {
            return Ok(ControlOutcome::Retry);
        }
        self.position = snap.head;
        self.state = State::Anchor { seq: snap.head_seq };
        self.anchor_invalid = false;
        self.need = HEADER_LEN;
        self.assembly.clear();
        self.data_waits = snap.tail > snap.head;
        Ok(ControlOutcome::Resync { position: snap.head, seq: snap.head_seq })
    }

    /// Whether `h` (at the reader's offset) is a complete, valid record of a later lap.
    fn is_later_record(&mut self, h: &RecordHeader, rest: &[u8]) -> bool {
        let cap = self.capacity as u64;
        if h.position <= self.position || (h.position - self.position) % cap != 0 {
            return false;
        }
        if h.is_padding() {
            return h.len as u64 + HEADER_LEN as u64 == layout::room_to_end(h.position, self.capacity)
                && h.compute_crc(self.checksum, &[]) == h.crc;
        }
        if h.len as usize > self.max_record_payload || h.flags & layout::FLAG_NO_CHECKSUM != 0 {
            return false;
        }
        let size = h.size() as usize;
        if rest.len() < size {
            // Read the whole record next time to check it.
            self.need = size;
            return false;
        }
        h.compute_crc(self.checksum, &rest[HEADER_LEN..HEADER_LEN + h.len as usize]) == h.crc
    }

    fn advance(&mut self, size: u64) {
        self.position += size;
        self.need = HEADER_LEN;
        self.stats.records += 1;
    }

    fn corrupt(&self, h: &RecordHeader, detail: &str) -> RingError {
        RingError::Corrupt { position: h.position, detail: format!("{detail} (header {h:?}, state {:?})", self.state) }
    }

    /// Checks the sequence of a padding record (it carries the sequence of the record after it).
    fn expect_seq(&mut self, h: &RecordHeader) -> Result<RecordVerdict, RingError> {
        let want = match self.state {
            State::Anchor { seq } => {
                if h.seq != seq {
                    self.anchor_invalid = true;
                    return Ok(RecordVerdict::Stop(Stop::NeedControl));
                }
                return Ok(RecordVerdict::Consume);
            }
            State::Boundary | State::Assembling { .. } => self.next_seq,
            State::Skipping { seq } => seq,
        };
        if h.seq == want {
            Ok(RecordVerdict::Consume)
        } else {
            Err(self.corrupt(h, "padding with a sequence that does not continue the stream"))
        }
    }

    /// Applies one valid (crc-checked) message record.
    fn accept<F>(
        &mut self,
        h: &RecordHeader,
        payload: &[u8],
        out: &mut Parsed,
        deliver: &mut F,
    ) -> Result<RecordVerdict, RingError>
    where
        F: FnMut(u64, &[u8]),
    {
        let known = layout::FLAG_FIRST | layout::FLAG_LAST | layout::FLAG_NO_CHECKSUM;
        if h.flags & !known != 0 || h.reserved != 0 || h.len > h.total_len {
            return Err(self.corrupt(h, "bad flags or lengths"));
        }
        if let State::Anchor { seq } = self.state {
            let target = seq + !h.is_first() as u64;
            if h.seq != seq || target < self.next_seq {
                self.anchor_invalid = true;
                return Ok(RecordVerdict::Stop(Stop::NeedControl));
            }
            let lost = target - self.next_seq;
            out.lost += lost;
            self.stats.lost += lost;
            self.next_seq = target;
            self.state = if h.is_first() { State::Boundary } else { State::Skipping { seq } };
        }
        match self.state {
            State::Anchor { .. } => unreachable!("resolved above"),
            State::Skipping { seq } => {
                if h.is_first() || h.seq != seq {
                    return Err(self.corrupt(h, "expected a continuation of a skipped message"));
                }
                if h.is_last() {
                    self.state = State::Boundary;
                }
            }
            State::Boundary => {
                if !h.is_first() || h.seq != self.next_seq {
                    return Err(self.corrupt(h, "expected the first fragment of the next message"));
                }
                let total = h.total_len as u64;
                if total > self.max_message_len {
                    return Err(RingError::MessageTooLarge { len: total, max: self.max_message_len });
                }
                if h.is_last() {
                    if h.len != h.total_len {
                        return Err(self.corrupt(h, "single-record message with a different total"));
                    }
                    self.deliver(payload, out, deliver);
                } else {
                    self.assembly.clear();
                    self.assembly.reserve(total as usize);
                    self.assembly.extend_from_slice(payload);
                    self.state = State::Assembling { total_len: total };
                }
            }
            State::Assembling { total_len } => {
                let received = self.assembly.len() as u64 + h.len as u64;
                if h.is_first()
                    || h.seq != self.next_seq
                    || h.total_len as u64 != total_len
                    || received > total_len
                    || h.is_last() != (received == total_len)
                {
                    return Err(self.corrupt(h, "fragment does not continue the message"));
                }
                self.assembly.extend_from_slice(payload);
                if h.is_last() {
                    let whole = std::mem::take(&mut self.assembly);
                    self.deliver(&whole, out, deliver);
                    self.assembly = whole;
                    self.assembly.clear();
                }
            }
        }
        Ok(RecordVerdict::Consume)
    }

    fn deliver<F: FnMut(u64, &[u8])>(&mut self, payload: &[u8], out: &mut Parsed, deliver: &mut F) {
        deliver(self.next_seq, payload);
        self.next_seq += 1;
        self.state = State::Boundary;
        out.delivered += 1;
        self.stats.delivered += 1;
        self.stats.bytes += payload.len() as u64;
    }
}
