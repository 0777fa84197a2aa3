//! `#[derive(Record)]` for Burrow: implements `burrow::Record` for a struct with
//! named fields, with straight-line code for every field (no maps, no loops).
//!
//! ```ignore
//! use burrow::{chrono::{DateTime, Utc}, Currency, Record};
//!
//! #[derive(Record)]
//! #[burrow(table = "Customer")]
//! struct Customer {
//!     id: i64,                                   // the ID: not a field
//!     #[burrow(unique)] email: String,           // field "Email", unique index
//!     #[burrow(index, column = "LAST_NAME")]
//!     last_name: String,                         // field "LastName", column "LAST_NAME"
//!     #[burrow(name = "Amt")] balance: Currency, // field "Amt"
//!     #[burrow(created)] created_at: DateTime<Utc>,
//!     #[burrow(modified)] changed: Option<DateTime<Utc>>,
//!     note: Option<String>,                      // nullable
//!     #[burrow(skip)] cache: Vec<u8>,            // not stored; `Default` on read
//! }
//! ```
//!
//! # Struct attributes
//!
//! | attribute | meaning |
//! |---|---|
//! | `table = "Name"` | the table's name (default: the struct's name) |
//! | `crate = "path"` | the path of the Burrow crate in generated code (default: `::burrow`) |
//!
//! # Field attributes
//!
//! | attribute | meaning |
//! |---|---|
//! | `id` | this `i64` field is the ID (default: the field called `id`) |
//! | `name = "Name"` | the field's name (default: the ident in PascalCase, `first_name` → `FirstName`) |
//! | `column = "COL"` | the column that stores it (default: its name) |
//! | `unique` | a unique index enforces it |
//! | `index` | a plain index speeds lookups on it |
//! | `created` | set to the current time when the record is added |
//! | `modified` | set to the current time when the record is added or updated |
//! | `skip` | not stored; the field's type must implement `Default` |
//!
//! Several may share one attribute, `#[burrow(index, name = "Amt")]`, or be split
//! over several. A `created` or `modified` field must be a `DateTime<Utc>` or an
//! `Option<DateTime<Utc>>`. Every other stored field's type must implement
//! `burrow::FieldType`.
//!
//! The struct must not be generic, must have exactly one ID, and its field names
//! must differ from each other and from `ID` and `RowID`, ignoring case.

