//! What the tests render: `/json`'s message and the fortunes page, through
//! the Mustache template library `ramhorns`, which escapes HTML itself.

use std::sync::OnceLock;

use ramhorns::{Content, Template};
use serde::Serialize;

use crate::orm::Fortune;

/// `/json`'s body, serialized for every request.
#[derive(Serialize)]
pub struct Message {
    /// `Hello, World!`.
    pub message: &'static str,
}

/// The fortunes page, as TFB specifies it.
pub const FORTUNES_TEMPLATE: &str = "<!DOCTYPE html><html><head><title>Fortunes</title></head>\
<body><table><tr><th>id</th><th>message</th></tr>\
{{#fortunes}}<tr><td>{{id}}</td><td>{{message}}</td></tr>{{/fortunes}}\
</table></body></html>";

#[derive(Content)]
struct Page<'a> {
    fortunes: &'a [Row<'a>],
}

#[derive(Content)]
struct Row<'a> {
    id: i64,
    message: &'a str,
}

fn template() -> &'static Template<'static> {
    static T: OnceLock<Template<'static>> = OnceLock::new();
    T.get_or_init(|| Template::new(FORTUNES_TEMPLATE).expect("the fortunes template parses"))
}

/// The page of `rows` plus the fortune added at request time, sorted by
/// message here, not by the database.
pub fn fortunes(mut rows: Vec<Fortune>) -> String {
    rows.push(Fortune {
        id: 0,
        message: "Additional fortune added at request time.".into(),
    });
    rows.sort_unstable_by(|a, b| a.message.cmp(&b.message));
    let view: Vec<Row<'_>> = rows
        .iter()
        .map(|f| Row {
            id: f.id,
            message: &f.message,
        })
        .collect();
    template().render(&Page { fortunes: &view })
}
