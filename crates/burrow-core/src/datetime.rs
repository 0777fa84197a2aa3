//! The text forms of dates and date-times that SQL engines store.
//!
//! Dates are `YYYY-MM-DD`; date-times are UTC `YYYY-MM-DDThh:mm:ss` followed by a
//! fraction of a second only when it is not zero, with trailing zeros dropped. Both
//! sort as text in time order, SQLite's date functions read them, and they are the
//! forms mORMot peers use. They are written and parsed by hand because they sit on
//! the per-row path and chrono's general-purpose formatter costs several times more
//! than these fixed layouts.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, Timelike, Utc};

/// Room for the longest date-time this module writes.
pub const DATETIME_BUF: usize = 32;

/// The current time, as [`Utc::now`] gives it. Every write stamps its
/// records' automatic times, and most of `Utc::now`'s cost is turning the
/// clock's seconds into a calendar date; the date changes once a day, so each
/// thread keeps the last one it worked out.
pub fn now() -> DateTime<Utc> {
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local!(static DAY: DayCache = const { DayCache::new(None) });
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|since| DAY.with(|day| from_unix(since, day)))
        .unwrap_or_else(Utc::now)
}

/// The last day number (since 1970) turned into a date, and its date.
type DayCache = std::cell::Cell<Option<(i64, NaiveDate)>>;

/// The time `since` the Unix epoch, the date taken from `cache` when it holds
/// the same day (and put there when not).
fn from_unix(since: std::time::Duration, cache: &DayCache) -> Option<DateTime<Utc>> {
    let secs = i64::try_from(since.as_secs()).ok()?;
    let (day, in_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400) as u32);
    let date = match cache.get() {
        Some((d, date)) if d == day => date,
        _ => {
            let date = DateTime::from_timestamp(secs, 0)?.date_naive();
            cache.set(Some((day, date)));
            date
        }
    };
    let time = NaiveTime::from_num_seconds_from_midnight_opt(in_day, since.subsec_nanos())?;
    Some(NaiveDateTime::new(date, time).and_utc())
}

/// "00" to "99" one after the other: two digits are written with one copy
/// from here rather than a division for each.
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Writes `v` (below 100) as two digits at `buf[at..at + 2]`.
#[inline(always)]
fn put2(buf: &mut [u8], at: usize, v: u32) {
    let p = 2 * v as usize;
    buf[at..at + 2].copy_from_slice(&PAIRS[p..p + 2]);
}

fn put_date(buf: &mut [u8], d: NaiveDate) -> usize {
    let y = d.year();
    if !(0..=9999).contains(&y) {
        // Outside four digits: fall back to chrono's signed, extended-year form.
        let s = d.format("%Y-%m-%d").to_string();
        buf[..s.len()].copy_from_slice(s.as_bytes());
        return s.len();
    }
    let y = y as u32;
    put2(buf, 0, y / 100);
    put2(buf, 2, y % 100);
    buf[4] = b'-';
    put2(buf, 5, d.month());
    buf[7] = b'-';
    put2(buf, 8, d.day());
    10
}

/// Writes `d` as `YYYY-MM-DD` into `buf` and returns the text.
pub fn write_date(d: NaiveDate, buf: &mut [u8; DATETIME_BUF]) -> &str {
    let n = put_date(buf, d);
    crate::text::utf8(&buf[..n]).expect("ASCII digits")
}

/// Writes `t` as `YYYY-MM-DDThh:mm:ss[.fraction]` into `buf` and returns the text.
pub fn write_datetime(t: DateTime<Utc>, buf: &mut [u8; DATETIME_BUF]) -> &str {
    let mut n = put_date(buf, t.date_naive());
    buf[n] = b'T';
    put2(buf, n + 1, t.hour());
    buf[n + 3] = b':';
    put2(buf, n + 4, t.minute());
    buf[n + 6] = b':';
    // A leap second shows as nanosecond >= 1e9; it is kept as second 60.
    let nanos = t.nanosecond();
    let (sec, frac) = if nanos >= 1_000_000_000 {
        (60, nanos - 1_000_000_000)
    } else {
        (t.second(), nanos)
    };
    put2(buf, n + 7, sec);
    n += 9;
    if frac != 0 {
        // All nine digits in pairs, then the trailing zeros dropped (the
        // fraction is not zero, so the scan stops before the point).
        buf[n] = b'.';
        buf[n + 1] = b'0' + (frac / 100_000_000) as u8;
        let (hi, lo) = ((frac / 10_000) % 10_000, frac % 10_000);
        put2(buf, n + 2, hi / 100);
        put2(buf, n + 4, hi % 100);
        put2(buf, n + 6, lo / 100);
        put2(buf, n + 8, lo % 100);
        n += 10;
        while buf[n - 1] == b'0' {
            n -= 1;
        }
    }
    crate::text::utf8(&buf[..n]).expect("ASCII digits")
}