use proc_macro::TokenStream;
use proc_macro2::{Group, TokenStream as TokenStream2, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{parse_macro_input, Data, DeriveInput, Error, Fields, Ident, LitStr, Path, Result, Type};

/// Implements `Record` for a struct with named fields; see the [crate] documentation
/// for the `#[burrow(...)]` attributes.
#[proc_macro_derive(Record, attributes(burrow))]
pub fn derive_record(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// Whether the ORM fills a field with the time.
#[derive(Clone, Copy, PartialEq)]
enum Auto {
    No,
    Created,
    Modified,
}

/// A stored field, after its attributes are read.
struct Stored {
    ident: Ident,
    ty: TokenStream2,
    name: String,
    column: String,
    unique: bool,
    indexed: bool,
    auto: Auto,
}

/// What the `#[burrow(...)]` attributes of one field say.
#[derive(Default)]
struct FieldAttrs {
    id: bool,
    skip: bool,
    unique: bool,
    index: bool,
    created: bool,
    modified: bool,
    name: Option<LitStr>,
    column: Option<LitStr>,
}

fn expand(input: &DeriveInput) -> Result<TokenStream2> {
    let ident = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(f) => &f.named,
            _ => {
                return Err(Error::new_spanned(
                    &s.fields,
                    "#[derive(Record)] needs a struct with named fields",
                ))
            }
        },
        Data::Enum(e) => {
            return Err(Error::new_spanned(
                e.enum_token,
                "#[derive(Record)] needs a struct, not an enum",
            ))
        }
        Data::Union(u) => {
            return Err(Error::new_spanned(
                u.union_token,
                "#[derive(Record)] needs a struct, not a union",
            ))
        }
    };
    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        return Err(Error::new_spanned(
            &input.generics,
            "#[derive(Record)] does not support generic structs",
        ));
    }

    // Struct attributes.
    let mut table: Option<LitStr> = None;
    let mut krate: Option<Path> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("burrow")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("table") {
                set_once(&mut table, &meta, "table")
            } else if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                if krate.is_some() {
                    return Err(meta.error("duplicate `crate` attribute"));
                }
                let path = lit.parse().map_err(|_| {
                    Error::new(lit.span(), "expected a crate path, like \"::burrow\"")
                })?;
                krate = Some(path);
                Ok(())
            } else {
                Err(meta.error(format!(
                    "unknown struct attribute `{}`; expected `table` or `crate`",
                    path_text(&meta.path)
                )))
            }
        })?;
    }
    let krate = krate.unwrap_or_else(|| syn::parse_quote!(::burrow));
    let table_name = match &table {
        Some(lit) => checked_name(lit, "table")?,
        None => ident.unraw().to_string(),
    };

    // Field attributes.
    let mut errors: Vec<Error> = Vec::new();
    let mut push = |e: Error| errors.push(e);
    let mut parsed = Vec::new();
    let mut attr_errors = false;
    for f in fields {
        match field_attrs(f) {
            Ok(a) => parsed.push((f, a)),
            Err(e) => {
                attr_errors = true;
                push(e);
            }
        }
    }

    // The ID: the field marked `id`, else the field called `id`.
    let marked: Vec<_> = parsed.iter().filter(|(_, a)| a.id).collect();
    let id_field = match marked.as_slice() {
        [(f, _)] => Some(*f),
        [] => parsed
            .iter()
            .find(|(f, a)| !a.skip && f.ident.as_ref().is_some_and(|i| i.unraw() == "id"))
            .map(|(f, _)| *f),
        [_, (second, _), ..] => {
            push(Error::new_spanned(
                &second.ident,
                "only one field can be #[burrow(id)]",
            ));
            None
        }
    };
    match id_field {
        Some(f) if !is_i64(&f.ty) => push(Error::new_spanned(&f.ty, "the ID must be an `i64`")),
        Some(_) => {}
        None if marked.is_empty() && !attr_errors => push(Error::new_spanned(
            ident,
            "#[derive(Record)] needs an ID: a field `id: i64`, or an `i64` field marked #[burrow(id)]",
        )),
        None => {}
    }

    let mut stored: Vec<Stored> = Vec::new();
    let mut skipped: Vec<&Ident> = Vec::new();
    for (f, a) in &parsed {
        let fid = f.ident.as_ref().expect("named field");
        if id_field.is_some_and(|id| std::ptr::eq(id, *f)) {
            continue;
        }
        if a.skip {
            skipped.push(fid);
            continue;
        }
        let mut checked = |lit: &LitStr, what| {
            checked_name(lit, what).unwrap_or_else(|e| {
                push(e);
                lit.value()
            })
        };
        let name = match &a.name {
            Some(lit) => checked(lit, "field"),
            None => pascal_case(&fid.unraw().to_string()),
        };
        let column = match &a.column {
            Some(lit) => checked(lit, "column"),
            None => name.clone(),
        };
        let span = a.name.as_ref().map_or(fid.span(), LitStr::span);
        let col_span = a.column.as_ref().map_or(span, LitStr::span);
        if is_reserved(&name) {
            push(Error::new(
                span,
                format!(
                    "field name `{name}` is reserved for the ID; rename it with #[burrow(name = \"...\")]"
                ),
            ));
        } else if is_reserved(&column) {
            push(Error::new(
                col_span,
                format!("column `{column}` is reserved for the ID"),
            ));
        }
        if let Some(prev) = stored.iter().find(|s| s.name.eq_ignore_ascii_case(&name)) {
            push(Error::new(
                span,
                format!("field name `{name}` is already used by `{}`", prev.ident),
            ));
        } else if let Some(prev) = stored
            .iter()
            .find(|s| s.column.eq_ignore_ascii_case(&column))
        {
            push(Error::new(
                col_span,
                format!("column `{column}` is already used by `{}`", prev.ident),
            ));
        }
        stored.push(Stored {
            ident: fid.clone(),
            ty: replace_self(f.ty.to_token_stream(), ident),
            name,
            column,
            unique: a.unique,
            indexed: a.index,
            auto: if a.created {
                Auto::Created
            } else if a.modified {
                Auto::Modified
            } else {
                Auto::No
            },
        });
    }
    let mut errors = errors.into_iter();
    if let Some(mut all) = errors.next() {
        all.extend(errors);
        return Err(all);
    }
    let id = id_field
        .and_then(|f| f.ident.as_ref())
        .expect("checked above");
    Ok(generate(ident, &krate, &table_name, id, &stored, &skipped))
}

