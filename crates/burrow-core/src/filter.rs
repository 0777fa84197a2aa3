//! WHERE clauses: parsed, checked against the table, and re-rendered for each engine.
//!
//! Burrow never passes a caller's WHERE text to an engine. It parses the text into
//! an [`Expr`] over known columns, turns every literal into a bound parameter, and
//! coerces each parameter to the type of the column it is compared with. SQL
//! engines render the tree back with quoted column names and `?` placeholders; the
//! memory engine evaluates it. An unknown column, a stray keyword, a function call,
//! a sub-select or a `;` is an [`Error::InvalidWhere`] before anything runs.
//!
//! The grammar is the subset ORM filters use:
//!
//! ```text
//! expr      := term (OR term)*
//! term      := factor (AND factor)*
//! factor    := NOT factor | '(' expr ')' | predicate
//! predicate := column op operand
//!            | column [NOT] IN '(' operand (',' operand)* ')'
//!            | column IS [NOT] NULL
//!            | column [NOT] LIKE operand
//!            | column [NOT] BETWEEN operand AND operand
//! op        := '=' | '==' | '<>' | '!=' | '<' | '<=' | '>' | '>='
//! operand   := '?' | number | 'text' | TRUE | FALSE | :(literal):
//! ```
//!
//! `:(123):` and `:('text'):` are the inline parameters mORMot clients send.

use chrono::NaiveTime;

use crate::currency::Currency;
use crate::datetime::{parse_date, parse_datetime};
use crate::error::{Error, Result};
use crate::schema::{Column, FieldKind, Table};
use crate::value::Value;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// The SQL spelling.
    pub fn sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// A checked WHERE expression. Operands are indexes into [`Filter::params`].
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// All must hold.
    And(Vec<Expr>),
    /// One must hold.
    Or(Vec<Expr>),
    /// Must not hold.
    Not(Box<Expr>),
    /// `column op ?`
    Cmp(Column, CmpOp, usize),
    /// `column [NOT] IN (?, …)`
    In(Column, Vec<usize>, bool),
    /// `column IS [NOT] NULL` (`true` for NOT NULL).
    IsNull(Column, bool),
    /// `column [NOT] LIKE ?`
    Like(Column, usize, bool),
    /// `column [NOT] BETWEEN ? AND ?`
    Between(Column, usize, usize, bool),
}

/// A parsed WHERE clause with its parameters, each coerced to its column's type.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filter {
    /// The expression; `None` matches every row.
    pub expr: Option<Expr>,
    /// The parameters, in the order the expression renders them.
    pub params: Vec<Value>,
}

impl Filter {
    /// A filter that matches every row.
    pub fn all() -> Self {
        Filter::default()
    }

    /// `ID = id`.
    pub fn id(id: i64) -> Self {
        Filter {
            expr: Some(Expr::Cmp(Column::Id, CmpOp::Eq, 0)),
            params: vec![Value::Int(id)],
        }
    }

    /// Parses `text` against `table`, binding `params` to its `?` in order.
    pub fn parse(table: &Table, text: &str, params: &[Value]) -> Result<Filter> {
        let mut p = Parser {
            table,
            depth: 0,
            terms: 0,
            toks: tokenize(text)?,
            pos: 0,
            given: params,
            used: 0,
            params: Vec::with_capacity(params.len()),
        };
        if p.toks.is_empty() {
            if !params.is_empty() {
                return Err(bad(format!(
                    "{} parameter(s) given for an empty WHERE",
                    params.len()
                )));
            }
            return Ok(Filter::all());
        }
        let expr = p.expr()?;
        if let Some(t) = p.toks.get(p.pos) {
            return Err(bad(format!(
                "unexpected {} after the expression",
                t.describe()
            )));
        }
        if p.used != params.len() {
            return Err(bad(format!(
                "{} placeholder(s) but {} parameter(s)",
                p.used,
                params.len()
            )));
        }
        Ok(Filter {
            expr: Some(expr),
            params: p.params,
        })
    }

