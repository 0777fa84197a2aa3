use super::write::{write_currency, CURRENCY_EXACT_AS_NUMBER};
use super::*;
use crate::currency::Currency;
use crate::datetime::{parse_datetime, write_date, write_datetime, DATETIME_BUF};
use crate::error::Result;
use crate::row::OwnedRow;
use crate::schema::{AutoTime, Column, Field, FieldKind, Table};
use crate::value::{Value, ValueRef};
use chrono::NaiveDate;

const fn f(name: &'static str, kind: FieldKind, auto: AutoTime, nullable: bool) -> Field {
    let f = Field::new(name, kind).auto(auto);
    if nullable {
        f.nullable()
    } else {
        f
    }
}

static T: Table = Table {
    name: "Sample",
    fields: &[
        f("Name", FieldKind::Text, AutoTime::No, false),
        f("Amount", FieldKind::Currency, AutoTime::No, false),
        f("Born", FieldKind::Date, AutoTime::No, true),
        f("Changed", FieldKind::DateTime, AutoTime::Modified, false),
        f("Data", FieldKind::Blob, AutoTime::No, false),
        f("Doc", FieldKind::Json, AutoTime::No, false),
    ],
};

fn row() -> OwnedRow {
    OwnedRow {
        table: &T,
        id: 7,
        values: vec![
            Value::Text("A \"q\"\n\u{1}".into()),
            Value::Currency("12.5".parse().unwrap()),
            Value::Null,
            Value::DateTime(parse_datetime("2024-03-04T05:06:07.25").unwrap()),
            Value::Blob(vec![0, 1, 2, 250]),
            Value::Text(r#"{"a":[1,2]}"#.into()),
        ],
    }
}

#[test]
fn timelog_round_trips() {
    let t = parse_datetime("2024-02-29T23:59:58").unwrap();
    assert_eq!(from_timelog(to_timelog(t)), Some(t));
    assert_eq!(
        to_timelog(t),
        58 | 59 << 6 | 23 << 12 | 28 << 17 | 1 << 22 | 2024 << 26
    );
    assert_eq!(from_timelog(-1), None);
}

#[test]
fn mormot_and_exact_dialects() -> Result<()> {
    let cols: Vec<Column> = std::iter::once(Column::Id)
        .chain((0..T.fields.len()).map(Column::Field))
        .collect();
    let mut out = Vec::new();
    write_row(&mut out, &T, &row(), &cols, JsonDialect::Mormot)?;
    let s = String::from_utf8(out).unwrap();
    let tl = to_timelog(parse_datetime("2024-03-04T05:06:07").unwrap());
    assert_eq!(
        s,
        format!(
            r#"{{"ID":7,"Name":"A \"q\"\n\u0001","Amount":12.5,"Born":null,"Changed":{tl},"Data":"{BLOB_MAGIC}AAEC+g==","Doc":{{"a":[1,2]}}}}"#
        )
    );
    let mut exact = Vec::new();
    write_row(&mut exact, &T, &row(), &cols, JsonDialect::Exact)?;
    let (back, present) = read_row(&T, &exact)?;
    assert_eq!(back, row());
    assert_eq!(present, (0..T.fields.len()).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn compact_lists_in_any_member_order_and_refused_when_malformed() -> Result<()> {
    let want = parse_list(
        &T,
        br#"{"fieldCount":2,"values":["ID","Name","7","a",8,"b"],"rowCount":2}"#,
    )?;
    assert_eq!(want.len(), 2);
    assert_eq!(
        (want[0].id, &want[1].values[0]),
        (7, &Value::Text("b".into()))
    );
    for body in [
        &br#"{"rowCount":2,"values":["ID","Name",7,"a",8,"b"],"fieldCount":2}"#[..],
        br#" { "values" : [ "ID" , "Name" , 7 , "a" , 8 , "b" ] , "fieldCount" : 2 } "#,
        br#"[{"ID":7,"Name":"a"},{"Name":"b","RowID":8}]"#,
    ] {
        assert_eq!(
            parse_list(&T, body)?,
            want,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    for bad in [
        &br#"{"fieldCount":2,"values":["ID","Name",7]}"#[..],
        br#"{"fieldCount":2,"values":["ID","Name",7,"a",8]}"#,
        br#"{"fieldCount":2,"values":["ID"]}"#,
        br#"{"fieldCount":0,"values":[]}"#,
        br#"{"values":["ID","Name",7,"a"]}"#,
        br#"{"fieldCount":2}"#,
        br#"{"fieldCount":2,"values":["ID","Nope",7,"a"]}"#,
        br#"{"fieldCount":2,"values":["ID","Name",-7,"a"]}"#,
        br#"{"fieldCount":2,"values":["ID","Name",7,"a"]} x"#,
        br#"[{"ID":7,"Name":"a"},]"#,
        br#"[{"ID":7,"Name":1}]"#,
        br#"[{"ID":7,"Nope":"a"}]"#,
        br#"[7]"#,
        br#""a list""#,
        b"[{\"Name\":\"\xff\"}]",
    ] {
        assert!(
            parse_list(&T, bad).is_err(),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    Ok(())
}

/// The reader converts the common shapes in place and leaves the rest to
/// [`parse_value`]: for every form, it agrees with converting the value's tree.
#[test]
fn the_streaming_reader_agrees_with_the_value_converter() {
    let forms = [
        "0",
        "1",
        "-1",
        "12.5",
        "1e3",
        "-0",
        "0.00001",
        "99999999999999.9999",
        "135654243328",
        "true",
        "false",
        "null",
        r#""""#,
        r#""12.5""#,
        r#""x""#,
        r#""2024-03-04""#,
        r#""2024-03-04T05:06:07""#,
        r#""2024-03-04T05:06:07.5Z""#,
        r#""\uFFF0AAEC+g==""#,
        r#""AAEC""#,
        r#""Infinity""#,
        "[1,{\"a\":null}]",
        r#"{"a":1}"#,
    ];
    for (idx, field) in T.fields.iter().enumerate() {
        for form in forms {
            let tree: serde_json::Value = serde_json::from_str(form).unwrap();
            let mut general = parse_value(&T, field, &tree);
            // A number's tree holds a double; the reader takes an amount from
            // its digits, exactly, where a double would round it.
            if let (FieldKind::Currency, Ok(c)) = (field.kind, form.parse::<Currency>()) {
                general = Ok(Value::Currency(c));
            }
            let body = format!(r#"{{"{}":{form}}}"#, field.name);
            let streamed = read_row(&T, body.as_bytes()).map(|(r, _)| r.values[idx].clone());
            match (&general, &streamed) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}: {form}", field.name),
                (Err(_), Err(_)) => {}
                _ => panic!("{}: {form}: {general:?} against {streamed:?}", field.name),
            }
        }
    }
}

#[test]
fn lists_in_both_forms() -> Result<()> {
    let cols = [Column::Id, Column::Field(0)];
    for compact in [false, true] {
        let mut out = Vec::new();
        let mut w = ListWriter::begin(&mut out, &T, &cols, compact, JsonDialect::Exact);
        w.row(&mut out, &row())?;
        w.row(&mut out, &row())?;
        w.finish(&mut out);
        assert!(out.ends_with(b"\n"));
        let rows = parse_list(&T, &out)?;
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].id, 7);
        assert_eq!(rows[1].values[0], row().values[0]);
    }
    let mut out = Vec::new();
    ListWriter::begin(&mut out, &T, &cols, false, JsonDialect::Exact).finish(&mut out);
    assert_eq!(
        out,
        b"{\"fieldCount\":2,\"values\":[\"ID\",\"Name\"],\"rowCount\":0}\n"
    );
    assert!(parse_list(&T, &out)?.is_empty());
    Ok(())
}

#[test]
fn refuses_wrong_types() {
    let bad = [
        r#"{"Name":1}"#,
        r#"{"Amount":"x"}"#,
        r#"{"Amount":1.23456}"#,
        r#"{"Born":"2024-13-01"}"#,
        r#"{"Name":null}"#,
        r#"{"Nope":1}"#,
        r#"{"ID":-3}"#,
        r#"{"Data":"*"}"#,
    ];
    for b in bad {
        assert!(read_row(&T, b.as_bytes()).is_err(), "{b}");
    }
}

#[test]
fn direct_writers_match_the_general_ones() {
    for scaled in [
        0,
        1,
        -1,
        5000,
        -100,
        12_345_678,
        10_000,
        -10_000,
        123_450,
        i64::MAX,
        i64::MIN,
    ] {
        let c = Currency::from_scaled(scaled);
        let mut out = Vec::new();
        write_currency(&mut out, c);
        let text = String::from_utf8(out).unwrap();
        // Beyond what a double holds exactly, an amount is a string.
        let want = if scaled.unsigned_abs() > CURRENCY_EXACT_AS_NUMBER {
            format!("\"{c}\"")
        } else {
            c.to_string()
        };
        assert_eq!(text, want);
    }
    let plain = f("When", FieldKind::DateTime, AutoTime::No, false);
    for s in [
        "2024-02-29T23:59:58",
        "2024-02-29T23:59:58.5",
        "0001-01-01T00:00:00.000000001",
        "9999-12-31T23:59:59.999999999",
        "1999-12-31T12:34:56.12345",
        "-0044-03-15T12:30:15.000000005",
        "+10000-01-01T00:00:00",
        "2016-12-31T23:59:60.5",
    ] {
        let t = parse_datetime(s).unwrap();
        let mut buf = [0; DATETIME_BUF];
        let full = write_datetime(t, &mut buf);
        for (dialect, want) in [
            (JsonDialect::Exact, full),
            (JsonDialect::Mormot, full.split('.').next().unwrap()),
        ] {
            let mut out = Vec::new();
            write_value(&mut out, Some(&plain), &ValueRef::DateTime(t), dialect);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("\"{want}\""),
                "{s}"
            );
        }
        let d = t.date_naive();
        let mut out = Vec::new();
        write_value(&mut out, None, &ValueRef::Date(d), JsonDialect::Exact);
        let mut buf = [0; DATETIME_BUF];
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("\"{}\"", write_date(d, &mut buf))
        );
    }
    let mut simple = SimpleWriter::new();
    let mut r = row();
    for dialect in [JsonDialect::Exact, JsonDialect::Mormot] {
        for _ in 0..2 {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            simple.write(&mut a, &r, dialect);
            write_simple(&mut b, &r, dialect);
            assert_eq!(a, b);
            r.values[3] = Value::DateTime(parse_datetime("2024-03-04T05:06:08.5").unwrap());
        }
    }
    for s in [
        "",
        "plain text",
        "\"quoted\" and \\ more than eight",
        "ctl\u{1f}\u{7f}é\t",
    ] {
        let mut out = Vec::new();
        write_str(&mut out, s);
        assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
    }
    // One character to escape (or not) at every place of every length
    // around the word size: the check reads whole words, the last one
    // overlapping or padded.
    for len in 1..=25 {
        for at in 0..len {
            for c in ['"', '\\', '\n', '\u{1}', '\u{1f}', 'é', ' ', '~'] {
                let s: String = (0..len).map(|i| if i == at { c } else { 'a' }).collect();
                let mut out = Vec::new();
                write_str(&mut out, &s);
                assert_eq!(out, serde_json::to_vec(&s).unwrap(), "{s:?}");
            }
        }
    }
}

#[test]
fn base64_round_trips() {
    for n in 0..10 {
        let data: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
        let mut out = Vec::new();
        base64_encode(&mut out, &data);
        assert_eq!(
            base64_decode(std::str::from_utf8(&out).unwrap()),
            Some(data)
        );
    }
}

/// Feeds `body` to a [`ListFeed`] in pieces ending at `cuts` (each feed
/// given what was not consumed, then the next piece), and returns the rows
/// it handed on, or its error.
fn feed_in_pieces(body: &[u8], cuts: &[usize]) -> Result<Vec<OwnedRow>> {
    let mut feed = ListFeed::new(&T);
    let mut rows = Vec::new();
    let mut out = |r: &dyn crate::record::Row| -> Result<()> {
        rows.push(OwnedRow::from_row(&T, r)?);
        Ok(())
    };
    let mut from = 0;
    for &cut in cuts.iter().chain([body.len()].iter()) {
        let end = cut == body.len();
        let used = feed.feed(&body[from..cut], end, &mut out)?;
        assert!(used <= cut - from);
        from += used;
        if end {
            break;
        }
    }
    Ok(rows)
}

const FEED_BODIES: &[&str] = &[
    // Expanded, one object leaving fields out (they read as zero values,
    // not as the row before's), escapes, and text past ASCII cut anywhere.
    r#"[{"ID":1,"Name":"A \"q\" é ✓","Amount":12.5,"Born":"2020-01-02","Changed":"2024-03-04T05:06:07.25"},{"ID":2,"Amount":7},{"ID":3,"Name":"x","Amount":123456,"Changed":"2024-03-04T05:06:07.25"}]"#,
    " [ { \"ID\" : 4 , \"Name\" : \"sp\" } , {\"ID\":5} ] \n",
    "[]",
    "[]\n",
    // Compact, as the server writes it; numbers that a cut could shorten.
    r#"{"fieldCount":3,"values":["ID","Name","Amount","1","a\u00e9",1234.5678,22,"b",99],"rowCount":2}"#,
    "{\"fieldCount\":2,\"values\":[\"ID\",\"Amount\",10,1,11,22],\"rowCount\":2}\n",
    r#"{"fieldCount":2,"values":["ID","Name"],"rowCount":0}"#,
    // Members in another order: read whole at the end.
    r#"{"rowCount":1,"fieldCount":2,"values":["ID","Name",5,"z"]}"#,
    r#"{"values":["ID","Name",5,"z"],"fieldCount":2}"#,
];

#[test]
fn a_list_fed_in_pieces_reads_as_the_whole_body() -> Result<()> {
    for body in FEED_BODIES {
        let b = body.as_bytes();
        let whole = parse_list(&T, b)?;
        assert_eq!(feed_in_pieces(b, &[])?, whole, "{body}");
        for cut in 0..=b.len() {
            assert_eq!(feed_in_pieces(b, &[cut])?, whole, "{body} cut at {cut}");
        }
        let every: Vec<usize> = (0..b.len()).collect();
        assert_eq!(feed_in_pieces(b, &every)?, whole, "{body} byte by byte");
    }
    Ok(())
}

#[test]
fn a_bad_or_cut_list_fed_in_pieces_fails_as_the_whole_body() {
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for body in FEED_BODIES {
        // Every truncation, and every byte replaced by one that breaks it.
        for n in 0..body.len() {
            bodies.push(body.as_bytes()[..n].to_vec());
            for bad in [b'"', b'}', b']', b',', b'x', 0xff] {
                let mut b = body.as_bytes().to_vec();
                b[n] = bad;
                bodies.push(b);
            }
        }
    }
    bodies.extend(
        [
            &b"[1]"[..],
            b"[{\"ID\":1}]]",
            b"[{\"Nope\":1}]",
            b"{\"fieldCount\":2,\"values\":[\"ID\",\"Name\",1]}",
            b"{\"fieldCount\":0,\"values\":[]}",
            b"{\"fieldCount\":1,\"values\":[\"ID\",1],\"values\":[\"ID\",2]}",
            b"{\"fieldCount\":1,\"values\":[\"ID\",-1]}",
            b"{\"fieldCount\":1,\"values\":[\"ID\",1]} x",
            b"",
        ]
        .map(<[u8]>::to_vec),
    );
    for b in &bodies {
        let whole = parse_list(&T, b);
        for cuts in [vec![], vec![b.len() / 2], (0..b.len()).collect()] {
            let fed = feed_in_pieces(b, &cuts);
            let text = String::from_utf8_lossy(b);
            match (&whole, &fed) {
                (Ok(w), Ok(f)) => assert_eq!(w, f, "{text}"),
                (Err(_), Err(_)) => {}
                // A second values member the whole reader takes (the last
                // wins) is refused once the first one's rows went out.
                (Ok(_), Err(e)) if text.matches("\"values\"").count() > 1 => {
                    assert!(e.to_string().contains("two values"), "{e}")
                }
                _ => panic!("{text}: whole {whole:?}, in pieces {fed:?}"),
            }
        }
    }
}

/// What a compact list of one row of `T` whose Born and Changed hold `born`
/// and `changed` writes, or its error.
fn list_of(born: Value, changed: Value, dialect: JsonDialect) -> Result<String> {
    let mut r = row();
    r.values[2] = born;
    r.values[3] = changed;
    let cols = [Column::Id, Column::Field(2), Column::Field(3)];
    let mut out = Vec::new();
    let mut w = ListWriter::begin(&mut out, &T, &cols, true, dialect);
    w.row(&mut out, &r)?;
    w.finish(&mut out);
    Ok(String::from_utf8(out).expect("UTF-8"))
}

#[test]
fn stored_dates_in_the_written_form_are_written_as_parsed_ones_are() -> Result<()> {
    let text = |s: &str| Value::Text(s.into());
    for dialect in [JsonDialect::Exact, JsonDialect::Mormot] {
        for (born, changed) in [
            ("2020-02-29", "2024-03-04T05:06:07"),
            ("0001-01-01", "2024-03-04T05:06:07.5"),
            ("9999-12-31", "2024-03-04T23:59:59.123456789"),
        ] {
            let typed = list_of(
                Value::Date(crate::datetime::parse_date(born).expect("date")),
                Value::DateTime(parse_datetime(changed).expect("date-time")),
                dialect,
            )?;
            assert_eq!(list_of(text(born), text(changed), dialect)?, typed);
        }
        // Shaped like them but no date or time: refused as before.
        for (born, changed) in [
            ("2021-02-29", "2024-03-04T05:06:07"),
            ("2020-13-01", "2024-03-04T05:06:07"),
            ("2020-01-01", "2024-02-30T05:06:07"),
            ("2020-01-01", "2024-03-04T24:00:00"),
            ("2020-01-01", "2024-03-04T05:60:00"),
        ] {
            assert!(
                list_of(text(born), text(changed), dialect).is_err(),
                "{born} {changed}"
            );
        }
    }
    Ok(())
}

/// A row that hands its values over through `get` alone.
struct GetOnly<'a>(&'a OwnedRow);

impl crate::record::Row for GetOnly<'_> {
    fn id(&self) -> Result<i64> {
        Ok(self.0.id)
    }
    fn get(&self, idx: usize) -> Result<ValueRef<'_>> {
        crate::record::Row::get(self.0, idx)
    }
}