/// `d` as `YYYY-MM-DD`.
pub fn format_date(d: NaiveDate) -> String {
    write_date(d, &mut [0; DATETIME_BUF]).to_owned()
}

/// `t` as `YYYY-MM-DDThh:mm:ss[.fraction]`.
pub fn format_datetime(t: DateTime<Utc>) -> String {
    write_datetime(t, &mut [0; DATETIME_BUF]).to_owned()
}

fn num(b: &[u8]) -> Option<u32> {
    b.iter().try_fold(0u32, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

/// The two ASCII digits at `b[i..i + 2]` as a number.
#[inline(always)]
pub(crate) fn two(b: &[u8], i: usize) -> Option<u32> {
    let (h, l) = (b[i].wrapping_sub(b'0'), b[i + 1].wrapping_sub(b'0'));
    (h < 10 && l < 10).then(|| u32::from(h) * 10 + u32::from(l))
}

/// The ASCII digit at `b[i]`, if there is one.
#[inline(always)]
fn digit(b: &[u8], i: usize) -> Option<u32> {
    b.get(i)
        .map(|c| c.wrapping_sub(b'0'))
        .filter(|d| *d < 10)
        .map(u32::from)
}

/// The eight ASCII digits at `b[i..i + 8]` as a number, checked and converted
/// as one word rather than digit by digit: a stored time's fraction nearly
/// always has eight or nine digits.
#[inline(always)]
fn eight(b: &[u8], i: usize) -> Option<u32> {
    let word: [u8; 8] = b.get(i..i + 8)?.try_into().ok()?;
    let v = u64::from_le_bytes(word).wrapping_sub(0x3030_3030_3030_3030);
    // A byte below '0' borrows into the high half of its own byte, and one
    // above '9' carries there once 6 is added: either shows in the mask.
    if (v | v.wrapping_add(0x0606_0606_0606_0606)) & 0xf0f0_f0f0_f0f0_f0f0 != 0 {
        return None;
    }
    // Pairs, then fours, then the eight: the first byte is the most
    // significant digit.
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    let v = (v & 0x0000_00ff_0000_00ff)
        .wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((v >> 16) & 0x0000_00ff_0000_00ff).wrapping_mul(1 + (10_000 << 32)));
    Some((v >> 32) as u32)
}

/// The fraction of a second of 1 to 9 digits starting at `b[i]`, as
/// nanoseconds, and where its digits end; `None` for no digit or more than 9.
#[inline(always)]
fn fraction(b: &[u8], i: usize) -> Option<(u32, usize)> {
    let (mut nanos, mut end, mut scale) = match eight(b, i) {
        Some(v) => (v * 10, i + 8, 1),
        None => (0, i, 100_000_000),
    };
    while let Some(d) = digit(b, end) {
        if scale == 0 {
            return None;
        }
        nanos += d * scale;
        scale /= 10;
        end += 1;
    }
    (end > i).then_some((nanos, end))
}

/// `YYYY-MM-DDThh:mm:ss[.fraction][Z]`, the form [`write_datetime`] writes
/// (a four-digit year, `T`): what nearly every stored or sent date-time is,
/// read once per row without the general parser's search for the
/// separator. `None` for anything else (a leap second included), which the
/// general parser then reads or refuses.
#[inline]
pub(crate) fn parse_written_datetime(b: &[u8]) -> Option<DateTime<Utc>> {
    let [year, month, day, hour, min, sec] = written_parts(b)?;
    if sec >= 60 {
        return None;
    }
    let (nanos, end) = if b.get(19) == Some(&b'.') {
        fraction(b, 20)?
    } else {
        (0, 19)
    };
    if !matches!(&b[end..], [] | [b'Z']) {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(year as i32, month, day)?;
    let time = NaiveTime::from_hms_nano_opt(hour, min, sec, nanos)?;
    Some(NaiveDateTime::new(date, time).and_utc())
}

/// Year, month, day, hour, minute and second of `b` when it starts with
/// `YYYY-MM-DDThh:mm:ss` (digits where digits go, not yet checked as a day
/// or a time): the layout checked two words at a time, then each digit
/// read without a check of its own. A whole-table read parses a date-time
/// or two per row; a byte at a time, this cost it a tenth of its consumer.
#[inline(always)]
fn written_parts(b: &[u8]) -> Option<[u32; 6]> {
    let h = b.first_chunk::<19>()?;
    let shaped = shape(le8(h), DATE_HEAD.0, DATE_HEAD.1)
        & shape(le8(&h[8..16]), DATE_TIME.0, DATE_TIME.1)
        & (h[16] == b':');
    if !shaped {
        return None;
    }
    let sec = two(h, 17)?;
    let d = |i: usize| u32::from(h[i].wrapping_sub(b'0'));
    let (year, month) = year_month(h);
    Some([
        year,
        month,
        d(8) * 10 + d(9),
        d(11) * 10 + d(12),
        d(14) * 10 + d(15),
        sec,
    ])
}

/// The year and month of `b`, whose first eight bytes have the shape of
/// `YYYY-MM-` (checked by the caller).
#[inline(always)]
fn year_month(b: &[u8]) -> (u32, u32) {
    let d = |i: usize| u32::from(b[i].wrapping_sub(b'0'));
    (
        d(0) * 1000 + d(1) * 100 + d(2) * 10 + d(3),
        d(5) * 10 + d(6),
    )
}

/// Parses `YYYY-MM-DD`.
pub fn parse_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    if b.first().is_some_and(|c| *c == b'+' || *c == b'-') {
        // Extended years, as written by chrono for years beyond 0..=9999.
        return NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
    }
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year = two(b, 0)? * 100 + two(b, 2)?;
    NaiveDate::from_ymd_opt(year as i32, two(b, 5)?, two(b, 8)?)
}

/// Parses `YYYY-MM-DD[T| ]hh:mm[:ss[.fraction]]` with an optional `Z` or `+00:00`,
/// read as UTC; a date alone is midnight. Other offsets are converted to UTC.
pub fn parse_datetime(s: &str) -> Option<DateTime<Utc>> {
    let b = s.as_bytes();
    LAST_PARSED.with(|last| {
        let mut last = last.borrow_mut();
        if let Some(t) = last.get(b) {
            return Some(t);
        }
        let t = parse_datetime_afresh(s)?;
        last.set(b, t);
        Some(t)
    })
}

/// [`parse_datetime`] without the thread's last parse.
fn parse_datetime_afresh(s: &str) -> Option<DateTime<Utc>> {
    parse_written_datetime(s.as_bytes()).or_else(|| parse_any_datetime(s))
}

thread_local! {
    /// The last date-time text each thread parsed, and its time. Rows
    /// written together carry one time (a batch's records are stamped
    /// once), so a list of them holds the same text row after row: then a
    /// parse is one comparison, where it is otherwise most of what reading
    /// a date-time costs. A text that differs costs the comparison more.
    static LAST_PARSED: std::cell::RefCell<LastParsed> = const {
        std::cell::RefCell::new(LastParsed {
            len: 0,
            tail: 0,
            text: [0; LAST_PARSED_MAX],
            at: DateTime::UNIX_EPOCH,
        })
    };
}

/// The longest text [`LAST_PARSED`] keeps: a written date-time with all
/// nine digits of a fraction and a `+00:00` fits.
const LAST_PARSED_MAX: usize = 40;

struct LastParsed {
    /// 0 until a text is kept (a text under 8 bytes is never kept).
    len: usize,
    /// The text's last 8 bytes: where two times of a run of rows differ
    /// (the seconds and the fraction), so a different text is told apart
    /// by one comparison.
    tail: u64,
    text: [u8; LAST_PARSED_MAX],
    at: DateTime<Utc>,
}

impl LastParsed {
    #[inline(always)]
    fn get(&self, b: &[u8]) -> Option<DateTime<Utc>> {
        let n = b.len();
        if n != self.len || n < 8 || le8(&b[n - 8..]) != self.tail {
            return None;
        }
        (self.text[..n] == *b).then_some(self.at)
    }

    #[inline(always)]
    fn set(&mut self, b: &[u8], at: DateTime<Utc>) {
        let n = b.len();
        if (8..=LAST_PARSED_MAX).contains(&n) {
            self.text[..n].copy_from_slice(b);
            self.tail = le8(&b[n - 8..]);
            self.len = n;
            self.at = at;
        }
    }
}

/// [`parse_datetime`] for every shape it takes.
fn parse_any_datetime(s: &str) -> Option<DateTime<Utc>> {
    // The date ends at the separator: after 10 bytes, or later for the signed
    // extended years written outside 0..=9999.
    let sep = s
        .char_indices()
        .skip(1)
        .find(|&(_, c)| c == 'T' || c == ' ')
        .map(|(i, _)| i);
    let Some(sep) = sep else {
        return parse_date(s).map(|d| d.and_time(NaiveTime::MIN).and_utc());
    };
    let date = parse_date(&s[..sep])?;
    let b = &s.as_bytes()[sep + 1..];
    if b.len() < 5 || b[2] != b':' {
        return DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.with_timezone(&Utc));
    }
    let (hour, min) = (num(&b[0..2])?, num(&b[3..5])?);
    let mut rest = &b[5..];
    let (mut sec, mut nanos) = (0, 0);
    if let [b':', s1, s2, tail @ ..] = rest {
        sec = num(&[*s1, *s2])?;
        rest = tail;
        if let [b'.', tail @ ..] = rest {
            let digits = tail.iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 || digits > 9 {
                return None;
            }
            nanos = num(&tail[..digits])? * 10u32.pow(9 - digits as u32);
            rest = &tail[digits..];
        }
    }
    match rest {
        [] | [b'Z'] | b"+00:00" => {}
        _ => {
            return DateTime::parse_from_rfc3339(s)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        }
    }
    let (sec, nanos) = if sec == 60 {
        (59, nanos + 1_000_000_000)
    } else {
        (sec, nanos)
    };
    let time = NaiveTime::from_hms_nano_opt(hour, min, sec, nanos)?;
    Some(NaiveDateTime::new(date, time).and_utc())
}