fn generate(
    ident: &Ident,
    krate: &Path,
    table_name: &str,
    id: &Ident,
    stored: &[Stored],
    skipped: &[&Ident],
) -> TokenStream2 {
    let field_defs = stored.iter().map(|s| {
        let Stored {
            ty,
            name,
            column,
            unique,
            indexed,
            ..
        } = s;
        let auto = match s.auto {
            Auto::No => quote!(No),
            Auto::Created => quote!(Created),
            Auto::Modified => quote!(Modified),
        };
        quote! {
            #krate::Field {
                name: #name,
                column: #column,
                kind: <#ty as #krate::FieldType>::KIND,
                nullable: <#ty as #krate::FieldType>::NULLABLE,
                unique: #unique,
                indexed: #indexed,
                auto: #krate::AutoTime::#auto,
            }
        }
    });
    let idx = 0..stored.len();
    let f = stored.iter().map(|s| &s.ident);
    let field_arms = quote! {
        #(#idx => #krate::FieldType::to_value(&self.#f),)*
    };
    let idx = 0..stored.len();
    let f = stored.iter().map(|s| &s.ident);
    let set_arms = quote! {
        #(#idx => #krate::FieldType::assign(&mut self.#f, value)
            .map_err(|e| #krate::ConvertError::at(e, <Self as #krate::Record>::table(), #idx)),)*
    };
    let idx = 0..stored.len();
    let f = stored.iter().map(|s| &s.ident);
    let ty = stored.iter().map(|s| &s.ty);
    let from_row = quote! {
        #(#f: <#ty as #krate::FieldType>::read(row, <Self as #krate::Record>::table(), #idx)?,)*
        #(#skipped: ::core::default::Default::default(),)*
    };
    let idx = 0..stored.len();
    let f = stored.iter().map(|s| &s.ident);
    let ty = stored.iter().map(|s| &s.ty);
    let from_values = quote! {
        #(#f: <#ty as #krate::FieldType>::from_value(row.get(#idx)?)
            .map_err(|e| #krate::ConvertError::at(e, <Self as #krate::Record>::table(), #idx))?,)*
        #(#skipped: ::core::default::Default::default(),)*
    };
    let idx = 0..stored.len();
    let f = stored.iter().map(|s| &s.ident);
    let read_row = quote! {
        #(#krate::FieldType::assign(&mut self.#f, row.get(#idx)?)
            .map_err(|e| #krate::ConvertError::at(e, <Self as #krate::Record>::table(), #idx))?;)*
    };

    // Automatic times: a compile-time check of the kind, and straight-line stamping.
    let mut checks = TokenStream2::new();
    let mut created = TokenStream2::new();
    let mut modified = TokenStream2::new();
    for s in stored.iter().filter(|s| s.auto != Auto::No) {
        let (f, ty) = (&s.ident, &s.ty);
        let (attr, out) = match s.auto {
            Auto::Created => ("created", &mut created),
            _ => ("modified", &mut modified),
        };
        let msg = format!(
            "#[burrow({attr})] field `{ident}.{f}` must be a DateTime<Utc> or an Option<DateTime<Utc>>"
        );
        checks.extend(quote_spanned! {ty.span()=>
            const _: () = ::core::assert!(
                ::core::matches!(<#ty as #krate::FieldType>::KIND, #krate::FieldKind::DateTime),
                #msg
            );
        });
        out.extend(quote! {
            if let ::core::option::Option::Some(v) =
                <#ty as #krate::FieldType>::from_time(now)
            {
                self.#f = v;
            }
        });
    }
    let stamp_now = if created.is_empty() && modified.is_empty() {
        quote!(_now)
    } else {
        quote!(now)
    };
    let (stamp_inserting, created) = if created.is_empty() {
        (quote!(_inserting), created)
    } else {
        (quote!(inserting), quote!(if inserting { #created }))
    };
    let n = stored.len();

    quote! {
        #checks

        #[automatically_derived]
        impl #krate::Record for #ident {
            const TABLE_NAME: &'static str = #table_name;

            fn table() -> &'static #krate::Table {
                static TABLE: #krate::Table = #krate::Table {
                    name: #table_name,
                    fields: &[#(#field_defs),*],
                };
                &TABLE
            }

            #[inline]
            fn id(&self) -> i64 {
                self.#id
            }

            #[inline]
            fn set_id(&mut self, id: i64) {
                self.#id = id;
            }

            fn field(&self, idx: usize) -> #krate::ValueRef<'_> {
                match idx {
                    #field_arms
                    _ => #krate::ValueRef::Null,
                }
            }

            fn set_field(
                &mut self,
                idx: usize,
                value: #krate::ValueRef<'_>,
            ) -> #krate::Result<()> {
                match idx {
                    #set_arms
                    _ => ::core::result::Result::Err(#krate::Error::BadInput(::std::format!(
                        "{}: no field at index {} (it has {})", #table_name, idx, #n
                    ))),
                }
            }

            fn from_row(row: &dyn #krate::Row) -> #krate::Result<Self> {
                // Typed reads only where the row has them: elsewhere each
                // would be one more call per field, answering `None`.
                if row.typed() {
                    ::core::result::Result::Ok(Self {
                        #id: row.id()?,
                        #from_row
                    })
                } else {
                    ::core::result::Result::Ok(Self {
                        #id: row.id()?,
                        #from_values
                    })
                }
            }

            fn read_row(&mut self, row: &dyn #krate::Row) -> #krate::Result<()> {
                self.#id = row.id()?;
                #read_row
                ::core::result::Result::Ok(())
            }

            fn stamp(
                &mut self,
                #stamp_now: #krate::chrono::DateTime<#krate::chrono::Utc>,
                #stamp_inserting: bool,
            ) {
                #created
                #modified
            }
        }
    }
}