    /// How deeply the text [`Filter::write_sql`] writes nests, counted as
    /// [`Filter::parse`] counts it (each parenthesised group and each `NOT`
    /// one level): a filter whose text is to be parsed again, as a remote
    /// engine's server does, must stay within [`MAX_WHERE_DEPTH`]. Written
    /// text can nest deeper than the clause it was parsed from (`NOT a = 1`
    /// is written `NOT (a = ?)`). Walks the tree without recursing, so a
    /// filter built by hand however deep gets an answer.
    pub fn written_depth(&self) -> usize {
        // A comparison alone (most filters) is answered without the walk's
        // allocation: this runs for every remote call that filters.
        let root = match &self.expr {
            Some(e @ (Expr::And(_) | Expr::Or(_) | Expr::Not(_))) => e,
            _ => return 0,
        };
        let mut deepest = 0;
        let mut todo: Vec<(&Expr, usize)> = vec![(root, 0)];
        while let Some((e, depth)) = todo.pop() {
            deepest = deepest.max(depth);
            match e {
                Expr::And(v) | Expr::Or(v) => todo.extend(v.iter().map(|x| (x, depth + 1))),
                Expr::Not(x) => todo.push((x, depth + 2)),
                _ => {}
            }
        }
        deepest
    }

    /// Appends the SQL form of the expression to `out`, one placeholder per
    /// parameter (in [`Filter::params`] order), spelled as `style` says. Appends
    /// nothing when the filter matches every row. A closure
    /// `|c: Column, out: &mut String|` writing a quoted column name is a style
    /// with `?` placeholders and SQLite's `LIKE`.
    pub fn write_sql(&self, out: &mut String, style: &mut dyn SqlStyle) {
        if let Some(e) = &self.expr {
            write_expr(e, out, style);
        }
    }
}

/// What differs between SQL dialects when a [`Filter`] is written out.
pub trait SqlStyle {
    /// Appends a column's quoted name.
    fn column(&mut self, c: Column, out: &mut String);

    /// Appends the next placeholder.
    fn placeholder(&mut self, out: &mut String) {
        out.push('?');
    }

    /// Appends `column [NOT] LIKE placeholder`, ignoring ASCII case as SQLite
    /// does; dialects whose `LIKE` is case-sensitive override it.
    fn like(&mut self, c: Column, negated: bool, out: &mut String) {
        self.column(c, out);
        out.push_str(if negated { " NOT LIKE " } else { " LIKE " });
        self.placeholder(out);
    }
}

impl<F: FnMut(Column, &mut String)> SqlStyle for F {
    fn column(&mut self, c: Column, out: &mut String) {
        self(c, out)
    }
}

fn write_expr(e: &Expr, out: &mut String, st: &mut dyn SqlStyle) {
    let not = |n: bool| if n { "NOT " } else { "" };
    match e {
        Expr::And(v) | Expr::Or(v) => {
            let sep = if matches!(e, Expr::And(_)) {
                " AND "
            } else {
                " OR "
            };
            out.push('(');
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                write_expr(x, out, st);
            }
            out.push(')');
        }
        Expr::Not(x) => {
            out.push_str("NOT (");
            write_expr(x, out, st);
            out.push(')');
        }
        Expr::Cmp(c, op, _) => {
            st.column(*c, out);
            out.push_str(op.sql());
            st.placeholder(out);
        }
        Expr::In(c, list, neg) => {
            st.column(*c, out);
            out.push(' ');
            out.push_str(not(*neg));
            out.push_str("IN (");
            for i in 0..list.len() {
                if i > 0 {
                    out.push(',');
                }
                st.placeholder(out);
            }
            out.push(')');
        }
        Expr::IsNull(c, neg) => {
            st.column(*c, out);
            out.push_str(" IS ");
            out.push_str(not(*neg));
            out.push_str("NULL");
        }
        Expr::Like(c, _, neg) => st.like(*c, *neg, out),
        Expr::Between(c, _, _, neg) => {
            st.column(*c, out);
            out.push(' ');
            out.push_str(not(*neg));
            out.push_str("BETWEEN ");
            st.placeholder(out);
            out.push_str(" AND ");
            st.placeholder(out);
        }
    }
}

fn bad(msg: String) -> Error {
    Error::InvalidWhere(msg)
}