/// Whether `s` has the shape of a date this module writes (`YYYY-MM-DD`, a
/// year of four digits). Such a text reads back as itself: parsed and written
/// again it is the same text, or it is no date and a reader keeps it as text.
#[inline]
pub fn is_written_date(s: &str) -> bool {
    written_date(s.as_bytes())
}

/// `YYYY-MM-` read as one little-endian word: its digit bytes, and what the
/// others must be (see [`shape`]).
const DATE_HEAD: (u64, u64) = (0x00FF_FF00_FFFF_FFFF, 0x2D00_002D_0000_0000);
/// `DDThh:mm`, the next eight bytes of a date-time, in the same form.
const DATE_TIME: (u64, u64) = (0xFFFF_00FF_FF00_FFFF, 0x0000_3A00_0054_0000);

fn written_date(b: &[u8]) -> bool {
    // `YYYY-MM-` as one word, then the day's two digits.
    b.len() == 10
        && shape(le8(b), DATE_HEAD.0, DATE_HEAD.1)
        && b[8].is_ascii_digit()
        && b[9].is_ascii_digit()
}

/// Whether `s` has the shape of a date-time this module writes
/// (`YYYY-MM-DDThh:mm:ss`, then a fraction only when not zero, without
/// trailing zeros), with the same guarantee as [`is_written_date`].
#[inline]
pub fn is_written_datetime(s: &str) -> bool {
    // Bytes, not `&s[..10]`: a stored text may put a multi-byte character
    // across byte 10.
    let all = s.as_bytes();
    let Some(b) = all.first_chunk::<19>() else {
        return false;
    };
    // `YYYY-MM-`, then `DDThh:mm`, each checked as one word (a scan calls
    // this for every stored date-time it hands over as it is).
    shape(le8(b), DATE_HEAD.0, DATE_HEAD.1)
        && shape(le8(&b[8..16]), DATE_TIME.0, DATE_TIME.1)
        && b[16] == b':'
        && b[17].is_ascii_digit()
        && b[18].is_ascii_digit()
        && fraction_after(all)
}

