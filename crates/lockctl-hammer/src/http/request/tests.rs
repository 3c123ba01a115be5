//! Request templates and what they refuse, case by case.

use super::*;

const VARS: Vars = Vars {
    sku: "{sku 1}",
    user: "u7",
    order: "h1-7",
    n: 7,
    token: "tok/7",
};

#[test]
fn placeholders_fill_encoded_in_the_url_and_as_is_elsewhere() {
    let t = Template::parse("/buy?sku={sku}&u={user}&o={order}&n={n}");
    assert_eq!(
        t.fill(&VARS, true),
        "/buy?sku=%7Bsku%201%7D&u=u7&o=h1-7&n=7"
    );
    let body = Template::parse(r#"{"sku":"{sku}","n":{n}}"#);
    assert!(!body.is_constant());
    assert_eq!(body.fill(&VARS, false), r#"{"sku":"{sku 1}","n":7}"#);
    assert!(Template::parse("plain {x}").is_constant());
}

fn written(spec: &RequestSpec, vars: &Vars) -> String {
    let mut out = Vec::new();
    spec.write(vars, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn a_request_is_written_with_its_host_headers_and_body() {
    let spec = RequestSpec::new(
        "POST",
        "http://127.0.0.1:8080/run_demo.php?sku={sku}#top",
        &["X-Order: {order}".into(), "Content-Type: text/plain".into()],
        Some("n={n}"),
    )
    .unwrap();
    assert_eq!(
        written(&spec, &VARS),
        "POST /run_demo.php?sku=%7Bsku%201%7D HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n\
         content-type: text/plain\r\nx-order: h1-7\r\ncontent-length: 3\r\n\r\nn=7"
    );
    assert_eq!(spec.port, 8080);
    assert!(!spec.is_constant() && !spec.closes());
    // No path: `/`. A Host given replaces the URL's; Connection: close is kept in mind.
    let spec = RequestSpec::new(
        "GET",
        "http://me:pw@shop:81?q=1",
        &["Host: other".into(), "Connection: Close".into()],
        None,
    )
    .unwrap();
    assert!(spec.is_constant() && spec.closes());
    assert_eq!(
        written(&spec, &VARS),
        "GET /?q=1 HTTP/1.1\r\nhost: other\r\nconnection: Close\r\n\r\n"
    );
    let spec = RequestSpec::new("POST", "http://h/", &[], None).unwrap();
    assert_eq!(
        written(&spec, &VARS),
        "POST / HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn no_header_value_can_smuggle_a_line_break() {
    let spec = RequestSpec::new("GET", "http://h/", &["X-Sku: {sku}".into()], None).unwrap();
    let mut out = Vec::new();
    let vars = Vars {
        sku: "a\r\nX-Evil: 1",
        ..VARS
    };
    let err = spec.write(&vars, &mut out).unwrap_err();
    assert_eq!((err.request, err.name.as_str()), (7, "x-sku"));
    assert!(
        err.to_string()
            .contains("request 7: the value of header 'x-sku'"),
        "{err}"
    );
    // In the URL every such byte is escaped.
    let spec = RequestSpec::new("GET", "http://h/?s={sku}", &[], None).unwrap();
    assert_eq!(
        written(&spec, &vars),
        "GET /?s=a%0D%0AX-Evil%3A%201 HTTP/1.1\r\nhost: h\r\n\r\n"
    );
}

#[test]
fn an_https_url_is_taken_with_port_443_unless_it_names_one() {
    let spec = RequestSpec::new("GET", "https://shop.example/buy", &[], None).unwrap();
    assert!(spec.is_https());
    assert_eq!(spec.host(), "shop.example");
    let mut out = Vec::new();
    spec.write(&SAMPLES[0], &mut out).unwrap();
    // The Host header is the authority as written: no default port added.
    assert!(String::from_utf8_lossy(&out).contains("\r\nhost: shop.example\r\n"));
    let spec = RequestSpec::new("GET", "https://127.0.0.1:8443/buy", &[], None).unwrap();
    assert_eq!(spec.resolve().unwrap().port(), 8443);
    let spec = RequestSpec::new("GET", "https://127.0.0.1/buy", &[], None).unwrap();
    assert_eq!(spec.resolve().unwrap().port(), 443);
    assert!(
        !RequestSpec::new("GET", "http://127.0.0.1/", &[], None)
            .unwrap()
            .is_https()
    );
}

#[test]
fn bad_requests_are_refused_naming_the_value() {
    let bad = |method: &str, url: &str, header: &str| {
        let headers: Vec<String> = [header]
            .iter()
            .filter(|h| !h.is_empty())
            .map(|h| h.to_string())
            .collect();
        RequestSpec::new(method, url, &headers, None)
            .unwrap_err()
            .to_string()
    };
    assert!(bad("GET", "not a url", "").contains("'not a url' is not a URL"));
    assert!(bad("GET", "ftp://x/", "").contains("'ftp' is neither http nor https"));
    assert!(bad("GET", "/path", "").contains("no scheme"));
    assert!(bad("GET", "http://h:99999/", "").contains("'99999' is not a port (1 to 65535)"));
    assert!(bad("GET", "http://h:0/", "").contains("'0' is not a port"));
    assert!(bad("GET", "http://h:+80/", "").contains("'+80' is not a port"));
    assert!(bad("GET", "http://[::1]7412/", "").contains("'7412' is not a port"));
    assert!(bad("GET", "http://[::1]:99999/", "").contains("'99999' is not a port"));
    assert!(RequestSpec::new("GET", "http://[::1]:7412/", &[], None).is_ok());
    assert!(bad("GET", "http://{sku}.shop/", "").contains("placeholder in its host"));
    assert!(bad("GET", "http://x/{skus}", "").contains("brace that is not a placeholder"));
    assert!(bad("GE T", "http://x/", "").contains("the method 'GE T'"));
    // The part at fault is data, for a program to name in its own terms.
    let e = RequestSpec::new("GET", "http://x/", &["NoColon".into()], None).unwrap_err();
    assert_eq!((e.part, e.given.as_str()), (Part::Header, "NoColon"));
    assert_eq!(e.problem, Problem::NoColon);
    let e = RequestSpec::new("GET", "ftp://x/", &[], None).unwrap_err();
    assert_eq!(e.part, Part::Url);
    let head = RequestSpec::new("head", "http://x/", &[], None).unwrap();
    assert!(head.is_head());
    assert!(bad("GET", "http://x/", "NoColon").contains("has no ':'"));
    assert!(bad("GET", "http://x/", "Bad Name: v").contains("'Bad Name' is not a header name"));
    assert!(bad("GET", "http://x/", "Content-Length: 9").contains("leave content-length out"));
}

#[test]
fn a_bad_header_is_quoted_without_its_credential() {
    let bad = |header: &str| {
        RequestSpec::new("GET", "http://x/", &[header.to_string()], None).unwrap_err()
    };
    for header in [
        "Authorization Bearer S3cr3t",
        "Authorization: Bearer S3cr3t\u{1}",
        "Authorization Bearer S3cr3t: x",
        "Cookie: s=S3cr3t\r\nX: y",
    ] {
        let err = bad(header);
        assert_eq!(err.part, Part::Header, "{err}");
        let err = err.to_string();
        assert!(!err.contains("S3cr3t"), "{err}");
        assert!(err.contains("the header '"), "{err}");
    }
    let err = RequestSpec::new("GET", "http://u:S3cr3t@x/?token=S3cr3t&{skus}", &[], None)
        .unwrap_err()
        .to_string();
    assert!(!err.contains("S3cr3t") && err.contains("brace"), "{err}");
}

#[test]
fn a_token_fills_the_url_encoded_and_headers_and_body_as_is() {
    let spec = RequestSpec::new(
        "POST",
        "http://h/buy?t={token}",
        &["Authorization: Bearer {token}".into()],
        Some(r#"{"t":"{token}"}"#),
    )
    .unwrap();
    assert!(spec.uses_token() && spec.uses_user() && spec.uses_ids());
    let mut out = Vec::new();
    spec.write(&VARS, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("POST /buy?t=tok%2F7 HTTP/1.1\r\n"),
        "{text}"
    );
    assert!(text.contains("authorization: Bearer tok/7\r\n"), "{text}");
    assert!(text.ends_with(r#"{"t":"tok/7"}"#), "{text}");
}

/// Issue 50: a JSON login body sent with no `Content-Type` is told apart, so that a failed
/// login can say so; typed, a form body or no body at all, it is not.
#[test]
fn a_json_body_without_a_content_type_is_told_apart() {
    let spec = |headers: &[&str], body: Option<&str>| {
        let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
        RequestSpec::new("POST", "http://h/login", &headers, body).unwrap()
    };
    let json = Some(r#" {"userName":"{user}","pwd":"x"}"#);
    assert!(spec(&[], json).sends_untyped_json());
    assert!(spec(&["X-Trace: 1"], Some("[1]")).sends_untyped_json());
    assert!(!spec(&["Content-Type: application/json"], json).sends_untyped_json());
    assert!(!spec(&["content-type: text/plain"], json).sends_untyped_json());
    assert!(!spec(&[], Some("user={user}&pwd=x")).sends_untyped_json());
    assert!(!spec(&[], None).sends_untyped_json());
}
