//! Planning the next READ: how far, from where, and the READ posted ahead from headers alone.

use super::*;

/// The length of a READ that brings a record of `first` bytes, then as many records of
/// `stride` bytes as fit within `max_batch`, then the header after them: it ends just past a
/// record boundary when the records are of the sizes expected (at least the first record and a
/// header, even past `max_batch`).
fn whole_records_len(first: usize, stride: usize, max_batch: usize) -> usize {
    let stride = stride.max(HEADER_LEN);
    let budget = max_batch.max(first + HEADER_LEN);
    first + (budget - first - HEADER_LEN) / stride * stride + HEADER_LEN
}

impl RingReader {
    /// The READ to post before `bytes` (a completed READ from `position`) is validated, when
    /// its headers alone show that a written record continues past it: the plan
    /// [`next_read`](Self::next_read) would make after a parse that accepts every record up to
    /// that one (at least `max_batch`, and the whole record and a header). The headers are read
    /// without their checksums: if the parse then stops earlier (a torn record, a broken
    /// stream), the READ is stale and [`parse`](Self::parse) says so. `None` when the headers
    /// end at a record boundary, at the end of the data area or on anything unexpected.
    pub fn plan_ahead(&self, bytes: &[u8], position: u64, max_batch: usize) -> Option<ReadPlan> {
        if position != self.position {
            return None;
        }
        let avail = bytes.len().min(layout::room_to_end(position, self.capacity) as usize);
        let (mut off, mut pos, mut largest) = (0, position, self.last_record);
        while off < avail {
            let h = RecordHeader::decode(&bytes[off..avail])?;
            if h.position != pos || h.is_padding() || h.len as usize > self.max_record_payload {
                return None;
            }
            let size = h.size() as usize;
            largest = largest.max(size);
            if avail - off < size {
                let room = layout::room_to_end(pos, self.capacity) as usize;
                let len = whole_records_len(size, largest, max_batch).min(room);
                return Some(ReadPlan { ring_offset: layout::data_offset(pos, self.capacity), len, position: pos });
            }
            off += size;
            pos += size as u64;
        }
        None
    }

    /// A READ to post while `in_flight` is still on the wire, so that the publisher's NIC
    /// serves the next READ back to back instead of idling through this reader's turn-around
    /// (the completion, a wake-up, the next request). Only for a reader behind a stream of
    /// records larger than `max_batch` (its last parse consumed records and stopped in the
    /// middle of written data): `in_flight` must be a READ from the position of one record of
    /// the size last consumed and the header after it (what [`plan_ahead`] plans for such
    /// records). The READ returned is the next one of the same shape, from that
    /// header: where the next record starts is known, its size is guessed to be the same.
    ///
    /// A wrong guess costs a READ, never a message: a longer record makes the READ short (the
    /// parse asks for the rest), a shorter one makes it bring part of the record after it, an
    /// unwritten one makes it an empty READ, and a READ that then starts elsewhere than the
    /// parse ended is stale ([`parse`](Self::parse) says so). `None` for anything else, and when
    /// the next record and its header would not fit before the end of the data area (it may be
    /// padded to the start).
    ///
    /// [`plan_ahead`]: Self::plan_ahead
    pub fn plan_behind(&self, in_flight: &ReadPlan, max_batch: usize) -> Option<ReadPlan> {
        let record = self.last_record;
        let one_record = in_flight.len == record + HEADER_LEN && in_flight.len > max_batch;
        if !self.streaming || !one_record || in_flight.position != self.position || self.need > record + HEADER_LEN {
            return None;
        }
        let position = in_flight.position + record as u64;
        if (layout::room_to_end(position, self.capacity) as usize) < record + HEADER_LEN {
            return None;
        }
        Some(ReadPlan { ring_offset: layout::data_offset(position, self.capacity), len: record + HEADER_LEN, position })
    }

    /// The longest READ [`next_read`](Self::next_read) plans with `max_batch` (or the control
    /// block READ): the size a READ destination needs.
    pub fn max_read_len(&self, max_batch: usize) -> usize {
        let largest_record = layout::record_size(self.max_record_payload) as usize;
        max_batch.max(largest_record + HEADER_LEN).max(layout::CONTROL_READ_LEN)
    }

    /// The next READ, from the current position.
    ///
    /// While `behind` (the last READ ended in the middle of written data, or the last control
    /// block READ showed data waiting) it brings at least `max_batch` bytes, and at least the
    /// last record consumed plus the header after it: a stream of records larger than
    /// `max_batch` costs one READ each (rather than a short READ that finds the header and a
    /// second for the rest), and each READ shows whether the next record is written.
    ///
    /// A reader that caught up probes with a READ of the last record and a header, or of twice
    /// what the last READ brought when that was several records (at least [`PROBE_LEN`], at
    /// most `max_batch`): polling an idle ring does not move a batch of stale bytes each time,
    /// and a trickle of small messages grows the probes. After a record larger than
    /// `max_batch` it probes with [`PROBE_LEN`]: no probe could bring such a record whole, the
    /// READ after the probe that finds its header brings all of it, and a probe of `max_batch`
    /// moved that much of stale bytes across the network each time, ahead of the record.
    ///
    /// A READ while behind ends just past a record boundary (whole records of the last size,
    /// then the next header), not in the middle of a record whose bytes the next READ would
    /// bring again: with 64 KiB records and a 256 KiB batch, a READ of exactly `max_batch`
    /// wasted a quarter of every READ.
    ///
    /// Either way it covers the whole record the last parse saw only partly, and never passes
    /// the end of the data area.
    pub fn next_read(&self, max_batch: usize, behind: bool) -> ReadPlan {
        let room = layout::room_to_end(self.position, self.capacity) as usize;
        let behind = behind || self.data_waits;
        let next = self.last_record + HEADER_LEN;
        let want = if behind {
            // The record at the position is `need` bytes when its header was seen; the ones
            // after it are guessed to be the size of the last one consumed.
            let first = if self.need > HEADER_LEN { self.need } else { self.last_record };
            let stride = if self.last_record > HEADER_LEN { self.last_record } else { first };
            whole_records_len(first, stride, max_batch)
        } else if next > max_batch {
            // A probe could not bring such a record whole: the READ after it brings all of it
            // anyway, so the probe only needs to find its header.
            PROBE_LEN.min(max_batch)
        } else {
            next.max(2 * self.last_fill).max(PROBE_LEN).min(max_batch)
        };
        let len = want.max(self.need).max(HEADER_LEN).min(room);
        ReadPlan { ring_offset: layout::data_offset(self.position, self.capacity), len, position: self.position }
    }

    /// As [`next_read`](Self::next_read), but at most `max` bytes unless the record at the
    /// position is known to be longer: a reader whose READs cost a copy per byte (the same-host
    /// path) probes an empty ring with a short READ instead of the whole next record, then
    /// READs the record once a probe has seen its header.
    pub fn next_read_at_most(&self, max_batch: usize, behind: bool, max: usize) -> ReadPlan {
        let plan = self.next_read(max_batch, behind);
        ReadPlan { len: plan.len.min(max.max(self.need).max(HEADER_LEN)), ..plan }
    }

    /// What a parse that consumed `consumed` bytes teaches the next probe: the bytes, when they
    /// held several records (a trickle of small messages: probe for as many again); nothing
    /// when one record (one large message at a time: probing twice its size would move a whole
    /// stale message with every empty READ).
    pub(super) fn fill_hint(&self, consumed: usize, records_before: u64) -> usize {
        if self.stats.records - records_before >= 2 {
            consumed
        } else {
            0
        }
    }
}