/// Whether `s` is a date as [`is_written_date`] has it that also names a
/// real day: what `is_written_date(s) && parse_date(s).is_some()` answers,
/// without a date made (a list writer asks it of every stored date).
pub fn is_valid_written_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10 && real_day(b)
}

/// Whether `s` is a date-time as [`is_written_datetime`] has it that also
/// names a real day and time, a leap second (`:60`) excepted: what the
/// fixed-layout parser behind [`parse_datetime`] accepts of that shape,
/// without a date-time made.
pub fn is_valid_written_datetime(s: &str) -> bool {
    let all = s.as_bytes();
    let Some([year, month, day, hour, min, sec]) = written_parts(all) else {
        return false;
    };
    in_month(year, month, day) && hour < 24 && min < 60 && sec < 60 && fraction_after(all)
}

/// Whether what follows the seconds of `b` (19 bytes at least) is a fraction
/// as Burrow writes it: none, or `.` and one to nine digits without a
/// trailing zero; the digits checked eight at a time from the end of `b`.
#[inline(always)]
fn fraction_after(b: &[u8]) -> bool {
    let n = b.len() - 19;
    if n == 0 {
        return true;
    }
    if !(2..=10).contains(&n) || b[19] != b'.' || b[b.len() - 1] == b'0' {
        return false;
    }
    let digits = n - 1;
    // The last eight bytes, of which the last `digits` (the high ones, read
    // little-endian) must be digits; a ninth is the byte before them.
    let tail = le8(&b[b.len() - 8..]);
    let mask = if digits >= 8 {
        u64::MAX
    } else {
        u64::MAX << (8 * (8 - digits))
    };
    shape(tail, mask, tail & !mask) && (digits < 9 || b[20].is_ascii_digit())
}