/// A held row (which answers the typed reads) is written as it is through
/// `get` alone: the same JSON, or the same error, in either dialect and
/// either list shape.
#[test]
fn held_rows_write_as_through_get() {
    let text = |s: &str| Value::Text(s.into());
    // Field, value held, whether it is written.
    let cases = [
        (1, Value::Int(125_000), true), // currency as its scaled integer
        (1, Value::Currency(Currency::from_scaled(-1)), true),
        (1, text("lots"), false), // currency, other text
        (2, text("2020-02-29"), true),
        (2, text("2021-02-29"), false), // no such date
        (
            2,
            Value::Date(NaiveDate::from_ymd_opt(1, 1, 1).expect("date")),
            true,
        ),
        (3, text("2024-03-04T05:06:07.5"), true),
        (3, Value::Int(5), false), // date-time, an integer
        (0, text(""), true),
        (0, Value::Int(3), false), // text field, an integer
    ];
    let cols = [
        Column::Id,
        Column::Field(0),
        Column::Field(1),
        Column::Field(2),
        Column::Field(3),
    ];
    for (idx, v, writes) in cases {
        let mut held = row();
        held.values[idx] = v.clone();
        for dialect in [JsonDialect::Exact, JsonDialect::Mormot] {
            for compact in [false, true] {
                let write = |r: &dyn crate::record::Row| -> Result<String> {
                    let mut out = Vec::new();
                    let mut w = ListWriter::begin(&mut out, &T, &cols, compact, dialect);
                    w.row(&mut out, r)?;
                    w.finish(&mut out);
                    Ok(String::from_utf8(out).expect("UTF-8"))
                };
                let typed = write(&held);
                let plain = write(&GetOnly(&held));
                assert_eq!(
                    plain.is_ok(),
                    writes,
                    "field {idx} holding {v:?}: {plain:?}"
                );
                assert_eq!(
                    format!("{typed:?}"),
                    format!("{plain:?}"),
                    "field {idx} holding {v:?}, {dialect:?}, compact {compact}"
                );
            }
        }
    }
}
