//! Static files from `[server] static_dir` at `/`: the demo page and
//! `pushgate.js`.
//!
//! Paths are percent-decoded and then must consist of plain segments: no
//! `..`, `.`, empty segments, backslashes, NUL or other control bytes, so
//! nothing outside the directory can be named, however it is encoded.

use std::path::{Path, PathBuf};

use hyper::header::{self, HeaderValue};
use hyper::{Method, Response};

use crate::http::ApiError;
use crate::http::{Body, empty, full};

/// The file a request path names under `root`, or `None` for a path that
/// could leave it. `/` is `index.html`.
pub(crate) fn resolve(root: &Path, request_path: &str) -> Option<PathBuf> {
    let decoded = percent_encoding::percent_decode_str(request_path)
        .decode_utf8()
        .ok()?;
    let relative = decoded.strip_prefix('/')?;
    let relative = if relative.is_empty() {
        "index.html"
    } else {
        relative
    };
    let mut path = root.to_path_buf();
    for segment in relative.split('/') {
        let plain = !segment.is_empty()
            && segment != "."
            && segment != ".."
            && !segment.starts_with('.')
            && !segment.contains(['\\', ':'])
            && !segment.chars().any(char::is_control);
        if !plain {
            return None;
        }
        path.push(segment);
    }
    Some(path)
}

/// The content type for a file name.
pub(crate) fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("ts") => "text/plain; charset=utf-8",
        Some("txt" | "md") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Serves one file (GET or HEAD); 404 when no file is there, 405 for
/// another method on a file.
pub(crate) async fn serve(root: &str, request_path: &str, method: &Method) -> Response<Body> {
    let Some(path) = resolve(Path::new(root), request_path) else {
        return ApiError::NotFound.into_body_response();
    };
    if method != Method::GET && method != Method::HEAD {
        // Only a path naming a file is known; for it, the method is wrong.
        return match tokio::fs::metadata(&path).await {
            Ok(meta) if meta.is_file() => ApiError::MethodNotAllowed { allow: "GET, HEAD" },
            _ => ApiError::NotFound,
        }
        .into_body_response();
    }
    let bytes = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(_) => return ApiError::NotFound.into_body_response(),
    };
    let len = bytes.len();
    let mut resp = Response::new(if method == Method::HEAD {
        empty()
    } else {
        full(bytes)
    });
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&path)),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_root() {
        let root = Path::new("/srv/static");
        let ok = [
            ("/", "/srv/static/index.html"),
            ("/pushgate.js", "/srv/static/pushgate.js"),
            ("/img/logo%20big.png", "/srv/static/img/logo big.png"),
        ];
        for (req, want) in ok {
            assert_eq!(resolve(root, req), Some(PathBuf::from(want)), "{req}");
        }
        let refused = [
            "/../etc/passwd",
            "/static/../../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/%2E%2E%2Fetc%2Fpasswd",
            "/..%2f..%2fetc/passwd",
            "/a/%2e/b",
            "/a//b",
            "/.git/config",
            "/a%5c..%5cb",
            "/index.html%00.js",
            "/c:/windows",
            "/%ff",
            "relative",
        ];
        for req in refused {
            assert_eq!(resolve(root, req), None, "{req}");
        }
    }
}