/// Reads the `#[burrow(...)]` attributes of a field.
fn field_attrs(f: &syn::Field) -> Result<FieldAttrs> {
    let mut a = FieldAttrs::default();
    for attr in f.attrs.iter().filter(|a| a.path().is_ident("burrow")) {
        attr.parse_nested_meta(|meta| {
            let flag = |on: &mut bool, key: &str| {
                if std::mem::replace(on, true) {
                    Err(meta.error(format!("duplicate `{key}` attribute")))
                } else {
                    Ok(())
                }
            };
            let p = &meta.path;
            if p.is_ident("id") {
                flag(&mut a.id, "id")
            } else if p.is_ident("skip") {
                flag(&mut a.skip, "skip")
            } else if p.is_ident("unique") {
                flag(&mut a.unique, "unique")
            } else if p.is_ident("index") {
                flag(&mut a.index, "index")
            } else if p.is_ident("created") {
                flag(&mut a.created, "created")
            } else if p.is_ident("modified") {
                flag(&mut a.modified, "modified")
            } else if p.is_ident("name") {
                set_once(&mut a.name, &meta, "name")
            } else if p.is_ident("column") {
                set_once(&mut a.column, &meta, "column")
            } else {
                Err(meta.error(format!(
                    "unknown field attribute `{}`; expected one of `id`, `name`, `column`, \
                     `unique`, `index`, `created`, `modified`, `skip`",
                    path_text(p)
                )))
            }
        })?;
    }
    let span = f.ident.as_ref().map_or_else(|| f.span(), Ident::span);
    if a.created && a.modified {
        return Err(Error::new(
            span,
            "a field cannot be both #[burrow(created)] and #[burrow(modified)]; \
             `modified` is also set when the record is added",
        ));
    }
    let stored_only =
        a.unique || a.index || a.created || a.modified || a.name.is_some() || a.column.is_some();
    if a.skip && (a.id || stored_only) {
        return Err(Error::new(
            span,
            "#[burrow(skip)] cannot be combined with other attributes",
        ));
    }
    if a.id && stored_only {
        return Err(Error::new(
            span,
            "#[burrow(id)] cannot be combined with other attributes: the ID is not a field",
        ));
    }
    Ok(a)
}

