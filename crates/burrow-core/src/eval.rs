//! Evaluation of a [`Filter`] against a row, with SQLite's semantics, for the
//! engines that answer without SQL (the memory engine).
//!
//! The aim is that a WHERE clause selects exactly the rows SQLite selects on the
//! same data, so a table can move between engines without changing answers:
//!
//! - Three-valued logic: a comparison with NULL is unknown, `NOT unknown` is
//!   unknown, `false AND unknown` is false, `true OR unknown` is true; a row is
//!   selected only when the whole expression is true.
//! - Values compare as SQLite compares the values it stores (see
//!   [`crate::FieldKind`] for how each kind is stored): integers, booleans and
//!   currency amounts (their 1/10,000 count) as integers; floats numerically
//!   against integers, exactly; dates and date-times as their text, which is time
//!   order; text byte by byte (SQLite's `BINARY` collation); blobs byte by byte.
//!   Across classes, NULL < numbers < text < blobs. A NaN float is NULL, as SQLite
//!   stores it.
//! - `LIKE`: `%` matches any run of characters, `_` one character, and ASCII
//!   letters match either case (SQLite's default `case_sensitive_like=OFF`);
//!   other characters match only themselves.
//! - `BETWEEN a AND b` is `>= a AND <= b`; `IN` is true on an equal member,
//!   unknown when the value is NULL or no member is equal but one is NULL.
//! - ORDER BY ([`order`], [`compare_rows`]) sorts NULLs first ascending and last
//!   descending, like SQLite.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::datetime::{write_date, write_datetime, DATETIME_BUF};
use crate::error::{Error, Result};
use crate::filter::{CmpOp, Expr, Filter};
use crate::record::Row;
use crate::schema::Column;
use crate::value::{Value, ValueRef};

/// Whether `row` is selected by `filter`: its expression is true (not false,
/// not unknown). A filter without an expression selects every row.
pub fn matches<R: Row + ?Sized>(filter: &Filter, row: &R) -> Result<bool> {
    match &filter.expr {
        None => Ok(true),
        Some(e) => Ok(eval(e, &filter.params, row)? == Some(true)),
    }
}

/// The value of `expr` on `row`: `Some(true)`, `Some(false)`, or `None` for
/// unknown (SQL NULL). Operands are indexes into `params`.
pub fn eval<R: Row + ?Sized>(expr: &Expr, params: &[Value], row: &R) -> Result<Option<bool>> {
    Ok(match expr {
        Expr::And(list) => {
            let mut unknown = false;
            for e in list {
                match eval(e, params, row)? {
                    Some(false) => return Ok(Some(false)),
                    None => unknown = true,
                    Some(true) => {}
                }
            }
            if unknown {
                None
            } else {
                Some(true)
            }
        }
        Expr::Or(list) => {
            let mut unknown = false;
            for e in list {
                match eval(e, params, row)? {
                    Some(true) => return Ok(Some(true)),
                    None => unknown = true,
                    Some(false) => {}
                }
            }
            if unknown {
                None
            } else {
                Some(false)
            }
        }
        Expr::Not(e) => eval(e, params, row)?.map(|b| !b),
        Expr::Cmp(c, op, p) => {
            let v = column(row, *c)?;
            compare(&v, &param(params, *p)?.as_ref()).map(|o| cmp_holds(*op, o))
        }
        Expr::In(c, list, neg) => {
            let v = column(row, *c)?;
            in_list(&v, list, params)?.map(|b| b != *neg)
        }
        Expr::IsNull(c, not_null) => {
            let v = column(row, *c)?;
            Some(is_null(&v) != *not_null)
        }
        Expr::Like(c, p, neg) => {
            let v = column(row, *c)?;
            let pat = param(params, *p)?.as_ref();
            like_values(&v, &pat)?.map(|b| b != *neg)
        }
        Expr::Between(c, lo, hi, neg) => {
            let v = column(row, *c)?;
            let ge = compare(&v, &param(params, *lo)?.as_ref()).map(|o| o != Ordering::Less);
            let le = compare(&v, &param(params, *hi)?.as_ref()).map(|o| o != Ordering::Greater);
            and3(ge, le).map(|b| b != *neg)
        }
    })
}