/// Converts `v` to the canonical value of a column of `kind`, or says why not.
///
/// Integers become currency amounts in whole units, text becomes dates and
/// date-times when it parses as one; anything else of the wrong type is refused.
pub fn coerce(kind: FieldKind, v: Value) -> std::result::Result<Value, Value> {
    use FieldKind as K;
    Ok(match (kind, v) {
        (_, Value::Null) => Value::Null,
        (K::I32 | K::I64 | K::U32 | K::Reference(_), Value::Int(i)) => Value::Int(i),
        (K::I32 | K::I64 | K::U32 | K::Reference(_), Value::Bool(b)) => Value::Int(b.into()),
        (K::F64, Value::Real(f)) => Value::Real(f),
        (K::F64, Value::Int(i)) => Value::Real(i as f64),
        (K::F64, Value::Currency(c)) => Value::Real(c.to_f64()),
        (K::Bool, Value::Bool(b)) => Value::Bool(b),
        (K::Bool, Value::Int(i @ (0 | 1))) => Value::Bool(i == 1),
        (K::Currency, Value::Currency(c)) => Value::Currency(c),
        (K::Currency, Value::Int(i)) => match Currency::from_int(i) {
            Some(c) => Value::Currency(c),
            None => return Err(Value::Int(i)),
        },
        (K::Currency, Value::Real(f)) => match Currency::from_f64(f) {
            Some(c) => Value::Currency(c),
            None => return Err(Value::Real(f)),
        },
        (K::Currency, Value::Text(t)) => match t.parse() {
            Ok(c) => Value::Currency(c),
            Err(_) => return Err(Value::Text(t)),
        },
        (K::Text | K::Json, Value::Text(t)) => Value::Text(t),
        (K::Blob, Value::Blob(b)) => Value::Blob(b),
        (K::Date, Value::Date(d)) => Value::Date(d),
        (K::Date, Value::Text(t)) => match parse_date(&t) {
            Some(d) => Value::Date(d),
            None => return Err(Value::Text(t)),
        },
        (K::DateTime, Value::DateTime(d)) => Value::DateTime(d),
        (K::DateTime, Value::Date(d)) => Value::DateTime(d.and_time(NaiveTime::MIN).and_utc()),
        (K::DateTime, Value::Text(t)) => match parse_datetime(&t) {
            Some(d) => Value::DateTime(d),
            None => return Err(Value::Text(t)),
        },
        (_, other) => return Err(other),
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Placeholder,
    Lit(Value),
    Punct(&'static str),
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("{s:?}"),
            Tok::Placeholder => "'?'".into(),
            Tok::Lit(v) => format!("literal {v}"),
            Tok::Punct(p) => format!("'{p}'"),
        }
    }

    fn is_kw(&self, kw: &str) -> bool {
        matches!(self, Tok::Ident(s) if s.eq_ignore_ascii_case(kw))
    }
}

const KEYWORDS: &[&str] = &[
    "and", "or", "not", "in", "is", "null", "like", "between", "true", "false",
];

fn tokenize(s: &str) -> Result<Vec<Tok>> {
    let b = s.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if toks.len() > MAX_WHERE_TOKENS {
            return Err(bad(format!(
                "more than {MAX_WHERE_TOKENS} words and signs in one WHERE clause"
            )));
        }
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'?' => {
                toks.push(Tok::Placeholder);
                i += 1;
            }
            b'(' | b')' | b',' => {
                toks.push(Tok::Punct(match c {
                    b'(' => "(",
                    b')' => ")",
                    _ => ",",
                }));
                i += 1;
            }
            b'=' | b'<' | b'>' | b'!' => {
                let two = b.get(i..i + 2).unwrap_or(&[]);
                let (p, n) = match two {
                    b"==" => ("=", 2),
                    b"<>" | b"!=" => ("<>", 2),
                    b"<=" => ("<=", 2),
                    b">=" => (">=", 2),
                    _ if c == b'=' => ("=", 1),
                    _ if c == b'<' => ("<", 1),
                    _ if c == b'>' => (">", 1),
                    _ => return Err(bad("'!' must be followed by '='".into())),
                };
                toks.push(Tok::Punct(p));
                i += n;
            }
            b'\'' => {
                let (text, next) = string_lit(s, i)?;
                toks.push(Tok::Lit(Value::Text(text)));
                i = next;
            }
            b':' if b.get(i + 1) == Some(&b'(') => {
                // mORMot inline parameter :(literal):
                let start = i + 2;
                let (lit, next) = if b.get(start) == Some(&b'\'') {
                    let (t, n) = string_lit(s, start)?;
                    (Value::Text(t), n)
                } else {
                    let end = s[start..]
                        .find("):")
                        .map(|e| start + e)
                        .ok_or_else(|| bad("unterminated :( ): parameter".into()))?;
                    (number(s[start..end].trim())?, end)
                };
                if b.get(next..next + 2) != Some(b"):") {
                    return Err(bad("unterminated :( ): parameter".into()));
                }
                toks.push(Tok::Lit(lit));
                i = next + 2;
            }
            b'0'..=b'9' | b'-' | b'+' | b'.' => {
                let end = b[i + 1..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'.'))
                    .map_or(b.len(), |p| i + 1 + p);
                toks.push(Tok::Lit(number(&s[i..end])?));
                i = end;
            }
            b'"' | b'`' | b'[' => {
                let close = match c {
                    b'[' => b']',
                    q => q,
                };
                let end = b[i + 1..]
                    .iter()
                    .position(|&x| x == close)
                    .ok_or_else(|| bad("unterminated quoted name".into()))?;
                toks.push(Tok::Ident(s[i + 1..i + 1 + end].to_owned()));
                i += end + 2;
            }
            b'x' | b'X' if b.get(i + 1) == Some(&b'\'') => {
                // A blob, as SQL writes one: x'0aff'.
                let end = b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|e| i + 2 + e)
                    .ok_or_else(|| bad("unterminated x'…' blob".into()))?;
                toks.push(Tok::Lit(Value::Blob(hex_blob(&s[i + 2..end])?)));
                i = end + 1;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let end = b[i..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                    .map_or(b.len(), |p| i + p);
                toks.push(Tok::Ident(s[i..end].to_owned()));
                i = end;
            }
            _ => {
                let ch = s[i..].chars().next().unwrap_or('?');
                return Err(bad(format!("unexpected character {ch:?}")));
            }
        }
    }
    Ok(toks)
}

