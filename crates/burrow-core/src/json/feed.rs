//! A list answer read while it arrives: rows are handed on as soon as they
//! are whole in what came so far, so that a client parses the start of a
//! long list while the server still writes its end (the two run on two
//! cores instead of one after the other).
//!
//! A row counts only when the byte after it has arrived too, so it is read
//! exactly as it would be from the whole body (a number cut by the end of
//! what came reads as a shorter number, a cut string or object fails). A
//! row that fails to read is tried again once more has come, and only the
//! body's end makes the failure an error: an error is then the one
//! [`parse_list`] gives for the same body.
//!
//! The usual shapes are read as they come: an array of objects, and the
//! compact object whose `fieldCount` comes before `values`. Any other shape
//! is kept whole and read by [`parse_list`] at the end.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::record::Row;
use crate::row::OwnedRow;
use crate::schema::{Column, Table};

use super::read::{parse_list, read_members, zero_value, Reader};

/// Below this much, a start of a list that reads as neither shape may still
/// be a compact head cut short: it is waited for rather than given up on.
const HEAD_WAIT: usize = 64 * 1024;

/// Where a [`ListFeed`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the list's first byte.
    Start,
    /// In the array of objects, `sep` when the next thing is a `,` or `]`.
    Objects {
        sep: bool,
    },
    /// In the compact `values`, right after a `,`: a row follows.
    Cells,
    /// After the rows: only the end of the list and whitespace are left,
    /// read once everything came.
    Tail {
        compact: bool,
    },
    /// An unusual shape: read whole at the end.
    Whole,
    Done,
}

/// Reads one list answer of `table` in pieces; see the module documentation.
pub struct ListFeed {
    table: &'static Table,
    stage: Stage,
    /// The row every row is read into, its text buffers reused.
    row: OwnedRow,
    present: Vec<usize>,
    /// The compact list's columns.
    cols: Vec<Column>,
    /// Bytes consumed so far (error positions count from the body's start).
    consumed: usize,
    /// After a row that did not read whole: how many bytes must be waiting
    /// before it is tried again. Doubling it each time keeps a very long row
    /// from being read again for every piece that comes.
    wait_for: usize,
}

impl ListFeed {
    /// A reader for a list of `table`.
    pub fn new(table: &'static Table) -> ListFeed {
        ListFeed {
            table,
            stage: Stage::Start,
            row: OwnedRow::zero(table),
            present: Vec::with_capacity(table.fields.len()),
            cols: Vec::new(),
            consumed: 0,
            wait_for: 0,
        }
    }