/// The 8 bytes from `b[0]`, little-endian.
#[inline(always)]
fn le8(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Whether the bytes of `x` under `digits` (`0xFF` each) are ASCII digits and
/// the others are those of `other`: eight bytes checked at once, where a
/// byte at a time cost a date-time list's server a tenth of its work.
#[inline(always)]
fn shape(x: u64, digits: u64, other: u64) -> bool {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    const SIXES: u64 = 0x0606_0606_0606_0606;
    // A digit (0x30..=0x39) has the high nibble 3 before and after adding 6;
    // a byte that passes the first test cannot carry into the next.
    ((x & HIGH & digits) == (ZEROS & digits))
        & ((x.wrapping_add(SIXES & digits) & HIGH & digits) == (ZEROS & digits))
        & ((x & !digits) == other)
}

/// Whether `b`, at least 10 bytes, starts with `YYYY-MM-DD` naming a day of
/// the proleptic Gregorian calendar.
#[inline(always)]
fn real_day(b: &[u8]) -> bool {
    let Some(b) = b.first_chunk::<10>() else {
        return false;
    };
    // `YYYY-MM-`, then the day's two digits.
    if !shape(le8(b), DATE_HEAD.0, DATE_HEAD.1) {
        return false;
    }
    let Some(day) = two(b, 8) else {
        return false;
    };
    let (year, month) = year_month(b);
    in_month(year, month, day)
}

/// Whether `day` is a day of `month` (1 to 12) of `year` in the proleptic
/// Gregorian calendar.
#[inline(always)]
fn in_month(year: u32, month: u32, day: u32) -> bool {
    let last = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return false,
    };
    (1..=last).contains(&day)
}

#[cfg(test)]
mod test {
    use super::*;

    /// `YYYY-MM-DD`, byte by byte: what [`is_written_date`] answers.
    fn plain_date(s: &str) -> bool {
        s.len() == 10 && plain_date_bytes(s.as_bytes())
    }

    /// `YYYY-MM-DDThh:mm:ss[.fraction]`, byte by byte: what
    /// [`is_written_datetime`] answers.
    fn plain_datetime(s: &str) -> bool {
        let b = s.as_bytes();
        if b.len() < 19 || !plain_date_bytes(&b[..10]) || b[10] != b'T' {
            return false;
        }
        let time = b[11..19].iter().enumerate().all(|(i, c)| match i {
            2 | 5 => *c == b':',
            _ => c.is_ascii_digit(),
        });
        time && match &b[19..] {
            [] => true,
            [b'.', frac @ ..] => {
                (1..=9).contains(&frac.len())
                    && frac.iter().all(u8::is_ascii_digit)
                    && frac.last() != Some(&b'0')
            }
            _ => false,
        }
    }