fn hex_blob(hex: &str) -> Result<Vec<u8>> {
    let h = hex.as_bytes();
    if h.len() % 2 != 0 {
        return Err(bad("an x'…' blob needs an even number of hex digits".into()));
    }
    h.chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| bad(format!("{hex:?} is not hexadecimal")))
        })
        .collect()
}

fn string_lit(s: &str, open: usize) -> Result<(String, usize)> {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = open + 1;
    let mut from = i;
    loop {
        match b.get(i) {
            None => return Err(bad("unterminated string literal".into())),
            Some(b'\'') if b.get(i + 1) == Some(&b'\'') => {
                out.push_str(&s[from..=i]);
                i += 2;
                from = i;
            }
            Some(b'\'') => {
                out.push_str(&s[from..i]);
                return Ok((out, i + 1));
            }
            Some(_) => i += 1,
        }
    }
}

fn number(t: &str) -> Result<Value> {
    if let Ok(i) = t.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() && t.bytes().any(|c| c.is_ascii_digit()) => Ok(Value::Real(f)),
        _ => Err(bad(format!("{t:?} is not a number"))),
    }
}

/// How deep parentheses and `NOT`s may nest in a WHERE clause: the parser,
/// the evaluator and the SQL writer recurse once per level, and a hostile
/// clause must get an error, not overflow the stack.
pub const MAX_WHERE_DEPTH: usize = 64;
/// How many comparisons a WHERE clause may hold: SQLite parses an `OR` chain
/// as a tree as deep as it is long, and refuses one deeper than 1,000.
pub const MAX_WHERE_TERMS: usize = 500;
/// How many values a WHERE clause may bind (an `IN` list counts each of its
/// values); below every engine's own limit on parameters.
pub const MAX_WHERE_VALUES: usize = 10_000;

