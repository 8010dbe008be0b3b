//! Routing as any HTTP client sees it: unknown paths, wrong methods, the
//! static page, and paths that try to leave the static directory.

mod support;

use bytes::Bytes;
use hyper::Method;
use support::{Gateway, raw_http, raw_status};

const INDEX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/static/index.html");

#[tokio::test]
async fn unknown_paths_are_404_with_a_json_error() {
    let gw = Gateway::default().await;
    for path in ["/nope", "/push/extra", "/users", "/healthz/", "/index.htm"] {
        let resp = gw.request(Method::GET, path, &[], Bytes::new()).await;
        assert_eq!(resp.status, 404, "{path}");
        assert_eq!(resp.headers["content-type"], "application/json", "{path}");
        assert_eq!(resp.error_code(), "not_found", "{path}");
    }
}

#[tokio::test]
async fn wrong_methods_are_405_with_allow() {
    let gw = Gateway::default().await;
    let cases = [
        (Method::POST, "/healthz", "GET, HEAD"),
        (Method::DELETE, "/readyz", "GET, HEAD"),
        (Method::PUT, "/metrics", "GET, HEAD"),
        (Method::POST, "/users/alice", "GET, HEAD"),
        (Method::POST, "/", "GET, HEAD"),
        (Method::PUT, "/push", "POST"),
    ];
    for (method, path, allow) in cases {
        let resp = gw.request(method.clone(), path, &[], Bytes::new()).await;
        assert_eq!(resp.status, 405, "{method} {path}");
        assert_eq!(resp.headers["allow"], allow, "{method} {path}");
        assert_eq!(resp.error_code(), "method_not_allowed", "{method} {path}");
    }
    let ws = gw.request(Method::POST, "/ws", &[], Bytes::new()).await;
    assert_eq!(ws.status, 405);
    let allow = ws.headers["allow"].to_str().expect("ASCII");
    assert!(allow.split(", ").any(|m| m == "GET"), "{allow}");
}

#[tokio::test]
async fn a_405_never_lists_the_refused_method_in_allow() {
    let gw = Gateway::default().await;
    let cases = [
        (Method::HEAD, "/ws"),
        (Method::POST, "/ws"),
        (Method::GET, "/push"),
        (Method::HEAD, "/push"),
        (Method::DELETE, "/healthz"),
        (Method::PATCH, "/users/alice"),
    ];
    for (method, path) in cases {
        let resp = gw.request(method.clone(), path, &[], Bytes::new()).await;
        assert_eq!(resp.status, 405, "{method} {path}");
        let allow = resp.headers["allow"].to_str().expect("ASCII");
        assert!(
            !allow.split(", ").any(|m| m == method.as_str()),
            "{method} {path} refused, yet Allow: {allow}"
        );
    }
}

#[tokio::test]
async fn root_serves_the_static_index_page() {
    let gw = Gateway::default().await;
    let want = std::fs::read(INDEX).expect("static/index.html exists");
    for path in ["/", "/index.html"] {
        let resp = gw.request(Method::GET, path, &[], Bytes::new()).await;
        assert_eq!(resp.status, 200, "{path}");
        let content_type = resp.headers["content-type"].to_str().expect("ASCII");
        assert!(
            content_type.starts_with("text/html"),
            "{path}: {content_type}"
        );
        assert_eq!(resp.body, want, "{path}");
    }
    let text = String::from_utf8(want).expect("UTF-8");
    assert!(
        text.contains("<title>") && text.contains("pushgate"),
        "{text}"
    );
}

#[tokio::test]
async fn head_of_the_index_page_has_its_headers_and_no_body() {
    let gw = Gateway::default().await;
    let len = std::fs::metadata(INDEX).expect("static/index.html").len();
    let resp = gw.request(Method::HEAD, "/", &[], Bytes::new()).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.headers["content-length"], len.to_string().as_str());
    assert!(resp.body.is_empty());
    // On the wire: the head only, then the connection closes.
    let answer = raw_http(
        gw.addr,
        b"HEAD / HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    let body = answer.split_once("\r\n\r\n").expect("a head").1;
    assert!(body.is_empty(), "HEAD sent a body: {body:?}");
}

#[tokio::test]
async fn paths_that_leave_the_static_directory_are_refused() {
    let gw = Gateway::default().await;
    let paths = [
        "/../../etc/passwd",
        "/../Cargo.toml",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/%2e%2e/Cargo.toml",
        "/%2E%2E%2FCargo.toml",
        "/..%2fCargo.toml",
        "/..%5cCargo.toml",
        "/%00",
        "/index.html%00",
        "/static/../../Cargo.toml",
        "//etc/passwd",
        "/.%2e/Cargo.toml",
        "/./index.html",
        "http://gw/../Cargo.toml",
    ];
    for path in paths {
        let request = format!("GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n");
        let answer = raw_http(gw.addr, request.as_bytes()).await;
        let status = raw_status(&answer);
        assert!(status == 404 || status == 400, "{path}: {answer}");
        for leaked in ["[package]", "root:", "<title>"] {
            assert!(
                !answer.contains(leaked),
                "{path} leaked {leaked:?}: {answer}"
            );
        }
    }
}