/// The value of a column of a row: the ID or a field.
pub fn column<R: Row + ?Sized>(row: &R, c: Column) -> Result<ValueRef<'_>> {
    match c {
        Column::Id => Ok(ValueRef::Int(row.id()?)),
        Column::Field(i) => row.get(i),
    }
}

fn param(params: &[Value], i: usize) -> Result<&Value> {
    params.get(i).ok_or_else(|| {
        Error::InvalidWhere(format!(
            "parameter #{i} is missing ({} given)",
            params.len()
        ))
    })
}

fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn cmp_holds(op: CmpOp, o: Ordering) -> bool {
    match op {
        CmpOp::Eq => o == Ordering::Equal,
        CmpOp::Ne => o != Ordering::Equal,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Le => o != Ordering::Greater,
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Ge => o != Ordering::Less,
    }
}

fn in_list(v: &ValueRef<'_>, list: &[usize], params: &[Value]) -> Result<Option<bool>> {
    if is_null(v) {
        return Ok(if list.is_empty() { Some(false) } else { None });
    }
    let mut unknown = false;
    for &p in list {
        match compare(v, &param(params, p)?.as_ref()) {
            Some(Ordering::Equal) => return Ok(Some(true)),
            None => unknown = true,
            Some(_) => {}
        }
    }
    Ok(if unknown { None } else { Some(false) })
}

/// Whether a value is NULL as SQLite sees it (a NaN float is NULL there).
pub fn is_null(v: &ValueRef<'_>) -> bool {
    match v {
        ValueRef::Null => true,
        ValueRef::Real(f) => f.is_nan(),
        _ => false,
    }
}

/// A value reduced to the classes SQLite compares: integer, real, text, blob.
enum Class<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(Cow<'a, str>),
    Blob(&'a [u8]),
}

impl Class<'_> {
    fn rank(&self) -> u8 {
        match self {
            Class::Null => 0,
            Class::Int(_) | Class::Real(_) => 1,
            Class::Text(_) => 2,
            Class::Blob(_) => 3,
        }
    }
}

fn class<'a>(v: &'a ValueRef<'_>) -> Class<'a> {
    match v {
        ValueRef::Null => Class::Null,
        ValueRef::Int(i) => Class::Int(*i),
        ValueRef::Bool(b) => Class::Int(i64::from(*b)),
        ValueRef::Currency(c) => Class::Int(c.scaled()),
        ValueRef::Real(f) if f.is_nan() => Class::Null,
        ValueRef::Real(f) => Class::Real(*f),
        ValueRef::Text(t) => Class::Text(Cow::Borrowed(t.as_ref())),
        ValueRef::Date(d) => Class::Text(Cow::Owned(
            write_date(*d, &mut [0; DATETIME_BUF]).to_owned(),
        )),
        ValueRef::DateTime(t) => Class::Text(Cow::Owned(
            write_datetime(*t, &mut [0; DATETIME_BUF]).to_owned(),
        )),
        ValueRef::Blob(b) => Class::Blob(b),
    }
}