    fn plain_date_bytes(b: &[u8]) -> bool {
        b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
    }

    /// What a reader that parses a stored text and writes it again shows.
    fn reread(s: &str, date: bool) -> String {
        let mut buf = [0u8; DATETIME_BUF];
        if date {
            parse_date(s).map_or(s.to_owned(), |d| write_date(d, &mut buf).to_owned())
        } else {
            parse_datetime(s).map_or(s.to_owned(), |t| write_datetime(t, &mut buf).to_owned())
        }
    }

    proptest::proptest! {
        #[test]
        fn written_shapes_read_back_as_themselves(
            y in 0u32..10_000, mo in 0u32..14, d in 0u32..33,
            h in 0u32..26, mi in 0u32..62, se in 0u32..62,
            frac in proptest::option::of(1u32..1_000_000_000), digits in 1usize..=9,
        ) {
            let date = format!("{y:04}-{mo:02}-{d:02}");
            proptest::prop_assert!(is_written_date(&date));
            proptest::prop_assert_eq!(reread(&date, true), date.clone());
            let mut time = format!("{date}T{h:02}:{mi:02}:{se:02}");
            if let Some(f) = frac {
                let f = format!("{f:09}");
                let f = f[..digits].trim_end_matches('0');
                if !f.is_empty() {
                    time.push('.');
                    time.push_str(f);
                }
            }
            proptest::prop_assert!(is_written_datetime(&time), "{}", time);
            proptest::prop_assert_eq!(reread(&time, false), time.clone());
            proptest::prop_assert_eq!(
                is_valid_written_date(&date),
                parse_date(&date).is_some(),
                "{}", date
            );
            proptest::prop_assert_eq!(
                is_valid_written_datetime(&time),
                parse_written_datetime(time.as_bytes()).is_some(),
                "{}", time
            );
        }

        /// A valid date and date-time with one character replaced: the
        /// checks a list writer makes answer as the shape checks and the
        /// parsers do together.
        #[test]
        fn one_wrong_character_is_seen(
            at in 0usize..31,
            digits in 0usize..=10,
            c in proptest::prop_oneof![
                proptest::char::any(),
                proptest::sample::select(vec!['/', ':', '0', '9', '-', 'T', '.', '\u{fa}']),
            ],
        ) {
            let swap = |base: &str| -> String {
                base.chars().enumerate().map(|(i, ch)| if i == at { c } else { ch }).collect()
            };
            let mut base = String::from("2024-02-29T23:59:59");
            if digits > 0 {
                base.push('.');
                base.push_str(&"1234567891"[..digits]);
            }
            let time = swap(&base);
            proptest::prop_assert_eq!(
                is_valid_written_datetime(&time),
                is_written_datetime(&time) && parse_written_datetime(time.as_bytes()).is_some(),
                "{}", time
            );
            let date = swap("2024-02-29");
            proptest::prop_assert_eq!(
                is_valid_written_date(&date),
                is_written_date(&date) && parse_date(&date).is_some(),
                "{}", date
            );
            // The fixed-layout parser reads what the general one reads.
            proptest::prop_assert_eq!(parse_datetime(&time), parse_any_datetime(&time), "{}", time);
            // The word-at-a-time shape checks answer as the plain byte ones.
            proptest::prop_assert_eq!(is_written_datetime(&time), plain_datetime(&time), "{}", time);
            proptest::prop_assert_eq!(is_written_date(&date), plain_date(&date), "{}", date);
        }

        /// A date-time written reads back as itself, over every year
        /// written with four digits and the signed ones around them.
        #[test]
        fn datetimes_written_read_back(
            secs in -62_300_000_000i64..253_500_000_000, nanos in 0u32..1_000_000_000,
        ) {
            let t = DateTime::from_timestamp(secs, nanos).expect("in chrono's range");
            let mut buf = [0u8; DATETIME_BUF];
            let text = write_datetime(t, &mut buf).to_owned();
            proptest::prop_assert_eq!(parse_datetime(&text), Some(t), "{}", text);
            proptest::prop_assert_eq!(
                is_written_datetime(&text),
                (0..=9_999).contains(&t.year()),
                "{}", text
            );
        }

        /// The fixed-layout parser answers as the general one wherever it
        /// answers at all, invalid days, hours and leap seconds included.
        #[test]
        fn written_layout_parses_as_the_general_way(
            y in 0u32..10_000, mo in 0u32..14, d in 0u32..33,
            h in 0u32..26, mi in 0u32..62, se in 0u32..62,
            // '/' and ':' sit just below and above the digits.
            frac in proptest::option::of("[0-9]{0,10}[/:0-9]{0,2}"), tail in "(|Z|\\+00:00|x)",
        ) {
            let mut time = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}");
            if let Some(f) = frac {
                time.push('.');
                time.push_str(&f);
            }
            time.push_str(&tail);
            let fast = parse_written_datetime(time.as_bytes());
            if fast.is_some() {
                proptest::prop_assert_eq!(fast, parse_any_datetime(&time), "{}", time);
            }
            proptest::prop_assert_eq!(parse_datetime(&time), parse_any_datetime(&time), "{}", time);
        }
    }

    /// A text is answered from the thread's last parse only when it is
    /// that very text: texts alike but for one byte, of the same length,
    /// too long to keep, or that do not parse, each read as the parser
    /// alone reads them, in any order.
    #[test]
    fn repeated_datetimes_read_as_parsed() {
        let long = "2026-11-29T02:34:11.752031422+00:00 and more";
        let texts = [
            "2026-11-29T02:34:11.752031422",
            "2026-11-29T02:34:11.752031422",
            "2026-11-29T02:34:11.752031423",
            "2026-11-29T02:34:11.752031422",
            "2026-11-29T02:34:11.75203142x",
            "2026-11-29T02:34:11.752031422",
            "2026-11-29T02:34:11.752031422+01:00",
            "2026-11-29T02:34:11.752031422+01:00",
            "2026-11-29T02:34:11.752031422+02:00",
            long,
            long,
            "2026-11-29T02:34:11",
            "2026-11-29",
            "",
            "2026-11-29T02:34:11",
        ];
        for _ in 0..2 {
            for t in texts {
                assert_eq!(parse_datetime(t), parse_datetime_afresh(t), "{t}");
            }
        }
        assert_ne!(
            parse_datetime("2026-11-29T02:34:11.752031422+01:00"),
            parse_datetime("2026-11-29T02:34:11.752031422+02:00")
        );
    }

    #[test]
    fn fast_datetimes_agree_with_the_general_parser() {
        for s in [
            "2024-02-29T23:59:59",
            "2024-02-29T23:59:59Z",
            "2024-02-29T00:00:00.000000001",
            "1999-12-31T12:34:56.123456789Z",
            "0001-01-01T00:00:00.5",
            "2023-02-29T00:00:00",
            "2024-13-01T00:00:00",
            "2024-01-01T24:00:00",
            "2024-01-01T23:59:60",
            "2024-01-01T23:59:59.",
            "2024-01-01T23:59:59.1234567891",
            "2024-01-01T23:59:59.12345678",
            "2024-01-01T23:59:59.12345678Z",
            "2024-01-01T23:59:59.1234567/9",
            "2024-01-01T23:59:59.123:5678",
            "2024-01-01T23:59:59.0000000009",
            "2024-01-01T23:59:59+00:00",
            "2024-01-01T23:59:59+02:00",
            "2024-01-01 23:59:59",
            "2024-01-01T23:59",
            "2024-01-01Tab:cd:ef",
        ] {
            let fast = parse_written_datetime(s.as_bytes());
            if fast.is_some() {
                assert_eq!(fast, parse_any_datetime(s), "{s}");
            }
            assert_eq!(parse_datetime(s), parse_any_datetime(s), "{s}");
        }
        assert!(parse_written_datetime(b"2024-02-29T23:59:59.25Z").is_some());
    }

    #[test]
    fn a_leap_second_is_written_as_second_60() {
        let mut buf = [0u8; DATETIME_BUF];
        for (secs, nanos, text) in [
            (59, 1_500_000_000, "1970-01-01T00:00:60.5"),
            (1_483_228_799, 1_000_000_000, "2016-12-31T23:59:60"),
        ] {
            let t = DateTime::from_timestamp(secs, nanos).expect("a leap second");
            assert_eq!(write_datetime(t, &mut buf), text);
            assert_eq!(parse_datetime(text), Some(t));
        }
    }

    #[test]
    fn other_shapes_are_not_written_ones() {
        for s in ["2020-1-02", "+10000-01-01", "2020-01-02 ", "2020/01/02", ""] {
            assert!(!is_written_date(s), "{s}");
        }
        for s in [
            "2020-01-02",
            "2020-01-02 10:00:00",
            "2020-01-02T10:00",
            "2020-01-02T10:00:00Z",
            "2020-01-02T10:00:00.50",
            "2020-01-02T10:00:00.",
            "2020-01-02T10:00:00.1234567891",
            // A multi-byte character across byte 10 (another writer's text).
            "2024-01-0é0T00:00:00",
            "2024-01-02éT00:00:00",
        ] {
            assert!(!is_written_datetime(s), "{s}");
            // The general parser takes some of these; it must not panic on any.
            let _ = parse_datetime(s);
        }
        assert!(is_written_datetime("2020-01-02T10:00:00.5"));
    }

    #[test]
    fn dates_round_trip() {
        for s in ["2024-02-29", "0001-01-01", "9999-12-31", "1970-01-01"] {
            let d = parse_date(s).unwrap();
            assert_eq!(format_date(d), s);
        }
        assert_eq!(parse_date("2023-02-29"), None);
        assert_eq!(parse_date("2023-1-5"), None);
        assert_eq!(parse_date("garbage!!!"), None);
    }

    #[test]
    fn datetimes_round_trip_to_the_nanosecond() {
        for s in [
            "2024-02-29T23:59:59",
            "2024-02-29T23:59:59.5",
            "2024-02-29T00:00:00.000000001",
            "1999-12-31T12:34:56.123456789",
        ] {
            let t = parse_datetime(s).unwrap();
            assert_eq!(format_datetime(t), s);
        }
        for s in ["-0044-03-15T12:30:15.000000005", "+10000-01-01T00:00:00"] {
            let t = parse_datetime(s).unwrap();
            assert_eq!(format_datetime(t), s);
        }
        let now = Utc::now();
        assert_eq!(parse_datetime(&format_datetime(now)), Some(now));
    }

    #[test]
    fn now_matches_chrono_across_days() {
        let before = Utc::now();
        let t = now();
        assert!(before <= t && t <= Utc::now());
        let cache = DayCache::new(None);
        // Either side of midnights, leap days and the epoch, through one cache.
        for secs in [
            0u64,
            86_399,
            86_400,
            951_782_399,
            951_782_400,
            951_868_800,
            1_709_164_799,
            1_709_164_800,
            1_709_251_200,
            1_709_251_199,
            4_102_444_800,
        ] {
            for nanos in [0, 1, 999_999_999] {
                let since = std::time::Duration::new(secs, nanos);
                assert_eq!(
                    from_unix(since, &cache),
                    DateTime::from_timestamp(secs as i64, nanos),
                    "{secs}.{nanos}"
                );
            }
        }
    }

    #[test]
    fn datetimes_accept_common_variants() {
        let t = parse_datetime("2024-01-02T03:04:05").unwrap();
        assert_eq!(parse_datetime("2024-01-02 03:04:05Z"), Some(t));
        assert_eq!(parse_datetime("2024-01-02T05:04:05+02:00"), Some(t));
        assert_eq!(
            parse_datetime("2024-01-02"),
            parse_datetime("2024-01-02T00:00:00")
        );
        assert_eq!(parse_datetime("2024-01-02T25:00:00"), None);
        assert_eq!(parse_datetime("2024-01-02T"), None);
        assert_eq!(parse_datetime("T"), None);
        assert_eq!(parse_datetime("2024-01-02T03:04:05.1234567890"), None);
    }

    #[test]
    fn text_order_is_time_order() {
        let a = format_datetime(parse_datetime("2024-01-01T00:00:56").unwrap());
        let b = format_datetime(parse_datetime("2024-01-01T00:00:56.5").unwrap());
        let c = format_datetime(parse_datetime("2024-01-01T00:00:56.123").unwrap());
        let d = format_datetime(parse_datetime("2024-01-01T00:00:57").unwrap());
        let mut v = vec![d.clone(), b.clone(), a.clone(), c.clone()];
        v.sort();
        assert_eq!(v, vec![a, c, b, d]);
    }
}
