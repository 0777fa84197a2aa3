//! mORMot's *TimeLog* integers: how its clients send creation and
//! modification times.

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeZone, Timelike, Utc};

/// A UTC time as mORMot's *TimeLog* integer:
/// `sec | min<<6 | hour<<12 | (day-1)<<17 | (month-1)<<22 | year<<26`.
/// The fraction of a second is dropped.
pub fn to_timelog(t: DateTime<Utc>) -> i64 {
    let d = t.date_naive();
    i64::from(t.second().min(59))
        | i64::from(t.minute()) << 6
        | i64::from(t.hour()) << 12
        | i64::from(d.day() - 1) << 17
        | i64::from(d.month() - 1) << 22
        | i64::from(d.year()) << 26
}

/// The UTC time of a TimeLog integer, `None` when it names no valid time.
pub fn from_timelog(v: i64) -> Option<DateTime<Utc>> {
    if v < 0 {
        return None;
    }
    let sec = (v & 63) as u32;
    let min = ((v >> 6) & 63) as u32;
    let hour = ((v >> 12) & 31) as u32;
    let day = ((v >> 17) & 31) as u32 + 1;
    let month = ((v >> 22) & 15) as u32 + 1;
    let year = i32::try_from(v >> 26).ok()?;
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    let time = NaiveTime::from_hms_opt(hour, min, sec)?;
    Some(Utc.from_utc_datetime(&date.and_time(time)))
}
