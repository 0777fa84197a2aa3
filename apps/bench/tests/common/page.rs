//! The check of a `burrow-bench --html` page, shared by the unit tests (on
//! synthetic results) and the integration test (on a real run).

const SVG: &str = "http://www.w3.org/2000/svg";

/// Parses the whole page as XML and checks that it loads nothing from
/// anywhere (the SVG namespace is its only URL) and that every chart has bars
/// and labels. Returns the number of charts.
pub fn check_page(html: &str) -> Result<usize, String> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(html, opts)
        .map_err(|e| format!("the page is not well-formed: {e}"))?;
    if doc.root_element().tag_name().name() != "html" {
        return Err("the root element is not <html>".into());
    }
    for n in doc.descendants().filter(|n| n.is_element()) {
        let name = n.tag_name().name();
        let loads = [
            "script",
            "link",
            "img",
            "iframe",
            "object",
            "embed",
            "image",
            "use",
            "foreignObject",
        ];
        if loads.contains(&name) {
            return Err(format!("the page has a <{name}> element"));
        }
        if let Some(a) = n.attributes().find(|a| a.name().ends_with("href")) {
            return Err(format!("<{name}> has {}={:?}", a.name(), a.value()));
        }
    }
    if html.contains("url(") || html.contains("@import") {
        return Err("the page's style loads something".into());
    }
    let charts: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name((SVG, "svg")))
        .collect();
    let urls = html.matches("http://").count() + html.matches("https://").count();
    let namespaces = html.matches(&format!("xmlns=\"{SVG}\"")).count();
    if urls != charts.len() || namespaces != charts.len() {
        return Err(format!(
            "{urls} URLs in the page, {namespaces} of them SVG namespaces, for {} charts",
            charts.len()
        ));
    }
    for (i, svg) in charts.iter().enumerate() {
        let count = |tag: &str| {
            svg.descendants()
                .filter(|n| n.has_tag_name((SVG, tag)))
                .count()
        };
        let size = |a: &str| svg.attribute(a).and_then(|v| v.parse::<u32>().ok());
        if !matches!((size("width"), size("height")), (Some(w), Some(h)) if w > 0 && h > 0) {
            return Err(format!("chart {i} has no size"));
        }
        // The background, at least one bar and its legend swatch.
        if count("rect") < 3 || count("text") < 4 {
            return Err(format!("chart {i} has no bars or no labels"));
        }
    }
    Ok(charts.len())
}
