//! The JSON codec for records and result sets, in the forms mORMot peers exchange.
//!
//! | field kind | written | read |
//! |---|---|---|
//! | ID, integers, references | a JSON integer | an integer (range-checked) |
//! | `F64` | a JSON number (`null` for NaN and infinities) | any number |
//! | `Bool` | `true` / `false` | `true`/`false`, `0`/`1` |
//! | `Currency` | a number with at most 4 decimals, trailing zeros dropped | a number or a string such as `"12.5"` |
//! | `Text` | a string | a string |
//! | `Json` | the document itself, inline | any JSON value |
//! | `Blob` | `"\uFFF0"` followed by Base64 (mORMot's magic prefix) | the same, or plain Base64 |
//! | `Date` | `"YYYY-MM-DD"` | that, or a date-time whose date is kept; `""` is unset |
//! | `DateTime` | `"YYYY-MM-DDThh:mm:ss"`; creation and modification times as *TimeLog* integers | ISO 8601 text, or a TimeLog integer; `""` is unset |
//!
//! [`JsonDialect::Mormot`] writes what a mORMot client expects: date-times to the
//! second, and automatic times as TimeLog. [`JsonDialect::Exact`] keeps every
//! date-time as ISO 8601 text with its fraction of a second, so a Burrow client
//! reads back exactly what it wrote. Both are always accepted on input.
//!
//! An unset (`""`) date or date-time is NULL in a nullable field and the zero
//! value (1970-01-01) otherwise; an explicit `null` in a field that is not
//! nullable is an error. A field missing from an object written as a whole
//! takes its kind's zero value (see [`zero_value`]).

mod base64;
mod feed;
mod read;
#[cfg(test)]
mod tests;
mod timelog;
mod write;

pub use base64::{base64_decode, base64_encode};
pub use feed::ListFeed;
pub use read::{parse_id, parse_list, parse_value, read_members, read_row, zero_value, Reader};
pub use timelog::{from_timelog, to_timelog};
pub use write::*;

/// How date-times are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonDialect {
    /// mORMot's forms: date-times to the second, creation and modification
    /// times as TimeLog integers.
    #[default]
    Mormot,
    /// Every date-time as ISO 8601 text with its full fraction of a second.
    Exact,
}

/// The prefix mORMot puts before Base64 to mark a blob in JSON (U+FFF0).
pub const BLOB_MAGIC: &str = "\u{FFF0}";