/// Tokens a WHERE clause may hold: a clause within the limits above needs
/// fewer (two per listed value, a handful per comparison). Counted as the
/// text is read, so that a long text fails before it is held whole in
/// tokens many times its size.
const MAX_WHERE_TOKENS: usize = 3 * MAX_WHERE_VALUES + 16 * MAX_WHERE_TERMS;

struct Parser<'a> {
    table: &'a Table,
    /// Parentheses and `NOT`s open around the current position.
    depth: usize,
    /// Comparisons read so far.
    terms: usize,
    toks: Vec<Tok>,
    pos: usize,
    given: &'a [Value],
    used: usize,
    params: Vec<Value>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn peek_kw(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| t.is_kw(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        let yes = self.peek_kw(kw);
        self.pos += usize::from(yes);
        yes
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let yes = matches!(self.peek(), Some(Tok::Punct(x)) if *x == p);
        self.pos += usize::from(yes);
        yes
    }

    fn expect_punct(&mut self, p: &str) -> Result<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(bad(format!("expected '{p}', found {}", self.found())))
        }
    }

    fn found(&self) -> String {
        self.peek()
            .map_or_else(|| "the end".to_owned(), Tok::describe)
    }

    fn expr(&mut self) -> Result<Expr> {
        let mut v = vec![self.term()?];
        while self.eat_kw("or") {
            v.push(self.term()?);
        }
        Ok(if v.len() == 1 {
            v.pop().expect("one")
        } else {
            Expr::Or(v)
        })
    }

    fn term(&mut self) -> Result<Expr> {
        let mut v = vec![self.factor()?];
        while self.eat_kw("and") {
            v.push(self.factor()?);
        }
        Ok(if v.len() == 1 {
            v.pop().expect("one")
        } else {
            Expr::And(v)
        })
    }

    fn factor(&mut self) -> Result<Expr> {
        let not = self.eat_kw("not");
        if not || self.eat_punct("(") {
            self.depth += 1;
            if self.depth > MAX_WHERE_DEPTH {
                return Err(bad(format!(
                    "parentheses and NOTs nest deeper than {MAX_WHERE_DEPTH} levels"
                )));
            }
            let e = if not {
                Expr::Not(Box::new(self.factor()?))
            } else {
                let e = self.expr()?;
                self.expect_punct(")")?;
                e
            };
            self.depth -= 1;
            return Ok(e);
        }
        self.terms += 1;
        if self.terms > MAX_WHERE_TERMS {
            return Err(bad(format!(
                "more than {MAX_WHERE_TERMS} comparisons in one WHERE clause"
            )));
        }
        self.predicate()
    }

    fn predicate(&mut self) -> Result<Expr> {
        if let (Some(Tok::Ident(name)), Some(Tok::Punct("("))) =
            (self.toks.get(self.pos), self.toks.get(self.pos + 1))
        {
            return Err(bad(format!(
                "{name}(…): functions are not supported in a WHERE clause, only fields, \
                 values and operators"
            )));
        }
        let (col, kind) = match self.peek() {
            Some(Tok::Ident(name)) if !KEYWORDS.iter().any(|k| name.eq_ignore_ascii_case(k)) => {
                let col = self.table.column(name).ok_or_else(|| Error::UnknownField {
                    table: self.table.name,
                    field: name.clone(),
                })?;
                let kind = match col {
                    Column::Id => FieldKind::I64,
                    Column::Field(i) => self.table.fields[i].kind,
                };
                self.pos += 1;
                (col, kind)
            }
            _ => {
                return Err(bad(format!(
                    "expected a field name, found {}",
                    self.found()
                )))
            }
        };
        if let Some(Tok::Punct(p)) = self.peek() {
            let op = match *p {
                "=" => Some(CmpOp::Eq),
                "<>" => Some(CmpOp::Ne),
                "<" => Some(CmpOp::Lt),
                "<=" => Some(CmpOp::Le),
                ">" => Some(CmpOp::Gt),
                ">=" => Some(CmpOp::Ge),
                _ => None,
            };
            if let Some(op) = op {
                self.pos += 1;
                let v = self.operand(col, kind)?;
                return Ok(Expr::Cmp(col, op, v));
            }
        }
        if self.eat_kw("is") {
            let neg = self.eat_kw("not");
            if !self.eat_kw("null") {
                return Err(bad(format!(
                    "expected NULL after IS, found {}",
                    self.found()
                )));
            }
            return Ok(Expr::IsNull(col, neg));
        }
        let neg = self.eat_kw("not");
        if self.eat_kw("in") {
            self.expect_punct("(")?;
            let mut list = vec![self.operand(col, kind)?];
            while self.eat_punct(",") {
                list.push(self.operand(col, kind)?);
            }
            self.expect_punct(")")?;
            return Ok(Expr::In(col, list, neg));
        }
        if self.eat_kw("like") {
            if !matches!(kind, FieldKind::Text | FieldKind::Json) {
                return Err(bad(format!(
                    "LIKE needs a text field, {} is {}",
                    self.table.column_name(col),
                    kind.name()
                )));
            }
            let v = self.operand(col, kind)?;
            return Ok(Expr::Like(col, v, neg));
        }
        if self.eat_kw("between") {
            let lo = self.operand(col, kind)?;
            if !self.eat_kw("and") {
                return Err(bad(format!(
                    "expected AND in BETWEEN, found {}",
                    self.found()
                )));
            }
            let hi = self.operand(col, kind)?;
            return Ok(Expr::Between(col, lo, hi, neg));
        }
        Err(bad(format!(
            "expected an operator after {}, found {}",
            self.table.column_name(col),
            self.found()
        )))
    }

    fn operand(&mut self, col: Column, kind: FieldKind) -> Result<usize> {
        let raw = match self.peek().cloned() {
            Some(Tok::Placeholder) => {
                let v = self.given.get(self.used).cloned().ok_or_else(|| {
                    bad(format!(
                        "more placeholders than the {} parameter(s) given",
                        self.given.len()
                    ))
                })?;
                self.used += 1;
                v
            }
            Some(Tok::Lit(v)) => v,
            Some(t) if t.is_kw("true") => Value::Bool(true),
            Some(t) if t.is_kw("false") => Value::Bool(false),
            Some(t) if t.is_kw("null") => {
                return Err(bad("compare with NULL using IS NULL or IS NOT NULL".into()))
            }
            _ => return Err(bad(format!("expected a value, found {}", self.found()))),
        };
        self.pos += 1;
        if self.params.len() >= MAX_WHERE_VALUES {
            return Err(bad(format!(
                "more than {MAX_WHERE_VALUES} values in one WHERE clause"
            )));
        }
        if raw == Value::Null {
            return Err(bad(format!(
                "NULL parameter for {}: use IS NULL or IS NOT NULL",
                self.table.column_name(col)
            )));
        }
        let v = coerce(kind, raw).map_err(|v| Error::TypeMismatch {
            at: format!(
                "{}.{} in WHERE",
                self.table.name,
                self.table.column_name(col)
            ),
            expected: kind.name(),
            found: v.type_name().to_owned(),
        })?;
        self.params.push(v);
        Ok(self.params.len() - 1)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::schema::Field;

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
        ],
    };

    fn sql(filter: &Filter) -> String {
        let mut out = String::new();
        filter.write_sql(&mut out, &mut |c: Column, o: &mut String| {
            o.push('"');
            o.push_str(T.column_name(c));
            o.push('"');
        });
        out
    }

    #[test]
    fn literals_become_parameters() -> Result<()> {
        let f = Filter::parse(
            &T,
            "name = 'O''Brien' and Amount >= 2 or ID in (1, ?)",
            &[7.into()],
        )?;
        assert_eq!(sql(&f), r#"(("Name"=? AND "Amount">=?) OR "ID" IN (?,?))"#);
        assert_eq!(
            f.params,
            vec![
                Value::Text("O'Brien".into()),
                Value::Currency(Currency::from_int(2).unwrap()),
                Value::Int(1),
                Value::Int(7)
            ]
        );
        Ok(())
    }

    /// A clause nested thousands of levels deep overflowed the parser's stack
    /// and aborted the process; each limit is now an error that says which.
    #[test]
    fn hostile_sizes_are_refused_not_overflowed() -> Result<()> {
        let deep = format!("{}Age = 1{}", "(".repeat(2_500), ")".repeat(2_500));
        let nots = format!("{}Age = 1", "NOT ".repeat(20_000));
        for text in [&deep, &nots] {
            let e = Filter::parse(&T, text, &[]).unwrap_err();
            assert!(matches!(e, Error::InvalidWhere(_)), "{e:?}");
            assert!(e.to_string().contains("nest deeper"), "{e}");
        }
        let at_limit = format!(
            "{}Age = 1{}",
            "(".repeat(MAX_WHERE_DEPTH),
            ")".repeat(MAX_WHERE_DEPTH)
        );
        Filter::parse(&T, &at_limit, &[])?;
        let ors = vec!["Age = 1"; MAX_WHERE_TERMS + 1].join(" OR ");
        let e = Filter::parse(&T, &ors, &[]).unwrap_err();
        assert!(e.to_string().contains("comparisons"), "{e}");
        Filter::parse(&T, &vec!["Age = 1"; MAX_WHERE_TERMS].join(" OR "), &[])?;
        let values = vec!["1"; MAX_WHERE_VALUES + 1].join(",");
        let e = Filter::parse(&T, &format!("Age IN ({values})"), &[]).unwrap_err();
        assert!(e.to_string().contains("values"), "{e}");
        let e = Filter::parse(&T, "lower(Name) = 'x'", &[]).unwrap_err();
        assert!(e.to_string().contains("functions are not supported"), "{e}");
        // A text far past every limit fails while it is read, not once it
        // is held whole in tokens many times its size.
        for text in ["(".repeat(1 << 20), ",".repeat(1 << 20)] {
            let e = Filter::parse(&T, &text, &[]).unwrap_err();
            assert!(e.to_string().contains("words and signs"), "{e}");
        }
        Ok(())
    }

    #[test]
    fn mormot_inline_parameters() -> Result<()> {
        let f = Filter::parse(&T, "Name=:('Du'':pont'): and Age>:(42):", &[])?;
        assert_eq!(
            f.params,
            vec![Value::Text("Du':pont".into()), Value::Int(42)]
        );
        Ok(())
    }

    #[test]
    fn every_predicate_form_renders() -> Result<()> {
        let f = Filter::parse(
            &T,
            "NOT (Born BETWEEN '2000-01-01' AND ?) AND Name NOT LIKE ? AND Age IS NOT NULL AND Age NOT IN (1)",
            &["2001-01-01".into(), "A%".into()],
        )?;
        assert_eq!(
            sql(&f),
            r#"(NOT ("Born" BETWEEN ? AND ?) AND "Name" NOT LIKE ? AND "Age" IS NOT NULL AND "Age" NOT IN (?))"#
        );
        assert!(matches!(f.params[0], Value::Date(_)));
        Ok(())
    }

    #[test]
    fn refuses_what_is_not_a_safe_expression() {
        let cases: &[(&str, Vec<Value>)] = &[
            ("Nope = 1", vec![]),
            ("Name = 'x'; DROP TABLE People", vec![]),
            ("Name = 'x' --", vec![]),
            ("1 = 1", vec![]),
            ("Name = (SELECT 1)", vec![]),
            ("lower(Name) = 'a'", vec![]),
            ("Name = ?", vec![]),
            ("Name = ?", vec![1.into(), 2.into()]),
            ("Age = ?", vec!["x".into()]),
            ("Name = NULL", vec![]),
            ("Age = ?", vec![Value::Null]),
            ("Amount LIKE 'x'", vec![]),
            ("Name = 'unterminated", vec![]),
            ("Name =", vec![]),
            ("Name", vec![]),
            ("(Name = 'a'", vec![]),
            ("", vec![1.into()]),
        ];
        for (text, params) in cases {
            let r = Filter::parse(&T, text, params);
            assert!(r.is_err(), "{text:?} was accepted: {r:?}");
        }
    }

    #[test]
    fn injection_text_stays_a_value() -> Result<()> {
        let f = Filter::parse(&T, "Name = ?", &["x' OR '1'='1".into()])?;
        assert_eq!(sql(&f), r#""Name"=?"#);
        assert_eq!(f.params, vec![Value::Text("x' OR '1'='1".into())]);
        Ok(())
    }
}