    /// Reads the rows whole in `data` (the bytes not consumed yet, then
    /// what came since) and hands each to `out`; `end` when `data` holds
    /// the rest of the body. Returns how many bytes of `data` are consumed:
    /// the next call starts after them. After `end`, the whole list has
    /// been read and checked.
    pub fn feed(
        &mut self,
        data: &[u8],
        end: bool,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<usize> {
        if self.stage == Stage::Done {
            return match data.iter().all(u8::is_ascii_whitespace) {
                true => Ok(data.len()),
                false => Err(Error::BadInput(format!(
                    "trailing characters at byte {}",
                    self.consumed
                ))),
            };
        }
        if self.stage == Stage::Whole {
            if !end {
                return Ok(0);
            }
            for row in parse_list(self.table, data)? {
                out(&row)?;
            }
            self.stage = Stage::Done;
            return Ok(data.len());
        }
        if !end && data.len() < self.wait_for {
            return Ok(0);
        }
        let text = match std::str::from_utf8(data) {
            Ok(t) => t,
            // A character cut by the end of what came: read up to it.
            Err(e) if !end && e.error_len().is_none() => {
                std::str::from_utf8(&data[..e.valid_up_to()]).expect("valid up to there")
            }
            Err(e) => {
                return Err(Error::BadInput(format!(
                    "the JSON is not UTF-8 (at byte {})",
                    self.consumed + e.valid_up_to()
                )))
            }
        };
        let used = self.rows(text, end, out)?;
        if self.stage == Stage::Whole && end {
            return self.feed(data, end, out);
        }
        self.consumed += used;
        Ok(used)
    }

    /// [`ListFeed::feed`] on text: the bytes consumed.
    fn rows(
        &mut self,
        text: &str,
        end: bool,
        out: &mut dyn FnMut(&dyn Row) -> Result<()>,
    ) -> Result<usize> {
        let mut r = Reader::at(text, self.consumed);
        // Where the last step read whole ends.
        let mut used = 0;
        loop {
            let step = match self.stage {
                Stage::Start => match r.peek() {
                    None => Ok(Step::Wait),
                    Some(b'[') => {
                        r.expect(b'[')?;
                        // Whether the list is empty shows at its next byte.
                        match r.peek() {
                            None => Ok(Step::Wait),
                            Some(b']') => {
                                r.expect(b']')?;
                                self.stage = Stage::Tail { compact: false };
                                Ok(Step::Moved)
                            }
                            Some(_) => {
                                self.stage = Stage::Objects { sep: false };
                                Ok(Step::Moved)
                            }
                        }
                    }
                    Some(b'{') => match self.compact_head(&mut r) {
                        Ok(more) => {
                            self.stage = match more {
                                true => Stage::Cells,
                                false => Stage::Tail { compact: true },
                            };
                            Ok(Step::Moved)
                        }
                        Err(_) if end || text.len() >= HEAD_WAIT => {
                            self.stage = Stage::Whole;
                            return Ok(0);
                        }
                        Err(_) => Ok(Step::Wait),
                    },
                    Some(_) => return r.fail("a list is an array or a compact object"),
                },
                Stage::Objects { sep: true } => match r.peek() {
                    None => Ok(Step::Wait),
                    Some(b',') => {
                        r.expect(b',')?;
                        self.stage = Stage::Objects { sep: false };
                        Ok(Step::Moved)
                    }
                    Some(b']') => {
                        r.expect(b']')?;
                        self.stage = Stage::Tail { compact: false };
                        Ok(Step::Moved)
                    }
                    Some(_) => return r.fail("expected ',' or ']'"),
                },
                Stage::Objects { sep: false } => self.object(&mut r).map(|()| {
                    self.stage = Stage::Objects { sep: true };
                    Step::Row
                }),
                Stage::Cells => self.cells(&mut r).map(|more| {
                    if !more {
                        self.stage = Stage::Tail { compact: true };
                    }
                    Step::Row
                }),
                Stage::Tail { compact } => {
                    if !end {
                        break;
                    }
                    if compact {
                        self.compact_tail(&mut r)?;
                    }
                    r.end()?;
                    self.stage = Stage::Done;
                    return Ok(text.len());
                }
                Stage::Whole | Stage::Done => unreachable!("handled by feed"),
            };
            match step {
                Ok(Step::Row) => out(&self.row)?,
                Ok(Step::Moved) => {}
                // Not whole yet (or wrong, which only the end tells apart):
                // read again once more came.
                Ok(Step::Wait) | Err(_) if !end => break,
                Ok(Step::Wait) => return r.fail("an unterminated list"),
                Err(e) => return Err(e),
            }
            used = r.position();
            self.wait_for = 0;
        }
        self.wait_for = (text.len() - used).saturating_mul(2);
        Ok(used)
    }

    /// One object of the array into `self.row`.
    fn object(&mut self, r: &mut Reader<'_>) -> Result<()> {
        let table = self.table;
        let row = &mut self.row;
        row.id = 0;
        read_members(r, table, &mut row.id, &mut self.present, |r, i| {
            r.field_into(table, i, &mut row.values[i])
        })?;
        // Fields an object leaves out take their zero value, not the last row's.
        if self.present.len() < table.fields.len() {
            for (i, f) in table.fields.iter().enumerate() {
                if !self.present.contains(&i) {
                    row.values[i] = zero_value(f);
                }
            }
        }
        Ok(())
    }

    /// `{"fieldCount":N,"values":[` and the N column names; whether rows
    /// follow them.
    fn compact_head(&mut self, r: &mut Reader<'_>) -> Result<bool> {
        r.expect(b'{')?;
        if !r.eat_quoted("fieldCount") {
            return r.fail("expected fieldCount");
        }
        r.expect(b':')?;
        let n = usize::try_from(r.unsigned()?).unwrap_or(usize::MAX);
        r.expect(b',')?;
        if n == 0 || !r.eat_quoted("values") {
            return r.fail("expected values");
        }
        r.expect(b':')?;
        r.expect(b'[')?;
        self.cols.clear();
        while self.cols.len() < n {
            if !self.cols.is_empty() && !r.more(b']')? {
                return r.fail("a compact list of the wrong length");
            }
            let name = r.string()?;
            let c = self.table.column(&name);
            self.cols.push(c.ok_or_else(|| Error::UnknownField {
                table: self.table.name,
                field: name.into_owned(),
            })?);
        }
        r.more(b']')
    }

    /// One row of the compact `values` into `self.row`; whether another
    /// follows.
    fn cells(&mut self, r: &mut Reader<'_>) -> Result<bool> {
        let table = self.table;
        for (k, c) in self.cols.iter().enumerate() {
            if k > 0 && !r.more(b']')? {
                return Err(Error::BadInput("a compact list of the wrong length".into()));
            }
            match c {
                Column::Id => {
                    self.row.id = r.id()?.ok_or_else(|| {
                        Error::BadInput("a row's ID is not a positive integer".into())
                    })?
                }
                Column::Field(i) => r.field_into(table, *i, &mut self.row.values[*i])?,
            }
        }
        // Also says that the byte after the row's last value came: a number
        // cut short by the end of what came is not taken for a whole one.
        r.more(b']')
    }

    /// The compact object's members after `values`, to its end.
    fn compact_tail(&mut self, r: &mut Reader<'_>) -> Result<()> {
        while r.more(b'}')? {
            let name: Cow<'_, str> = r.string()?;
            r.expect(b':')?;
            if name == "fieldCount" || name == "values" {
                return r.fail("a compact list with two values");
            }
            r.raw()?;
        }
        Ok(())
    }
}

/// What one step of reading a list did.
enum Step {
    /// Read a row, now in the feed's row.
    Row,
    /// Read the list's head or a separator.
    Moved,
    /// Needs more of the body.
    Wait,
}