/// Compares an integer with a float exactly (SQLite's `sqlite3IntFloatCompare`).
fn int_real(i: i64, r: f64) -> Ordering {
    // 2^63, exactly representable.
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if r < -TWO63 {
        return Ordering::Greater;
    }
    if r >= TWO63 {
        return Ordering::Less;
    }
    let t = r.trunc();
    match i.cmp(&(t as i64)) {
        Ordering::Equal => {
            let frac = r - t;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

fn cmp_class(a: &Class<'_>, b: &Class<'_>) -> Ordering {
    match (a, b) {
        (Class::Null, Class::Null) => Ordering::Equal,
        (Class::Int(x), Class::Int(y)) => x.cmp(y),
        (Class::Real(x), Class::Real(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Class::Int(x), Class::Real(y)) => int_real(*x, *y),
        (Class::Real(x), Class::Int(y)) => int_real(*y, *x).reverse(),
        (Class::Text(x), Class::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Class::Blob(x), Class::Blob(y)) => x.cmp(y),
        _ => a.rank().cmp(&b.rank()),
    }
}

/// Compares two values as a SQL comparison does: `None` when either is NULL.
pub fn compare(a: &ValueRef<'_>, b: &ValueRef<'_>) -> Option<Ordering> {
    // The common pairs, without going through the general classes.
    match (a, b) {
        (ValueRef::Int(x), ValueRef::Int(y)) => return Some(x.cmp(y)),
        (ValueRef::Text(x), ValueRef::Text(y)) => return Some(x.as_bytes().cmp(y.as_bytes())),
        (ValueRef::Currency(x), ValueRef::Currency(y)) => return Some(x.cmp(y)),
        (ValueRef::Date(x), ValueRef::Date(y)) if text_ordered_year(x) && text_ordered_year(y) => {
            return Some(x.cmp(y))
        }
        (ValueRef::DateTime(x), ValueRef::DateTime(y))
            if text_ordered_year(&x.date_naive()) && text_ordered_year(&y.date_naive()) =>
        {
            return Some(x.cmp(y))
        }
        _ => {}
    }
    let (a, b) = (class(a), class(b));
    if matches!(a, Class::Null) || matches!(b, Class::Null) {
        return None;
    }
    Some(cmp_class(&a, &b))
}

/// Whether a date's text form (four-digit year) sorts in time order.
fn text_ordered_year(d: &chrono::NaiveDate) -> bool {
    use chrono::Datelike;
    (0..=9999).contains(&d.year())
}

/// The ORDER BY order of two values: a total order where NULL comes first,
/// then numbers, text and blobs, each compared as [`compare`] does.
pub fn order(a: &ValueRef<'_>, b: &ValueRef<'_>) -> Ordering {
    match (is_null(a), is_null(b)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => compare(a, b).unwrap_or(Ordering::Equal),
    }
}

/// Compares two rows by the columns of an ORDER BY (`true` for descending).
/// Rows equal on every column compare equal; the caller breaks ties.
pub fn compare_rows<A: Row + ?Sized, B: Row + ?Sized>(
    order_by: &[(Column, bool)],
    a: &A,
    b: &B,
) -> Result<Ordering> {
    for &(c, desc) in order_by {
        let o = order(&column(a, c)?, &column(b, c)?);
        if o != Ordering::Equal {
            return Ok(if desc { o.reverse() } else { o });
        }
    }
    Ok(Ordering::Equal)
}

fn like_values(v: &ValueRef<'_>, pat: &ValueRef<'_>) -> Result<Option<bool>> {
    if is_null(v) || is_null(pat) {
        return Ok(None);
    }
    match (v, pat) {
        (ValueRef::Text(t), ValueRef::Text(p)) => Ok(Some(like(p, t))),
        _ => Err(Error::Unsupported(format!(
            "LIKE on {} and {} (not text) is unsupported by the memory engine, use the virtual table",
            v.type_name(),
            pat.type_name()
        ))),
    }
}

/// SQLite's default `LIKE`: whether `text` matches `pattern`, where `%` is any
/// run of characters, `_` any one character, and ASCII letters ignore case.
pub fn like(pattern: &str, text: &str) -> bool {
    let p: &[u8] = pattern.as_bytes();
    let t: &[u8] = text.as_bytes();
    // Greedy matching with backtracking to the last `%`: linear in the common
    // cases, O(|p|·|t|) at worst. Works on UTF-8 bytes: a character other than
    // an ASCII letter matches only itself byte for byte, and `_` steps over one
    // whole character.
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                b'%' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                b'_' => {
                    pi += 1;
                    ti += char_len(t[ti]);
                    continue;
                }
                c if c.eq_ignore_ascii_case(&t[ti]) => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                // Let the last `%` swallow one more character and retry.
                let next = st + char_len(t[st]);
                star = Some((sp, next));
                pi = sp + 1;
                ti = next;
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'%')
}

/// The length of the UTF-8 character that starts with byte `b`.
fn char_len(b: u8) -> usize {
    match b {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::currency::Currency;
    use crate::schema::{Field, FieldKind, Table};
    use chrono::{NaiveDate, TimeZone, Utc};

    struct R(i64, Vec<Value>);

    impl Row for R {
        fn id(&self) -> Result<i64> {
            Ok(self.0)
        }
        fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
            Ok(self.1[idx].as_ref())
        }
    }

    const fn f(name: &'static str, kind: FieldKind) -> Field {
        Field::new(name, kind).nullable()
    }

    static T: Table = Table {
        name: "People",
        fields: &[
            f("Name", FieldKind::Text),
            f("Amount", FieldKind::Currency),
            f("Born", FieldKind::Date),
            f("Age", FieldKind::I32),
            f("Score", FieldKind::F64),
            f("Active", FieldKind::Bool),
            f("Seen", FieldKind::DateTime),
        ],
    };

    fn row(id: i64, name: Option<&str>, age: Option<i64>) -> R {
        R(
            id,
            vec![
                name.map_or(Value::Null, Value::from),
                Value::Currency(Currency::from_scaled(id * 15_000)),
                Value::Date(NaiveDate::from_ymd_opt(2000, 1, id as u32).unwrap()),
                age.map_or(Value::Null, Value::Int),
                Value::Real(id as f64 / 2.0),
                Value::Bool(id % 2 == 0),
                Value::DateTime(Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, id as u32).unwrap()),
            ],
        )
    }

    fn sel(text: &str, params: &[Value], r: &R) -> bool {
        matches(&Filter::parse(&T, text, params).unwrap(), r).unwrap()
    }

    #[test]
    fn comparisons_are_typed() {
        let r = row(3, Some("Dupont"), Some(40));
        assert!(sel("Name = 'Dupont'", &[], &r));
        assert!(!sel("Name = 'dupont'", &[], &r));
        assert!(sel("Name > 'Du' AND Name < 'Dv'", &[], &r));
        assert!(sel("Amount = 4.5", &[], &r));
        assert!(sel("Amount > 4 AND Amount < ?", &[Value::Real(4.51)], &r));
        assert!(sel("Born = '2000-01-03'", &[], &r));
        assert!(sel("Born < '2000-01-10' AND Born >= '2000-01-03'", &[], &r));
        assert!(sel("Age >= 40 AND Age <> 41", &[], &r));
        assert!(sel("Score = 1.5 AND Score > 1 AND Score < 2", &[], &r));
        assert!(sel("Active = false", &[], &r));
        assert!(sel("Seen > '2024-01-01T00:00:02.5'", &[], &r));
        assert!(sel("Seen = '2024-01-01 00:00:03Z'", &[], &r));
        assert!(sel("ID = 3 AND ID IN (1, 3) AND ID NOT IN (2)", &[], &r));
    }

    #[test]
    fn null_is_unknown() {
        let r = row(1, None, None);
        for text in [
            "Name = 'x'",
            "Name <> 'x'",
            "NOT Name = 'x'",
            "Age < 5",
            "NOT Age < 5",
            "Age IN (1, 2)",
            "Age NOT IN (1, 2)",
            "Age BETWEEN 1 AND 5",
            "Age NOT BETWEEN 1 AND 5",
            "Name LIKE '%'",
            "Name NOT LIKE '%'",
        ] {
            assert!(!sel(text, &[], &r), "{text} selected a NULL");
        }
        assert!(sel("Age IS NULL AND Name IS NULL", &[], &r));
        assert!(!sel("Age IS NOT NULL", &[], &r));
        // Unknown OR true is true; unknown AND false is false, and its NOT true.
        assert!(sel("Age = 3 OR ID = 1", &[], &r));
        assert!(sel("NOT (Age = 3 AND ID = 2)", &[], &r));
        assert!(!sel("NOT (Age = 3 OR ID = 2)", &[], &r));
    }

    #[test]
    fn three_valued_in_and_between() {
        let p = [Value::Int(5), Value::Null];
        let r = row(1, Some("a"), Some(5));
        let e = Expr::In(Column::Field(3), vec![1], false);
        assert_eq!(eval(&e, &p, &r).unwrap(), None);
        let e = Expr::In(Column::Field(3), vec![0, 1], false);
        assert_eq!(eval(&e, &p, &r).unwrap(), Some(true));
        let e = Expr::In(Column::Field(3), vec![1], true);
        assert_eq!(eval(&e, &p, &r).unwrap(), None);
        // 5 BETWEEN NULL AND 3: unknown AND false = false.
        let p = [Value::Null, Value::Int(3)];
        let e = Expr::Between(Column::Field(3), 0, 1, false);
        assert_eq!(eval(&e, &p, &r).unwrap(), Some(false));
        let e = Expr::Between(Column::Field(3), 0, 1, true);
        assert_eq!(eval(&e, &p, &r).unwrap(), Some(true));
        let p = [Value::Null, Value::Int(7)];
        assert_eq!(eval(&e, &p, &r).unwrap(), None);
    }

    #[test]
    fn like_follows_sqlite() {
        assert!(like("abc", "ABC"));
        assert!(like("a%", "abc"));
        assert!(like("%c", "abc"));
        assert!(like("%b%", "abc"));
        assert!(like("a_c", "abc"));
        assert!(!like("a_c", "ac"));
        assert!(like("%", ""));
        assert!(!like("_", ""));
        assert!(like("%%a%%", "bab"));
        assert!(like("a%b%c", "aXXbYYc"));
        assert!(!like("a%b%c", "aXXbYY"));
        assert!(like("%aab", "aaaab"));
        // Only ASCII folds: é and É differ, as in SQLite without ICU.
        assert!(!like("é", "É"));
        assert!(like("_t_", "été"));
        assert!(like("%t_", "été"));
        assert!(!like("__", "é"));
        assert!(like("100%", "100%"));
        assert!(!like("abc", "abcd"));
        assert!(!like("", "a"));
    }

    #[test]
    fn mixed_classes_compare_as_sqlite() {
        let c = |a: Value, b: Value| compare(&a.as_ref(), &b.as_ref());
        assert_eq!(c(Value::Int(1), Value::Real(1.0)), Some(Ordering::Equal));
        assert_eq!(c(Value::Int(1), Value::Real(1.5)), Some(Ordering::Less));
        assert_eq!(
            c(Value::Int(-1), Value::Real(-1.5)),
            Some(Ordering::Greater)
        );
        assert_eq!(c(Value::Real(0.5), Value::Int(0)), Some(Ordering::Greater));
        assert_eq!(
            c(Value::Int(i64::MAX), Value::Real(9.3e18)),
            Some(Ordering::Less)
        );
        assert_eq!(
            c(Value::Int(9), Value::Text("1".into())),
            Some(Ordering::Less)
        );
        assert_eq!(
            c(Value::Text("z".into()), Value::Blob(vec![0])),
            Some(Ordering::Less)
        );
        assert_eq!(c(Value::Real(f64::NAN), Value::Int(1)), None);
        assert_eq!(c(Value::Null, Value::Null), None);
        assert_eq!(c(Value::Bool(true), Value::Int(1)), Some(Ordering::Equal));
        let d = NaiveDate::from_ymd_opt(2020, 5, 6).unwrap();
        assert_eq!(
            c(Value::Date(d), Value::Text("2020-05-06".into())),
            Some(Ordering::Equal)
        );
        assert_eq!(
            c(
                Value::DateTime(d.and_hms_opt(0, 0, 0).unwrap().and_utc()),
                Value::Date(d)
            ),
            Some(Ordering::Greater)
        );
    }

    #[test]
    fn order_puts_nulls_first() {
        let rows = [
            row(1, Some("b"), None),
            row(2, None, Some(1)),
            row(3, Some("a"), Some(0)),
        ];
        let mut v: Vec<&R> = rows.iter().collect();
        v.sort_by(|a, b| compare_rows(&[(Column::Field(0), false)], *a, *b).unwrap());
        assert_eq!(v.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3, 1]);
        v.sort_by(|a, b| compare_rows(&[(Column::Field(0), true)], *a, *b).unwrap());
        assert_eq!(v.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 3, 2]);
        v.sort_by(|a, b| {
            compare_rows(&[(Column::Field(3), true), (Column::Id, false)], *a, *b).unwrap()
        });
        assert_eq!(v.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3, 1]);
    }

    #[test]
    fn like_on_non_text_is_unsupported_not_wrong() {
        // The parser refuses it; a hand-built filter gets a clear error, not a guess.
        let e = Expr::Like(Column::Field(3), 0, false);
        let err = eval(&e, &[Value::from("4%")], &row(1, None, Some(42))).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("use the virtual table"));
    }

    #[test]
    fn missing_parameter_is_an_error() {
        let e = Expr::Cmp(Column::Id, CmpOp::Eq, 3);
        assert!(eval(&e, &[], &row(1, None, None)).is_err());
    }
}
