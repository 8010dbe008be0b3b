//! The outgoing HTTP client that auth uses to reach the site's services
//! (the JWK set provider, the connect proxy): hyper's pooled client over
//! rustls with the system's root certificates, `http://` and `https://`.

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A pooled HTTP/1.1 client for `http://` and `https://` URLs, sending
/// request bodies of type `B`.
pub(crate) type HttpsClient<B> = Client<HttpsConnector<HttpConnector>, B>;

/// Builds an [`HttpsClient`]. Fails only when the system's root
/// certificates cannot be loaded.
pub(crate) fn https_client<B>() -> std::io::Result<HttpsClient<B>>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let provider = tokio_rustls::rustls::crypto::ring::default_provider();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}
