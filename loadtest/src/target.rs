//! Targets: URL templates, the addresses they name, and where connections
//! come from.
//!
//! A template is an ordinary URL with `{user}` where the user id goes, for
//! example `ws://127.0.0.1:8080/ws?uid={user}`, and optionally `{token}`
//! where that user's token goes (`ws://…/ws?token={token}`, tokens from
//! the file `LOADTEST_TOKEN_FILE` names). Only what a load client
//! needs is parsed: scheme, host, port and the request target.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use anyhow::{Context as _, bail};
use tokio::net::{TcpSocket, TcpStream};

/// Connections per source address past which another loopback source is
/// used (the ephemeral port range here holds about 28,000).
pub(crate) const CONNECTIONS_PER_SOURCE: u64 = 25_000;

/// A parsed URL template.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `ws`, `wss`, `http` or `https` (only the plain ones are served).
    pub scheme: String,
    /// Host as written (sent in the `Host` header).
    pub host: String,
    /// Port (default 80).
    pub port: u16,
    /// Path and query, still holding `{user}`.
    pub path: String,
}

impl Target {
    /// Parses `url`; refuses TLS schemes (loopback only, no TLS stack).
    pub(crate) fn parse(url: &str) -> anyhow::Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .with_context(|| format!("{url:?}: not a URL (no scheme)"))?;
        if !matches!(scheme, "ws" | "http") {
            bail!("{url:?}: scheme {scheme:?} not supported (use ws:// or http://)");
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().with_context(|| format!("{url:?}: bad port"))?),
            None => (authority, 80),
        };
        Ok(Self {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }

    /// The `Host` header value.
    pub(crate) fn host_header(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The request target for `user`, with `cursor` appended as the query
    /// parameter `cursor_param` when given. `{token}` becomes the user's
    /// token from the token file (see `tokens`).
    pub(crate) fn path_for(&self, user: &str, cursor: Option<(&str, &str)>) -> String {
        let mut path = self.path.replace("{user}", user);
        if path.contains("{token}") {
            path = path.replace("{token}", crate::tokens::token_of(user));
        }
        if let Some((param, value)) = cursor {
            path.push(if path.contains('?') { '&' } else { '?' });
            path.push_str(param);
            path.push('=');
            path.push_str(&encode_query_value(value));
        }
        path
    }

    /// The full URL for `user` (what tungstenite's handshake wants).
    pub(crate) fn url_for(&self, user: &str, cursor: Option<(&str, &str)>) -> String {
        format!(
            "{}://{}{}",
            self.scheme,
            self.host_header(),
            self.path_for(user, cursor)
        )
    }

    /// Resolves the host to one IPv4 socket address.
    pub(crate) async fn resolve(&self) -> anyhow::Result<SocketAddr> {
        let mut addrs = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .with_context(|| format!("cannot resolve {}", self.host))?;
        addrs
            .find(SocketAddr::is_ipv4)
            .with_context(|| format!("{} has no IPv4 address", self.host))
    }
}

/// Percent-encodes everything outside RFC 3986's unreserved set.
fn encode_query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How many loopback source addresses `connections` need (at least 1).
pub(crate) fn sources_for(connections: u64) -> u8 {
    connections
        .div_ceil(CONNECTIONS_PER_SOURCE)
        .clamp(1, 254)
        .try_into()
        .unwrap_or(254)
}

/// The source address of global connection number `index`: connections
/// round-robin over `127.0.0.1 ..= 127.0.0.<sources>`. `None` when one
/// source is enough (the kernel picks, as for any client).
pub(crate) fn source_of(index: u64, sources: u8) -> Option<Ipv4Addr> {
    if sources <= 1 {
        return None;
    }
    let last = (index % u64::from(sources)) as u8 + 1;
    Some(Ipv4Addr::new(127, 0, 0, last))
}

/// The node (index into a list of `nodes` URL templates) global
/// connection number `index` starts on: connections round-robin over the
/// nodes, so each of k nodes holds every k-th connection of every
/// transport.
pub(crate) fn node_of(index: u64, nodes: usize) -> usize {
    (index % nodes.max(1) as u64) as usize
}

/// Opens a TCP connection to `addr`, bound to `source` first if given.
pub(crate) async fn connect(
    addr: SocketAddr,
    source: Option<Ipv4Addr>,
) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(ip) = source {
        port_at_connect(&socket)?;
        socket.bind(SocketAddr::V4(SocketAddrV4::new(ip, 0)))?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Leaves the choice of the source port to `connect` (Linux's
/// `IP_BIND_ADDRESS_NO_PORT`). A port bound before connecting must be free
/// for every destination, so the sockets a storm leaves in TIME_WAIT (a
/// client closes first after a `reconnect` frame) make each bind scan the
/// whole port range and, past about 28,000, fail; at connect time the port
/// need only be unique for its destination.
#[cfg(target_os = "linux")]
fn port_at_connect(socket: &TcpSocket) -> std::io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt::IpBindAddressNoPort};
    setsockopt(socket, IpBindAddressNoPort, &true).map_err(std::io::Error::from)
}

/// Elsewhere the port is chosen at bind, as before.
#[cfg(not(target_os = "linux"))]
fn port_at_connect(_socket: &TcpSocket) -> std::io::Result<()> {
    Ok(())
}

/// The user id of user number `index`.
pub(crate) fn user_id(prefix: &str, index: u64) -> String {
    format!("{prefix}{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_and_fill_in_user_and_cursor() {
        let t = Target::parse("ws://127.0.0.1:8080/ws?uid={user}").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 8080));
        assert_eq!(t.path_for("u7", None), "/ws?uid=u7");
        assert_eq!(
            t.path_for("u7", Some(("cursor", "ab-1 2"))),
            "/ws?uid=u7&cursor=ab-1%202"
        );
        let p = Target::parse("http://localhost/sub/{user}").unwrap();
        assert_eq!(p.port, 80);
        assert_eq!(p.path_for("x", Some(("c", "1"))), "/sub/x?c=1");
        assert!(Target::parse("wss://h/").is_err());
        assert!(Target::parse("127.0.0.1:80").is_err());
    }

    #[test]
    fn sources_spread_past_the_port_range() {
        assert_eq!(sources_for(0), 1);
        assert_eq!(sources_for(19_000), 1);
        assert_eq!(sources_for(40_000), 2);
        assert_eq!(source_of(5, 1), None);
        assert_eq!(source_of(5, 3), Some(Ipv4Addr::new(127, 0, 0, 3)));
    }

    #[test]
    fn connections_round_robin_over_nodes() {
        let per_node = (0..10).fold([0; 3], |mut n, k| {
            n[node_of(k, 3)] += 1;
            n
        });
        assert_eq!(per_node, [4, 3, 3]);
        assert_eq!(node_of(7, 1), 0);
        assert_eq!(node_of(7, 0), 0, "no node list counts as one node");
    }
}