/// Parses `key = "value"` into `slot`, refusing a second occurrence.
fn set_once(slot: &mut Option<LitStr>, meta: &ParseNestedMeta, key: &str) -> Result<()> {
    let lit: LitStr = meta.value()?.parse()?;
    if slot.is_some() {
        return Err(Error::new(
            lit.span(),
            format!("duplicate `{key}` attribute"),
        ));
    }
    *slot = Some(lit);
    Ok(())
}

/// The value of a `name`, `column` or `table` attribute, which must be an identifier.
fn checked_name(lit: &LitStr, what: &str) -> Result<String> {
    let v = lit.value();
    let mut chars = v.chars();
    let ok = chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_');
    if ok {
        Ok(v)
    } else {
        Err(Error::new(
            lit.span(),
            format!("{what} name {v:?} must be an identifier (letters, digits and `_`)"),
        ))
    }
}

/// Whether a field or column name would clash with the ID, ignoring case.
fn is_reserved(name: &str) -> bool {
    name.eq_ignore_ascii_case("id") || name.eq_ignore_ascii_case("rowid")
}

fn path_text(p: &Path) -> String {
    p.to_token_stream().to_string().replace(' ', "")
}

/// Whether a type is written as a path ending in `i64`.
fn is_i64(ty: &Type) -> bool {
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "i64" && s.arguments.is_none()),
        Type::Group(g) => is_i64(&g.elem),
        Type::Paren(p) => is_i64(&p.elem),
        _ => false,
    }
}

/// `first_name` → `FirstName`, `birth_date2` → `BirthDate2`.
fn pascal_case(s: &str) -> String {
    s.split('_')
        .filter(|w| !w.is_empty())
        .flat_map(|w| {
            let mut c = w.chars();
            let first = c.next().into_iter().flat_map(char::to_uppercase);
            first.chain(c)
        })
        .collect()
}

/// Replaces `Self` in a field type by the struct's name: the `static` in `table()`
/// and the `const` checks cannot name `Self`.
fn replace_self(tokens: TokenStream2, ident: &Ident) -> TokenStream2 {
    tokens
        .into_iter()
        .map(|tt| match tt {
            TokenTree::Ident(i) if i == "Self" => {
                let mut name = ident.clone();
                name.set_span(i.span());
                TokenTree::Ident(name)
            }
            TokenTree::Group(g) => {
                let mut new = Group::new(g.delimiter(), replace_self(g.stream(), ident));
                new.set_span(g.span());
                TokenTree::Group(new)
            }
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pascal_case;

    #[test]
    fn pascal() {
        assert_eq!(pascal_case("first_name"), "FirstName");
        assert_eq!(pascal_case("amount"), "Amount");
        assert_eq!(pascal_case("birth_date2"), "BirthDate2");
        assert_eq!(pascal_case("_x__y_"), "XY");
        assert_eq!(pascal_case("type"), "Type");
    }
}
